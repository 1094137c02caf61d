"""The thresholds of each feature's grids: uniform, quantile and k-means edges (one-dimensional Lloyd on the sorted
values), and the codes of values given thresholds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.sorting import sort_values
from torch_amore.data.arguments import check_bin_strategy, check_n_grids
from torch_amore.data.column_stats import CHUNK_ELEMENTS, chunk_len, column_stats, pass_rows
from torch_amore.grids import exact_edges as E

#: Above this many thresholds per feature, codes come from a binary search rather than one pass per threshold.
_SEARCH_ABOVE = 64


#: At most this many columns (of one chunk) run their Lloyd iterations column by column in numpy on the CPU: a few
#: columns take up to hundreds of small iterations, each a dozen torch dispatches (diabetes' 4 numeric columns: 46 ->
#: 22 ms); many columns run as batched torch operations, which a loop over columns would outlast.
_HOST_LLOYD_COLUMNS = 8


#: Values per chunk of :func:`codes_from_thresholds`: the chunk and its float32 scratch stay in cache.
_CODE_CHUNK = 1 << 19


def nan_min_max(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column min and max over non-missing values (NaN where a column is all missing), in float64 (float32 on
    MPS), from one chunked pass without a host synchronisation.

    Example:
        >>> import torch
        >>> lo, hi = nan_min_max(torch.tensor([[1.0, float("nan")], [-2.0, float("nan")]]))
        >>> lo.tolist(), hi.tolist()
        ([-2.0, nan], [1.0, nan])
    """
    stats = column_stats(X, integers=False)
    return stats.lo, stats.hi


