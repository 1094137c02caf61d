"""Running a LightningModule over a DataLoader the way Lightning's evaluation loop runs ``validation_step``: the
precision plugin's ``convert_input``, the batch hooks, the strategy's ``batch_to_device`` and the plugin's
``forward_context``, under ``torch.no_grad`` in eval mode. Without a trainer (a module restored from a checkpoint) the
module's own batch hooks run, and floating-point inputs are cast to its parameter dtype.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any

import torch
from lightning_utilities.core.apply_func import apply_to_collection
from pytorch_lightning import LightningModule, Trainer
from pytorch_lightning.utilities.model_helpers import is_overridden
from torch import nn

from torch_amore._utils.typing import BatchKey
from torch_amore.model.batches import split_batch
from torch_amore.model.forward import Step
from torch_amore.model.source import BatchSource


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


class LightningBatches(BatchSource):
    """The first ``max_batches`` batches of ``loader``, moved by the trainer's batch path (:func:`transfer_batch`)
    and run in its precision context; bf16 and fp16 values come as float32. ``n``: the loader's rows, when known.

    Example:
        >>> import pytorch_lightning as pl
        >>> class Module(pl.LightningModule):
        ...     def __init__(self):
        ...         super().__init__()
        ...         self.net = nn.Linear(3, 2)
        ...     def forward(self, x):
        ...         return self.net(x)
        >>> source = LightningBatches(None, Module(), [torch.ones(4, 3), torch.zeros(2, 3)])
        >>> tuple(source.collect(None, None).outputs.shape)
        (6, 2)
    """

    noun = "module"
    checks_finite = False
    empty = "Expected the data to explain to hold at least one batch, but the loader yielded none."
    finds = "the callback finds the rules"

    def __init__(
        self,
        trainer: Trainer | None,
        pl_module: LightningModule,
        loader: Any,
        *,
        n: int | None = None,
        max_batches: int | float = math.inf,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        forward_kwargs: Mapping[str, Any] | None = None,
        dataloader_idx: int = 0,
    ) -> None:
        self.trainer, self.model, self.loader, self.n = trainer, pl_module, loader, n
        self.max_batches, self.input_key, self.label_key = max_batches, input_key, label_key
        self.kwargs, self.dataloader_idx = dict(forward_kwargs or {}), dataloader_idx

    def batches(self, first_only: bool = False) -> Iterator[tuple[Any, Any]]:
        last = 1 if first_only else self.max_batches
        for i, batch in enumerate(self.loader):
            if i >= last:
                return
            batch = transfer_batch(self.trainer, self.model, batch, self.dataloader_idx)
            yield split_batch(batch, self.input_key, self.label_key)

    def feed(self, inp: Any, start: int) -> tuple[Any, tuple, dict[str, Any]]:
        return inp, (), self.kwargs

    def context(self) -> AbstractContextManager:
        return self.trainer.precision_plugin.forward_context() if self.trainer is not None else nullcontext()

    def steps(
        self, layer: nn.Module | None, layer_name: str | None, layer_input: bool = False, first_only: bool = False
    ) -> Iterator[Step]:
        with closing(super().steps(layer, layer_name, layer_input, first_only)) as steps:
            for s in steps:
                acts = None if s.activations is None else _at_least_float32(s.activations)
                inp = _at_least_float32(s.inputs.detach()) if isinstance(s.inputs, torch.Tensor) else s.inputs
                yield Step(_at_least_float32(s.outputs), acts, inp, s.labels, s.start)
