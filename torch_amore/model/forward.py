"""Running a model over data: the one forward loop, hooks on a layer, eval mode, devices and extra model arguments.
Whatever a hook or the mode switch touches is undone in ``finally`` blocks, also when the model raises.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from torch_amore.data.validation import check_not_meta, numpy_to_tensor, to_tensor_2d
from torch_amore.model.batches import batch_len, is_graph
from torch_amore.model.input_shape import call_model

# ------------------------------------------------------------------------------------------------- layers, modes, hooks


def resolve_layer(model: nn.Module, layer: nn.Module | str | None) -> tuple[nn.Module | None, str | None]:
    if layer is None:
        return None, None
    names = [n for n, _ in model.named_modules() if n]
    if isinstance(layer, str):
        try:
            return model.get_submodule(layer), layer
        except AttributeError:
            raise ValueError(
                f"Expected `layer` to name a submodule of the model, but got {layer!r}; its submodules are "
                f"{names[:12]}{' ...' if len(names) > 12 else ''}."
            ) from None
    if isinstance(layer, nn.Module):
        for name, module in model.named_modules():
            if module is layer:
                return layer, name or "<model>"
        raise ValueError(
            f"Expected `layer` to be a submodule of the model, but got a {type(layer).__name__} that is not part of it."
        )
    raise TypeError(f"Expected `layer` to be an nn.Module, a dotted submodule name or None, but got {layer!r}.")


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[None]:
    """Eval mode inside; every submodule's own ``training`` flag restored afterwards, also on error."""
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


class _Capture:
    """Forward hook that keeps the (flattened) output or first input of a layer for every call."""

    def __init__(self, use_input: bool) -> None:
        self.use_input = use_input
        self.values: list[torch.Tensor] = []

    def __call__(self, module: nn.Module, args: tuple, output: Any) -> None:
        value = (args[0] if args else None) if self.use_input else output
        if isinstance(value, (tuple, list)) and value:
            value = value[0]
        if not isinstance(value, torch.Tensor):
            where = "input" if self.use_input else "output"
            raise TypeError(f"Expected the layer's {where} to be a tensor, but got {type(value).__name__}.")
        self.values.append(value.detach().clone())  # clone: later in-place ops must not change it


@contextmanager
def hook_on(layer: nn.Module | None, hook: Callable, *, pre: bool = False) -> Iterator[None]:
    """``hook`` on ``layer`` (a forward pre-hook with ``pre``) inside, removed on exit; nothing without a layer."""
    if layer is None:
        yield
        return
    handle = layer.register_forward_pre_hook(hook) if pre else layer.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def model_dtype(model: nn.Module) -> torch.dtype | None:
    """The dtype of the model's first floating-point parameter (or buffer); ``None`` when it has none."""
    for tensor in (*model.parameters(), *model.buffers()):
        if tensor.is_floating_point():
            return tensor.dtype
    return None


def _cast(t: torch.Tensor, device: torch.device, dtype: torch.dtype | None) -> torch.Tensor:
    """``t`` on ``device``; floating tensors in ``dtype`` (integer ids and masks keep theirs)."""
    if dtype is not None and t.is_floating_point() and t.dtype != dtype:
        return t.to(device=device, dtype=dtype)
    return t.to(device)


def to_device(obj: Any, device: torch.device, dtype: torch.dtype | None = None) -> Any:
    """Move tensors (inside tuples, lists, dicts and graph batches) to ``device``, floating ones cast to ``dtype``."""
    if isinstance(obj, torch.Tensor):
        return _cast(obj, device, dtype)
    if isinstance(obj, tuple):
        return tuple(to_device(o, device, dtype) for o in obj)
    if isinstance(obj, list):
        return [to_device(o, device, dtype) for o in obj]
    if isinstance(obj, Mapping):
        return {k: to_device(v, device, dtype) for k, v in obj.items()}
    if hasattr(obj, "to") and callable(obj.to):  # e.g. a torch_geometric Batch
        obj = obj.to(device)
        if dtype is not None and is_graph(obj):
            obj = obj.apply(lambda t: _cast(t, device, dtype))
        return obj
    return obj


# ------------------------------------------------------------------------------------- inputs and extra model arguments


def as_inputs(inputs: Any) -> tuple[Any, list[str] | None]:
    """Inputs as :class:`~torch_amore.model.source.ModelInputs` takes them (numpy arrays and DataFrames as tensors, a
    graph ``Batch`` as its graphs), and a DataFrame's column names (else None)."""
    if hasattr(inputs, "columns") and hasattr(inputs, "to_numpy"):
        return to_tensor_2d(inputs, "inputs")
    if isinstance(inputs, np.ndarray):
        return numpy_to_tensor(inputs, "inputs", keep_integers=True), None
    if isinstance(inputs, tuple) and inputs and all(isinstance(t, (np.ndarray, torch.Tensor)) for t in inputs):
        return tuple(
            numpy_to_tensor(t, "inputs", keep_integers=True) if isinstance(t, np.ndarray) else t for t in inputs
        ), None
    if is_graph(inputs) and hasattr(inputs, "to_data_list"):
        return inputs.to_data_list(), None
    if is_graph(inputs):
        raise TypeError(
            "Expected `inputs` to hold many samples, but got a single graph; pass a list of graphs, a Batch or a "
            "DataLoader (a single graph is the `x` of explain_local)."
        )
    return inputs, None


