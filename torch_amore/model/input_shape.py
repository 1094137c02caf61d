"""Shape mistakes named by the library: a shape mismatch between a batch and the model becomes a ``ValueError`` that
names ``inputs``, its shape and what the model's first layer expects; new data are checked against the explained
width before the model runs.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch
from torch import nn

#: torch's words for a shape mismatch (other errors inside the model pass unchanged).
_SHAPE_WORDS = re.compile(r"\bshapes?\b|\bsize\b|dimension|channels|expected input|must match", re.IGNORECASE)
_CONVS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def first_layer(model: nn.Module) -> tuple[str, nn.Module, bool] | None:
    """The model's first ``nn.Linear``, convolution or recurrent layer in registration order, its name, and whether
    it is the first module that computes anything (no flattening or other module before it); ``None`` without one.

    Example:
        >>> from torch import nn
        >>> name, layer, first = first_layer(nn.Sequential(nn.Flatten(), nn.Linear(6, 2)))
        >>> name, layer.in_features, first
        ('1', 6, False)
    """
    leaves = [(name, m) for name, m in model.named_modules() if not list(m.children())]
    for i, (name, module) in enumerate(leaves):
        if isinstance(module, nn.modules.lazy.LazyModuleMixin):
            return None
        if isinstance(module, (nn.Linear, *_CONVS, nn.RNNBase)):
            return name or "<model>", module, i == 0
    return None


def _expects(model: nn.Module, shape: tuple[int, ...]) -> tuple[str, bool] | None:
    """What the first layer expects, in words, and whether a batch of ``shape`` contradicts it."""
    found = first_layer(model)
    if found is None:
        return None
    name, layer, first = found
    per_sample = shape[1:] if len(shape) > 1 else ()
    if isinstance(layer, nn.Linear):
        width = layer.in_features
        if first:
            return f"(N, {width}) (the model's first layer, `{name}`, is Linear(in_features={width}))", (
                len(shape) != 2 or shape[1] != width
            )
        words = f"(N, ...) with {width} values per sample (its Linear layer `{name}` has in_features={width})"
        return words, math.prod(per_sample) != width
    if isinstance(layer, nn.RNNBase):
        width = layer.input_size
        words = f"(..., {width}) (the model's first layer, `{name}`, is {type(layer).__name__}(input_size={width}))"
        return words, first and shape[-1] != width
    dims = int(type(layer).__name__[-2])
    channels = layer.in_channels
    spatial = ", ".join(["..."] * dims)
    words = (
        f"(N, {channels}, {spatial}) (the model's first layer, `{name}`, is {type(layer).__name__}"
        f"(in_channels={channels}))"
    )
    return words, first and (len(shape) != dims + 2 or shape[1] != channels)


def shape_error(
    model: nn.Module, batch: Any, err: Exception, *, accepted: tuple[int, ...] | None = None, inputs: Any = None
) -> ValueError | None:
    """The ``ValueError`` for ``err``, raised by ``model`` on ``batch``, where it is a shape mismatch, else ``None``;
    ``accepted``: the sample shape of earlier batches; ``inputs``: the whole inputs (a tensor's shape is named).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model, x = nn.Linear(3, 1), torch.zeros(4, 2)
        >>> error = shape_error(model, x, RuntimeError("mat1 and mat2 shapes cannot be multiplied (4x2 and 3x1)"))
        >>> print(error)  # doctest: +ELLIPSIS
        Expected `inputs` of shape (N, 3) (the model's first layer, `<model>`, is Linear(in_features=3)), but got ...
        >>> shape_error(model, torch.zeros(4, 3), RuntimeError("CUDA out of memory")) is None  # not a shape error
        True
    """
    if not isinstance(err, RuntimeError) or isinstance(err, torch.OutOfMemoryError) or not torch.is_tensor(batch):
        return None
    shape = tuple(batch.shape)
    expects = _expects(model, shape)
    changed = accepted is not None and shape[1:] != tuple(accepted)
    contradicts = expects is not None and expects[1]
    if not (changed or contradicts or _SHAPE_WORDS.search(str(err))):
        return None
    given = tuple(inputs.shape) if isinstance(inputs, torch.Tensor) else None
    got = f"shape {given}" if given is not None else f"a batch of shape {shape}"
    if given is not None and given[1:] != shape[1:]:
        got += f" (a batch of shape {shape})"
    head = "Expected `inputs` of " + ("a shape the model accepts" if expects is None else f"shape {expects[0]}")
    if changed:
        head += f"; the model accepted samples of shape {tuple(accepted)} in earlier batches"
    hint = ""
    if len(shape) == 1:
        hint = (
            " A 1-D `inputs` holds one value per sample: pass inputs.reshape(-1, 1) for one feature, or "
            "inputs.reshape(1, -1) for a single sample."
        )
    return ValueError(f"{head}, but got {got}; the model raised: {str(err).strip()}.{hint}")


def call_model(
    model: nn.Module,
    fed: Any,
    args: tuple = (),
    kwargs: dict[str, Any] | None = None,
    *,
    accepted: tuple[int, ...] | None = None,
    inputs: Any = None,
) -> Any:
    """``model(fed, *args, **kwargs)`` (``fed`` a tuple: several positional inputs); a shape mismatch between the
    batch and the model is a ``ValueError`` from :func:`shape_error`, with torch's error chained.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> call_model(nn.Linear(3, 1), torch.zeros(1, 20))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected `inputs` of shape (N, 3) (...), but got a batch of shape (1, 20); the model raised: ...
    """
    kwargs = {} if kwargs is None else kwargs
    try:
        return model(*fed, *args, **kwargs) if isinstance(fed, tuple) else model(fed, *args, **kwargs)
    except RuntimeError as err:
        error = shape_error(model, fed, err, accepted=accepted, inputs=inputs)
        if error is None:
            raise
        raise error from err


def check_width(data: Any, name: str, *, n_features: int | None, input_shape: Any = None) -> None:
    """Before the model runs: ``data`` (a tensor, array or DataFrame; other kinds pass) holds samples of the
    explained ``input_shape`` and, where rules were built on it, ``n_features`` values per sample.

    Example:
        >>> import torch
        >>> check_width(torch.zeros(50, 29), "inputs", n_features=30)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected `inputs` with 30 features per sample (...), but got shape (50, 29) (29 features).
    """
    shape = getattr(data, "shape", None)
    if not isinstance(shape, tuple | torch.Size) or len(shape) < 1:
        return
    shape = tuple(int(s) for s in shape)
    if input_shape is not None and shape[1:] != tuple(input_shape):
        raise ValueError(
            f"Expected `{name}` of shape (N, {', '.join(map(str, input_shape))}) like the explained samples, but got "
            f"shape {shape}."
        )
    width = math.prod(shape[1:])
    if n_features is not None and width != n_features:
        raise ValueError(
            f"Expected `{name}` with {n_features} features per sample (those the rules were built on), but got "
            f"shape {shape} ({width} features)."
        )


def check_new_data(inputs: Any, features: Any, source: str | None, *, n_features: int, input_shape: Any) -> None:
    """:func:`check_width` of new ``inputs`` (and of ``features`` for rules on a separate matrix) against the
    explained ``input_shape`` and the rules' ``n_features``, before the model runs (``evaluate``, ``verify``).

    Example:
        >>> import numpy as np
        >>> check_new_data(np.zeros((5, 4)), None, source="inputs", n_features=4, input_shape=[4])  # fits
        >>> check_new_data(None, np.zeros((5, 3)), "features", n_features=4, input_shape=None)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected `features` with 4 features per sample (...), but got shape (5, 3) (3 features).
    """
    check_width(inputs, "inputs", n_features=n_features if source == "inputs" else None, input_shape=input_shape)
    if source == "features" and features is not None:
        check_width(features, "features", n_features=n_features)
