"""How the Lightning callback explains a LightningModule: the explainer's pipeline on this rank's rows of the data."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import numpy as np
import torch
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    Subset,
)

from torch_amore._utils import distributed as D
from torch_amore._utils.one_warning import OneWarning
from torch_amore.data import arguments as A
from torch_amore.explain.concept_space import check_on_sample, fresh_basis
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import ExplainRequest
from torch_amore.explain.stream_explain import ModelBatches
from torch_amore.integrations.callback_args import _first_loader
from torch_amore.integrations.lightning_batches import LightningBatches, limited_batches
from torch_amore.model.forward import Step
from torch_amore.model.subgroups import subgroup_mask

_LOADERS = {"train": "train_dataloader", "val": "val_dataloaders", "test": "test_dataloaders"}
_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader"}
_LIMITS = {"train": "limit_train_batches", "val": "limit_val_batches", "test": "limit_test_batches"}

#: How the search's check of a held-out split starts its message when one side lacks target rows or other rows.


def check_rows_read(loader: DataLoader, what: str, batch_size: int) -> tuple[int, bool]:
    """The batch size and ``drop_last`` of a DataLoader over a sized dataset whose rows the callback reads itself, in
    dataset order (and sharded by row under DDP): its sampler must read every row once, in any order (sequential,
    ``shuffle=True``, or the ``DistributedSampler`` Lightning puts in under DDP), else the callback would explain
    other rows. ``batch_size``: for a loader without one.

    Example:
        >>> from torch.utils.data import SubsetRandomSampler, TensorDataset
        >>> data = TensorDataset(torch.zeros(300, 2))
        >>> check_rows_read(DataLoader(data, batch_size=64, drop_last=True, shuffle=True), "`data`", 256)
        (64, True)
        >>> check_rows_read(DataLoader(data, sampler=SubsetRandomSampler(range(60))), "`data`", 256)
        Traceback (most recent call last):
        ...
        ValueError: Expected `data` to read every row of its dataset once, but its SubsetRandomSampler reads 60 of ...
    """
    sampler, size, drop_last = loader.sampler, loader.batch_size, loader.drop_last
    if size is None and loader.batch_sampler is not None:  # a batch_sampler given: only a plain BatchSampler
        if type(loader.batch_sampler) is not BatchSampler:
            raise ValueError(
                f"Expected {what} without a custom batch_sampler, but it has a {type(loader.batch_sampler).__name__}; "
                "the callback reads the dataset in dataset order and would explain other rows: to explain some rows, "
                "pass DataLoader(Subset(dataset, rows), batch_size=...)."
            )
        batches = loader.batch_sampler
        sampler, size, drop_last = batches.sampler, batches.batch_size, batches.drop_last
    n = len(loader.dataset)
    if type(sampler) is SequentialSampler:
        whole = len(sampler) == n
    elif type(sampler) is RandomSampler:  # shuffle=True
        whole = not sampler.replacement and len(sampler) == n
    else:  # under DDP, Lightning's for a sequential or random one (a DistributedSamplerWrapper for any other)
        whole = type(sampler) is DistributedSampler and sampler.dataset is loader.dataset
    if not whole:
        reads = "draws with replacement" if getattr(sampler, "replacement", False) else "reads"
        count = f"{len(sampler)} of its {n} rows" if hasattr(sampler, "__len__") else f"rows of its {n}"
        raise ValueError(
            f"Expected {what} to read every row of its dataset once, but its {type(sampler).__name__} {reads} "
            f"{count}; the callback reads the dataset in dataset order and would explain other rows: to explain some "
            "rows, pass DataLoader(Subset(dataset, rows), ...)."
        )
    size = size or batch_size
    if drop_last and n < size:
        raise ValueError(
            f"Expected {what} to yield a batch, but drop_last=True drops all its {n} rows (batch size {size})."
        )
    return size, drop_last


class _FirstBatch(LightningBatches):
    """The first batch of a loader; its model :class:`Step` (outputs, labels) is kept for the checks."""

    step: Step | None = None

    def steps(
        self, layer: torch.nn.Module | None, layer_name: str | None, layer_input: bool = False, first_only: bool = False
    ) -> Iterator[Step]:
        with closing(super().steps(layer, layer_name, layer_input, first_only=True)) as steps:
            for step in steps:
                self.step = step
                yield step


class CallbackExplain:
    """The explaining steps of :class:`~torch_amore.integrations.callbacks.RegionalRuleExtractor`."""

    def _given_loader(self, trainer: Trainer, pl_module: LightningModule, split: str) -> tuple[DataLoader, Any]:
        """The DataLoader of the data to explain and the ``limit_*_batches`` / ``fast_dev_run`` limit on it."""
        if isinstance(self.data, DataLoader):
            return self.data, int(trainer.fast_dev_run) if trainer.fast_dev_run else 1.0
        loader = _first_loader(getattr(trainer, _LOADERS[split]))
        if loader is None:
            source = trainer.datamodule if is_overridden(_HOOKS[split], trainer.datamodule) else pl_module
            loader = _first_loader(getattr(source, _HOOKS[split])())
        if not isinstance(loader, DataLoader):
            raise ValueError(f"Expected a {split!r} DataLoader to explain, but the trainer has {loader!r}.")
        return loader, getattr(trainer, _LIMITS[split])

    def _loader(self, trainer: Trainer, pl_module: LightningModule, split: str) -> tuple[Any, list[int] | None, Any]:
        """This rank's rows of the data in dataset order (no shuffling, no DistributedSampler padding; without the
        last partial batch with ``drop_last``), the rank's indices of all rows of the dataset (of which the loader
        holds the first) and the number of batches the trainer's ``limit_*_batches`` / ``fast_dev_run`` leave."""
        loader, limit = self._given_loader(trainer, pl_module, split)
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset):
            return loader, None, limited_batches(math.inf, limit)  # an iterable dataset shards itself
        what = "`data`" if isinstance(self.data, DataLoader) else f"the {split!r} DataLoader"
        batch_size, drop_last = check_rows_read(loader, what, self.batch_size)
        yielded = len(dataset) // batch_size * batch_size if drop_last else len(dataset)
        rows = list(range(D.rank(), len(dataset), D.world_size()))
        mine = rows[: len(range(D.rank(), yielded, D.world_size()))]  # those among the rows the loader yields
        shard = DataLoader(
            Subset(dataset, mine) if len(mine) < len(dataset) else dataset,
            batch_size=batch_size,
            shuffle=False,
            collate_fn=loader.collate_fn,
            num_workers=loader.num_workers,
        )
        return shard, rows, limited_batches(len(shard), limit)

    def _request(self, *, progress: bool) -> ExplainRequest:
        """The request of :meth:`RegionalRuleExplainer.explain` that the callback's arguments make (checked by it)."""
        return ExplainRequest.make(
            target=self.target,
            threshold=self.threshold,
            features=self.features,
            feature_names=self.feature_names,
            select_features=self.select_features,
            options=self.options.replace(progress=progress),
            batch_size=self.batch_size,
            input_key=self.input_key,
            label_key=self.label_key,
            holdout_rows=self.holdout_rows,
        )

    def _check_first_batch(self, trainer: Trainer, pl_module: LightningModule, split: str) -> None:
        """What needs the model's outputs or the features' width, on the first batch of this rank's rows (one
        forward pass without gradients; the module's mode restored), with the messages of the extraction: the
        sampler, ``input_key`` / ``label_key`` on the batch, ``forward_kwargs`` in the call, a class-index or range
        ``target`` against the outputs (and ``threshold="roc"``'s labels), and ``features``, ``feature_names``,
        ``feature_scale`` and ``feature_offset`` against the width (with ``concepts``: the basis against the layer)."""
        loader, rows, max_batches = self._loader(trainer, pl_module, split)
        if max_batches == 0 or (rows is not None and len(loader) == 0):
            return  # nothing to explain on this rank: the extraction says so
        request = self._request(progress=False)
        source = _FirstBatch(
            trainer,
            pl_module,
            loader,
            max_batches=1,
            input_key=self.input_key,
            label_key=self.label_key,
            forward_kwargs=self.forward_kwargs,
        )
        explainer = RegionalRuleExplainer(pl_module, self.layer)  # the layer's own units: the basis is not fitted
        if request.matrix is None:  # rules on the inputs or the layer: the explainer's width probe
            width, _ = ModelBatches(explainer, source, request).probe()
        else:  # rules on a separate matrix: the model runs for the subgroup only
            width = request.matrix.shape[1]
            with closing(source.steps(None, None)) as steps:
                next(steps, None)
        step = source.step
        if step is None:
            raise ValueError(source.empty)
        _check_target_on(step, request)
        if self.concepts is not None:
            check_on_sample(fresh_basis(self.concepts), step.activations[:1])
            return
        if request.feature_names is not None:
            A.resolve_names(request.feature_names, None, width)
        if request.indices is not None:
            A.resolve_features(request.indices, width)
        A.resolve_affine(request.options.feature_scale, "feature_scale", width, 1.0)
        A.resolve_affine(request.options.feature_offset, "feature_offset", width, 0.0)

    def _explain(self, trainer: Trainer, pl_module: LightningModule, split: str) -> tuple[RegionalExplanation, Any]:
        """The explanation of this rank's rows of the data (none of its rule sets when the subgroup holds no row or
        every row, or too few of either for a held-out split) and the loader of those rows."""
        loader, rows, max_batches = self._loader(trainer, pl_module, split)
        n = None if rows is None else min(len(loader.dataset), max_batches * loader.batch_size)
        source = LightningBatches(
            trainer,
            pl_module,
            loader,
            n=n,
            max_batches=max_batches,
            input_key=self.input_key,
            label_key=self.label_key,
            forward_kwargs=self.forward_kwargs,
        )
        request = self._request(progress=self.options.progress and trainer.is_global_zero).shard(rows, n)
        concepts = None if self.concepts is None else fresh_basis(self.concepts)  # fitted anew on each extraction
        explainer = RegionalRuleExplainer(pl_module, self.layer, concepts=concepts)
        with OneWarning(stacklevel=2, leave_out=("leak",)) as warned:  # rules are meant to match the model's decision
            explanation = explainer.explain_batches(source, request, stream=self.stream, empty="keep")
        explanation.message = warned.text
        params = explanation.params
        del params["progress"]  # the same on every rank
        n_all = D.global_count(params["n_samples"])  # a DDP run's rows, over all ranks
        params.update(n_samples=n_all, subgroup_size=D.global_count(params["subgroup_size"]), world_size=D.world_size())
        for held in ("held_out_rows", "held_out_subgroup"):
            if held in params:
                params[held] = D.global_count(params[held])
        return explanation, loader


def _check_target_on(step: Step, request: ExplainRequest) -> None:
    """A class-index or range ``target`` against one batch's outputs, with the messages of the subgroup (a mask or a
    callable target is of all rows: not checked on a batch). ``threshold="roc"`` asks for labels only."""
    target = request.target
    if not isinstance(target, (int, np.integer, tuple)):
        return
    roc = request.threshold == "roc"
    threshold = None if roc and step.labels is not None else request.threshold  # "roc" without labels: its message
    subgroup_mask(step.outputs, target, threshold, None, request.outputs)
