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
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn

from torch_amore._utils.typing import BatchKey
from torch_amore.model.batches import split_batch
from torch_amore.model.forward import eval_mode, layer_activations


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


class _Capture:
    """Forward hook keeping the output of a layer for every call."""

    def __init__(self) -> None:
        self.values: list[torch.Tensor] = []

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        value = output[0] if isinstance(output, (tuple, list)) and output else output
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"Expected the layer's output to be a tensor, but got {type(value).__name__}.")
        self.values.append(value.detach().clone())


@contextmanager
def _hooked(layer: nn.Module | None) -> Iterator[_Capture | None]:
    if layer is None:
        yield None
        return
    capture = _Capture()
    handle = layer.register_forward_hook(capture)
    try:
        yield capture
    finally:
        handle.remove()


def _module_dtype(module: nn.Module) -> torch.dtype | None:
    for tensor in module.parameters():
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def transfer_batch(trainer: Trainer | None, pl_module: LightningModule, batch: Any, dataloader_idx: int = 0) -> Any:
    """``batch`` converted by the precision plugin and moved through the batch hooks, as the trainer's loops do."""
    if trainer is None:
        dtype = _module_dtype(pl_module)
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

    def __init__(self, layer_name: str | None, collect_inputs: bool) -> None:
        self.layer_name, self.collect_inputs = layer_name, collect_inputs
        self.outputs: list[torch.Tensor] = []
        self.acts: list[torch.Tensor] = []
        self.inputs: list[torch.Tensor] = []
        self.labels: list[torch.Tensor] = []

    def add(self, out: Any, inp: Any, labels: Any, capture: _Capture | None) -> None:
        if isinstance(out, (tuple, list)) and out:
            out = out[0]
        if not isinstance(out, torch.Tensor):
            raise TypeError(f"Expected the module to return a tensor, but it returned {type(out).__name__}.")
        out = out.reshape(1) if out.ndim == 0 else out
        rows = out.shape[0]
        self.outputs.append(_at_least_float32(out.detach()))
        if capture is not None:
            self.acts.append(_at_least_float32(layer_activations(capture.values, self.layer_name, rows)))
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


def run_module(
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
    collect_inputs: bool = False,
    dataloader_idx: int = 0,
) -> ModuleOutputs:
    """Run ``pl_module`` over (the first ``max_batches`` batches of) ``loader`` through the trainer's batch path.

    Args:
        trainer: the trainer whose precision plugin and strategy move the batches (``None``: the module's hooks).
        pl_module: the LightningModule; its ``forward`` is called on the model input of each batch.
        loader: an iterable of batches (a DataLoader).
        layer, layer_name: a submodule whose output is collected (flattened to (N, D)), and its name for messages.
        max_batches: stop after this many batches (``limit_val_batches`` and friends).
        input_key, label_key: where the model input and the labels are in a batch (see :func:`split_batch`).
        forward_kwargs: extra keyword arguments for every forward call.
        collect_inputs: also return the model inputs (after the batch hooks and the precision conversion).
        dataloader_idx: passed to the batch hooks.

    Returns:
        A :class:`ModuleOutputs` with everything on the module's device.
    """
    kwargs = dict(forward_kwargs or {})
    collector = _Collector(layer_name, collect_inputs)
    context = trainer.precision_plugin.forward_context if trainer is not None else nullcontext
    with eval_mode(pl_module), _hooked(layer) as capture, torch.no_grad():
        for i, batch in enumerate(loader):
            if i >= max_batches:
                break
            batch = transfer_batch(trainer, pl_module, batch, dataloader_idx)
            inp, labels = split_batch(batch, input_key, label_key)
            with context():
                out = pl_module(*inp, **kwargs) if isinstance(inp, tuple) else pl_module(inp, **kwargs)
            collector.add(out, inp, labels, capture)
    return collector.result()
