"""Running a LightningModule over a DataLoader the way Lightning's evaluation loop runs ``validation_step``.

Every batch goes through the same path as in ``trainer.validate``: the precision plugin's ``convert_input``, the
``on_before_batch_transfer`` hook (of the datamodule when it overrides it, else of the module), the strategy's
``batch_to_device`` (the ``transfer_batch_to_device`` and ``on_after_batch_transfer`` hooks), and the forward pass runs
inside the precision plugin's ``forward_context`` (autocast for mixed precision, the default dtype for ``"64-true"``
and ``"bf16-true"``), under ``torch.no_grad`` with the module in eval mode (every submodule's mode is restored
afterwards, also on error). A forward hook on ``layer`` collects that layer's activations.

Without a trainer (a module restored from a checkpoint) the module's own batch hooks run, on the module's device, and
floating-point inputs are cast to the module's parameter dtype, as a ``"*-true"`` precision plugin would.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import closing, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn

from torch_amore._utils.typing import BatchKey
from torch_amore.explain.concept_space import encode_concepts
from torch_amore.explain.stream_explain import decide_stream, unsupported
from torch_amore.model.batches import split_batch
from torch_amore.model.forward import Step, forward_batches
from torch_amore.model.subgroups import subgroup_mask


@dataclass
class ModuleOutputs:
    """What one pass over a loader collected, all rows in loader order.

    Attributes:
        outputs: the module's outputs (N, ...), at least float32.
        activations: the layer's activations flattened to (N, D), or ``None`` without a layer.
        inputs: the model inputs after the batch hooks (N, ...), when asked for.
        labels: the labels of the batches (N,), when every batch has them.
    """

    outputs: torch.Tensor
    activations: torch.Tensor | None
    inputs: torch.Tensor | None
    labels: torch.Tensor | None


def limited_batches(n_batches: int | float, limit: int | float) -> int | float:
    """The number of batches a ``limit_*_batches`` setting leaves of ``n_batches`` (as Lightning counts them).

    Example:
        >>> limited_batches(10, 3), limited_batches(10, 0.25), limited_batches(10, 1.0)
        (3, 2, 10)
    """
    if isinstance(limit, int) and not isinstance(limit, bool):
        return min(n_batches, limit)
    if float(limit) == 1.0 or math.isinf(n_batches):
        return n_batches
    return int(n_batches * float(limit))


def transfer_batch(trainer: Trainer | None, pl_module: LightningModule, batch: Any, dataloader_idx: int = 0) -> Any:
    """``batch`` converted by the precision plugin and moved through the batch hooks, as the trainer's loops do."""
    if trainer is None:
        dtype = next((t.dtype for t in pl_module.parameters() if t.is_floating_point()), None)
        if dtype is not None:
            batch = apply_to_collection(batch, torch.Tensor, lambda t: t.to(dtype) if t.is_floating_point() else t)
        batch = pl_module.on_before_batch_transfer(batch, dataloader_idx)
        batch = pl_module.transfer_batch_to_device(batch, pl_module.device, dataloader_idx)
        return pl_module.on_after_batch_transfer(batch, dataloader_idx)
    batch = trainer.precision_plugin.convert_input(batch)
    datamodule = trainer.datamodule
    hooks = datamodule if is_overridden("on_before_batch_transfer", datamodule) else pl_module
    batch = hooks.on_before_batch_transfer(batch, dataloader_idx)
    return trainer.strategy.batch_to_device(batch, dataloader_idx=dataloader_idx)


def _at_least_float32(t: torch.Tensor) -> torch.Tensor:
    """bf16/fp16 values as float32 (exactly); float32/float64 and integer tensors as they are."""
    return t.float() if t.is_floating_point() and t.element_size() < 4 else t


class _Collector:
    """Per-batch outputs, activations, inputs and labels, checked and concatenated."""

    def __init__(self, collect_inputs: bool) -> None:
        self.collect_inputs = collect_inputs
        self.outputs: list[torch.Tensor] = []
        self.acts: list[torch.Tensor] = []
        self.inputs: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []

    def add(self, step: Step) -> None:
        out, inp, labels = step.outputs, step.inputs, step.labels
        rows = out.shape[0]
        self.outputs.append(_at_least_float32(out))
        if step.activations is not None:
            self.acts.append(_at_least_float32(step.activations))
        if self.collect_inputs:
            if not isinstance(inp, torch.Tensor):
                raise TypeError(
                    f"Expected tensor model inputs to build rules on them, but got {type(inp).__name__}; pass "
                    "`layer=` or a `features=` matrix."
                )
            self.inputs.append(_at_least_float32(inp.detach()))
        if labels is not None:
            self.labels.append(torch.as_tensor(labels).reshape(rows, -1).squeeze(1).detach().cpu())

    def result(self) -> ModuleOutputs:
        if not self.outputs:
            raise ValueError("Expected the data to explain to hold at least one batch, but the loader yielded none.")
        return ModuleOutputs(
            outputs=torch.cat(self.outputs),
            activations=torch.cat(self.acts) if self.acts else None,
            inputs=torch.cat(self.inputs) if self.inputs else None,
            labels=torch.cat(self.labels) if len(self.labels) == len(self.outputs) else None,
        )