def uniform_edges(lo: torch.Tensor, hi: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-width edges between each column's min ``lo`` and max ``hi`` (F,)."""
    steps = E.divide(torch.arange(n_grids + 1, dtype=lo.dtype, device=lo.device), n_grids)
    edges = lo[:, None] + (hi - lo)[:, None] * steps
    edges[:, -1] = hi  # exact max despite rounding
    return edges


def quantile_edges(X: torch.Tensor, n_grids: int, dt: torch.dtype) -> torch.Tensor:
    """(F, n_grids + 1) equal-frequency edges (linear interpolation between order statistics) in the work dtype
    ``dt``, NaN ignored."""
    if D.is_sharded():  # exact order statistics of all shards by a distributed selection
        return E.sharded_quantile_edges(X, n_grids)
    n, n_features = X.shape
    q = E.divide(torch.arange(n_grids + 1, dtype=dt, device=X.device), n_grids)
    out = torch.empty(n_features, n_grids + 1, dtype=dt, device=X.device)
    step = max(1, CHUNK_ELEMENTS // max(1, n))
    for f0 in range(0, n_features, step):
        cols = X[:, f0 : f0 + step].to(dt)
        valid = (~torch.isnan(cols)).sum(0)  # (f,)
        srt = sort_values(cols, dim=0)  # NaN sorts last
        pos = q[:, None] * (valid - 1).clamp(min=0).to(dt)[None, :]  # (G+1, f)
        below = pos.floor().long().clamp(max=n - 1)
        above = (below + 1).clamp(max=(valid - 1).clamp(min=0)[None, :].expand_as(below))
        frac = pos - below.to(dt)
        v0, v1 = srt.gather(0, below), srt.gather(0, above)
        out[f0 : f0 + step] = (v0 + (v1 - v0) * frac).t()
    return out


def _comparable(thresholds: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, torch.dtype]:
    """Thresholds to compare values of ``dtype`` against, and the dtype to compare in.

    float32 values are compared in float32 against each threshold rounded up to the next float32: for a float32
    ``x``, ``x >= t`` exactly when ``x >= t32`` (``t32`` the smallest float32 ``>= t``), so the codes are those of a
    float64 comparison at half the memory traffic. Other dtypes are compared in the thresholds' dtype.
    """
    if dtype != torch.float32 or thresholds.dtype != torch.float64:
        return thresholds, thresholds.dtype
    t32 = thresholds.float()
    up = torch.nextafter(t32, torch.full_like(t32, math.inf))
    return torch.where(t32.double() < thresholds, up, t32), torch.float32


def _count_reached(
    chunk: torch.Tensor, thresholds: Sequence[torch.Tensor], acc: torch.Tensor, hit: torch.Tensor
) -> None:
    """``acc`` (float32) = how many of ``thresholds`` each value of ``chunk`` reaches; ``hit`` is scratch. float32
    comparisons are about four times faster on CPU than bool ones, and the sums are exact small integers."""
    torch.ge(chunk, thresholds[0], out=acc)
    for t in thresholds[1:]:
        acc.add_(torch.ge(chunk, t, out=hit))


def codes_from_thresholds(X: torch.Tensor, thresholds: torch.Tensor, out: torch.Tensor, nan_code: int) -> None:
    """Write into ``out`` (N, F) the number of thresholds (F, T) each value reaches; NaN gets ``nan_code``.

    One comparison per threshold for few thresholds, a binary search (``searchsorted``) for many; in chunks of
    rows that stay in cache.

    Example:
        >>> import torch
        >>> out = torch.empty(3, 1, dtype=torch.uint8)
        >>> codes_from_thresholds(torch.tensor([[0.5], [2.0], [float("nan")]]), torch.tensor([[1.0, 2.0]]), out, 9)
        >>> out[:, 0].tolist()
        [0, 2, 9]
    """
    thr, dt = _comparable(thresholds, X.dtype)
    n, n_cols = X.shape
    if n == 0 or thresholds.shape[1] == 0:
        out.fill_(0)
        out.masked_fill_(torch.isnan(X), nan_code)
        return
    search = thresholds.shape[1] > _SEARCH_ABOVE
    # a count of thresholds <= x does not depend on their order; thresholds are never NaN
    thr = torch.sort(thr, dim=1).values if search else thr.t().contiguous().unbind(0)
    step = pass_rows(n, n_cols, _CODE_CHUNK)
    if X.dtype != dt:  # each chunk converted (e.g. float16 to float64): more memory per value, smaller chunks
        step = min(step, chunk_len(n, n_cols))
    acc = hit = None  # float32 scratch, reused
    for chunk, dst in zip(X.split(step), out.split(step)):  # views made by one operation each
        chunk = chunk if chunk.dtype == dt else chunk.to(dt)
        if search:
            codes = torch.searchsorted(thr, chunk.t().contiguous(), right=True, out_int32=True).t()
            codes.masked_fill_(torch.isnan(chunk), nan_code)
        else:
            if acc is None:
                acc, hit = (torch.empty(chunk.shape, dtype=torch.float32, device=X.device) for _ in range(2))
            codes, scratch = (acc, hit) if len(chunk) == len(acc) else (acc[: len(chunk)], hit[: len(chunk)])
            _count_reached(chunk, thr, codes, scratch)  # NaN reaches no threshold: 0, then 0 + nan_code
            codes.add_(torch.ne(chunk, chunk, out=scratch), alpha=nan_code)  # no bool mask: no fresh memory
        dst.copy_(codes)


def _kmeans_update(
    centres: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """New centres from exact fixed-point sums (units ``scale``, (F, 1)) and counts; an empty cluster keeps its
    centre."""
    means = E.fixed_point_value(sums, scale)
    return torch.where(counts > 0, means / counts.clamp(min=1), centres)


def _check_convergence(iteration: int) -> bool:
    """Whether to ask the device if every column has converged after ``iteration`` (from 1): after 2, 4 and 8, then
    every 16th. Each question is a host sync; a converged column's centres are frozen, so asking less often gives the
    same centres."""
    return iteration in (2, 4, 8) or iteration % 16 == 0


def _lloyd_on_host(
    vals: np.ndarray,
    prefix: np.ndarray,
    n_valid: np.ndarray,
    centres: np.ndarray,
    scale: np.ndarray,
    tol: np.ndarray,
    max_iter: int,
) -> np.ndarray:
    """The Lloyd iterations of :func:`_kmeans_sorted` column by column in numpy: the same float64 arithmetic, so the
    same centres bit for bit, without a torch dispatch per small operation. Arrays as there."""
    out = np.empty_like(centres)
    limb = float(1 << E.LIMB_BITS)  # the limbs of E.to_fixed_point, valued as E.fixed_point_value does
    for j in range(centres.shape[0]):
        col, sums, n, c = vals[j], prefix[:, j], int(n_valid[j, 0]), centres[j]
        for _ in range(max_iter):
            pos = np.minimum(np.searchsorted(col, (c[1:] + c[:-1]) / 2, side="left"), n)
            pos = np.concatenate(([0], pos, [n]))
            high, low = np.diff(sums[:, pos], axis=1).astype(c.dtype)
            counts = np.diff(pos)
            new = np.where(counts > 0, (high * limb + low) * scale[j, 0] / np.maximum(counts, 1), c)
            moved = np.abs(new - c).max() > tol[j, 0]
            c = np.sort(new)
            if not moved:
                break
        out[j] = c
    return out


def _kmeans_sorted(
    X: torch.Tensor, centres: torch.Tensor, exps: torch.Tensor, tol: torch.Tensor, max_iter: int
) -> torch.Tensor:
    """Lloyd iterations for one process: each column is sorted once, then every iteration only needs a
    ``searchsorted`` of the cluster bounds and differences of prefix sums (O(G log N) per column); few operations
    per iteration, as the iterations are many and small."""
    n, n_features = X.shape
    step = max(1, CHUNK_ELEMENTS // max(1, n))
    out = centres.clone()
    for f0 in range(0, n_features, step):
        f1 = min(n_features, f0 + step)
        vals = sort_values(X[:, f0:f1].t(), dim=1).to(centres.dtype).contiguous()  # (f, N), NaN last
        missing = torch.isnan(vals)
        n_valid = (~missing).sum(1, keepdim=True)
        prefix = torch.empty(2, f1 - f0, n + 1, dtype=torch.long, device=X.device)  # (2, f, N+1): limbs, then sums
        prefix[:, :, 0] = 0
        sums = E.to_fixed_point(vals.masked_fill_(missing, 0.0), exps[f0:f1], dim=0, out=prefix[:, :, 1:])
        vals.masked_fill_(missing, math.inf)  # a proper sort order for searchsorted
        sums.cumsum_(2)  # in place: no second table
        scale = E.fixed_point_scale(exps[f0:f1], centres.dtype)[:, None]
        first, col_tol = torch.zeros_like(n_valid), tol[f0:f1, None]
        c = torch.sort(out[f0:f1], dim=1).values
        if X.device.type == "cpu" and f1 - f0 <= _HOST_LLOYD_COLUMNS:  # few columns in host memory: numpy
            out[f0:f1] = torch.from_numpy(
                _lloyd_on_host(
                    vals.numpy(), prefix.numpy(), n_valid.numpy(), c.numpy(), scale.numpy(), col_tol.numpy(), max_iter
                )
            )
            continue
        active = torch.ones(f1 - f0, 1, dtype=torch.bool, device=X.device)
        for it in range(1, max_iter + 1):
            bounds = (c[:, 1:] + c[:, :-1]) / 2
            pos = torch.minimum(torch.searchsorted(vals, bounds, side="left"), n_valid)
            pos = torch.cat([first, pos, n_valid], dim=1)  # (f, G+1)
            new = _kmeans_update(c, prefix.gather(2, pos.expand(2, -1, -1)).diff(dim=2), pos.diff(dim=1), scale)
            moved = (new - c).abs().amax(1, keepdim=True) > col_tol
            c = torch.sort(torch.where(active, new, c), dim=1).values
            active &= moved
            if _check_convergence(it) and not bool(active.any()):
                break
        out[f0:f1] = c
    return out


def kmeans_edges(
    X: torch.Tensor,
    value_range: tuple[torch.Tensor, torch.Tensor],
    n_grids: int,
    max_iter: int = 300,
    tol: float = 1e-8,
) -> torch.Tensor:
    """(F, n_grids + 1) edges of a 1-D k-means per column, all columns at once and deterministic.

    Centres start at the uniform-grid midpoints; Lloyd iterations update a column until none of its centres moves by
    more than ``tol * (max - min)``; edges are the midpoints of the sorted centres, framed by the column's min and
    max (``value_range``). Cluster sums are exact fixed-point sums, so the result does not depend on how the rows are
    split.
    """
    lo, hi = value_range
    centres, col_tol = kmeans_start(lo, hi, n_grids, tol)
    n_features = X.shape[1]
    exps = E.fixed_point_exponents(lo, hi)  # sums in int64 fixed point: exact, so independent of the order
    if not D.is_sharded():
        centres = _kmeans_sorted(X, centres, exps, col_tol, max_iter)
    else:
        codes = torch.empty(X.shape, dtype=torch.int16 if n_grids < 32000 else torch.int32, device=X.device)
        offsets = torch.arange(n_features, device=X.device) * (n_grids + 1)

        def cluster_means(centres: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
            codes_from_thresholds(X, bounds, codes, n_grids)
            sums = torch.zeros(2, n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            counts = torch.zeros(n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            step = chunk_len(X.shape[0], X.shape[1])
            for r0 in range(0, X.shape[0], step):
                idx = (codes[r0 : r0 + step].long() + offsets).reshape(-1)
                vals = E.to_fixed_point(X[r0 : r0 + step].to(lo.dtype).nan_to_num(0.0), exps).reshape(2, -1)
                sums.index_add_(1, idx, vals)
                counts += counting.bincount(idx, counts.numel())
            sums, counts = D.all_reduce_sum(sums), D.all_reduce_sum(counts)
            sums = sums.view(2, n_features, -1)[:, :, :n_grids]
            counts = counts.view(n_features, -1)[:, :n_grids]
            return _kmeans_update(centres, sums, counts, E.fixed_point_scale(exps, centres.dtype)[:, None])

        centres = lloyd(centres, cluster_means, col_tol, max_iter)
    return centre_edges(lo, centres, hi)


def kmeans_start(lo: torch.Tensor, hi: torch.Tensor, n_grids: int, tol: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The start of the k-means of :func:`kmeans_edges` (F, n_grids): the uniform-grid midpoints between each
    column's ``lo`` and ``hi`` (NaN where a column has no values: treated as 0), and each column's tolerance
    ``tol * (hi - lo)`` (F,)."""
    span = (hi - lo).nan_to_num(0.0)
    steps = E.divide(torch.arange(n_grids, dtype=lo.dtype, device=lo.device) + 0.5, n_grids)
    return lo.nan_to_num(0.0)[:, None] + span[:, None] * steps, tol * span


def lloyd(
    centres: torch.Tensor,
    cluster_means: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    col_tol: torch.Tensor,
    max_iter: int,
) -> torch.Tensor:
    """Lloyd iterations of all columns at once, ``cluster_means(centres, bounds)`` giving each cluster's new centre
    from the midpoints between the sorted centres; a column stops once no centre moves by more than its ``col_tol``.
    Returns the sorted centres."""
    active = torch.ones(centres.shape[0], dtype=torch.bool, device=centres.device)
    for _ in range(max_iter):
        centres = torch.sort(centres, dim=1).values
        new = cluster_means(centres, midpoints(centres))
        new = torch.where(active[:, None], new, centres)
        active &= (new - centres).abs().amax(1) > col_tol
        centres = new
        if not bool(active.any()):
            break
    return torch.sort(centres, dim=1).values


def midpoints(centres: torch.Tensor) -> torch.Tensor:
    """The bounds (F, G - 1) between neighbouring sorted centres (F, G)."""
    return (centres[:, 1:] + centres[:, :-1]) / 2


def centre_edges(lo: torch.Tensor, centres: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """The edges (F, G + 1) of k-means grids: the midpoints of the sorted ``centres`` (F, G), framed by each column's
    ``lo`` and ``hi``."""
    return torch.cat([lo[:, None], midpoints(centres), hi[:, None]], dim=1)


def grid_edges(
    X: torch.Tensor,
    n_grids: int,
    bin_strategy: str = "uniform",
    *,
    value_range: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """Edges (F, n_grids + 1) of the value grids of every column of ``X``, computed on X's device in float64.

    ``value_range``: each column's (min, max) over its non-missing values (NaN where none), when already known
    (:func:`torch_amore.data.column_stats.column_stats`); the uniform grids then need no pass over ``X``.

    Example:
        >>> import torch
        >>> grid_edges(torch.tensor([[0.0], [1.0], [4.0]]), 4).tolist()
        [[0.0, 1.0, 2.0, 3.0, 4.0]]
    """
    n_grids, bin_strategy = check_n_grids(n_grids), check_bin_strategy(bin_strategy)
    return strategy_edges(X, n_grids, bin_strategy, nan_min_max(X) if value_range is None else value_range)


def strategy_edges(
    X: torch.Tensor, n_grids: int, bin_strategy: str, value_range: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """The edges of :func:`grid_edges` for checked arguments and a known ``value_range`` in the work dtype."""
    if bin_strategy == "uniform":
        return uniform_edges(*value_range, n_grids)
    if bin_strategy == "quantile":
        return quantile_edges(X, n_grids, value_range[0].dtype)
    return kmeans_edges(X, value_range, n_grids)
