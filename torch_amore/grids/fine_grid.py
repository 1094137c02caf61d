"""Fine equal-width grids for the ``"beam"`` search: codes by arithmetic, thresholds only when asked for.

:func:`fine_binning` cuts each numeric feature into ``n_fine`` equal-width grids by arithmetic: the code of ``x`` is
``floor((x - lo) * scale)`` clamped to ``[0, n_fine - 1]`` (:func:`uniform_code`), ``scale = n_fine / (max - min)``.
Categorical features keep the base binning's categories. The codes are stored column-major (``codes_t``), ``codes``
being their transpose (a view).

The lower edge of grid ``g`` is the smallest float64 whose code is ``g``, so ``x >= edge`` holds exactly for the
values in grids ``>= g``; it is found by bisection on the floats' order (:meth:`FineBinned.threshold` on the device,
:func:`host_grid_start` on the host, the same operations in the same order), only for the grids a search asks for.
"""

from __future__ import annotations

import math
import struct
import sys
from dataclasses import dataclass, field

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.column_stats import pass_rows, work_dtype
from torch_amore.grids.binning import Binned
from torch_amore.grids.edges import nan_min_max


def uniform_code(x: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor, n_grids: int) -> torch.Tensor:
    """floor((x - lo) * scale) clamped to [0, n_grids - 1]; monotone non-decreasing in x.

    Example:
        >>> import torch
        >>> uniform_code(torch.tensor([-1.0, 0.3, 0.5, 2.0]), torch.tensor(0.0), torch.tensor(4.0), 4).tolist()
        [0.0, 1.0, 2.0, 3.0]
    """
    return torch.floor((x - lo) * scale).clamp_(0, n_grids - 1)


_SIGN = -(2**63)


def _float_key(x: torch.Tensor) -> torch.Tensor:
    """Order-preserving int64 key of float64 values (-0.0 and 0.0 share the key 0)."""
    bits = x.view(torch.int64)
    return torch.where(bits < 0, -(bits & ~tensor_on(_SIGN, device=x.device)), bits)


