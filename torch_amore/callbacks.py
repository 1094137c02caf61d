"""RegionalRuleExtractor: a Lightning callback that extracts regional rules from the model being trained.

At the end of fitting (and optionally every ``n`` validation epochs) the callback runs
:class:`~torch_amore.RegionalRuleExplainer` over the train or validation data (or a given DataLoader) on the trainer's
device, keeps the result on ``.explanation``, writes ``rules.json`` (reload with
:meth:`RegionalExplanation.from_json`) and a readable ``rules.txt`` into the run's log directory, and logs the best
rule set's support, confidence and fitness to every logger (and the rule text to TensorBoard).

Under DDP every rank explains a disjoint shard of the data (rows ``rank, rank + world_size, ...`` of the dataset, no
padding) and the rule search reduces its statistics across ranks (:mod:`torch_amore.distributed`), so the rules equal
those of one process on the whole data; rank 0 writes the files.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from torch.utils.data import DataLoader, IterableDataset, Subset

from torch_amore import _validation as V
from torch_amore import distributed as D
from torch_amore._forward import BatchKey
from torch_amore.explainer import RegionalRuleExplainer
from torch_amore.explanation import RegionalExplanation

_DATA = ("train", "val")


def _describe_target(target: Any) -> str:
    """A short, stable description of ``target`` for the callback's ``state_key``."""
    if isinstance(target, (bool, int, float, str, np.integer, np.floating)) or target is None:
        return repr(target)
    if isinstance(target, tuple):
        return repr(tuple(float(v) if v is not None else None for v in target))
    if callable(target):
        return getattr(target, "__qualname__", type(target).__name__)
    return f"mask[{len(target)}]" if hasattr(target, "__len__") else type(target).__name__


