"""Value grids per feature and the bin code of every value, computed once for all features.

A numeric feature gets ``n_grids`` grids from its non-missing values (``uniform``, ``quantile`` or ``kmeans``); a
categorical feature gets one grid per category. Grid ``g`` of feature ``f`` holds the values ``x`` with
``thresholds[f, g-1] <= x < thresholds[f, g]`` (the first grid is open below, the last open above), so the code of a
value is the number of thresholds it reaches. Thresholds and codes are computed in float64 so that float32 and
float64 copies of the same data get the same grids. Missing values (NaN) get the code ``n_bins_max``, which no grid
uses.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.sorting import sort_values
from torch_amore.data.column_stats import CHUNK_ELEMENTS, ColumnStats, chunk_len, column_stats, pass_rows, work_dtype
from torch_amore.data.validation import MAX_CATEGORIES, check_bin_strategy, check_n_grids

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


def uniform_edges(
    X: torch.Tensor | None, n_grids: int, *, value_range: tuple[torch.Tensor, torch.Tensor] | None = None
) -> torch.Tensor:
    """(F, n_grids + 1) equal-width edges between each column's min and max (``value_range`` when known: then
    ``X`` is not read)."""
    lo, hi = nan_min_max(X) if value_range is None else value_range
    steps = torch.arange(n_grids + 1, dtype=lo.dtype, device=lo.device) / n_grids
    edges = lo[:, None] + (hi - lo)[:, None] * steps
    edges[:, -1] = hi  # exact max despite rounding
    return edges


def quantile_edges(X: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-frequency edges (linear interpolation between order statistics), NaN ignored."""
    if D.is_sharded():  # exact order statistics of all shards by a distributed selection
        return D.sharded_quantile_edges(X, n_grids)
    dt = work_dtype(X.device)
    n, n_features = X.shape
    q = torch.arange(n_grids + 1, dtype=dt, device=X.device) / n_grids
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
    """``acc`` (float32) = how many of ``thresholds`` (each (F,)) each value of ``chunk`` reaches; ``hit`` is
    scratch. A comparison written as float32 is about four times faster on CPU than one written as bool, and the
    sums are exact small integers."""
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
    means = D.fixed_point_value(sums, scale)
    return torch.where(counts > 0, means / counts.clamp(min=1), centres)