def _tensor_of(value: Any, name: str) -> Any:
    """A numpy array as a tensor (dtype kept), anything else as it is."""
    return numpy_to_tensor(value, name, keep_integers=True) if isinstance(value, np.ndarray) else value


def _per_sample(value: Any, n: int | None) -> bool:
    return n is not None and isinstance(value, torch.Tensor) and value.ndim >= 1 and value.shape[0] == n


@dataclass(frozen=True)
class ModelArgs:
    """Extra model arguments: positional ones after the inputs (Captum's ``additional_forward_args``) and keywords.
    A tensor (or numpy array) with one row per sample is split by the batches; everything else goes whole."""

    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, additional_forward_args: Any = None, forward_kwargs: Mapping[str, Any] | None = None) -> ModelArgs:
        if forward_kwargs is None:
            forward_kwargs = {}
        if not isinstance(forward_kwargs, Mapping) or not all(isinstance(k, str) for k in forward_kwargs):
            raise TypeError(
                f"Expected `forward_kwargs` to be a dict of keyword arguments for the model, got {forward_kwargs!r}."
            )
        if additional_forward_args is None:
            args: tuple = ()
        elif isinstance(additional_forward_args, tuple):
            args = additional_forward_args
        else:  # Captum: a single extra argument need not be wrapped in a tuple
            args = (additional_forward_args,)
        return cls(
            tuple(_tensor_of(a, "additional_forward_args") for a in args),
            {k: _tensor_of(v, f"forward_kwargs[{k!r}]") for k, v in forward_kwargs.items()},
        )

    def __bool__(self) -> bool:
        return bool(self.args or self.kwargs)

    def has_per_sample(self, n: int | None) -> bool:
        return any(_per_sample(v, n) for v in (*self.args, *self.kwargs.values()))

    def rows(self, start: int, stop: int, n: int | None) -> tuple[tuple, dict[str, Any]]:
        """The arguments for the samples ``start:stop`` of ``n``."""
        pick = lambda v: v[start:stop] if _per_sample(v, n) else v  # noqa: E731
        return tuple(pick(a) for a in self.args), {k: pick(v) for k, v in self.kwargs.items()}


# -------------------------------------------------------------------------------------------------------------- batches


@dataclass
class Forward:
    """What one pass over the data collected (all rows in data order)."""

    outputs: torch.Tensor
    activations: torch.Tensor | None
    flat_inputs: torch.Tensor | None
    labels: torch.Tensor | None
    input_shape: tuple[int, ...] | None  # shape of one model input (without the batch dimension)
    input_type: str = "Tensor"  # type name of the model input of the batches

    @property
    def inputs(self) -> torch.Tensor | None:
        """The collected model inputs in their shape (N, ...), when they were collected."""
        if self.flat_inputs is None or self.input_shape is None:
            return None
        return self.flat_inputs.reshape(-1, *self.input_shape)


@dataclass
class Step:
    """One batch of :func:`forward_batches`: the model's outputs (detached), the layer's (rows, D) activations (or
    ``None``), the model input as transferred, the labels as the batch held them, and the batch's first row."""

    outputs: torch.Tensor
    activations: torch.Tensor | None
    inputs: Any
    labels: Any
    start: int


Feed = Callable[[Any, int], tuple[Any, tuple, dict[str, Any]]]


def model_feed(model: nn.Module, model_args: ModelArgs, n: int | None) -> Feed:
    """How a plain ``nn.Module`` is fed a batch that starts at row ``start``: floating inputs and extra arguments
    cast to its dtype on its device, per-sample arguments split by the batch's rows (of ``n``)."""
    device, dtype = model_device(model), model_dtype(model)

    def feed(inp: Any, start: int) -> tuple[Any, tuple, dict[str, Any]]:
        args, kwargs = to_device(batch_args(model_args, inp, start, n), device, dtype)
        return to_device(inp, device, dtype), args, kwargs

    return feed


def model_batches(model: nn.Module, batches: Iterable[tuple[Any, Any]]) -> Iterator[tuple[Any, Any]]:
    """The batch transfer of a plain ``nn.Module``: each (input, labels) checked off 'meta', the input moved to the
    model's device (its dtype kept: that is the input the rules and feature selection see)."""
    device = model_device(model)
    for inp, lab in batches:
        check_not_meta(inp, "inputs")  # a loader's batches: seen one by one, before the model sees them
        yield to_device(inp, device), lab


