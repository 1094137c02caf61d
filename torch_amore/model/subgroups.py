"""The explained subgroup from model outputs: a class (argmax, or a given or ROC probability threshold), a boolean
mask, a callable on the outputs, or a value range of a regression output."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from torch_amore.data.arguments import check_choice
from torch_amore.data.validation import to_labels


def _is_range(target: Any) -> bool:
    return (
        isinstance(target, tuple)
        and len(target) == 2
        and all(v is None or (isinstance(v, (int, float, np.number)) and not isinstance(v, bool)) for v in target)
    )


def _tuple_target(target: tuple) -> str:
    """The message for a tuple ``target`` that is no (low, high) range."""
    return (
        f"Expected a tuple `target` to be a (low, high) range of a regression output, but got {target!r}; "
        "Captum-style output indices are not subgroups: pass a callable on the outputs instead, e.g. "
        "`target=lambda out: out[:, 0, 1] > 0`."
    )


#: Captum's per-sample output indices look like a mask of numbers; a subgroup is a boolean mask.
_NOT_CAPTUM = "Captum's per-sample output indices are not a subgroup: pass a class index or a boolean mask."


def _check_target_kind(target: Any) -> None:
    """A ``TypeError`` for a ``target`` of a kind that is no subgroup definition (a number that is no class index, a
    string, None, a tuple that is no range, a per-sample array of other than booleans)."""
    called = callable(target) and not isinstance(target, torch.Tensor)
    if isinstance(target, (bool, float, str, bytes, np.floating)) or target is None:
        raise TypeError(
            "Expected `target` to be a class index, a mask, a callable or a (low, high) range, got "
            f"{target!r} ({type(target).__name__})."
        )
    if isinstance(target, tuple) and not called and not _is_range(target):
        raise TypeError(_tuple_target(target))
    try:  # a ragged list: refused with the mask's own message where it is converted
        array = np.asarray(target) if isinstance(target, list) else target
    except ValueError:
        return
    if isinstance(array, (np.ndarray, torch.Tensor)) and array.ndim >= 1 and array.dtype not in (bool, torch.bool):
        raise TypeError(
            f"Expected a per-sample `target` to be a boolean mask of the subgroup, but got dtype {array.dtype}; "
            + _NOT_CAPTUM
        )


def check_target(target: Any, threshold: Any) -> None:
    """Type checks that need no model outputs: what no model output could make a subgroup is refused here, before
    the model runs.

    Example:
        >>> check_target(1.0, None)
        Traceback (most recent call last):
        ...
        TypeError: Expected `target` to be a class index, a mask, a callable or a (low, high) range, got 1.0 (float).
    """
    _check_target_kind(target)
    is_class = isinstance(target, (int, np.integer))
    if is_class and target < 0:
        raise ValueError(f"Expected a class-index `target` >= 0, but got {target}.")
    if threshold is None:
        return
    if not is_class:
        raise ValueError(f"Expected `threshold` only with a class-index `target`, but got threshold={threshold!r}.")
    if isinstance(threshold, str):
        if threshold != "roc":
            raise ValueError(f"Expected `threshold` to be a probability in [0, 1] or 'roc', but got {threshold!r}.")
    elif isinstance(threshold, bool) or not isinstance(threshold, (int, float, np.number)):
        raise TypeError(f"Expected `threshold` to be a probability in [0, 1] or 'roc', but got {threshold!r}.")
    elif not 0.0 <= float(threshold) <= 1.0:
        raise ValueError(f"Expected `threshold` to be a probability in [0, 1], but got {threshold}.")


#: What ``outputs=`` accepts: guess from the values, or say what the model returns.
OUTPUT_KINDS = ("auto", "logits", "probs")


def check_outputs(kind: Any) -> str:
    return check_choice(kind, "outputs", OUTPUT_KINDS)


def looks_like_probs(outputs: torch.Tensor) -> bool:
    if outputs.shape[1] == 1:
        return bool(((outputs >= 0) & (outputs <= 1)).all())
    sums_to_one = torch.allclose(outputs.sum(1), torch.ones_like(outputs[:, 0]), atol=1e-4)
    return bool((outputs >= 0).all()) and bool(sums_to_one)


def _class_scores(outputs: torch.Tensor, cls: int, kind: str = "auto") -> torch.Tensor:
    """Probability of the positive class (one output) or of class ``cls`` (several outputs), from probabilities or
    logits (sigmoid for one output, softmax for several); ``kind="auto"`` takes values in [0, 1] (summing to 1 for
    several outputs) as probabilities."""
    is_prob = looks_like_probs(outputs) if kind == "auto" else kind == "probs"
    if kind == "probs" and not bool(((outputs >= 0) & (outputs <= 1)).all()):
        low, high = float(outputs.min()), float(outputs.max())
        raise ValueError(
            f"Expected probabilities in [0, 1] with outputs='probs', but the model returns values in "
            f"[{low:.4g}, {high:.4g}]; pass outputs='logits'."
        )
    if is_prob:
        return outputs[:, 0] if outputs.shape[1] == 1 else outputs[:, cls]
    if outputs.shape[1] == 1:
        return torch.sigmoid(outputs[:, 0])
    return torch.softmax(outputs.to(torch.float64), dim=1)[:, cls]


def _roc_threshold(scores: torch.Tensor, positives: torch.Tensor) -> float:
    """The threshold on ``scores`` maximizing TPR - FPR against ``positives`` (torchmetrics' ROC curve)."""
    from torchmetrics.functional.classification import binary_roc

    n_pos = int(positives.sum())
    if n_pos == 0 or n_pos == positives.numel():
        raise ValueError(
            f"Expected `labels` with positive and negative samples for threshold='roc', but {n_pos} of "
            f"{positives.numel()} are positive."
        )
    fpr, tpr, thresholds = binary_roc(scores, positives.long())
    best = int(torch.argmax(tpr - fpr))
    return float(thresholds[best])


def subgroup_mask(
    outputs: torch.Tensor, target: Any, threshold: Any, labels: torch.Tensor | None, kind: str = "auto"
) -> tuple[torch.Tensor, float | None, str]:
    """Boolean subgroup mask, the probability threshold used (or None) and a short description (the subgroup may
    be empty or hold every sample: the caller decides)."""
    thr_used = None
    if _is_range(target) and not callable(target):
        mask, desc = _range_mask(outputs, target)
    elif isinstance(target, (int, np.integer)):
        mask, thr_used, desc = _class_mask(outputs, int(target), threshold, labels, kind)
    else:  # a mask, or a callable's mask of the outputs
        mask, desc = _given_mask(target, outputs)
    return mask.reshape(-1).to(torch.bool), thr_used, desc


def _range_mask(outputs: torch.Tensor, target: tuple) -> tuple[torch.Tensor, str]:
    if outputs.ndim != 1 and not (outputs.ndim == 2 and outputs.shape[1] == 1):
        raise ValueError(
            f"Expected a single model output per sample for a (low, high) `target`, but the outputs have shape "
            f"{tuple(outputs.shape)}. A tuple target is a value range of a regression output here, not Captum's "
            "output index: for output index i pass a callable, e.g. `target=lambda out: out[:, i] > 0`."
        )
    low = -math.inf if target[0] is None else float(target[0])
    high = math.inf if target[1] is None else float(target[1])
    if not low < high:
        raise ValueError(f"Expected `target` (low, high) with low < high, but got {target}.")
    y = outputs.reshape(-1)
    return (y >= low) & (y < high), f"{low:g} <= output < {high:g}"


def _class_mask(
    outputs: torch.Tensor, cls: int, threshold: Any, labels: torch.Tensor | None, kind: str
) -> tuple[torch.Tensor, float | None, str]:
    """Predicted class ``cls``: argmax of several outputs, else a probability above a (given or ROC) threshold."""
    if outputs.ndim == 1:
        outputs = outputs[:, None]
    if outputs.ndim != 2:
        raise ValueError(
            f"Expected model outputs of shape (N,) or (N, C) for a class-index `target`, but got shape "
            f"{tuple(outputs.shape)}; pass a callable `target` instead."
        )
    n_out, desc = outputs.shape[1], f"predicted {cls}"
    if n_out == 1 and cls not in (0, 1):
        raise ValueError(f"Expected `target` 0 or 1 for a model with a single (binary) output, but got {cls}.")
    if n_out > 1 and cls >= n_out:
        raise ValueError(f"Expected `target` < {n_out} (the number of model outputs), but got {cls}.")
    if n_out > 1 and threshold is None:
        return outputs.argmax(1) == cls, None, desc
    scores = _class_scores(outputs, cls, kind)
    if threshold == "roc":
        if labels is None:
            raise ValueError(
                "Expected `labels` (or labels in the batches, see `label_key`) for threshold='roc', but got none."
            )
        positives = (labels.to(scores.device) == (1 if n_out == 1 else cls)).reshape(-1)
        thr_used = _roc_threshold(scores, positives)
    else:
        thr_used = 0.5 if threshold is None else float(threshold)
    mask = scores > thr_used
    if n_out == 1 and cls == 0:  # class 0 of a binary model: not predicted positive
        mask = ~mask
    return mask, thr_used, desc


def _given_mask(target: Any, outputs: torch.Tensor) -> tuple[torch.Tensor, str]:
    """A boolean mask ``target`` (N,), or a callable ``target``'s mask of the outputs, and its description."""
    called = callable(target) and not isinstance(target, torch.Tensor)
    if isinstance(target, tuple) and not called:
        raise TypeError(_tuple_target(target))
    name = getattr(target, "__name__", "target") if called else "target"
    try:
        given = target(outputs) if called else target
        mask = to_labels(given, outputs.shape[0], "target(outputs)" if called else "target", what="booleans")
    except TypeError:
        if called:
            raise
        raise TypeError(
            "Expected `target` to be a class index, a boolean mask, a callable on the model outputs or a "
            f"(low, high) range, but got {type(target).__name__}."
        ) from None
    if mask.dtype != torch.bool and called:
        raise TypeError(f"Expected the callable `target` to return a boolean mask, but it returned {mask.dtype}.")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"Expected a per-sample `target` to be a boolean mask of the subgroup, but got dtype {mask.dtype}; "
            + _NOT_CAPTUM
        )
    return mask, "target" if name == "<lambda>" else name
