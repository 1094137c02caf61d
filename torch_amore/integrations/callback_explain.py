"""How the Lightning callback explains a LightningModule: the explainer's pipeline on this rank's rows of the data."""

from __future__ import annotations

import math
from typing import Any

from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset, Subset

from torch_amore._utils import distributed as D
from torch_amore._utils.one_warning import OneWarning
from torch_amore.explain.concept_space import fresh_basis
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import ExplainRequest
from torch_amore.integrations.callback_args import _first_loader
from torch_amore.integrations.lightning_batches import LightningBatches, limited_batches

_LOADERS = {"train": "train_dataloader", "val": "val_dataloaders", "test": "test_dataloaders"}
_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader"}
_LIMITS = {"train": "limit_train_batches", "val": "limit_val_batches", "test": "limit_test_batches"}


class CallbackExplain:
    """The explaining steps of :class:`~torch_amore.integrations.callbacks.RegionalRuleExtractor`."""

    def _loader(self, trainer: Trainer, pl_module: LightningModule, split: str) -> tuple[Any, list[int] | None, Any]:
        """This rank's rows of the data in dataset order (no shuffling, no DistributedSampler padding), the rows'
        indices and the number of batches the trainer's ``limit_*_batches`` / ``fast_dev_run`` leave."""
        if isinstance(self.data, DataLoader):
            loader = self.data
            limit = int(trainer.fast_dev_run) if trainer.fast_dev_run else 1.0
        else:
            loader = _first_loader(getattr(trainer, _LOADERS[split]))
            if loader is None:
                source = trainer.datamodule if is_overridden(_HOOKS[split], trainer.datamodule) else pl_module
                loader = _first_loader(getattr(source, _HOOKS[split])())
            limit = getattr(trainer, _LIMITS[split])
        if not isinstance(loader, DataLoader):
            raise ValueError(f"Expected a {split!r} DataLoader to explain, but the trainer has {loader!r}.")
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset):
            return loader, None, limited_batches(math.inf, limit)  # an iterable dataset shards itself
        rows = list(range(D.rank(), len(dataset), D.world_size()))
        shard = DataLoader(
            Subset(dataset, rows) if D.is_sharded() else dataset,
            batch_size=loader.batch_size or self.batch_size,
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

    def _explain(self, trainer: Trainer, pl_module: LightningModule, split: str) -> tuple[RegionalExplanation, Any]:
        """The explanation of this rank's rows of the data (none of its rule sets when the subgroup holds no row or
        every row) and the loader of those rows."""
        loader, rows, max_batches = self._loader(trainer, pl_module, split)
        n = None if rows is None else min(len(rows), max_batches * (loader.batch_size or self.batch_size))
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
        request = self._request(progress=self.options.progress and trainer.is_global_zero)
        concepts = None if self.concepts is None else fresh_basis(self.concepts)  # fitted anew on each extraction
        explainer = RegionalRuleExplainer(pl_module, self.layer, concepts=concepts)
        with OneWarning(stacklevel=2, leave_out=("leak",)) as warned:  # rules are meant to match the model's decision
            explanation = explainer.explain_batches(source, request.shard(rows, n), stream=self.stream, empty="keep")
        explanation.message = warned.text
        params = explanation.params
        del params["progress"]  # the same on every rank
        n_all = D.global_count(params["n_samples"])  # a DDP run's rows, over all ranks
        params.update(n_samples=n_all, subgroup_size=D.global_count(params["subgroup_size"]), world_size=D.world_size())
        return explanation, loader
