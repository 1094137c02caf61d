"""How the Lightning callback explains a LightningModule: this rank's rows of the data, the subgroup and the features
of the module's outputs, and the rule search on them, in memory or streamed
(:class:`~torch_amore.integrations.callbacks.RegionalRuleExtractor`).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities import rank_zero_warn
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset, Subset

from torch_amore._utils import distributed as D
from torch_amore._utils.one_warning import OneWarning
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.explain.concept_space import encode_concepts, fit_on_batches, fit_once
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import target_param
from torch_amore.explain.subgroup_selection import select_for_subgroup
from torch_amore.integrations.callback_args import _first_loader, _is_mask, _rows_of
from torch_amore.integrations.lightning_batches import ModuleBatches, ModuleOutputs, limited_batches
from torch_amore.model.forward import eval_mode
from torch_amore.model.subgroups import subgroup_mask
from torch_amore.search.extract import extract_planned

_LOADERS = {"train": "train_dataloader", "val": "val_dataloaders", "test": "test_dataloaders"}
_HOOKS = {"train": "train_dataloader", "val": "val_dataloader", "test": "test_dataloader"}
_LIMITS = {"train": "limit_train_batches", "val": "limit_val_batches", "test": "limit_test_batches"}


class CallbackExplain:
    """The explaining steps of :class:`~torch_amore.integrations.callbacks.RegionalRuleExtractor` (which sets
    ``data``, ``target``, ``threshold``, ``features``, ``feature_names``, ``select_features``, ``options``,
    ``batch_size``, ``filename`` and ``_basis``, the concept basis of the current extraction or ``None``)."""

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

    def _explain(
        self,
        pl_module: LightningModule,
        fwd: ModuleOutputs,
        rows: list[int] | None,
        layer: Any,
        layer_name: Any,
        rank_zero: bool,
    ) -> RegionalExplanation:
        n = fwd.outputs.shape[0]
        target = _rows_of(self.target, rows, n, "target") if _is_mask(self.target) else self.target
        mask, thr_used, desc = subgroup_mask(fwd.outputs, target, self.threshold, fwd.labels)
        X, names, source, indices = self._features(fwd, rows, n)
        mask = mask.to(X.device)
        n_all, n_sub = D.global_count(n), D.global_count(int(mask.sum()))
        options = self.options.replace(progress=self.options.progress and rank_zero)
        selection, message, rule_sets = None, "", []
        if 0 < n_sub < n_all:
            if self.select_features:
                indices = selection = self._select(pl_module, fwd, mask, names, layer)
            with OneWarning(stacklevel=2, leave_out=("leak",)):  # rules are meant to match the model's decision
                rule_sets, plan, min_count = extract_planned(
                    X, mask, options, features=indices, feature_names=names, target_name=desc
                )
            columns = list(plan.columns)
        else:
            message = f"The subgroup ({desc}) holds {n_sub} of {n_all} rows: rules need rows inside and outside it."
            rank_zero_warn(f"RegionalRuleExtractor {self.filename!r}: {message}")
            columns, min_count = A.resolve_features(indices, X.shape[1]), self.options.support_count(n_all, n_sub)
        params = self._params(desc, n_all, n_sub, source, layer_name, min_count)
        return RegionalExplanation(
            rule_sets=rule_sets,
            subgroup=mask,
            threshold=thr_used,
            features=columns,
            feature_names=names,
            params=params,
            features_matrix=X,
            message=message,
            selection=selection,
        )

    def _params(
        self, desc: str, n_all: int, n_sub: int, source: str, layer_name: Any, min_count: int
    ) -> dict[str, Any]:
        params = {k: v for k, v in self.options.to_dict().items() if k != "progress"}
        params.update(
            min_support_count=min_count,
            source=source,
            layer=layer_name,
            layer_input=False,
            target=target_param(self.target, desc),
            target_name=desc,
            threshold=self.threshold
            if isinstance(self.threshold, str) or self.threshold is None
            else float(self.threshold),
            select_features=bool(self.select_features),
            n_samples=n_all,
            subgroup_size=n_sub,
            local=False,
            world_size=D.world_size(),
        )
        return params

    def _explain_streamed(self, batches: ModuleBatches, layer_name: Any, rank_zero: bool) -> RegionalExplanation:
        """The rules of the streamed batches (:mod:`torch_amore.search.stream`); no features matrix is kept."""
        from torch_amore.search.stream import prepare_stream, search_stream

        options = self.options.replace(progress=self.options.progress and rank_zero)
        prefix = "z" if batches.source == "layer" else "feature"
        names = self.feature_names
        if self._basis is not None and batches.source == "layer":  # fitted on the first rows, then batches encoded
            self._basis = fit_on_batches(self._basis, batches.activations(), progress=options.progress)
            batches.basis, names = self._basis, self._basis.names
        extractor = prepare_stream(batches, options, features=self.features, feature_names=names, name_prefix=prefix)
        extractor.target_name = batches.desc
        rule_sets, min_count = search_stream(extractor)
        mask = extractor.target
        n_all, n_sub = extractor.plan.n_rows, D.global_count(int(mask.sum()))
        params = self._params(batches.desc, n_all, n_sub, batches.source, layer_name, min_count)
        params["stream"] = True
        return RegionalExplanation(
            rule_sets=rule_sets,
            subgroup=mask,
            threshold=batches.threshold,
            features=list(extractor.binned.columns),
            feature_names=extractor.names,
            params=params,
        )

    def _features(self, fwd: ModuleOutputs, rows: list[int] | None, n: int) -> tuple[torch.Tensor, list, str, Any]:
        """The (N, D) rule features, their names, their source and the searched feature subset."""
        f = self.features
        is_matrix = hasattr(f, "iloc") or (getattr(f, "ndim", 1) == 2 and not hasattr(f, "features"))
        names = self.feature_names
        if is_matrix:
            X, matrix_names = V.to_tensor_2d(_rows_of(f, rows, n, "features"), "features")
            X, source, indices = X.to(fwd.outputs.device), "features", None
            names = names if names is not None else matrix_names
        elif fwd.activations is not None and self._basis is not None:  # rules over the layer's concepts
            self._basis = fit_once(self._basis, fwd.activations, progress=self.options.progress)
            X, source, indices = encode_concepts(self._basis, fwd.activations), "layer", f
            names = names if names is not None else self._basis.names
        elif fwd.activations is not None:
            X, source, indices = fwd.activations, "layer", f
        else:
            X, source, indices = fwd.inputs.reshape(n, -1), "inputs", f
        if X.shape[0] != n:
            raise ValueError(f"Expected `features` to have one row per explained sample ({n}), but got {X.shape[0]}.")
        if names is None:
            prefix = "z" if source == "layer" else "feature"
            names = [f"{prefix}_{i}" for i in range(X.shape[1])]
        return X, A.resolve_names(names, None, X.shape[1]), source, indices

    def _select(self, pl_module: LightningModule, fwd: ModuleOutputs, mask: torch.Tensor, names: list, layer: Any):
        """:func:`torch_amore.select_features` on the explained inputs (classes: the labels for a class target)."""
        with eval_mode(pl_module):
            return select_for_subgroup(
                pl_module,
                fwd.inputs,
                self.target,
                fwd.outputs,
                fwd.labels,
                mask,
                self.select_features,
                layer=layer,
                layer_input=False,
                names=names,
                basis=self._basis,
            )