def _check_convergence(iteration: int) -> bool:
    """Whether the Lloyd loop of one process asks the device if every column has converged after ``iteration``
    (counted from 1): after iterations 2, 4 and 8, then every 16th. Each question is a host synchronisation; an
    iteration after a column has converged leaves it unchanged (its centres are frozen), so asking less often gives
    the same centres and only costs the few small iterations run past convergence."""
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
    """The Lloyd iterations of :func:`_kmeans_sorted` for columns in host memory, column by column in numpy: the
    same float64 arithmetic, so the same centres bit for bit, without a torch dispatch per small operation (a
    column's iterations do not depend on the other columns'). Arrays as there: ``vals`` (f, N) sorted with missing
    values as +inf, ``prefix`` (2, f, N+1) fixed-point prefix sums, ``n_valid`` (f, 1), ``centres`` (f, G) sorted,
    ``scale`` and ``tol`` (f, 1)."""
    out = np.empty_like(centres)
    limb = float(1 << D._LIMB_BITS)  # the limbs of D.to_fixed_point, valued as D.fixed_point_value does
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
        limbs = D.to_fixed_point(vals.masked_fill_(missing, 0.0), exps[f0:f1], dim=0)  # (2, f, N)
        vals.masked_fill_(missing, math.inf)  # a proper sort order for searchsorted
        prefix = limbs.new_empty(2, f1 - f0, n + 1)  # (2, f, N+1); fresh pages are filled once, by the sums
        prefix[:, :, 0] = 0
        torch.cumsum(limbs, dim=2, out=prefix[:, :, 1:])
        scale = D.fixed_point_scale(exps[f0:f1], centres.dtype)[:, None]
        first, col_tol = torch.zeros_like(n_valid), tol[f0:f1, None]
        c = torch.sort(out[f0:f1], dim=1).values
        if X.device.type == "cpu" and f1 - f0 <= _HOST_LLOYD_COLUMNS:  # few columns in host memory: numpy
            out[f0:f1] = torch.from_numpy(
                _lloyd_on_host(
                    vals.numpy(), prefix.numpy(), n_valid.numpy(), c.numpy(), scale.numpy(), col_tol.numpy(), max_iter
                )  # fmt: skip
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
    n_grids: int,
    max_iter: int = 300,
    tol: float = 1e-8,
    *,
    value_range: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """(F, n_grids + 1) edges of a 1-D k-means per column, all columns at once and deterministic.

    Centres start at the uniform-grid midpoints; Lloyd iterations update a column until none of its centres moves by
    more than ``tol * (max - min)``; edges are the midpoints of the sorted centres, framed by the column's min and
    max. Cluster sums are exact integer (fixed-point) sums, so the result does not depend on how the rows are split
    (one process with sorted columns, or shards of a distributed run). ``value_range``: each column's (min, max)
    when known. One process asks whether the columns converged every few iterations (:func:`_check_convergence`),
    or, for a few columns on the CPU, iterates column by column in numpy (:func:`_lloyd_on_host`): the same centres.
    """
    lo, hi = nan_min_max(X) if value_range is None else value_range
    span = (hi - lo).nan_to_num(0.0)
    lo0 = lo.nan_to_num(0.0)
    steps = (torch.arange(n_grids, dtype=lo.dtype, device=lo.device) + 0.5) / n_grids
    centres = lo0[:, None] + span[:, None] * steps
    n_features = X.shape[1]
    exps = D.fixed_point_exponents(lo, hi)  # sums in int64 fixed point: exact, so independent of the order
    col_tol = tol * span
    if not D.is_sharded():
        centres = _kmeans_sorted(X, centres, exps, col_tol, max_iter)
    else:
        codes = torch.empty(X.shape, dtype=torch.int16 if n_grids < 32000 else torch.int32, device=X.device)
        offsets = torch.arange(n_features, device=X.device) * (n_grids + 1)
        active = torch.ones(n_features, dtype=torch.bool, device=X.device)
        for _ in range(max_iter):
            centres = torch.sort(centres, dim=1).values
            bounds = (centres[:, 1:] + centres[:, :-1]) / 2
            codes_from_thresholds(X, bounds, codes, n_grids)
            sums = torch.zeros(2, n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            counts = torch.zeros(n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            step = chunk_len(X.shape[0], X.shape[1])
            for r0 in range(0, X.shape[0], step):
                idx = (codes[r0 : r0 + step].long() + offsets).reshape(-1)
                vals = D.to_fixed_point(X[r0 : r0 + step].to(lo.dtype).nan_to_num(0.0), exps).reshape(2, -1)
                sums.index_add_(1, idx, vals)
                counts += torch.bincount(idx, minlength=counts.numel())
            sums, counts = D.all_reduce_sum(sums), D.all_reduce_sum(counts)
            sums = sums.view(2, n_features, -1)[:, :, :n_grids]
            counts = counts.view(n_features, -1)[:, :n_grids]
            new = _kmeans_update(centres, sums, counts, D.fixed_point_scale(exps, centres.dtype)[:, None])
            new = torch.where(active[:, None], new, centres)
            active &= (new - centres).abs().amax(1) > col_tol
            centres = new
            if not bool(active.any()):
                break
    centres = torch.sort(centres, dim=1).values
    bounds = (centres[:, 1:] + centres[:, :-1]) / 2
    return torch.cat([lo[:, None], bounds, hi[:, None]], dim=1)


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
    n_grids = check_n_grids(n_grids)
    check_bin_strategy(bin_strategy)
    if bin_strategy == "uniform":
        return uniform_edges(X, n_grids, value_range=value_range)
    if bin_strategy == "quantile":
        return quantile_edges(X, n_grids)
    return kmeans_edges(X, n_grids, value_range=value_range)


@dataclass
class Binned:
    """The bin code of every value of the searched features, with what is needed to turn grids into rules.

    The codes have two layouts: row-major ``codes`` (N, F'), one row per sample, which every binning has (what the
    paper tree reads), and column-major ``codes_t`` (F', N), one contiguous row per feature (what the beam reads),
    which a binning stores when it makes its codes that way (:func:`torch_amore.grids.fine_grid.fine_binning`: then
    ``codes`` is its transpose, a view). :meth:`column_major` gives the column-major codes of any binning.

    Attributes:
        codes: (N, F') uint8/int16 bin codes on X's device; ``nan_code`` marks a missing value.
        thresholds: (F', B - 1) float64 lower edges of grids 1..B-1 (``+inf`` pads features with fewer grids).
        n_bins: (F',) number of grids per feature.
        is_cat: (F',) whether each feature is categorical (one grid per category).
        categories: (F', B) float64 category value of each grid of a categorical feature (NaN elsewhere).
        columns: the column index in X of each searched feature.
        kinds: ``float``/``int``/``cat`` per searched feature.
        int_valued: per searched feature, whether all its values are integers (so bounds may be snapped).
        value_min: (F',) each searched feature's smallest non-missing value in the work dtype (NaN where none).
        value_max: (F',) its largest, likewise (with ``value_min``, what a finer equal-width binning needs).
        codes_t: (F', N) the same codes column-major, when the binning stored them (``None`` otherwise; see
            :meth:`column_major`).
    """

    codes: torch.Tensor
    thresholds: torch.Tensor
    n_bins: torch.Tensor
    is_cat: torch.Tensor
    categories: torch.Tensor
    columns: list[int]
    kinds: list[str]
    int_valued: list[bool]
    n_grids: int
    bin_strategy: str
    value_min: torch.Tensor | None = None
    value_max: torch.Tensor | None = None
    codes_t: torch.Tensor | None = None

    @property
    def n_bins_max(self) -> int:
        return int(self.categories.shape[1])

    @property
    def nan_code(self) -> int:
        return self.n_bins_max

    def column_major(self) -> torch.Tensor:
        """The codes column-major, (F', N) with one contiguous row per feature: :attr:`codes_t` when the binning
        stored them, else a transposed copy of :attr:`codes` made on first use and kept in :attr:`codes_t` (as much
        memory again as the codes). Callers that only want the stored layout read :attr:`codes_t` (``None`` when
        absent) instead.

        Example:
            >>> X = torch.tensor([[0.0, 1.0], [4.0, 0.0], [2.0, 1.0]])
            >>> b = bin_features(X, [0, 1], ["float", "cat"], n_grids=2)
            >>> b.codes_t is None, b.column_major().tolist(), b.column_major() is b.codes_t
            (True, [[0, 1, 1], [1, 0, 1]], True)
        """
        if self.codes_t is None:
            self.codes_t = self.codes.t().contiguous()
        return self.codes_t

    def encode_sample(self, x: torch.Tensor) -> list[int]:
        """Bin code of one sample's value per searched feature (-1 where missing)."""
        x = x.to(self.thresholds.device, self.thresholds.dtype)[self.columns]
        codes = (x[:, None] >= self.thresholds).sum(1)
        out = []
        for j, (v, c) in enumerate(zip(x.tolist(), codes.tolist())):
            if v != v or (bool(self.is_cat[j]) and float(self.categories[j, c]) != v):
                out.append(-1)  # missing, or a category never seen in X
            else:
                out.append(int(c))
        return out

    @functools.cached_property
    def host_grids(self) -> tuple[list[list[float]], list[int]]:
        """``thresholds`` and ``n_bins`` as Python lists (one transfer on first use, then cached: they are fixed
        after binning), for :meth:`interval_bounds`."""
        both = torch.cat([self.thresholds, self.n_bins[:, None].to(self.thresholds.dtype)], 1).tolist()
        return [row[:-1] for row in both], [int(row[-1]) for row in both]

    def interval_bounds(self, j: int, g_low: int, g_high: int) -> tuple[float, float]:
        """(low, high) of grids ``g_low..g_high`` of searched feature ``j`` (infinite where open), from host copies
        of the grids (:attr:`host_grids`): no device sync after the first call.

        Example:
            >>> b = bin_features(torch.tensor([[0.0], [1.0], [2.0], [4.0]]), [0], ["float"], n_grids=4)
            >>> b.interval_bounds(0, 1, 2), b.interval_bounds(0, 0, 3)
            ((1.0, 3.0), (-inf, inf))
        """
        thresholds, n_bins = self.host_grids
        low = thresholds[j][g_low - 1] if g_low > 0 else float("-inf")
        high = thresholds[j][g_high] if g_high < n_bins[j] - 1 else float("inf")
        return low, high


def bin_features(
    X: torch.Tensor,
    columns: list[int],
    kinds: list[str],
    n_grids: int = 10,
    bin_strategy: str = "uniform",
    *,
    stats: ColumnStats | None = None,
) -> Binned:
    """Grids and codes for the searched ``columns`` of ``X`` (categorical columns get one grid per category).

    ``stats``: :func:`torch_amore.data.column_stats.column_stats` of ``X`` when already computed (the uniform grids and
    the integer flags come from it, and its host copy is fetched once). Host synchronisations: that fetch, and the
    number of categories of categorical features whose values are not just {0, 1}.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [4.0, 1.0]])
        >>> b = bin_features(X, [0, 1], ["float", "cat"], n_grids=2)
        >>> b.codes.tolist()
        [[0, 1], [0, 0], [1, 1], [1, 1]]
    """
    n_grids = check_n_grids(n_grids)
    check_bin_strategy(bin_strategy)
    device = X.device
    dt = work_dtype(device)
    every = list(columns) == list(range(X.shape[1]))
    sub = X if every else X[:, columns]
    if stats is None:  # of the searched columns only
        stats, at = column_stats(sub), list(range(len(columns)))
    else:
        at = list(columns)
    facts = stats.fetch()
    value_range = (stats.lo, stats.hi) if at == list(range(len(stats.lo))) else (stats.lo[at], stats.hi[at])
    int_valued = [kind == "int" and facts.is_int[c] for kind, c in zip(kinds, at)]
    is_cat = [k == "cat" for k in kinds]
    num_idx = [j for j, c in enumerate(is_cat) if not c]
    cat_idx = [j for j, c in enumerate(is_cat) if c]
    binary = facts.binary()

    table, sizes = _category_table(sub, cat_idx, [binary[at[j]] for j in cat_idx], dt)
    if sizes and max(sizes) > MAX_CATEGORIES:
        k = max(range(len(sizes)), key=sizes.__getitem__)
        count = f"more than {MAX_CATEGORIES}" if D.is_sharded() else str(sizes[k])  # shards: a lower bound
        raise ValueError(
            f"Expected at most {MAX_CATEGORIES} distinct values in a 'cat' feature, but feature {columns[cat_idx[k]]} "
            f"has {count}; declare it 'int' or 'float' in `feature_types`."
        )
    n_bins_max = max([n_grids] + sizes)
    n_feat = len(columns)
    thresholds = torch.full((n_feat, n_bins_max - 1), float("inf"), dtype=dt, device=device)
    categories = torch.full((n_feat, n_bins_max), float("nan"), dtype=dt, device=device)
    n_bins = torch.full((n_feat,), n_grids, dtype=torch.long, device=device)
    if num_idx:
        edges = _numeric_edges(sub, num_idx, n_grids, bin_strategy, value_range, mixed=bool(cat_idx))
        thresholds[num_idx if cat_idx else slice(None), : n_grids - 1] = edges[:, 1:-1].nan_to_num(float("inf"))
    if cat_idx:
        m = max(sizes)
        n_bins[cat_idx] = torch.tensor([max(v, 1) for v in sizes], dtype=torch.long, device=device)
        if m > 1:  # grid g >= 1 of a category starts at its value; +inf pads columns with fewer categories
            thresholds[cat_idx, : m - 1] = table[:, 1:m].nan_to_num(math.inf, math.inf, -math.inf)
        if m > 0:
            categories[cat_idx, :m] = table[:, :m]

    code_dtype = torch.uint8 if n_bins_max < 255 else torch.int16
    codes = torch.empty(sub.shape, dtype=code_dtype, device=device)
    codes_from_thresholds(sub, thresholds, codes, n_bins_max)
    return Binned(
        codes=codes,
        thresholds=thresholds,
        n_bins=n_bins,
        is_cat=torch.tensor(is_cat, dtype=torch.bool, device=device),
        categories=categories,
        columns=list(columns),
        kinds=list(kinds),
        int_valued=int_valued,
        n_grids=n_grids,
        bin_strategy=bin_strategy,
        value_min=value_range[0],
        value_max=value_range[1],
    )


def _numeric_edges(
    sub: torch.Tensor,
    num_idx: list[int],
    n_grids: int,
    bin_strategy: str,
    value_range: tuple[torch.Tensor, torch.Tensor],
    mixed: bool,
) -> torch.Tensor:
    """Grid edges of the numeric columns ``num_idx`` of ``sub`` (``mixed``: ``sub`` has categorical columns too)."""
    lo, hi = value_range
    if mixed:
        lo, hi = lo[num_idx], hi[num_idx]
    if bin_strategy == "uniform":  # from the known range: no pass over the values
        return uniform_edges(None, n_grids, value_range=(lo, hi))
    return grid_edges(sub[:, num_idx] if mixed else sub, n_grids, bin_strategy, value_range=(lo, hi))


def _category_table(
    sub: torch.Tensor, cat_idx: list[int], binary: list[bool], dt: torch.dtype
) -> tuple[torch.Tensor | None, list[int]]:
    """Sorted distinct non-missing values of the categorical columns ``cat_idx`` of ``sub`` (over all shards) as a
    (len(cat_idx), width) table padded with NaN, and their number per column.

    Columns known to hold exactly {0, 1} (``binary``) need no pass; the others are sorted in batches of columns,
    and their counts fetched in one host synchronisation.
    """
    if not cat_idx:
        return None, []
    other = [j for j, b in zip(cat_idx, binary) if not b]
    table = torch.full((len(cat_idx), 2), math.nan, dtype=dt, device=sub.device)
    sizes = [2] * len(cat_idx)
    table[:, 0], table[:, 1] = 0.0, 1.0
    if not other:
        return table, sizes
    n_rows = sub.shape[0] if not D.is_sharded() else int(D.all_reduce_max(torch.tensor(sub.shape[0])))
    block = max(1, CHUNK_ELEMENTS // max(1, n_rows))  # columns per batch (the same on every rank)
    tables, counts = [], []
    for b0 in range(0, len(other), block):
        values = sub[:, other[b0 : b0 + block]].to(dt)
        part, count = D.all_gather_unique_columns(values, MAX_CATEGORIES + 1)
        tables.append(part)
        counts.append(count)
    found = tables[0] if len(tables) == 1 else torch.cat(tables)  # the same width: the same rows and cap
    found_sizes = (counts[0] if len(counts) == 1 else torch.cat(counts)).tolist()
    if len(other) == len(cat_idx):
        return found, found_sizes
    width = max(2, found.shape[1])
    table = torch.nn.functional.pad(table, (0, width - 2), value=math.nan)
    rows = [cat_idx.index(j) for j in other]
    table[rows] = torch.nn.functional.pad(found, (0, width - found.shape[1]), value=math.nan)
    for r, v in zip(rows, found_sizes):
        sizes[r] = v
    return table, sizes