class RegionalRuleExtractor(Callback):
    """Extract AMORE rules from the model at the end of ``trainer.fit`` (and every ``every_n_val_epochs``).

    Args:
        target: the subgroup to explain, as in :meth:`RegionalRuleExplainer.explain`: a class index, a callable on
            the outputs, or a ``(low, high)`` range of a regression output (a boolean mask must match ``data``'s rows).
        layer: a submodule of the LightningModule (or its dotted name, e.g. ``"encoder.fc1"``) whose activations
            are the rule features; ``None`` uses the flattened model inputs.
        data: ``"val"`` (the first validation DataLoader), ``"train"``, or a DataLoader to explain.
        features: a feature subset (indices or a ``FeatureSelection``), or a separate (N, F) feature matrix aligned
            with the rows of ``data``'s dataset.
        select_features: run the integrated-gradient feature selection first (single process only).
        feature_names: names of the features.
        threshold: probability threshold for a class target (``"roc"`` needs a single process).
        max_length, min_support, n_grids, bin_strategy, top_k: rule search options of
            :func:`torch_amore.extract_rules` (``min_support`` as a fraction is taken of the whole data).
        every_n_val_epochs: also extract after every n-th validation epoch (``None``: only at the end of fitting).
        on_fit_end: extract at the end of fitting.
        dirpath: where to write the files (default: ``trainer.log_dir``).
        filename: stem of the files (``rules`` -> ``rules.json`` and ``rules.txt``); use distinct stems for
            several extractors in one run.
        log_prefix: prefix of the logged metric names (default ``"{filename}/"``: ``rules/fitness``, ...).
        batch_size: batch size when ``data``'s DataLoader has none.
        input_key, label_key: where the model input and the labels are in a batch (see the explainer).
        forward_kwargs: extra keyword arguments for every model call.
        html: also write ``{filename}.html``, the self-contained report of :meth:`RegionalExplanation.to_html`.
        log_figures: log a :func:`~torch_amore.plot.plot_rule` figure of the best rule set to the loggers that take
            figures (TensorBoard's ``add_figure``; loggers with ``log_image``, e.g. Weights & Biases).

    Attributes:
        explanation: the last :class:`RegionalExplanation` (``None`` before the first extraction). Its
            ``features_matrix`` holds this rank's rows.

    Example:
        >>> extractor = RegionalRuleExtractor(target=1, data="val", max_length=2, min_support=0.05)
        >>> extractor.state_key
        "RegionalRuleExtractor{'target': '1', 'layer': None, 'data': 'val', 'filename': 'rules'}"
    """

    def __init__(
        self,
        target: Any,
        *,
        layer: torch.nn.Module | str | None = None,
        data: str | DataLoader = "val",
        features: Any = None,
        select_features: bool | dict = False,
        feature_names: Sequence[str] | None = None,
        threshold: float | str | None = None,
        max_length: int = 2,
        min_support: int | float = 0.05,
        n_grids: int = 10,
        bin_strategy: str = "uniform",
        top_k: int = 3,
        every_n_val_epochs: int | None = None,
        on_fit_end: bool = True,
        dirpath: str | Path | None = None,
        filename: str = "rules",
        log_prefix: str | None = None,
        batch_size: int = 256,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        forward_kwargs: dict | None = None,
        html: bool = False,
        log_figures: bool = False,
    ) -> None:
        if not (isinstance(data, DataLoader) or data in _DATA):
            raise ValueError(f"Expected `data` to be 'train', 'val' or a DataLoader, but got {data!r}.")
        V.check_int(max_length, "max_length", 1)
        V.check_int(top_k, "top_k", 1)
        V.check_int(n_grids, "n_grids", 2)
        V.check_int(batch_size, "batch_size", 1)
        V.check_bin_strategy(bin_strategy)
        V.resolve_min_support(min_support, 1 << 62)  # type and range; the count is resolved on the data
        if every_n_val_epochs is not None:
            V.check_int(every_n_val_epochs, "every_n_val_epochs", 1)
        if not isinstance(filename, str) or not filename or re.search(r"[\\/]", filename):
            raise ValueError(f"Expected `filename` to be a file stem such as 'rules', but got {filename!r}.")
        if layer is not None and not isinstance(layer, (str, torch.nn.Module)):
            raise TypeError(f"Expected `layer` to be an nn.Module, a dotted submodule name or None, got {layer!r}.")
        self.target = target
        self.layer = layer
        self.data = data
        self.features = features
        self.select_features = select_features
        self.feature_names = None if feature_names is None else [str(n) for n in feature_names]
        self.threshold = threshold
        self.search = dict(
            max_length=max_length, min_support=min_support, n_grids=n_grids, bin_strategy=bin_strategy, top_k=top_k
        )
        self.every_n_val_epochs = every_n_val_epochs
        self.at_fit_end = bool(on_fit_end)
        self.dirpath = None if dirpath is None else Path(dirpath)
        self.filename = filename
        self.log_prefix = f"{filename}/" if log_prefix is None else str(log_prefix)
        self.batch_size = batch_size
        self.input_key = input_key
        self.label_key = label_key
        self.forward_kwargs = dict(forward_kwargs or {})
        self.html = bool(html)
        self.log_figures = bool(log_figures)
        self.explanation: RegionalExplanation | None = None
        self.last_path: Path | None = None
        self.last_epoch: int | None = None

    # --- Lightning state ----------------------------------------------------------------------------------------
    @property
    def state_key(self) -> str:
        layer = self.layer if isinstance(self.layer, str) or self.layer is None else type(self.layer).__name__
        data = self.data if isinstance(self.data, str) else "DataLoader"
        return self._generate_state_key(
            target=_describe_target(self.target), layer=layer, data=data, filename=self.filename
        )

    def state_dict(self) -> dict[str, Any]:
        return {
            "explanation": None if self.explanation is None else self.explanation.to_dict(),
            "last_epoch": self.last_epoch,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        data = state_dict.get("explanation")
        self.explanation = None if data is None else RegionalExplanation.from_dict(data)
        self.last_epoch = state_dict.get("last_epoch")

    # --- hooks ----------------------------------------------------------------------------------------------------
    def on_fit_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.at_fit_end:
            self.extract(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        n = self.every_n_val_epochs
        if n is None or trainer.sanity_checking or (trainer.current_epoch + 1) % n:
            return
        self.extract(trainer, pl_module, in_loop=True)

    # --- the work ---------------------------------------------------------------------------------------------------
    def extract(self, trainer: Trainer, pl_module: LightningModule, *, in_loop: bool = False) -> RegionalExplanation:
        """Explain ``pl_module`` now (every rank must call this), write the files and log the metrics."""
        if D.is_sharded() and self.threshold == "roc":
            raise ValueError("threshold='roc' needs all scores in one process; give a number under DDP.")
        if D.is_sharded() and self.select_features:
            raise ValueError(
                "select_features=True runs on one process; under DDP select features beforehand and pass `features=`."
            )
        loader, rows = self._loader(trainer, pl_module)
        features = self._shard_features(rows)
        device = trainer.strategy.root_device
        previous = pl_module.device
        pl_module.to(device)  # Lightning moves the module to the CPU before on_fit_end
        try:
            n_total = D.global_count(len(rows)) if rows is not None else None
            min_support = self.search["min_support"]
            if n_total is not None:
                min_support = V.resolve_min_support(min_support, n_total)  # a fraction of all ranks' rows
            explainer = RegionalRuleExplainer(pl_module, self.layer, feature_names=self.feature_names)
            explanation = explainer.explain(
                loader, self.target, threshold=self.threshold, features=features,
                select_features=self.select_features, **{**self.search, "min_support": min_support},
                batch_size=self.batch_size, progress=False, input_key=self.input_key, label_key=self.label_key,
                forward_kwargs=self.forward_kwargs,
            )  # fmt: skip
        finally:
            pl_module.to(previous)
        explanation.params["min_support"] = self.search["min_support"]
        self._global_params(explanation)
        self.explanation = explanation
        self.last_epoch = int(trainer.current_epoch)
        self._write(trainer, explanation)
        self._log(trainer, pl_module, explanation, in_loop)
        return explanation

    def _loader(self, trainer: Trainer, pl_module: LightningModule) -> tuple[DataLoader, list[int] | None]:
        """This rank's rows of the chosen data, in dataset order (no shuffling, no DistributedSampler padding)."""
        loader = self.data if isinstance(self.data, DataLoader) else self._trainer_loader(trainer, pl_module)
        dataset = loader.dataset
        if isinstance(dataset, IterableDataset):
            return loader, None  # an iterable dataset shards itself
        rows = list(range(D.rank(), len(dataset), D.world_size()))
        batch_size = loader.batch_size or self.batch_size
        shard = DataLoader(
            Subset(dataset, rows) if D.is_sharded() else dataset,
            batch_size=batch_size,
            shuffle=False,
            collate_fn=loader.collate_fn,
            num_workers=loader.num_workers,
        )
        return shard, rows

    def _trainer_loader(self, trainer: Trainer, pl_module: LightningModule) -> DataLoader:
        if self.data == "train":
            loader = trainer.train_dataloader
            if loader is None:
                source = trainer.datamodule if trainer.datamodule is not None else pl_module
                loader = source.train_dataloader()
        else:
            loader = trainer.val_dataloaders
            if loader is None:
                source = trainer.datamodule if trainer.datamodule is not None else pl_module
                loader = source.val_dataloader()
        if isinstance(loader, (list, tuple)):
            loader = loader[0] if loader else None
        if isinstance(loader, dict):
            loader = next(iter(loader.values()), None)
        if not isinstance(loader, DataLoader):
            raise ValueError(f"Expected a {self.data!r} DataLoader to explain, but the trainer has {loader!r}.")
        return loader

    def _shard_features(self, rows: list[int] | None) -> Any:
        """A separate feature matrix, restricted to this rank's rows under DDP (index subsets pass through)."""
        f = self.features
        matrix = hasattr(f, "iloc") or (getattr(f, "ndim", 1) == 2 and not hasattr(f, "features"))
        if not matrix or rows is None or not D.is_sharded():
            return f
        if hasattr(f, "iloc"):
            return f.iloc[rows]
        return f[torch.as_tensor(rows)] if isinstance(f, torch.Tensor) else np.asarray(f)[rows]

    @staticmethod
    def _global_params(explanation: RegionalExplanation) -> None:
        """Under DDP the explainer saw one shard: report the whole data's sizes."""
        if not D.is_sharded():
            return
        p = explanation.params
        p["n_samples"] = D.global_count(int(p.get("n_samples", 0)))
        p["subgroup_size"] = D.global_count(int(p.get("subgroup_size", 0)))
        p["world_size"] = D.world_size()

    def _write(self, trainer: Trainer, explanation: RegionalExplanation) -> None:
        dirpath = self.dirpath if self.dirpath is not None else Path(trainer.log_dir or trainer.default_root_dir)
        self.last_path = dirpath / f"{self.filename}.json"
        if trainer.is_global_zero:
            dirpath.mkdir(parents=True, exist_ok=True)
            explanation.to_json(self.last_path)
            every = explanation.format(max_rows=None, distinct=False, include_negative=True)  # the full list
            (dirpath / f"{self.filename}.txt").write_text(every + "\n")
            if self.html:
                explanation.to_html(dirpath / f"{self.filename}.html")
        trainer.strategy.barrier("RegionalRuleExtractor.write")

    def _metrics(self, explanation: RegionalExplanation) -> dict[str, float]:
        p = self.log_prefix
        out = {f"{p}n_rule_sets": float(len(explanation))}
        best = explanation.best
        if best is not None:
            out[f"{p}support"] = float(best.support)
            out[f"{p}confidence"] = float(best.confidence)
            out[f"{p}fitness"] = float(best.fitness)
        return out

    def _log(
        self, trainer: Trainer, pl_module: LightningModule, explanation: RegionalExplanation, in_loop: bool
    ) -> None:
        metrics = self._metrics(explanation)
        if in_loop:  # inside the validation loop: through Lightning, so that e.g. ModelCheckpoint can monitor them
            for name, value in metrics.items():
                pl_module.log(name, value, on_step=False, on_epoch=True, sync_dist=False)  # equal on every rank
        elif trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
                logger.save()
        if not trainer.is_global_zero:
            return
        text = "\n".join("    " + line for line in explanation.format().splitlines())  # markdown code block
        for logger in trainer.loggers:
            add_text = getattr(getattr(logger, "experiment", None), "add_text", None)
            if callable(add_text):
                add_text(f"{self.log_prefix}{self.filename}", text, global_step=trainer.global_step)
        if self.log_figures:
            self._log_figure(trainer, explanation)

    def _log_figure(self, trainer: Trainer, explanation: RegionalExplanation) -> None:
        if explanation.best is None or not explanation.best.rules or explanation.features_matrix is None:
            return
        import matplotlib.pyplot as plt

        from torch_amore.plot import plot_rule

        fig = plot_rule(explanation)  # this rank's rows under DDP
        tag = f"{self.log_prefix}best_rule_set"
        for logger in trainer.loggers:
            add_figure = getattr(getattr(logger, "experiment", None), "add_figure", None)
            if callable(add_figure):
                add_figure(tag, fig, global_step=trainer.global_step, close=False)
            elif callable(getattr(logger, "log_image", None)):
                logger.log_image(key=tag, images=[fig], step=trainer.global_step)
        plt.close(fig)