def module_steps(
    trainer: Trainer | None,
    pl_module: LightningModule,
    loader: Any,
    *,
    layer: nn.Module | None = None,
    layer_name: str | None = None,
    max_batches: int | float = math.inf,
    input_key: BatchKey = None,
    label_key: BatchKey = None,
    forward_kwargs: Mapping[str, Any] | None = None,
    dataloader_idx: int = 0,
) -> Iterator[Step]:
    """:func:`torch_amore.model.forward.forward_batches` over (the first ``max_batches`` batches of) ``loader``,
    each batch moved by the trainer's batch path (:func:`transfer_batch`) and run in its precision context."""
    kwargs = dict(forward_kwargs or {})

    def batches() -> Iterator[tuple[Any, Any]]:
        for i, batch in enumerate(loader):
            if i >= max_batches:
                return
            yield split_batch(transfer_batch(trainer, pl_module, batch, dataloader_idx), input_key, label_key)

    def feed(inp: Any, start: int) -> tuple[Any, tuple, dict[str, Any]]:
        return inp, (), kwargs

    context = trainer.precision_plugin.forward_context if trainer is not None else nullcontext
    return forward_batches(
        pl_module, batches(), feed, layer=layer, layer_name=layer_name, context=context, noun="module"
    )


def run_module(
    trainer: Trainer | None,
    pl_module: LightningModule,
    loader: Any,
    *,
    collect_inputs: bool = False,
    **where: Any,
) -> ModuleOutputs:
    """Run ``pl_module`` over (the first ``max_batches`` batches of) ``loader`` through the trainer's batch path.

    Args:
        trainer: the trainer whose precision plugin and strategy move the batches (``None``: the module's hooks).
        pl_module: the LightningModule; its ``forward`` is called on the model input of each batch.
        loader: an iterable of batches (a DataLoader).
        collect_inputs: also return the model inputs (after the batch hooks and the precision conversion).
        **where: ``layer``, ``layer_name`` (a submodule whose output is collected, flattened to (N, D), and its name
            for messages), ``max_batches`` (``limit_val_batches`` and friends), ``input_key``, ``label_key`` (see
            :func:`~torch_amore.model.batches.split_batch`), ``forward_kwargs`` and ``dataloader_idx``, as in
            :func:`module_steps`.

    Returns:
        A :class:`ModuleOutputs` with everything on the module's device.
    """
    collector = _Collector(collect_inputs)
    with closing(module_steps(trainer, pl_module, loader, **where)) as steps:
        for step in steps:
            collector.add(step)
    return collector.result()


class ModuleBatches:
    """The Lightning callback's source of ``(X_batch, subgroup_batch)``: each call runs the LightningModule over the
    loader batch by batch through the trainer's batch path (:func:`module_steps`)."""

    def __init__(
        self,
        trainer: Any,
        pl_module: Any,
        loader: Any,
        *,
        layer: Any,
        layer_name: Any,
        max_batches: int | float,
        callback: Any,
    ) -> None:
        self.trainer, self.pl_module, self.loader = trainer, pl_module, loader
        self.layer, self.layer_name, self.max_batches, self.cb = layer, layer_name, max_batches, callback
        self.desc, self.threshold = "target", None
        self.source = "layer" if layer is not None else "inputs"
        self.basis: Any = None  # a concept basis: each batch's activations are encoded before they are binned

    def first_activations(self) -> torch.Tensor:
        """The layer's (1, D) flattened activations of the first sample (before any concept encoding)."""
        batches = self(raw=True)
        try:
            for X, _ in batches:
                return X[:1]
        finally:
            batches.close()
        raise ValueError("Expected the explained DataLoader to hold at least one sample, but it yielded no batches.")

    def activations(self) -> Iterator[torch.Tensor]:
        """The layer's flattened activations, batch by batch (to fit a concept basis on the first rows)."""
        return (X for X, _ in self(raw=True))

    def probe(self) -> tuple[int, int]:
        """(width, bytes per value) of the features, from the first batch."""
        for X, _ in self():
            return X.shape[1], X.element_size()
        raise ValueError("Expected the explained DataLoader to hold at least one sample, but it yielded no batches.")

    def __call__(self, raw: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        cb = self.cb
        steps = module_steps(
            self.trainer,
            self.pl_module,
            self.loader,
            layer=self.layer,
            layer_name=self.layer_name,
            max_batches=self.max_batches,
            input_key=cb.input_key,
            label_key=cb.label_key,
            forward_kwargs=cb.forward_kwargs,
        )
        with closing(steps):
            for step in steps:
                one = _Collector(collect_inputs=self.layer is None)
                one.add(step)
                fwd = one.result()
                n = fwd.outputs.shape[0]
                X = fwd.activations if fwd.activations is not None else fwd.inputs.reshape(n, -1)
                if self.basis is not None and fwd.activations is not None and not raw:
                    X = encode_concepts(self.basis, X)
                mask, self.threshold, self.desc = subgroup_mask(fwd.outputs, cb.target, cb.threshold, fwd.labels)
                yield X, mask.to(X.device)


def callback_streams(callback: Any, batches: ModuleBatches, n_rows: int | None) -> bool:
    """Whether the callback streams: :func:`~torch_amore.explain.stream_explain.decide_stream` of its ``stream``."""
    f = callback.features
    why = unsupported(
        matrix=hasattr(f, "iloc") or (getattr(f, "ndim", 1) == 2 and not hasattr(f, "features")),
        select=callback.select_features,
        threshold=callback.threshold,
        target=callback.target,
        evidence=callback.options.wants_evidence,
    )
    device = torch.device(batches.pl_module.device)
    return decide_stream(callback.stream, why, n_rows, device, batches.probe, "the callback finds the rules")
