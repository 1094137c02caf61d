"""RegionalRuleExtractor: a Lightning callback that extracts regional rules from the model being trained.

It runs the explainer's pipeline on the explained data, moved as Lightning's validation loop moves it, at the end of
training, every ``every_n_val_epochs`` validation epochs, or on ``trainer.test`` (``docs/lightning.md``). Each
extraction keeps the result on ``.explanation``, writes ``{filename}.json`` and ``{filename}.txt``, and logs the best
rule set's metrics. Under DDP every rank explains a disjoint shard and the search reduces its statistics across ranks,
so the rules equal those of one process on the whole data; rank 0 writes the files.
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from pytorch_lightning import Callback, LightningModule, Trainer
from pytorch_lightning.callbacks import EarlyStopping
from pytorch_lightning.strategies import DDPStrategy, SingleDeviceStrategy
from pytorch_lightning.utilities import rank_zero_info
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, Dataset, IterableDataset

from torch_amore._utils import distributed as D
from torch_amore._utils.typing import BatchKey
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.data.held_rows import check_holdout_rows
from torch_amore.explain.concept_space import resolve_basis
from torch_amore.explain.evaluation import evaluate_on
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.explanation_text import holds_out, searched_counts
from torch_amore.explain.stream_explain import check_stream, check_streamable
from torch_amore.integrations.callback_args import (
    _describe_target,
    _first_loader,
    _is_indices,
    _refuse_a_seen_key,
    _safe,
    _same_names,
)
from torch_amore.integrations.callback_explain import _LOADERS, CallbackExplain, check_rows_read
from torch_amore.integrations.callback_outputs import CallbackOutputs
from torch_amore.integrations.lightning_batches import LightningBatches
from torch_amore.model.forward import resolve_layer
from torch_amore.model.subgroups import check_target
from torch_amore.rules import serialization as S
from torch_amore.rules.evidence_columns import verdict_line
from torch_amore.rules.metrics import RuleMetrics
from torch_amore.search.options import SearchOptions
from torch_amore.verify.options import check_verify_options

_SPLITS = ("train", "val", "test")


def _writable_dir(dirpath: Any) -> Path:
    """``dirpath`` as a ``Path`` where the files can be written: an existing folder, or one that can be made in the
    nearest existing folder above it (made at the first extraction); else an error naming it, now rather than after
    training.

    Example:
        >>> _writable_dir("logs/rules").name
        'rules'
    """
    if not isinstance(dirpath, (str, os.PathLike)):
        raise TypeError(f"Expected `dirpath` to be a folder path (str or Path), but got {dirpath!r}.")
    path = Path(dirpath)
    above = next((p for p in (path, *path.parents) if p.exists()), Path.cwd())
    if not above.is_dir():
        raise ValueError(f"Expected `dirpath` {str(path)!r} to be a folder, but {str(above)!r} is a file.")
    if not os.access(above, os.W_OK | os.X_OK):
        raise ValueError(f"Expected `dirpath` {str(path)!r} to be a folder it can write to, but {str(above)!r} is not.")
    return path


def _check_data_arg(data: Any, every_n_val_epochs: Any, batch_size: Any) -> None:
    """``data``: a split or a DataLoader whose sampler reads its dataset's rows; no ``every_n_val_epochs`` with
    ``"test"``, which ``trainer.fit`` does not explain; and the two counts."""
    if not (isinstance(data, DataLoader) or data in _SPLITS):
        raise ValueError(f"Expected `data` to be 'train', 'val', 'test' or a DataLoader, but got {data!r}.")
    A.check_int(batch_size, "batch_size", 1)
    if every_n_val_epochs is not None:
        A.check_int(every_n_val_epochs, "every_n_val_epochs", 1)
        if isinstance(data, str) and data == "test":
            raise ValueError(
                f"Expected no `every_n_val_epochs` with data='test', which is explained on trainer.test only, but got "
                f"every_n_val_epochs={every_n_val_epochs}; pass data='val', 'train' or a DataLoader to extract during "
                "trainer.fit."
            )
    if isinstance(data, DataLoader) and not isinstance(data.dataset, IterableDataset):
        check_rows_read(data, "`data`", batch_size)  # a sampler of other rows than the dataset's


def _rows_text(params: dict[str, Any]) -> str:
    """The rows of an explanation as the progress line names them: those searched of all, when some were held out.

    Example:
        >>> _rows_text({"n_samples": 100, "subgroup_size": 20, "holdout": 0.3}), _rows_text({"n_samples": 100})
        ('70 of 100 rows searched', '100 rows')
    """
    n, searched = params["n_samples"], searched_counts(params)[0]
    return f"{searched} of {n} rows searched" if holds_out(params) and searched is not None else f"{n} rows"


def _check_rows_of(loader: Any, request: Any) -> None:
    """``request``'s row-aligned arguments against ``loader``'s dataset, where it is a DataLoader over a sized one."""
    dataset = getattr(loader, "dataset", None)
    if isinstance(loader, DataLoader) and not isinstance(dataset, IterableDataset) and hasattr(dataset, "__len__"):
        request.check_dataset_rows(len(dataset))


class RegionalRuleExtractor(CallbackExplain, CallbackOutputs, Callback):
    """Extract AMORE rules from the model being trained: at the end of training, every n validation epochs, or on
    ``trainer.test``.

    Args:
        target: the subgroup to explain, as in :meth:`RegionalRuleExplainer.explain` (a mask is over ``data``'s rows).
        layer: a submodule of the LightningModule (or its dotted name) whose flattened activations are the rule
            features; ``None`` uses the model inputs, flattened, after the batch hooks.
        data: ``"val"`` (the first validation DataLoader), ``"train"``, ``"test"`` (explained on ``trainer.test``),
            or a DataLoader to explain; its dataset's rows are read in dataset order (without a ``drop_last`` loader's
            last partial batch), so its sampler must read every row (sequential or shuffled).
        options: a :class:`~torch_amore.SearchOptions`; keyword arguments named like its fields override it.
        features, select_features, feature_names, threshold: as in :meth:`RegionalRuleExplainer.explain`
            (``select_features`` and ``threshold="roc"`` in a single process only).
        holdout_rows: rows of ``data``'s dataset held out of the search, as in :meth:`RegionalRuleExplainer.explain`
            (a boolean mask of its rows or their positions; with ``limit_*_batches``, those among the rows explained;
            under DDP, of the whole dataset): every rule set gets its numbers there (``held_out``), and the held-out
            confidence and p-value of the best one are logged. Not with ``holdout`` (a fraction drawn anew).
        every_n_val_epochs: also extract after every n-th validation epoch of ``trainer.fit``.
        at_train_end: extract when training ends (default ``True``).
        dirpath: where to write the files (default: ``trainer.log_dir``).
        filename: stem of the files and default metric prefix (default from the target, layer and data, e.g.
            ``"rules_val_inputs_target1"``).
        log_prefix: prefix of the logged metric names (default ``f"{filename}/"``).
        batch_size: batch size when ``data``'s DataLoader has none.
        input_key, label_key: where the model input and the labels are in a batch.
        forward_kwargs: extra keyword arguments for every forward call.
        log_figures: also log the rule table and a :func:`~torch_amore.report.plot.plot_rule` figure of the best rule
            set to the loggers that take figures, when matplotlib is installed.
        html: also write ``{filename}.html``, the self-contained report of :meth:`RegionalExplanation.to_html`.
        verify: also verify the rule sets by intervention (:meth:`RegionalExplanation.verify`; a dict passes options
            to it, their names and values checked now) before the files are written (under DDP, rank 0's rows).
        concepts, n_concepts, concept_names: rules over concepts of ``layer``, as in
            :class:`~torch_amore.RegionalRuleExplainer`; a fitted basis is fitted anew on each extraction.
        stream: as in :meth:`RegionalRuleExplainer.explain` (default ``"auto"``).
        **search_options: any field of :class:`~torch_amore.SearchOptions` (documented there); a fractional
            ``min_support`` is taken of the rows searched (all the explained rows of all ranks, less those held out).

    Attributes:
        explanation: the last :class:`RegionalExplanation` (``None`` before the first extraction). Its
            ``features_matrix`` and ``subgroup`` hold this rank's rows.
        last_epoch: the training epoch (0-based, as Lightning's ``epoch``) whose weights were explained last.
        last_step: the ``trainer.global_step`` of the last extraction.

    Example:
        >>> extractor = RegionalRuleExtractor(target=1, data="val", max_length=2, min_support=0.05)
        >>> extractor.filename, extractor.log_prefix
        ('rules_val_inputs_target1', 'rules_val_inputs_target1/')
        >>> RegionalRuleExtractor(target=1, min_suport=0.1)
        Traceback (most recent call last):
        ...
        TypeError: Unexpected keyword argument 'min_suport' (did you mean 'min_support'?).
    """

    def __init__(
        self,
        target: Any,
        *,
        layer: torch.nn.Module | str | None = None,
        data: str | DataLoader = "val",
        options: SearchOptions | Mapping[str, Any] | None = None,
        features: Any = None,
        select_features: bool | dict = False,
        feature_names: Sequence[str] | None = None,
        threshold: float | str | None = None,
        holdout_rows: Any = None,
        every_n_val_epochs: int | None = None,
        at_train_end: bool = True,
        dirpath: str | Path | None = None,
        filename: str | None = None,
        log_prefix: str | None = None,
        batch_size: int = 256,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        forward_kwargs: Mapping[str, Any] | None = None,
        log_figures: bool = True,
        html: bool = False,
        verify: bool | Mapping[str, Any] = False,
        stream: bool | str = "auto",
        concepts: Any = None,
        n_concepts: int | None = None,
        concept_names: Sequence[str] | None = None,
        **search_options: Any,
    ) -> None:
        self.options = SearchOptions.resolve(options, **search_options)
        _check_data_arg(data, every_n_val_epochs, batch_size)
        if layer is not None and not isinstance(layer, (str, torch.nn.Module)):
            raise TypeError(f"Expected `layer` to be an nn.Module, a dotted submodule name or None, got {layer!r}.")
        check_target(target, threshold)
        if filename is not None and (not isinstance(filename, str) or not filename or re.search(r"[\\/]", filename)):
            raise ValueError(f"Expected `filename` to be a file stem such as 'rules', but got {filename!r}.")
        if forward_kwargs is not None and not isinstance(forward_kwargs, Mapping):
            raise TypeError(f"Expected `forward_kwargs` to be a dict of keyword arguments, but got {forward_kwargs!r}.")
        self.target = target
        self.layer = layer
        self.data = data
        self.features = features
        self.select_features = select_features
        self.feature_names = A.name_list(feature_names)
        self.threshold = threshold
        self.holdout_rows = check_holdout_rows(holdout_rows)
        self.every_n_val_epochs = every_n_val_epochs
        self.at_train_end = A.check_flag(at_train_end, "at_train_end")
        self.dirpath = None if dirpath is None else _writable_dir(dirpath)
        self.filename = filename if filename is not None else self._default_filename()
        self.log_prefix = f"{self.filename}/" if log_prefix is None else str(log_prefix)
        self.batch_size = batch_size
        self.input_key = input_key
        self.label_key = label_key
        self.forward_kwargs = dict(forward_kwargs or {})
        self.log_figures = A.check_flag(log_figures, "log_figures")
        self.html = A.check_flag(html, "html")
        self.verify = check_verify_options(verify, target)
        self.stream = check_stream(stream)
        #: The concept basis of the rules (``None``: rules on units); a fitted kind is fitted on each extraction.
        self.concepts = resolve_basis(concepts, n_concepts, concept_names, layer=layer, feature_names=feature_names)
        if self.concepts is not None and features is not None and not _is_indices(features):
            raise ValueError(
                "Expected no separate `features` matrix with `concepts=`: the concepts are of the layer's activations."
            )
        request = self._request(progress=False)
        check_streamable(self.stream, request)  # what the request or streaming cannot take
        _check_rows_of(data, request)  # a mask target, features, holdout_rows: before any training
        self.explanation: RegionalExplanation | None = None
        self.last_path: Path | None = None
        self.last_epoch: int | None = None
        self.last_step: int | None = None
        self._val_epochs = 0  # validation epochs of fit seen so far (restored from checkpoints)
        self._train_epoch: int | None = None
        self._data_checked = False  # the explained data's first batch checked in this fit

    def _default_filename(self) -> str:
        layer = self.layer if isinstance(self.layer, str) else "inputs" if self.layer is None else "layer"
        data = self.data if isinstance(self.data, str) else "loader"
        return f"rules_{data}_{_safe(layer)}_target{_safe(_describe_target(self.target))}"

    # --- Lightning state ----------------------------------------------------------------------------------------
    @property
    def state_key(self) -> str:
        layer = self.layer if isinstance(self.layer, str) or self.layer is None else type(self.layer).__name__
        data = self.data if isinstance(self.data, str) else "DataLoader"
        key = self._generate_state_key(
            target=_describe_target(self.target), layer=layer, data=data, filename=self.filename
        )
        _refuse_a_seen_key(self, key, sys._getframe(1))
        return key

    def state_dict(self) -> dict[str, Any]:
        return {
            "explanation": None if self.explanation is None else self.explanation.to_dict(),
            "last_epoch": self.last_epoch,
            "last_step": self.last_step,
            "val_epochs": self._val_epochs,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the state saved by :meth:`state_dict`; a malformed entry (e.g. a corrupted checkpoint) raises
        :class:`~torch_amore.data.fields.FieldError` naming it."""
        state_dict = S.expect_mapping(state_dict, "state_dict")
        data = state_dict.get("explanation")
        with S.at_path("state_dict.explanation"):  # the basis's own module classes: those of this callback's basis
            classes = _module_classes(self.concepts)
            self.explanation = None if data is None else RegionalExplanation.from_dict(data, classes=classes)
        last_epoch, last_step = state_dict.get("last_epoch"), state_dict.get("last_step")
        self.last_epoch = None if last_epoch is None else S.expect_int(last_epoch, "state_dict.last_epoch", low=0)
        self.last_step = None if last_step is None else S.expect_int(last_step, "state_dict.last_step", low=0)
        self._val_epochs = S.expect_int(state_dict.get("val_epochs", 0), "state_dict.val_epochs", low=0)

    # --- checks before any training step ------------------------------------------------------------------------
    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        """Before the strategy sets the module up: distinct names, and no 'meta' module a strategy would only move."""
        self._check_distinct(trainer)
        if type(trainer.strategy) in (SingleDeviceStrategy, DDPStrategy):
            V.check_model_device(pl_module, type(pl_module).__name__)

    def on_fit_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._data_checked = False
        self._check_module(trainer, pl_module)
        if self.data == "val" and not trainer.enable_validation:
            raise ValueError(
                "Expected a validation split for `data='val'`: a val DataLoader (trainer.fit(..., val_dataloaders) "
                "or a val_dataloader() hook), a `validation_step` and limit_val_batches > 0, but this run does not "
                "validate; pass data='train' or a DataLoader."
            )
        if self.data == "test":
            rank_zero_info(f"RegionalRuleExtractor {self.filename!r}: data='test' is explained on trainer.test only.")
        self._check_monitors(trainer)

    def on_test_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.data == "test":
            self._check_module(trainer, pl_module)
            if _first_loader(trainer.test_dataloaders) is None:
                raise ValueError("Expected a test DataLoader for `data='test'`, but trainer.test has none.")
            self._check_data(trainer, pl_module, "test")

    def _check_module(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if not is_overridden("forward", pl_module):
            raise TypeError(
                f"Expected {type(pl_module).__name__} to define `forward`: the callback explains its outputs on "
                "each batch's model input."
            )
        resolve_layer(pl_module, self.layer)  # a ValueError naming the submodules when the name is wrong
        V.check_model_device(pl_module, type(pl_module).__name__)  # set up by the strategy: materialised by now
        if trainer.world_size > 1:
            self._check_distributed()
        self._check_distinct(trainer)

    def _check_distinct(self, trainer: Trainer) -> None:
        mine = (self.dirpath, self.filename)
        for other in trainer.callbacks:
            if other is self or not isinstance(other, RegionalRuleExtractor):
                continue
            if (other.dirpath, other.filename) == mine or other.log_prefix == self.log_prefix:
                raise ValueError(_same_names(self))

    def _check_distributed(self) -> None:
        if self.threshold == "roc":
            raise ValueError("threshold='roc' needs all scores in one process; give a number under DDP.")
        if self.select_features:
            raise ValueError(
                "select_features=True runs on one process; under DDP select features beforehand and pass `features=`."
            )

    def _check_monitors(self, trainer: Trainer) -> None:
        """A callback monitoring these metrics in trainer.fit needs them there (not with data='test'); an
        EarlyStopping needs a value at every validation epoch."""
        n = self.every_n_val_epochs
        for cb in trainer.callbacks:
            monitor = getattr(cb, "monitor", None)
            if monitor in self._metric_names() and self.data == "test":
                raise ValueError(
                    f"Expected no {type(cb).__name__}(monitor={monitor!r}) with data='test': the test split is "
                    f"explained on trainer.test only, so trainer.fit never logs {monitor!r}; monitor the metric of an "
                    "extractor with data='val' (or 'train', or a DataLoader)."
                )
            if isinstance(cb, EarlyStopping) and monitor in self._metric_names() and n != 1:
                raise ValueError(
                    f"Expected every_n_val_epochs=1 for EarlyStopping(monitor={monitor!r}), which needs the metric at "
                    f"every validation epoch, but got every_n_val_epochs={n}."
                )

    def on_train_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """Before the first training step: the explained data (see :meth:`_check_data`) where its loader is loaded by
        now (a DataLoader, the training split; the validation split after a sanity check)."""
        if self.data != "test":
            self._check_data(trainer, pl_module, self.data if isinstance(self.data, str) else "loader")

    def on_validation_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        """The validation split, once loaded: at the sanity check, else at the first validation of trainer.fit."""
        if self.data == "val" and trainer.state.fn == "fit":
            self._check_data(trainer, pl_module, "val")

    def _check_data(self, trainer: Trainer, pl_module: LightningModule, split: str) -> None:
        """Once per fit (at every trainer.test), where the split's loader is loaded: a mask target, features or
        held-out rows against its dataset, its sampler, and what needs the model's outputs on its first batch."""
        if self._data_checked and split != "test":
            return
        if split in _LOADERS and _first_loader(getattr(trainer, _LOADERS[split], None)) is None:
            return  # the validation split before its first loop: checked in on_validation_start
        self._data_checked = True
        loader = self.data if split == "loader" else _first_loader(getattr(trainer, _LOADERS[split]))
        _check_rows_of(loader, self._request(progress=False))
        self._check_first_batch(trainer, pl_module, split)

    # --- when to extract ------------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: Trainer, pl_module: LightningModule) -> None:
        self._train_epoch = int(trainer.current_epoch)

    def on_validation_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit":
            return
        self._val_epochs += 1
        n = self.every_n_val_epochs
        due = n is not None and self._val_epochs % n == 0
        if self.data != "test" and (due or (self.at_train_end and self._training_ends(trainer))):
            self.extract(trainer, pl_module, in_loop=True)
        elif self.data != "test":
            self._log_placeholders(trainer, pl_module)

    def on_train_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.data != "test" and self.at_train_end and self._training_ends(trainer) and not self._done(trainer):
            self.extract(trainer, pl_module, in_loop=True)

    def on_train_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.data != "test" and self.at_train_end and not self._done(trainer):
            self.extract(trainer, pl_module)

    def on_test_epoch_end(self, trainer: Trainer, pl_module: LightningModule) -> None:
        if self.data == "test":
            self.extract(trainer, pl_module, in_loop=True)

    def _done(self, trainer: Trainer) -> bool:
        return self.last_step == trainer.global_step and self.explanation is not None

    @staticmethod
    def _training_ends(trainer: Trainer) -> bool:
        """Whether the current batch is the last of ``trainer.fit`` (other stops are only known in ``on_train_end``)."""
        if trainer.max_steps not in (None, -1) and trainer.global_step >= trainer.max_steps:
            return True
        last_batch = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        max_epochs = trainer.max_epochs
        return bool(last_batch) and max_epochs not in (None, -1) and trainer.current_epoch + 1 >= max_epochs

    # --- the work ---------------------------------------------------------------------------------------------------
    def extract(self, trainer: Trainer, pl_module: LightningModule, *, in_loop: bool = False) -> RegionalExplanation:
        """Explain ``pl_module`` now (every rank must call this), write the files and log the metrics (``in_loop``:
        from a hook where ``pl_module.log`` is allowed)."""
        if D.is_sharded():
            self._check_distributed()
        V.check_model_device(pl_module, type(pl_module).__name__)
        split = self.data if isinstance(self.data, str) else "loader"
        start = time.perf_counter()
        epoch = self._train_epoch if split != "test" else (trainer.current_epoch - 1 if trainer.current_epoch else None)
        rank_zero_info(f"RegionalRuleExtractor {self.filename!r}: explaining the {split} data (epoch {epoch}) ...")
        explanation, loader = self._explain(trainer, pl_module, split)
        explanation.params.update(data=split, epoch=epoch, global_step=int(trainer.global_step))
        if self.verify is not None and explanation.rule_sets:
            explanation.verify(
                loader,
                model=pl_module,
                target=self.target,
                input_key=self.input_key,
                forward_kwargs=self.forward_kwargs or None,
                **{"batch_size": self.batch_size, **self.verify},
            )
        self.explanation, self.last_epoch, self.last_step = explanation, epoch, int(trainer.global_step)
        self._write(trainer, explanation)
        self._log(trainer, pl_module, explanation, in_loop)
        best, verdict = explanation.best, verdict_line(explanation.rule_sets, explanation.params)
        rows, seconds = _rows_text(explanation.params), time.perf_counter() - start
        rank_zero_info(
            f"RegionalRuleExtractor {self.filename!r}: {len(explanation)} rule sets on {rows} in {seconds:.1f} s"
            + (f"; {verdict}" if verdict is not None else "")
            + (f"; best: {best}" if best is not None else f"; {explanation.message}")
        )
        return explanation

    # --- evaluation of a (restored) explanation on new data --------------------------------------------------------
    def evaluate(
        self, pl_module: LightningModule, data: Any, *, target: Any = None, features: Any = None
    ) -> list[RuleMetrics]:
        """Support, confidence and fitness of every rule set of :attr:`explanation` on new ``data``, through the
        module's batch hooks, the same layer and the same subgroup definition (the threshold is not re-fitted).

        Args:
            pl_module: the trained LightningModule (e.g. restored from the same checkpoint as this callback).
            data: a DataLoader, a Dataset or a tensor of model inputs.
            target: the subgroup (default: this callback's ``target``; required when it is a mask).
            features: the new data's separate feature matrix, when the rules were built on one.

        Returns:
            One :class:`~torch_amore.RuleMetrics` per rule set, in the order of ``explanation.rule_sets``.
        """
        explanation = self.explanation
        if explanation is None:
            raise ValueError("Expected an explanation to evaluate, but this callback has not extracted one yet.")
        if isinstance(data, torch.Tensor):
            data = list(torch.split(data, self.batch_size))
        elif isinstance(data, Dataset) and not isinstance(data, DataLoader):
            data = DataLoader(data, batch_size=self.batch_size, shuffle=False)
        target = self.target if target is None else target
        layer = self.layer if explanation.params.get("source") == "layer" else None
        on = LightningBatches(
            None,
            pl_module,
            data,
            input_key=self.input_key,
            label_key=self.label_key,
            forward_kwargs=self.forward_kwargs,
        )
        return evaluate_on(
            RegionalRuleExplainer(pl_module, layer), explanation, on, target, labels=None, features=features
        )


def _module_classes(basis: Any) -> list[type]:
    """The classes of the ``nn.Module`` encoder and decoder of a concept basis (or that its methods are bound to): a
    restored checkpoint may build them again, and nothing else (loading imports nothing a file names)."""
    found = []
    for part in (getattr(basis, "encoder", None), getattr(basis, "decoder", None)):
        owner = getattr(part, "__self__", part)
        if isinstance(owner, torch.nn.Module) and type(owner) not in found:
            found.append(type(owner))
    return found
