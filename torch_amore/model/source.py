"""Where the explained model's batches come from: a :class:`BatchSource` is the pluggable batch transfer of the one
forward loop (:func:`torch_amore.model.forward.forward_batches`); :class:`ModelInputs` serves a plain ``nn.Module``,
``LightningBatches`` (:mod:`torch_amore.integrations.lightning_batches`) a LightningModule.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, closing, nullcontext
from typing import Any

import torch
from torch import nn

from torch_amore._utils.typing import BatchKey
from torch_amore.data.arguments import check_int
from torch_amore.data.validation import check_model_device, check_not_meta
from torch_amore.model.batches import iter_batches, n_rows
from torch_amore.model.forward import (
    Forward,
    ModelArgs,
    Step,
    as_inputs,
    check_finite_outputs,
    forward_batches,
    model_batches,
    model_feed,
)

__all__ = ["BatchSource", "ModelInputs", "run_model"]


class BatchSource:
    """The batches of one model over its data, moved to it: what :func:`forward_batches` runs on.

    A subclass supplies :meth:`batches` and, where it differs from a plain call, :meth:`feed` and :meth:`context`.

    Attributes:
        model: the model the batches are moved to and fed.
        n: the rows of the data when known before the model runs (``None``: unknown).
        inputs: the whole inputs, named in messages about a batch's shape (``None``: not named).
        noun: the model's name in messages.
        checks_finite: NaN outputs are a ``ValueError``.
        empty: the message when the data yield no batch.
        finds: who finds the rules, in the message of a streamed ``stream="auto"`` decision.
    """

    model: nn.Module
    n: int | None = None
    inputs: Any = None
    noun = "model"
    checks_finite = True
    empty = "Expected `inputs` to hold at least one sample, but it yielded no batches."
    finds = "the rules are found"

    def batches(self, first_only: bool = False) -> Iterator[tuple[Any, Any]]:
        """Each transferred ``(model input, labels)``; ``first_only``: the first one alone (the batch the run takes
        first), to probe the model's width."""
        raise NotImplementedError

    def feed(self, inp: Any, start: int) -> tuple[Any, tuple, dict[str, Any]]:
        """``(input, args, kwargs)`` of the model call on the batch that starts at row ``start``."""
        return inp, (), {}

    def context(self) -> AbstractContextManager:
        """The context each model call runs in (e.g. a precision plugin's autocast)."""
        return nullcontext()

    def steps(
        self, layer: nn.Module | None, layer_name: str | None, layer_input: bool = False, first_only: bool = False
    ) -> Iterator[Step]:
        """:func:`forward_batches` of :attr:`model` on :meth:`batches`, with the hook on ``layer``."""
        return forward_batches(
            self.model,
            self.batches(first_only),
            self.feed,
            layer=layer,
            layer_name=layer_name,
            layer_input=layer_input,
            context=self.context,
            noun=self.noun,
            inputs=self.inputs,
        )

    def collect(
        self,
        layer: nn.Module | None,
        layer_name: str | None,
        layer_input: bool = False,
        *,
        collect_inputs: bool = False,
        require_inputs: bool = False,
    ) -> Forward:
        """Every step of :meth:`steps` concatenated: outputs, activations, labels and, with ``collect_inputs``, the
        flattened tensor inputs (``require_inputs``: a TypeError for inputs that are not tensors)."""
        outputs, acts, flats, labels = [], [], [], []
        input_shape, input_type = None, None
        with closing(self.steps(layer, layer_name, layer_input)) as steps:  # the hook goes also when a check raises
            for step in steps:
                inp, rows = step.inputs, step.outputs.shape[0]
                outputs.append(step.outputs)
                if step.activations is not None:
                    acts.append(step.activations)
                input_type = input_type or type(inp).__name__
                if require_inputs and not isinstance(inp, torch.Tensor):
                    raise TypeError(
                        "Expected tensor model inputs to build rules on them, but the batches hold "
                        f"{type(inp).__name__}; pass `layer=` or a `features=` matrix."
                    )
                if collect_inputs and isinstance(inp, torch.Tensor):
                    flats.append(inp.detach().reshape(rows, -1))
                if input_shape is None and isinstance(inp, torch.Tensor):
                    input_shape = tuple(inp.shape[1:])
                if step.labels is not None:
                    labels.append(torch.as_tensor(step.labels).reshape(rows, -1).squeeze(1).detach().cpu())
        if not outputs:
            raise ValueError(self.empty)
        out_all = torch.cat(outputs)
        if self.checks_finite:
            check_finite_outputs(out_all)
        return Forward(
            outputs=out_all,
            activations=torch.cat(acts) if acts else None,
            flat_inputs=torch.cat(flats) if flats else None,
            labels=torch.cat(labels) if len(labels) == len(outputs) else None,
            input_shape=input_shape,
            input_type=str(input_type),
        )


