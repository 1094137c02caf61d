"""Running a model over data: batches of tensors, Datasets and DataLoaders, forward hooks on a layer, eval mode.

Private helpers of :class:`torch_amore.RegionalRuleExplainer`. Everything the hook or the mode switch touches is
undone in ``finally`` blocks, so an error inside the model leaves it as it was.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from torch_amore._validation import check_int

#: How to find the model input / the labels in a batch: an index or key, several of them, or a callable on the batch.
BatchKey = int | str | Sequence[int | str] | Callable[[Any], Any] | None


# --------------------------------------------------------------------------------------------------------------------
# layers, modes, hooks


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
def _hooked(layer: nn.Module | None, use_input: bool) -> Iterator[_Capture | None]:
    if layer is None:
        yield None
        return
    capture = _Capture(use_input)
    handle = layer.register_forward_hook(capture)
    try:
        yield capture
    finally:
        handle.remove()


def _model_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


def _to_device(obj: Any, device: torch.device) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, tuple):
        return tuple(_to_device(o, device) for o in obj)
    if isinstance(obj, list):
        return [_to_device(o, device) for o in obj]
    if isinstance(obj, Mapping):
        return {k: _to_device(v, device) for k, v in obj.items()}
    if hasattr(obj, "to") and callable(obj.to):  # e.g. a torch_geometric Batch
        return obj.to(device)
    return obj


# --------------------------------------------------------------------------------------------------------------------
# batches


def _pick(batch: Any, key: int | str, what: str) -> Any:
    try:
        if isinstance(batch, (Mapping, tuple, list)):
            return batch[key]
        if isinstance(key, str):
            return getattr(batch, key)
        return batch[key]
    except (KeyError, IndexError, AttributeError, TypeError):
        keys = list(batch.keys()) if isinstance(batch, Mapping) else None
        shown = f"keys {keys}" if keys is not None else f"a {type(batch).__name__}"
        raise ValueError(
            f"Expected `{what}` {key!r} to select an element of each batch, but the batch is {shown}."
        ) from None


def _split_batch(batch: Any, input_key: BatchKey, label_key: BatchKey) -> tuple[Any, Any]:
    """(model input, labels or None) of one batch; a tuple model input means several positional arguments."""
    if input_key is None:
        if isinstance(batch, torch.Tensor):
            inp = batch
        elif isinstance(batch, (tuple, list)):
            inp = batch[0]
        elif isinstance(batch, Mapping):
            raise ValueError(
                f"Expected `input_key` to say which element of the dict batches is the model input, but got None; "
                f"the batches have keys {list(batch.keys())}."
            )
        else:  # e.g. a torch_geometric Batch: the model takes the whole object
            inp = batch
    elif callable(input_key):
        inp = input_key(batch)
    elif isinstance(input_key, (tuple, list)):
        inp = tuple(_pick(batch, k, "input_key") for k in input_key)
    else:
        inp = _pick(batch, input_key, "input_key")
    if label_key is None:
        labels = batch[1] if isinstance(batch, (tuple, list)) and len(batch) > 1 and input_key is None else None
    elif callable(label_key):
        labels = label_key(batch)
    else:
        labels = _pick(batch, label_key, "label_key")
    return inp, labels


def n_rows(inputs: Any) -> int | None:
    """Number of samples when it is known before running the model; a TypeError for unsupported inputs."""
    if isinstance(inputs, torch.Tensor):
        return int(inputs.shape[0]) if inputs.ndim else 1
    if isinstance(inputs, tuple) and inputs and all(isinstance(t, torch.Tensor) and t.ndim for t in inputs):
        return int(inputs[0].shape[0])
    if not isinstance(inputs, (Dataset, DataLoader)):
        raise TypeError(
            "Expected `inputs` to be a tensor, a tuple of tensors, a Dataset or a DataLoader, but got "
            f"{type(inputs).__name__}."
        )
    try:
        return len(inputs.dataset) if isinstance(inputs, DataLoader) else len(inputs)
    except TypeError:
        return None


def _batches(inputs: Any, batch_size: int, input_key: BatchKey, label_key: BatchKey) -> tuple[Iterator, int | None]:
    """Iterator over (model input, labels) and the number of batches (None if unknown)."""
    if isinstance(inputs, torch.Tensor):
        if inputs.ndim == 0:
            raise ValueError("Expected `inputs` to have a batch dimension, but got a 0-dim tensor.")
        n = inputs.shape[0]
        return ((inputs[i : i + batch_size], None) for i in range(0, n, batch_size)), math.ceil(n / batch_size)
    if isinstance(inputs, tuple):
        if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
            raise TypeError("Expected a tuple `inputs` to hold tensors (the model's positional inputs).")
        n = inputs[0].shape[0]
        if any(t.shape[0] != n for t in inputs):
            raise ValueError(
                f"Expected the tensors of `inputs` to have the same length, got {[len(t) for t in inputs]}."
            )
        it = ((tuple(t[i : i + batch_size] for t in inputs), None) for i in range(0, n, batch_size))
        return it, math.ceil(n / batch_size)
    if isinstance(inputs, Dataset) and not isinstance(inputs, DataLoader):
        inputs = DataLoader(inputs, batch_size=batch_size, shuffle=False)
    if isinstance(inputs, DataLoader):
        try:
            n_batches = len(inputs)
        except TypeError:
            n_batches = None
        return (_split_batch(b, input_key, label_key) for b in inputs), n_batches
    raise TypeError(
        "Expected `inputs` to be a tensor, a tuple of tensors, a Dataset or a DataLoader, but got "
        f"{type(inputs).__name__}."
    )


@dataclass
class Forward:
    """What one pass over the data collected (all rows in data order)."""

    outputs: torch.Tensor
    activations: torch.Tensor | None
    flat_inputs: torch.Tensor | None
    labels: torch.Tensor | None
    input_shape: tuple[int, ...] | None  # shape of one model input (without the batch dimension)


def as_labels(values: Any, n: int | None, name: str = "labels") -> torch.Tensor:
    if hasattr(values, "to_numpy"):
        values = values.to_numpy()
    if isinstance(values, (list, tuple, np.ndarray)):
        values = torch.as_tensor(np.asarray(values))
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"Expected `{name}` to be a tensor or array of shape (N,), but got {type(values).__name__}.")
    values = values.reshape(-1) if values.ndim == 2 and values.shape[1] == 1 else values
    if values.ndim != 1:
        raise ValueError(f"Expected `{name}` to have shape (N,), but got shape {tuple(values.shape)}.")
    if n is not None and values.shape[0] != n:
        raise ValueError(
            f"Expected `{name}` to have one entry per sample of `inputs` ({n}), but got {values.shape[0]}."
        )
    return values


def run_model(
    model: nn.Module,
    inputs: Any,
    *,
    layer: nn.Module | None = None,
    layer_name: str | None = None,
    layer_input: bool = False,
    batch_size: int = 256,
    progress: bool = False,
    input_key: BatchKey = None,
    label_key: BatchKey = None,
    collect_inputs: bool = False,
    forward_kwargs: dict | None = None,
) -> Forward:
    """Run the model over ``inputs`` and collect outputs, layer activations, flattened inputs and labels."""
    batch_size = check_int(batch_size, "batch_size", 1)
    it, n_batches = _batches(inputs, batch_size, input_key, label_key)
    device = _model_device(model)
    outputs, acts, flats, labels = [], [], [], []
    input_shape = None
    if progress and (n_batches is None or n_batches > 1):
        from tqdm.auto import tqdm

        it = tqdm(it, total=n_batches, desc="forward", unit="batch", leave=False)
    with eval_mode(model), _hooked(layer, layer_input) as capture, torch.no_grad():
        for inp, lab in it:
            inp = _to_device(inp, device)
            out = model(*inp, **forward_kwargs) if isinstance(inp, tuple) else model(inp, **forward_kwargs)
            if isinstance(out, (tuple, list)) and out:
                out = out[0]
            if not isinstance(out, torch.Tensor):
                raise TypeError(f"Expected the model to return a tensor, but it returned {type(out).__name__}.")
            rows = out.shape[0] if out.ndim else 1
            out = out.reshape(1) if out.ndim == 0 else out
            outputs.append(out.detach())
            if capture is not None:
                if len(capture.values) != 1:
                    raise ValueError(
                        f"Expected `layer` ({layer_name}) to run once per forward pass, but it ran "
                        f"{len(capture.values)} times; pick a module the model calls exactly once."
                    )
                act = capture.values.pop()
                if act.ndim == 0 or act.shape[0] != rows:
                    raise ValueError(
                        f"Expected the activations of `layer` ({layer_name}) to have one row per sample "
                        f"({rows} in this batch), but got shape {tuple(act.shape)}; pick a layer after pooling."
                    )
                acts.append(act.reshape(rows, -1))
            if collect_inputs:
                if not isinstance(inp, torch.Tensor):
                    raise TypeError(
                        "Expected tensor model inputs to build rules on them, but got "
                        f"{type(inp).__name__}; pass `layer=` or a `features=` matrix."
                    )
                flats.append(inp.detach().reshape(rows, -1))
                input_shape = tuple(inp.shape[1:])
            elif input_shape is None and isinstance(inp, torch.Tensor):
                input_shape = tuple(inp.shape[1:])
            if lab is not None:
                labels.append(torch.as_tensor(lab).reshape(rows, -1).squeeze(1).detach().cpu())
    if not outputs:
        raise ValueError("Expected `inputs` to hold at least one sample, but it yielded no batches.")
    out_all = torch.cat(outputs)
    if out_all.is_floating_point() and bool(torch.isnan(out_all).any()):
        bad = torch.isnan(out_all.reshape(out_all.shape[0], -1)).any(1)
        raise ValueError(
            f"Expected finite model outputs, but {int(bad.sum())} of {out_all.shape[0]} samples give NaN "
            f"(first at sample {int(torch.nonzero(bad)[0])})."
        )
    return Forward(
        outputs=out_all,
        activations=torch.cat(acts) if acts else None,
        flat_inputs=torch.cat(flats) if flats else None,
        labels=torch.cat(labels) if len(labels) == len(outputs) else None,
        input_shape=input_shape,
    )
