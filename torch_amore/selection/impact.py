"""The impact matrix of feature selection: integrated gradients (Captum) on the inputs or a layer's units, or a
precomputed importance matrix (SHAP, LIME), and the inputs and baselines the attribution needs.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from torch_amore.data import validation as V
from torch_amore.model.forward import hook_on

_WAY_OUT = "pass a precomputed `importance=` matrix (e.g. SHAP or LIME values) instead"


def _impact_matrix(
    model: Any,
    samples: torch.Tensor,
    base: torch.Tensor,
    pair_b: torch.Tensor,
    pair_x: torch.Tensor,
    shift: torch.Tensor,
    *,
    target: int | None,
    layer: nn.Module | None,
    attribute_to_layer_input: bool,
    n_steps: int,
    internal_batch_size: int,
) -> torch.Tensor:
    """Rows ``|j / (y~ - y)|`` for the pairs (base[pair_b], samples[pair_x]); ``shift`` holds ``y~ - y`` per pair.

    Pairs go through Captum in chunks of ``internal_batch_size // n_steps``, so memory is bounded by the chunk.
    Captum integrates from the baseline to the sample (``sum_i j_i ~= y~ - y``); the paper's orientation flips the
    signs of both ``j_i`` and the shift, not the ratio.
    """
    from captum.attr import IntegratedGradients, LayerIntegratedGradients

    if layer is None:
        ig, extra = IntegratedGradients(model), {}
    else:
        ig, extra = LayerIntegratedGradients(model, layer), {"attribute_to_layer_input": attribute_to_layer_input}
    chunk = max(1, internal_batch_size // n_steps)
    n_pairs = pair_b.numel()
    J = None
    for start in range(0, n_pairs, chunk):
        b, m = pair_b[start : start + chunk], pair_x[start : start + chunk]
        attr = ig.attribute(
            samples[m],
            baselines=base[b],
            target=target,
            n_steps=n_steps,
            internal_batch_size=internal_batch_size,
            **extra,
        )
        if isinstance(attr, (tuple, list)):
            raise ValueError(
                f"Expected `layer` to produce a single tensor, but its "
                f"{'inputs' if attribute_to_layer_input else 'output'} hold {len(attr)} tensors."
            )
        attr = attr.detach().reshape(b.numel(), -1)
        if J is None:
            J = torch.empty(n_pairs, attr.shape[1], dtype=attr.dtype)
        rows = (attr / shift[start : start + chunk, None].to(attr.dtype)).abs()
        if not bool(torch.isfinite(rows).all()):
            raise ValueError(
                "The integrated gradients hold NaN or inf: check that the model is finite along the paths."
            )
        J[start : start + chunk] = rows.cpu()
    return J


def _importance_from_matrix(importance: Any) -> torch.Tensor:
    """The magnitudes of a precomputed (N, D) importance matrix (:func:`torch_amore.data.validation.to_tensor_2d`),
    on the CPU."""
    J, _ = V.to_tensor_2d(importance, "importance")
    if J.shape[0] == 0 or J.shape[1] == 0:
        raise ValueError(f"Expected `importance` to have shape (N, D) with N, D >= 1, but got {tuple(J.shape)}.")
    J = J.cpu().abs()
    if not bool(torch.isfinite(J).all()):
        raise ValueError("Expected `importance` to hold finite values, but it holds NaN or inf.")
    return J


def _model_dtype_device(model: Any) -> tuple[torch.dtype | None, torch.device | None]:
    if isinstance(model, nn.Module):
        for p in model.parameters():
            if p.is_floating_point():
                return p.dtype, p.device
    return None, None


def _to_inputs(inputs: Any, model: Any, *, allow_integer: bool) -> tuple[torch.Tensor, list[str] | None]:
    """The inputs (N, ...) as a tensor (:func:`torch_amore.data.validation.to_tensor`) on the model's device and, when
    floating, in its dtype; integer inputs only where they need no gradient (``allow_integer``)."""
    inputs, names = V.to_tensor(inputs, "inputs", samples=True, keep_integers=True)
    dtype, device = _model_dtype_device(model)
    if not inputs.is_floating_point():
        if not allow_integer:
            raise TypeError(
                f"Expected floating-point `inputs`, but got {inputs.dtype}: integer inputs cannot be differentiated. "
                "Cast them to float if they are numeric features, attribute to an embedding with `layer=` and "
                f"explicit `baselines`, or {_WAY_OUT}."
            )
    else:
        if not bool(torch.isfinite(inputs).all()):
            raise ValueError("Expected `inputs` to hold finite values, but they hold NaN or inf.")
        if dtype is not None:
            inputs = inputs.to(dtype)
    if device is not None:
        inputs = inputs.to(device)
    return inputs, names


def _baselines(baselines: Any, X: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    if isinstance(baselines, str):
        if baselines != "class_means":
            raise ValueError(f"Expected `baselines` to be 'class_means' or a tensor, but got {baselines!r}.")
        if labels is None:
            raise ValueError("Expected `labels` for baselines='class_means' (the class centres), but got None.")
        lab = labels.to(X.device)
        return torch.stack([X[lab == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    if isinstance(baselines, np.ndarray):
        baselines = torch.from_numpy(np.ascontiguousarray(baselines))
    if not isinstance(baselines, torch.Tensor):
        raise TypeError(f"Expected `baselines` to be 'class_means' or a tensor, but got {type(baselines).__name__}.")
    if tuple(baselines.shape) == tuple(X.shape[1:]):
        baselines = baselines[None]
    if tuple(baselines.shape[1:]) != tuple(X.shape[1:]) or baselines.shape[0] == 0:
        raise ValueError(
            f"Expected `baselines` of shape (B, {', '.join(map(str, X.shape[1:]))}), but got {tuple(baselines.shape)}."
        )
    return baselines.to(X.device, X.dtype)


def _test_rows(labels: torch.Tensor | None, n: int, per_class: int, seed: int) -> torch.Tensor:
    """A seeded, class-balanced draw: ``per_class`` rows of each class without replacement (all of smaller ones)."""
    g = torch.Generator().manual_seed(seed)
    groups = (
        [torch.arange(n)]
        if labels is None
        else [torch.nonzero(labels == c).flatten() for c in range(int(labels.max()) + 1)]
    )
    picks = [rows[torch.randperm(rows.numel(), generator=g)[:per_class]].sort().values for rows in groups]
    return torch.cat(picks)


def _check_differentiable(model: Any, x: torch.Tensor, layer: nn.Module | None, to_layer_input: bool) -> int:
    """Run two samples and check that the output carries a gradient w.r.t. the inputs (or the layer activations).

    Returns the number of values per sample of the attributed tensor (inputs or layer activations)."""
    seen: list[int] = []

    def width(t: Any) -> int:
        return t[0].numel() if torch.is_tensor(t) and t.ndim > 0 and t.shape[0] == x.shape[0] else 0

    def pre_hook(module: nn.Module, args: tuple) -> tuple:
        seen.append(max((width(a) for a in args), default=0))
        return tuple(
            a.detach().requires_grad_(True) if torch.is_tensor(a) and a.is_floating_point() else a for a in args
        )

    def hook(module: nn.Module, args: tuple, out: Any) -> Any:
        seen.append(width(out))
        return out.detach().requires_grad_(True) if torch.is_tensor(out) and out.is_floating_point() else out

    if layer is None:
        x = x.detach().clone().requires_grad_(True)
    with hook_on(layer, pre_hook if to_layer_input else hook, pre=to_layer_input), torch.enable_grad():
        out = model(x)
    if layer is not None and not seen:
        raise ValueError("Expected `layer` to run in model's forward pass, but it was never called.")
    if not torch.is_tensor(out) or not out.requires_grad:
        where = "the inputs" if layer is None else "the layer activations"
        raise TypeError(
            f"The model output is not differentiable with respect to {where} (does the forward run under "
            f"torch.no_grad(), detach, or cast to integers?); integrated gradients need gradients: {_WAY_OUT}."
        )
    return max([x[0].numel(), *seen])


@torch.no_grad()
def _outputs(
    model: Any, x: torch.Tensor, rows: torch.Tensor | None, target: int | None, batch: int
) -> tuple[torch.Tensor, int]:
    """The explained model output for ``x[rows]`` (all rows if None): column ``target`` of (N, C) outputs; and the
    number of output dimensions."""
    parts, ndim = [], 1
    n = x.shape[0] if rows is None else rows.numel()
    for start in range(0, n, batch):
        out = model(x[start : start + batch] if rows is None else x[rows[start : start + batch]])
        if not torch.is_tensor(out) or out.ndim > 2 or out.ndim == 0:
            shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise ValueError(f"Expected the model to return (N,), (N, 1) or (N, C) outputs, but got {shape}.")
        ndim = out.ndim
        out = out.reshape(out.shape[0], -1)
        if out.shape[1] > 1 and target is None:
            raise ValueError(
                f"The model returns {out.shape[1]} outputs per sample: pass `target` (the class index to explain)."
            )
        col = 0 if target is None else target
        if col >= out.shape[1]:
            raise ValueError(f"Expected `target` in [0, {out.shape[1] - 1}], but got {target}.")
        parts.append(out[:, col])
    return torch.cat(parts), ndim
