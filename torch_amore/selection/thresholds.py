"""The thresholds of feature selection: per feature the coverage threshold of the impact matrix, j_th, and the
columns used at it, computed by blocks."""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator

import numpy as np
import torch

_BLOCK = 1 << 22  # elements of J per temporary block in the threshold scan and the column counts


def _coverage_thresholds(J: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per feature, the highest threshold it still reaches in ``gamma`` of the rows: the k-th largest value of its
    column, ``k = ceil(gamma * N)``."""
    n, d = J.shape
    k = min(n, _min_count(gamma, n))
    step = max(1, _BLOCK // n)  # column blocks bound the buffers of topk
    out = torch.empty(d, dtype=J.dtype)
    for s in range(0, d, step):
        out[s : s + step] = _kth_smallest(J[:, s : s + step], n - k + 1)
    return out


def _kth_smallest(block: torch.Tensor, kth: int) -> torch.Tensor:
    """Per column, the ``kth`` smallest value (1-based): ``torch.topk`` from the nearer end (much faster than
    ``torch.kthvalue`` along the rows when ``kth`` is near 1 or N, as for gamma = 0.99)."""
    n = block.shape[0]
    if kth <= n - kth + 1:
        return torch.topk(block, kth, dim=0, largest=False).values[-1]
    return torch.topk(block, n - kth + 1, dim=0, largest=True).values[-1]


def _row_blocks(J: torch.Tensor) -> Iterator[torch.Tensor]:
    """Views of at most ``_BLOCK`` elements of J, in row order (temporary masks stay small)."""
    step = max(1, _BLOCK // max(1, J.shape[1]))
    for s in range(0, J.shape[0], step):
        yield J[s : s + step]


def _threshold_scan(J: torch.Tensor, gamma: float, top: torch.Tensor | None = None) -> tuple[float, int]:
    """The impact threshold j_th of eq. ``score_thd`` and the number of features reaching coverage at it.

    Exactly one feature reaches coverage for ``t_(2) < thr <= t_(1)`` (the two largest coverage thresholds), so j_th
    is the smallest entry of J above ``t_(2)``; when the two tie, j_th is ``t_(1)`` and a warning names the tie.
    """
    top = _coverage_thresholds(J, gamma) if top is None else top
    first = float(top.max())
    if first <= 0:
        raise ValueError(
            f"No feature scores above 0 in a fraction gamma={gamma} of the {J.shape[0]} rows, so no impact threshold "
            "can be found: lower `gamma`."
        )
    if top.numel() == 1:
        return float(J.min()), 1
    second = float(torch.topk(top, 2).values[1])
    if second < first:
        return min(float(blk[blk > second].min()) for blk in _row_blocks(J) if bool((blk > second).any())), 1
    tied = torch.nonzero(top == first).flatten().tolist()
    warnings.warn(
        f"No impact threshold leaves exactly one feature with coverage >= gamma={gamma}: features {tied[:10]} tie at "
        f"{first:.4g}. Using j_th = {first:.4g}, at which all {len(tied)} reach it.",
        stacklevel=3,
    )
    return first, len(tied)


def _min_count(min_frequency: float, n: int) -> int:
    """The fewest rows (>= 1) that make a fraction ``min_frequency`` of ``n``: ``count >= min_frequency * n`` (the
    product rounded to 9 decimals first, so that 0.3 * 10 means 3 rows)."""
    return max(1, math.ceil(round(min_frequency * n, 9)))


def _used_columns(J: torch.Tensor, threshold: float, min_count: int) -> tuple[torch.Tensor, np.ndarray]:
    """The columns used (``J >= threshold``) in at least ``min_count`` rows, and the boolean (N, C) matrix of their use
    (built by row blocks: no float copy of J)."""
    counts = sum((blk >= threshold).sum(dim=0) for blk in _row_blocks(J))
    cols = torch.nonzero(counts >= min_count).flatten()
    used = torch.cat([blk[:, cols] >= threshold for blk in _row_blocks(J)]) if cols.numel() else None
    return cols, np.zeros((J.shape[0], 0), dtype=bool) if used is None else used.numpy()


def _natural_break(values: np.ndarray) -> int:
    """How many of the descending positive ``values`` lie before the largest ratio between neighbours."""
    if values.size < 2:
        return int(values.size)
    logs = np.log(values)
    return int(np.argmax(logs[:-1] - logs[1:])) + 1  # first largest drop: deterministic
