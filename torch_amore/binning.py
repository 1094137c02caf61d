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
from dataclasses import dataclass

import torch

from torch_amore import distributed as D
from torch_amore._validation import MAX_CATEGORIES, check_bin_strategy, check_n_grids, integer_columns

#: Elements per temporary chunk (rows x features) in the passes over X.
_CHUNK_ELEMENTS = 1 << 22

#: Above this many thresholds per feature, codes come from a binary search rather than one pass per threshold.
_SEARCH_ABOVE = 64


def _work_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _row_chunks(n_rows: int, n_cols: int) -> range:
    step = max(1, _CHUNK_ELEMENTS // max(1, n_cols))
    return range(0, n_rows, step)


def _chunk_len(n_rows: int, n_cols: int) -> int:
    return max(1, _CHUNK_ELEMENTS // max(1, n_cols))


def nan_min_max(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-column min and max over non-missing values (NaN where a column is all missing), in float64."""
    dt = _work_dtype(X.device)
    lo = torch.full((X.shape[1],), float("inf"), dtype=dt, device=X.device)
    hi = torch.full((X.shape[1],), float("-inf"), dtype=dt, device=X.device)
    step = _chunk_len(X.shape[0], X.shape[1])
    for r0 in range(0, X.shape[0], step):
        chunk = X[r0 : r0 + step]
        c_lo, c_hi = torch.aminmax(chunk, dim=0)  # NaN propagates: redo those columns with NaN masked
        c_lo, c_hi = c_lo.to(dt), c_hi.to(dt)
        bad = torch.nonzero(torch.isnan(c_lo), as_tuple=True)[0]
        if bad.numel():
            sub = chunk[:, bad].to(dt)
            nan = torch.isnan(sub)
            c_lo[bad] = torch.where(nan, torch.inf, sub).amin(0)
            c_hi[bad] = torch.where(nan, -torch.inf, sub).amax(0)
        lo = torch.minimum(lo, c_lo)
        hi = torch.maximum(hi, c_hi)
    lo, hi = D.all_reduce_min(lo), D.all_reduce_max(hi)  # over the shards of a DDP run (no-op otherwise)
    empty = torch.isinf(lo)
    return lo.masked_fill(empty, float("nan")), hi.masked_fill(empty, float("nan"))


def uniform_edges(X: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-width edges between each column's min and max."""
    lo, hi = nan_min_max(X)
    steps = torch.arange(n_grids + 1, dtype=lo.dtype, device=lo.device) / n_grids
    edges = lo[:, None] + (hi - lo)[:, None] * steps
    edges[:, -1] = hi  # exact max despite rounding
    return edges


def quantile_edges(X: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-frequency edges (linear interpolation between order statistics), NaN ignored."""
    if D.is_sharded():  # exact order statistics of all shards by a distributed selection
        return D.sharded_quantile_edges(X, n_grids)
    dt = _work_dtype(X.device)
    n, n_features = X.shape
    q = torch.arange(n_grids + 1, dtype=dt, device=X.device) / n_grids
    out = torch.empty(n_features, n_grids + 1, dtype=dt, device=X.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, n))
    for f0 in range(0, n_features, step):
        cols = X[:, f0 : f0 + step].to(dt)
        valid = (~torch.isnan(cols)).sum(0)  # (f,)
        srt = torch.sort(cols, dim=0).values  # NaN sorts last
        pos = q[:, None] * (valid - 1).clamp(min=0).to(dt)[None, :]  # (G+1, f)
        below = pos.floor().long().clamp(max=n - 1)
        above = (below + 1).clamp(max=(valid - 1).clamp(min=0)[None, :].expand_as(below))
        frac = pos - below.to(dt)
        v0, v1 = srt.gather(0, below), srt.gather(0, above)
        out[f0 : f0 + step] = (v0 + (v1 - v0) * frac).t()
    return out


def _codes_from_thresholds(X: torch.Tensor, thresholds: torch.Tensor, out: torch.Tensor, nan_code: int) -> None:
    """Write into ``out`` (N, F) the number of thresholds each value reaches; NaN gets ``nan_code``."""
    dt = thresholds.dtype
    if thresholds.shape[1] > _SEARCH_ABOVE:  # many grids: a binary search instead of one pass per threshold
        _codes_by_search(X, thresholds, out, nan_code)
        return
    thr = thresholds.t().contiguous()  # (T, F)
    step = _chunk_len(X.shape[0], X.shape[1])
    for r0 in range(0, X.shape[0], step):
        chunk = X[r0 : r0 + step].to(dt)
        acc = torch.zeros(chunk.shape, dtype=out.dtype, device=X.device)
        for t in range(thr.shape[0]):
            acc += chunk >= thr[t]
        acc.masked_fill_(torch.isnan(chunk), nan_code)
        out[r0 : r0 + step] = acc


def _codes_by_search(X: torch.Tensor, thresholds: torch.Tensor, out: torch.Tensor, nan_code: int) -> None:
    """:func:`_codes_from_thresholds` by ``searchsorted``: the number of thresholds ``<= x`` is the number ``x``
    reaches (thresholds are never NaN)."""
    dt = thresholds.dtype
    thr = torch.sort(thresholds, dim=1).values  # (F, T); a count of thresholds <= x does not depend on their order
    step = _chunk_len(X.shape[0], X.shape[1])
    for r0 in range(0, X.shape[0], step):
        chunk = X[r0 : r0 + step].to(dt)
        acc = torch.searchsorted(thr, chunk.t().contiguous(), right=True, out_int32=True).t()
        acc = acc.masked_fill(torch.isnan(chunk), nan_code)
        out[r0 : r0 + step] = acc.to(out.dtype)


def _kmeans_update(centres: torch.Tensor, sums: torch.Tensor, counts: torch.Tensor, exps: torch.Tensor) -> torch.Tensor:
    """New centres from exact fixed-point sums and counts; an empty cluster keeps its centre."""
    means = D.from_fixed_point(sums, exps, centres.dtype)
    return torch.where(counts > 0, means / counts.clamp(min=1), centres)


def _kmeans_sorted(X: torch.Tensor, centres: torch.Tensor, exps: torch.Tensor, tol: torch.Tensor,
                   max_iter: int) -> torch.Tensor:
    """Lloyd iterations for one process: each column is sorted once, then every iteration only needs a
    ``searchsorted`` of the cluster bounds and differences of prefix sums (O(G log N) per column)."""
    n, n_features = X.shape
    step = max(1, _CHUNK_ELEMENTS // max(1, n))
    out = centres.clone()
    for f0 in range(0, n_features, step):
        f1 = min(n_features, f0 + step)
        vals = torch.sort(X[:, f0:f1].to(centres.dtype).t(), dim=1).values.contiguous()  # (f, N), NaN last
        missing = torch.isnan(vals)
        n_valid = (~missing).sum(1, keepdim=True)
        limbs = D.to_fixed_point(vals.masked_fill(missing, 0.0).t(), exps[f0:f1])  # (2, N, f)
        vals.masked_fill_(missing, math.inf)  # a proper sort order for searchsorted
        prefix = torch.cat([torch.zeros_like(limbs[:, :1]), torch.cumsum(limbs, dim=1)], dim=1)  # (2, N+1, f)
        prefix = prefix.transpose(1, 2)  # (2, f, N+1)
        c = out[f0:f1]
        active = torch.ones(f1 - f0, dtype=torch.bool, device=X.device)
        for _ in range(max_iter):
            c = torch.sort(c, dim=1).values
            bounds = (c[:, 1:] + c[:, :-1]) / 2
            pos = torch.minimum(torch.searchsorted(vals, bounds.contiguous(), side="left"), n_valid)
            pos = torch.cat([torch.zeros_like(n_valid), pos, n_valid], dim=1)  # (f, G+1)
            counts = pos[:, 1:] - pos[:, :-1]
            sums = prefix.gather(2, pos[None].expand(2, -1, -1))
            new = _kmeans_update(c, sums[:, :, 1:] - sums[:, :, :-1], counts, exps[f0:f1])
            new = torch.where(active[:, None], new, c)
            active &= (new - c).abs().amax(1) > tol[f0:f1]
            c = new
            if not bool(active.any()):
                break
        out[f0:f1] = c
    return out


def kmeans_edges(X: torch.Tensor, n_grids: int, max_iter: int = 300, tol: float = 1e-8) -> torch.Tensor:
    """(F, n_grids + 1) edges of a 1-D k-means per column, all columns at once and deterministic.

    Centres start at the uniform-grid midpoints; Lloyd iterations update a column until none of its centres moves by
    more than ``tol * (max - min)``; edges are the midpoints of the sorted centres, framed by the column's min and
    max. Cluster sums are exact integer (fixed-point) sums, so the result does not depend on how the rows are split
    (one process with sorted columns, or shards of a distributed run).
    """
    lo, hi = nan_min_max(X)
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
            _codes_from_thresholds(X, bounds, codes, n_grids)
            sums = torch.zeros(2, n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            counts = torch.zeros(n_features * (n_grids + 1), dtype=torch.long, device=X.device)
            step = _chunk_len(X.shape[0], X.shape[1])
            for r0 in range(0, X.shape[0], step):
                idx = (codes[r0 : r0 + step].long() + offsets).reshape(-1)
                vals = D.to_fixed_point(X[r0 : r0 + step].to(lo.dtype).nan_to_num(0.0), exps).reshape(2, -1)
                sums.index_add_(1, idx, vals)
                counts += torch.bincount(idx, minlength=counts.numel())
            sums, counts = D.all_reduce_sum(sums), D.all_reduce_sum(counts)
            sums = sums.view(2, n_features, -1)[:, :, :n_grids]
            counts = counts.view(n_features, -1)[:, :n_grids]
            new = _kmeans_update(centres, sums, counts, exps)
            new = torch.where(active[:, None], new, centres)
            active &= (new - centres).abs().amax(1) > col_tol
            centres = new
            if not bool(active.any()):
                break
    centres = torch.sort(centres, dim=1).values
    bounds = (centres[:, 1:] + centres[:, :-1]) / 2
    return torch.cat([lo[:, None], bounds, hi[:, None]], dim=1)


def grid_edges(X: torch.Tensor, n_grids: int, bin_strategy: str = "uniform") -> torch.Tensor:
    """Edges (F, n_grids + 1) of the value grids of every column of ``X``, computed on X's device in float64.

    Example:
        >>> import torch
        >>> grid_edges(torch.tensor([[0.0], [1.0], [4.0]]), 4).tolist()
        [[0.0, 1.0, 2.0, 3.0, 4.0]]
    """
    n_grids = check_n_grids(n_grids)
    check_bin_strategy(bin_strategy)
    if bin_strategy == "uniform":
        return uniform_edges(X, n_grids)
    if bin_strategy == "quantile":
        return quantile_edges(X, n_grids)
    return kmeans_edges(X, n_grids)


@dataclass
class Binned:
    """The bin code of every value of the searched features, with what is needed to turn grids into rules.

    Attributes:
        codes: (N, F') uint8/int16 bin codes on X's device; ``nan_code`` marks a missing value.
        thresholds: (F', B - 1) float64 lower edges of grids 1..B-1 (``+inf`` pads features with fewer grids).
        n_bins: (F',) number of grids per feature.
        is_cat: (F',) whether each feature is categorical (one grid per category).
        categories: (F', B) float64 category value of each grid of a categorical feature (NaN elsewhere).
        columns: the column index in X of each searched feature.
        kinds: ``float``/``int``/``cat`` per searched feature.
        int_valued: per searched feature, whether all its values are integers (so bounds may be snapped).
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

    @property
    def n_bins_max(self) -> int:
        return int(self.categories.shape[1])

    @property
    def nan_code(self) -> int:
        return self.n_bins_max

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
) -> Binned:
    """Grids and codes for the searched ``columns`` of ``X`` (categorical columns get one grid per category).

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
    dt = _work_dtype(device)
    sub = X if list(columns) == list(range(X.shape[1])) else X[:, columns]
    is_cat = [k == "cat" for k in kinds]
    num_idx = [j for j, c in enumerate(is_cat) if not c]
    cat_idx = [j for j, c in enumerate(is_cat) if c]

    cat_values: list[torch.Tensor] = []
    for j in cat_idx:
        col = sub[:, j].to(dt)
        cat_values.append(D.all_gather_unique(col))  # torch.unique of the non-missing values of all shards
    sizes = [int(v.numel()) for v in cat_values]
    if sizes and max(sizes) > MAX_CATEGORIES:
        k = max(range(len(sizes)), key=sizes.__getitem__)
        raise ValueError(
            f"Expected at most {MAX_CATEGORIES} distinct values in a 'cat' feature, but feature {columns[cat_idx[k]]} "
            f"has {sizes[k]}; declare it 'int' or 'float' in `feature_types`."
        )
    n_bins_max = max([n_grids] + sizes)
    n_feat = len(columns)
    thresholds = torch.full((n_feat, n_bins_max - 1), float("inf"), dtype=dt, device=device)
    categories = torch.full((n_feat, n_bins_max), float("nan"), dtype=dt, device=device)
    n_bins = torch.full((n_feat,), n_grids, dtype=torch.long, device=device)
    if num_idx:
        edges = grid_edges(sub[:, num_idx], n_grids, bin_strategy)
        thresholds[num_idx, : n_grids - 1] = edges[:, 1:-1].nan_to_num(float("inf"))
    for j, vals in zip(cat_idx, cat_values):
        m = int(vals.numel())
        n_bins[j] = max(m, 1)
        thresholds[j, : max(m - 1, 0)] = vals[1:]
        categories[j, :m] = vals

    code_dtype = torch.uint8 if n_bins_max < 255 else torch.int16
    codes = torch.empty(sub.shape, dtype=code_dtype, device=device)
    _codes_from_thresholds(sub, thresholds, codes, n_bins_max)

    is_int, _ = integer_columns(sub)
    int_valued = [kind == "int" and bool(v) for kind, v in zip(kinds, is_int.tolist())]
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
    )