class ModelInputs(BatchSource):
    """A plain ``nn.Module``'s batches of ``inputs``, converted once (:meth:`make`): tensors, Datasets and graph lists
    cut into ``batch_size`` batches, DataLoaders as they batch; floating inputs and extra arguments cast to the
    model's dtype on its device (:func:`model_feed`), per-sample arguments split by the batches' rows.

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 2))
        >>> source = ModelInputs.make(model, torch.rand(10, 3), batch_size=4)
        >>> source.n, tuple(source.collect(None, None).outputs.shape)
        (10, (10, 2))
    """

    def __init__(
        self,
        model: nn.Module,
        inputs: Any,
        n: int | None,
        *,
        column_names: list[str] | None = None,
        batch_size: int = 256,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        model_args: ModelArgs | None = None,
        progress: bool = False,
    ) -> None:
        self.model, self.inputs, self.n, self.column_names = model, inputs, n, column_names
        self.batch_size, self.input_key, self.label_key, self.progress = batch_size, input_key, label_key, progress
        self.model_args = ModelArgs() if model_args is None else model_args
        self._feed = model_feed(model, self.model_args, n)

    @classmethod
    def make(cls, model: nn.Module, inputs: Any, *, batch_size: int = 256, **options: Any) -> ModelInputs:
        """``inputs`` converted (:func:`torch_amore.model.forward.as_inputs`: numpy arrays and DataFrames as tensors,
        a graph ``Batch`` as its graphs), their rows counted and checked off 'meta'; ``options``: ``input_key``,
        ``label_key``, ``model_args`` and ``progress``."""
        inputs, column_names = as_inputs(inputs)
        n = n_rows(inputs)  # a TypeError for what cannot be batched
        if n == 0:
            raise ValueError("Expected `inputs` to hold at least one sample, but it is empty.")
        check_not_meta(inputs if isinstance(inputs, torch.Tensor | tuple) else None, "inputs")
        model_args = options.get("model_args") or ModelArgs()
        check_not_meta(model_args.args, "additional_forward_args")
        check_not_meta(dict(model_args.kwargs), "forward_kwargs")
        batch_size = check_int(batch_size, "batch_size", 1)
        return cls(model, inputs, n, column_names=column_names, batch_size=batch_size, **options)

    def batches(self, first_only: bool = False) -> Iterator[tuple[Any, Any]]:
        # the probe takes the first batch the run takes: a model may treat a batch of one otherwise (``squeeze()``)
        it, n_batches = iter_batches(self.inputs, self.batch_size, self.input_key, self.label_key)
        if self.progress and not first_only and (n_batches is None or n_batches > 1):
            from tqdm.auto import tqdm

            it = tqdm(it, total=n_batches, desc="forward", unit="batch", leave=False)
        return model_batches(self.model, it)

    def feed(self, inp: Any, start: int) -> tuple[Any, tuple, dict[str, Any]]:
        return self._feed(inp, start)


def run_model(
    model: nn.Module,
    inputs: Any,
    *,
    layer: nn.Module | None = None,
    layer_name: str | None = None,
    layer_input: bool = False,
    collect_inputs: bool = False,
    require_inputs: bool = False,
    **batching: Any,
) -> Forward:
    """Run ``model`` over ``inputs`` and collect outputs, layer activations, flattened inputs and labels
    (:meth:`ModelInputs.collect` of :meth:`ModelInputs.make`; ``batching``: ``batch_size``, ``progress``,
    ``input_key``, ``label_key``, ``model_args``). The collected inputs keep their dtype.

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> fwd = run_model(model, torch.rand(5, 3), layer=model[1], batch_size=2)
        >>> tuple(fwd.outputs.shape), tuple(fwd.activations.shape)
        ((5, 2), (5, 4))
    """
    check_model_device(model)
    source = ModelInputs.make(model, inputs, **batching)
    return source.collect(layer, layer_name, layer_input, collect_inputs=collect_inputs, require_inputs=require_inputs)
