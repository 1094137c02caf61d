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

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.arguments import check_bin_strategy, check_n_grids
from torch_amore.data.column_stats import CHUNK_ELEMENTS, ColumnStats, HostColumnStats, column_stats
from torch_amore.data.validation import MAX_CATEGORIES
from torch_amore.grids.edges import codes_from_thresholds, strategy_edges, uniform_edges


@dataclass
class Binned:
    """The bin code of every value of the searched features, with what is needed to turn grids into rules.

    Every binning has row-major ``codes`` (N, F'); column-major ``codes_t`` (F', N) is stored when the binning makes
    its codes that way (then ``codes`` is its transpose); :meth:`column_major` gives them for any binning.

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
        """The codes column-major (F', N): :attr:`codes_t`, made on first use as a transposed copy of :attr:`codes`
        when the binning did not store them (as much memory again).

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

    ``stats``: :func:`torch_amore.data.column_stats.column_stats` of ``X`` when already computed. Host syncs: its
    fetch, and the number of categories of categorical features not just {0, 1}.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 1.0], [4.0, 1.0]])
        >>> b = bin_features(X, [0, 1], ["float", "cat"], n_grids=2)
        >>> b.codes.tolist()
        [[0, 1], [0, 0], [1, 1], [1, 1]]
    """
    n_grids, bin_strategy = check_n_grids(n_grids), check_bin_strategy(bin_strategy)
    stats = column_stats(X) if stats is None else stats
    return encode_features(X, columns, kinds, n_grids, bin_strategy, stats, stats.fetch())


def encode_features(
    X: torch.Tensor,
    columns: list[int],
    kinds: list[str],
    n_grids: int,
    bin_strategy: str,
    stats: ColumnStats,
    facts: HostColumnStats,
) -> Binned:
    """:func:`bin_features` for checked arguments and known column facts: ``stats`` on the device, ``facts`` their
    fetch to the host (:meth:`ColumnStats.fetch`). The binning itself.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0], [3.0]])
        >>> stats = column_stats(X)
        >>> encode_features(X, [0], ["float"], 2, "uniform", stats, stats.fetch()).codes.tolist()
        [[0], [1]]
    """
    device, dt = X.device, stats.lo.dtype  # the facts' work dtype
    every = list(columns) == list(range(X.shape[1]))
    sub = X if every else X[:, columns]
    at = list(columns)
    value_range = (stats.lo, stats.hi) if at == list(range(len(stats.lo))) else (stats.lo[at], stats.hi[at])
    int_valued = [kind == "int" and facts.is_int[c] for kind, c in zip(kinds, at)]
    is_cat = [k == "cat" for k in kinds]
    num_idx = [j for j, c in enumerate(is_cat) if not c]
    cat_idx = [j for j, c in enumerate(is_cat) if c]
    binary = facts.binary

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
    if num_idx:
        edges = _numeric_edges(sub, num_idx, n_grids, bin_strategy, value_range, mixed=bool(cat_idx))
        thresholds[num_idx if cat_idx else slice(None), : n_grids - 1] = edges[:, 1:-1].nan_to_num(float("inf"))
    if cat_idx:
        m = max(sizes)
        if m > 1:  # grid g >= 1 of a category starts at its value; +inf pads columns with fewer categories
            thresholds[cat_idx, : m - 1] = table[:, 1:m].nan_to_num(math.inf, math.inf, -math.inf)
        if m > 0:
            categories[cat_idx, :m] = table[:, :m]

    per_category = dict(zip(cat_idx, sizes))  # a categorical feature has a grid per value (at least one)
    n_bins = [max(per_category.get(j, n_grids), 1) for j in range(n_feat)]
    code_dtype = torch.uint8 if n_bins_max < 255 else torch.int16
    codes = torch.empty(sub.shape, dtype=code_dtype, device=device)
    codes_from_thresholds(sub, thresholds, codes, n_bins_max)
    return Binned(
        codes=codes,
        thresholds=thresholds,
        n_bins=tensor_on(n_bins, dtype=torch.long, device=device),
        is_cat=tensor_on(is_cat, dtype=torch.bool, device=device),
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
        return uniform_edges(lo, hi, n_grids)
    return strategy_edges(sub[:, num_idx] if mixed else sub, n_grids, bin_strategy, (lo, hi))


def _category_table(
    sub: torch.Tensor, cat_idx: list[int], binary: list[bool], dt: torch.dtype
) -> tuple[torch.Tensor | None, list[int]]:
    """Sorted distinct non-missing values of the categorical columns ``cat_idx`` of ``sub`` (over all shards) as a
    NaN-padded table, and their number per column; ``binary`` columns need no pass, the others one host sync."""
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