def forward_batches(
    model: nn.Module,
    batches: Iterable[tuple[Any, Any]],
    feed: Feed,
    *,
    layer: nn.Module | None = None,
    layer_name: str | None = None,
    layer_input: bool = False,
    context: Callable[[], AbstractContextManager] = nullcontext,
    noun: str = "model",
    inputs: Any = None,
) -> Iterator[Step]:
    """The one forward loop: run ``model`` on each transferred ``(input, labels)`` of ``batches`` in eval mode
    under ``torch.no_grad``, with a forward hook on ``layer``, and yield each batch's :class:`Step`.

    The transfer is the caller's (:func:`model_batches` and :func:`model_feed` for a plain ``nn.Module``); ``noun``
    names the model in messages, ``inputs`` in shape errors (:func:`~torch_amore.model.input_shape.call_model`). The
    hook and the modes are restored when the loop ends; a consumer that may stop early closes the generator.

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
        >>> batches = [(torch.rand(5, 3), None), (torch.rand(2, 3), None)]
        >>> steps = forward_batches(model, batches, model_feed(model, ModelArgs(), 7), layer=model[1])
        >>> [(s.start, tuple(s.outputs.shape), tuple(s.activations.shape)) for s in steps]
        [(0, (5, 2), (5, 4)), (5, (2, 2), (2, 4))]
    """
    capture = None if layer is None else _Capture(layer_input)
    with eval_mode(model), hook_on(layer, capture), torch.no_grad():
        start, accepted = 0, None
        for inp, lab in batches:
            fed, args, kwargs = feed(inp, start)
            with context():
                out = call_model(model, fed, args, kwargs, accepted=accepted, inputs=inputs)
            if accepted is None and isinstance(fed, torch.Tensor):
                accepted = tuple(fed.shape[1:])  # later batches of another shape are named against it
            out = output_tensor(out, noun).detach()
            rows = out.shape[0]
            given = batch_len(fed) if isinstance(fed, (torch.Tensor, tuple)) else None
            if given is not None and rows != given:  # e.g. outputs transposed or pooled over the batch
                raise ValueError(
                    f"Expected the {noun} to return one row per sample, but it returned outputs of shape "
                    f"{tuple(out.shape)} for a batch of {given} samples (rows {start} to {start + given - 1})."
                )
            acts = None if capture is None else layer_activations(capture.values, layer_name, rows)
            yield Step(out, acts, inp, lab, start)
            start += rows


def batch_args(model_args: ModelArgs, inp: Any, start: int, n: int | None) -> tuple[tuple, dict[str, Any]]:
    """The extra model arguments of the batch that starts at row ``start``."""
    if not model_args.has_per_sample(n):
        return model_args.args, dict(model_args.kwargs)
    rows = batch_len(inp)
    if rows is None:
        raise TypeError(
            f"Expected batches whose number of samples is known to split per-sample model arguments, but got a "
            f"{type(inp).__name__}."
        )
    return model_args.rows(start, start + rows, n)


def output_tensor(out: Any, noun: str = "model") -> torch.Tensor:
    """The model's output tensor (the first element of a tuple or list output), at least one-dimensional."""
    if isinstance(out, (tuple, list)) and out:
        out = out[0]
    if not isinstance(out, torch.Tensor):
        raise TypeError(f"Expected the {noun} to return a tensor, but it returned {type(out).__name__}.")
    return out.reshape(1) if out.ndim == 0 else out


def layer_activations(values: list[torch.Tensor], layer_name: str | None, rows: int) -> torch.Tensor:
    """The (rows, D) activations a forward hook captured in ``values`` during one forward pass (emptied), checked:
    the layer ran exactly once and has one row per sample.

    Example:
        >>> import torch
        >>> layer_activations([torch.zeros(4, 2, 3)], "conv", 4).shape
        torch.Size([4, 6])
    """
    if len(values) != 1:
        n = len(values)
        values.clear()
        raise ValueError(
            f"Expected `layer` ({layer_name}) to run once per forward pass, but it ran {n} times; "
            "pick a module the model calls exactly once."
        )
    act = values.pop()
    if act.ndim == 0 or act.shape[0] != rows:
        raise ValueError(
            f"Expected the activations of `layer` ({layer_name}) to have one row per sample ({rows} in this batch), "
            f"but got shape {tuple(act.shape)}; pick a layer after pooling."
        )
    return act.reshape(rows, -1)


def check_finite_outputs(out: torch.Tensor, batch_start: int | None = None) -> None:
    """A ``ValueError`` where the model's outputs hold NaN, counting the samples that give it; ``batch_start``: the
    outputs are a batch whose first sample has this index (``None``: the outputs of every sample).

    Example:
        >>> check_finite_outputs(torch.tensor([[0.5], [float("nan")]]), batch_start=10)
        Traceback (most recent call last):
        ...
        ValueError: Expected finite model outputs, but 1 of the 2 samples 10..11 give NaN (first at sample 11).
    """
    if out.is_floating_point() and bool(torch.isnan(out).any()):
        bad = torch.isnan(out.reshape(out.shape[0], -1)).any(1)
        n, start = out.shape[0], batch_start or 0
        where = f"{n} samples" if batch_start is None else f"the {n} samples {start}..{start + n - 1}"
        raise ValueError(
            f"Expected finite model outputs, but {int(bad.sum())} of {where} give NaN "
            f"(first at sample {start + int(torch.nonzero(bad)[0])})."
        )