def _key_float(key: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_float_key`."""
    bits = torch.where(key < 0, (-key) | tensor_on(_SIGN, device=key.device), key)
    return bits.view(torch.float64)


def _grid_starts(lo: torch.Tensor, hi: torch.Tensor, scale: torch.Tensor, g: torch.Tensor, n_fine: int) -> torch.Tensor:
    """For each entry, the smallest float64 ``x`` with ``uniform_code(x, lo, scale, n_fine) >= g`` (1 <= g < n_fine).

    1-D arguments, one entry per wanted threshold. Bisection on the floats' order from a tight bracket around
    ``lo + g / scale``, all entries together (one host sync). A constant column (``scale == 0``) gets ``+inf``.
    """
    lo_f, hi_f, sc, g = lo.double(), hi.double(), scale.double(), g.double()
    live = sc > 0

    def reaches(x: torch.Tensor) -> torch.Tensor:
        return uniform_code(x, lo_f, sc, n_fine) >= g

    x0 = lo_f + g / sc.clamp(min=1e-300)
    d = 16 * torch.finfo(torch.float64).eps * (lo_f.abs() + x0.abs() + 1 / sc.clamp(min=1e-300))
    low, high = (x0 - d).clamp(min=lo_f), (x0 + d).clamp(max=hi_f)
    good = ~reaches(low) & reaches(high)  # the tight bracket holds the answer
    lo_k = torch.where(good, _float_key(low), _float_key(lo_f))  # code(lo) = 0 < g
    hi_k = torch.where(good, _float_key(high), _float_key(hi_f))  # code(hi) = n_fine - 1 >= g
    # bisection steps: the bit length of the widest open bracket (read once), then every entry steps together
    gap = torch.where(live & (hi_k - 1 > lo_k), hi_k.double() - lo_k.double(), 0.0)
    n_steps = int(torch.ceil(torch.log2(gap.max().clamp(min=1.0)))) + 1 if g.numel() else 0
    for _ in range(n_steps):
        mid = (lo_k >> 1) + (hi_k >> 1) + (lo_k & hi_k & 1)  # no a + b: it could overflow int64
        hit = reaches(_key_float(mid))
        hi_k = torch.where(hit, mid, hi_k)
        lo_k = torch.where(hit, lo_k, mid)
    return torch.where(live, _key_float(hi_k), torch.full_like(g, math.inf))


def _host_key(x: float) -> int:
    """:func:`_float_key` of one Python float."""
    bits = struct.unpack("<q", struct.pack("<d", x))[0]
    return -(bits & ~_SIGN) if bits < 0 else bits


def _host_float(key: int) -> float:
    """:func:`_key_float` of one Python int."""
    return struct.unpack("<d", struct.pack("<q", (-key) | _SIGN if key < 0 else key))[0]


def host_grid_start(lo: float, hi: float, scale: float, g: int, n_fine: int) -> float:
    """:func:`_grid_starts` of one entry in Python floats (IEEE float64, the same operations in the same order, so
    the same value), for thresholds without a host sync.

    Example:
        >>> host_grid_start(0.0, 1.0, 4.0, 1, 4)
        0.25
    """
    if not scale > 0:
        return math.inf

    def reaches(x: float) -> bool:
        v = (x - lo) * scale
        v = math.floor(v) if math.isfinite(v) else v
        return min(max(v, 0), n_fine - 1) >= g

    x0 = lo + g / max(scale, 1e-300)
    d = 16 * sys.float_info.epsilon * (abs(lo) + abs(x0) + 1 / max(scale, 1e-300))
    low, high = max(x0 - d, lo), min(x0 + d, hi)
    good = not reaches(low) and reaches(high)  # the tight bracket holds the answer
    lo_k, hi_k = (_host_key(low), _host_key(high)) if good else (_host_key(lo), _host_key(hi))
    while hi_k - 1 > lo_k:
        mid = (lo_k + hi_k) >> 1
        if reaches(_host_float(mid)):
            hi_k = mid
        else:
            lo_k = mid
    return _host_float(hi_k)


@dataclass
class FineBinned(Binned):
    """A :class:`Binned` whose numeric grids are ``n_fine`` equal-width cells by arithmetic.

    Numeric thresholds are computed only when asked for (:meth:`threshold`); ``thresholds`` holds the categorical
    ones (``+inf`` for numeric rows). ``is_cat_host`` and ``n_bins_host`` are host lists, read without a sync.
    """

    lo: torch.Tensor = None  # (F',) float64 column minima
    hi: torch.Tensor = None  # (F',) float64 column maxima
    scale: torch.Tensor = None  # (F',) cells per unit (0 for a constant column)
    is_cat_host: list = None  # ``is_cat`` as a list of bools
    n_bins_host: list = None  # ``n_bins`` as a list of ints
    lo_host: list = None  # ``lo``, ``hi`` and ``scale`` as lists of floats (thresholds without a host sync)
    hi_host: list = None
    scale_host: list = None
    _known: dict = field(default_factory=dict, repr=False)  # (feature, grid) -> threshold, filled by prefetch

    def __post_init__(self) -> None:
        if self.is_cat_host is None:
            self.is_cat_host = [bool(c) for c in self.is_cat.tolist()]
        if self.n_bins_host is None:
            self.n_bins_host = [int(n) for n in self.n_bins.tolist()]
        if self.lo_host is None:
            self.lo_host, self.hi_host, self.scale_host = torch.stack([self.lo, self.hi, self.scale]).tolist()

    def write_codes(
        self, sub: torch.Tensor, base: Binned, base_codes: torch.Tensor, codes_t: torch.Tensor, work: torch.Tensor
    ) -> None:
        """Write into ``codes_t`` (F', n) the codes of more rows ``sub`` (n, F'), as :func:`fine_binning` gives them;
        ``base_codes``: their codes in the refined binning; ``work``: (rows, F') float scratch reused across calls."""
        grid = (self.lo.to(work.dtype), self.scale.to(work.dtype), self.n_grids, self.nan_code)
        cats = [j for j, c in enumerate(self.is_cat_host) if c]
        cat_cols = tensor_on(cats, device=sub.device) if cats else None
        _write_codes(sub, base_codes if cats else None, base.nan_code, cat_cols, grid, codes_t, work)

    def threshold(self, j: torch.Tensor | int, g: torch.Tensor | int) -> torch.Tensor:
        """Lower edge of cell ``g`` of searched feature ``j`` (the smallest float64 whose code is >= ``g``)."""
        j = torch.as_tensor(j, device=self.lo.device).reshape(-1)
        g = torch.as_tensor(g, device=self.lo.device).reshape(-1).expand_as(j)
        return _grid_starts(self.lo[j], self.hi[j], self.scale[j], g, self.n_grids)

    def prefetch(self, pairs: list[tuple[int, int]]) -> None:
        """Compute the thresholds of many ``(feature, grid)`` pairs, for :meth:`interval_bounds` (on the host: no
        tensor work and no sync)."""
        for j, g in pairs:
            if 0 < g < self.n_grids:
                self._edge(j, g)

    def _edge(self, j: int, g: int) -> float:
        if (j, g) not in self._known:
            self._known[(j, g)] = host_grid_start(self.lo_host[j], self.hi_host[j], self.scale_host[j], g, self.n_grids)
        return self._known[(j, g)]

    def interval_bounds(self, j: int, g_low: int, g_high: int) -> tuple[float, float]:
        """(low, high) of grids ``g_low..g_high`` of searched feature ``j``: no host sync for numeric features whose
        edges were prefetched (:meth:`prefetch`)."""
        if self.is_cat_host[j]:
            return super().interval_bounds(j, g_low, g_high)
        low = self._edge(j, g_low) if g_low > 0 else float("-inf")
        high = self._edge(j, g_high + 1) if g_high < self.n_bins_host[j] - 1 else float("inf")
        return low, high


def default_n_fine(n_samples: int) -> int:
    """Fine grids per feature for ``n_samples`` samples: about 32 samples a grid, a power of two in [256, 1024]
    (finer grids gain nothing: the polish cuts between observed values anyway).

    Example:
        >>> [default_n_fine(n) for n in (1_000, 20_000, 70_000)]
        [256, 512, 1024]
    """
    cells = max(1, n_samples // 32)
    return min(1024, max(256, 1 << (cells.bit_length() - 1)))


def _write_codes(
    sub: torch.Tensor,
    base_codes: torch.Tensor | None,
    base_nan: int,
    cat_cols: torch.Tensor | None,
    grid: tuple[torch.Tensor, torch.Tensor, int, int],
    codes_t: torch.Tensor,
    work: torch.Tensor,
) -> None:
    """Write into ``codes_t`` (F', n) the fine codes of the rows ``sub`` (n, F') through the float scratch ``work``;
    ``grid``: (lower ends, cells per unit, ``n_fine``, missing code); ``base_codes``: the base codes that the
    categorical features ``cat_cols`` keep (``None``: none), ``base_nan`` their missing code."""
    lo0, scale, n_fine, nan_code = grid
    step = work.shape[0]
    rows = torch.empty(work.shape, dtype=codes_t.dtype, device=work.device)  # a chunk's codes, row-major
    # the chunks as views made by one operation each (the loop runs many times on big data)
    for chunk, dst in zip(sub.split(step), codes_t.T.split(step)):
        c, r = (work, rows) if chunk.shape[0] == step else (work[: chunk.shape[0]], rows[: chunk.shape[0]])
        # :func:`uniform_code` (the difference in float64 whatever X's dtype); NaN stays NaN until the last step. The
        # floor is the conversion to integers below: clamped to [0, n_fine - 1] first, truncation is the floor.
        torch.sub(chunk, lo0, out=c).mul_(scale).clamp_(0, n_fine - 1)
        # converted in place, then transposed: a third less time than one converting, transposing copy
        dst.copy_(r.copy_(c.nan_to_num_(nan=nan_code)))
    if base_codes is not None:  # the categorical columns: the base binning's categories, its missing code this grid's
        cats = base_codes.index_select(1, cat_cols).to(codes_t.dtype)
        codes_t.index_copy_(0, cat_cols, cats.masked_fill_(cats == base_nan, nan_code).T)


def fine_binning(X: torch.Tensor, base: Binned, n_fine: int = 1024) -> FineBinned:
    """Fine equal-width grids for the numeric features of ``base`` (categorical features keep their categories).

    Codes come from arithmetic, and each threshold is the smallest float64 reaching its grid, so codes and thresholds
    agree exactly (``x >= threshold(f, g)`` iff ``code >= g``).
    """
    device = X.device
    dt = work_dtype(device)
    columns = base.columns
    sub = X if list(columns) == list(range(X.shape[1])) else X[:, columns]
    if base.value_min is not None:  # the ranges the base binning measured (over all DDP ranks): no pass over X
        lo, hi = base.value_min.to(dt), base.value_max.to(dt)
        lo_host, hi_host, extra = torch.stack([lo, hi, base.n_bins.to(dt)]).tolist()
        base_bins = [int(v) for v in extra]
    else:
        lo, hi, lo_host, hi_host, base_bins = _column_min_max(sub, base.n_bins)
    # the cells per unit on the host (the same float64 operations as on the device), for thresholds without a sync
    scale_host = [n_fine / max(b - a, 1e-300) if b - a > 0 else 0.0 for a, b in zip(lo_host, hi_host)]
    lo_host = [0.0 if math.isnan(a) else a for a in lo_host]
    hi_host = [0.0 if math.isnan(b) else b for b in hi_host]
    scale = tensor_on(scale_host, dtype=torch.float64, device=device).to(dt)
    lo0 = lo.nan_to_num(0.0)
    width = max(n_fine, base.n_bins_max)
    nan_code = width
    codes_t = torch.empty(sub.shape[::-1], dtype=torch.int16, device=device)  # column-major: features are rows
    step = pass_rows(sub.shape[0], sub.shape[1], _FINE_CHUNK, max_chunks=_FINE_MAX_CHUNKS)
    is_cat = base.is_cat
    cat_host = [k == "cat" for k in base.kinds]
    any_cat = any(cat_host)
    work = torch.empty(min(step, sub.shape[0]), sub.shape[1], dtype=dt, device=device)  # reused: stays in cache
    cat_cols = tensor_on([j for j, c in enumerate(cat_host) if c], device=device) if any_cat else None
    _write_codes(
        sub, base.codes if any_cat else None, base.nan_code, cat_cols, (lo0, scale, n_fine, nan_code), codes_t, work
    )
    thresholds = torch.full((len(columns), width - 1), math.inf, dtype=dt, device=device)
    categories = torch.full((len(columns), width), math.nan, dtype=dt, device=device)
    categories[:, : base.n_bins_max] = base.categories
    n_bins = torch.full_like(base.n_bins, n_fine)
    n_bins_host = [b if c else n_fine for b, c in zip(base_bins, cat_host)]
    if any_cat:
        cat = is_cat[:, None]
        thresholds[:, : base.n_bins_max - 1] = torch.where(cat, base.thresholds, thresholds[:, : base.n_bins_max - 1])
        n_bins = torch.where(is_cat, base.n_bins, n_bins)
    return FineBinned(
        codes=codes_t.T,
        codes_t=codes_t,
        thresholds=thresholds,
        n_bins=n_bins,
        is_cat=is_cat,
        categories=categories,
        columns=list(columns),
        kinds=list(base.kinds),
        int_valued=list(base.int_valued),
        n_grids=n_fine,
        bin_strategy="uniform",
        lo=lo0.to(torch.float64),
        hi=hi.nan_to_num(0.0).to(torch.float64),
        scale=scale.to(torch.float64),
        is_cat_host=cat_host,
        n_bins_host=n_bins_host,
        lo_host=lo_host,
        hi_host=hi_host,
        scale_host=scale_host,
    )


#: Elements of X converted at once by :func:`fine_binning`: a float64 scratch of 10 MiB, reused by every chunk (a
#: chunk of a few MiB stays in cache through its passes; more, smaller chunks take more operations).
_FINE_CHUNK = 5 << 18
#: The fine binning takes at most this many chunks (six operations each); beyond, larger chunks.
_FINE_MAX_CHUNKS = 104


def _column_min_max(X: torch.Tensor, extra: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list, list, list]:
    """:func:`torch_amore.grids.edges.nan_min_max` with one host sync, also as lists (with ``extra`` read in the same
    sync); the pass is redone with NaN masked only when some column holds a NaN."""
    dt = work_dtype(X.device)
    if X.shape[0] > 0 and X.is_floating_point():
        lo, hi = torch.aminmax(X, dim=0)
        lo, hi = lo.to(dt), hi.to(dt)
    else:
        lo = hi = torch.full((X.shape[1],), math.nan, dtype=dt, device=X.device)
    lo_host, hi_host, extra_host = torch.stack([lo, hi, extra.to(dt)]).tolist()
    redo = any(map(math.isnan, lo_host))  # a NaN, or no rows
    if D.is_sharded():  # every rank takes the same path (and the same collectives)
        redo = float(D.all_reduce_max(tensor_on([float(redo)], dtype=dt, device=X.device))[0]) > 0
        lo, hi = nan_min_max(X) if redo else (D.all_reduce_min(lo), D.all_reduce_max(hi))
        lo_host, hi_host = torch.stack([lo, hi]).tolist()
    elif redo:
        lo, hi = nan_min_max(X)
        lo_host, hi_host = torch.stack([lo, hi]).tolist()
    return lo, hi, lo_host, hi_host, [int(v) for v in extra_host]
