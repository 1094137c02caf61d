"""Quantile and k-means grids of streamed data from a mergeable histogram sketch.

Between each numeric column's exact minimum and maximum (pass 1 of :mod:`torch_amore.search.stream`), one more pass
fills a histogram of :data:`SKETCH_BINS` equal-width bins per column: per bin the count, the exact fixed-point sum of
the
values (:func:`torch_amore._utils.distributed.to_fixed_point`) and the smallest and largest value. Every part is a sum,
a minimum or a maximum, so the sketch does not depend on how rows are cut into batches or split over the ranks of a DDP
run (they are reduced once).

Resolution: a bin spans ``(max - min) / SKETCH_BINS`` of its column. The order statistic of rank ``r`` lies in the bin
whose counts reach ``r``; it is estimated between that bin's smallest and largest value, so a **quantile** edge (the
linear interpolation of two order statistics, as :func:`torch_amore.grids.edges.quantile_edges`) is within one bin
width of the in-memory edge, and exact where a bin holds one distinct value (integer or few-valued columns). **k-means**
(:func:`torch_amore.grids.edges.kmeans_edges`: the same start, tolerance and iteration cap) runs on the bins: a bin
goes whole to the cluster of its mean (of its value where it holds one distinct value: then exactly as in memory),
except
the bin holding a bound, split there (its smallest and largest values known, the others taken as evenly spread). Its
edges are within a bin width of the in-memory ones on few-valued columns, the diabetes task and planted boxes, but
this is an observation, not a bound: on a flat objective (e.g. six clusters on one Gaussian column) the exact Lloyd
iterations stop where no value crosses a bound, and the sketch's iterations may stop some bins away (16 bin widths
on one of twelve columns of ``latent_like(20000, 12)``), with the same best fitness. The first and last edges are
the exact minimum and maximum.
"""

from __future__ import annotations

import math

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore.data.column_stats import work_dtype
from torch_amore.data.stream_source import BatchSource
from torch_amore.grids.binning import Binned

__all__ = ["SKETCH_BINS", "HistogramSketch", "sketch_thresholds"]

#: Histogram bins per numeric column: the grids' resolution is ``(max - min) / SKETCH_BINS``.
SKETCH_BINS = 1 << 14


class HistogramSketch:
    """Per column, :data:`SKETCH_BINS` equal-width bins between ``lo`` and ``hi``: counts, exact sums, minima and
    maxima of the values.

    Args:
        lo, hi: (F,) each column's exact minimum and maximum (work dtype).
        n_bins: bins per column.

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.0], [1.0], [2.0], [3.0], [10.0]], dtype=torch.float64)
        >>> s = HistogramSketch(x.amin(0), x.amax(0), n_bins=1000)
        >>> s.update(x[:2]); s.update(x[2:])
        >>> s.quantile_edges(2).tolist()
        [[0.0, 2.0, 10.0]]
    """

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, n_bins: int = SKETCH_BINS) -> None:
        self.lo, self.hi, self.n_bins = lo, hi, n_bins
        span = hi - lo
        self.scale = torch.where(span > 0, n_bins / span.clamp(min=1e-300), torch.zeros_like(span))
        self.exps = D.fixed_point_exponents(lo, hi)
        n_feat, device, dt = lo.shape[0], lo.device, lo.dtype
        width = n_bins + 1  # the last: missing values
        self.offsets = torch.arange(n_feat, device=device) * width
        self.counts = torch.zeros(n_feat * width, dtype=torch.int64, device=device)
        self.sums = torch.zeros(2, n_feat * width, dtype=torch.int64, device=device)
        self.mins = torch.full((n_feat * width,), math.inf, dtype=dt, device=device)
        self.maxs = torch.full((n_feat * width,), -math.inf, dtype=dt, device=device)

    def update(self, X: torch.Tensor) -> None:
        """Add the rows ``X`` (n, F) (NaN: missing)."""
        x = X.to(self.lo.dtype)
        missing = torch.isnan(x)
        b = ((x - self.lo) * self.scale).floor_().clamp_(0, self.n_bins - 1).masked_fill_(missing, self.n_bins)
        idx = (b.long() + self.offsets).view(-1)
        self.counts += torch.bincount(idx, minlength=self.counts.numel())
        vals = x.masked_fill(missing, 0.0)
        self.sums.index_add_(1, idx, D.to_fixed_point(vals, self.exps).view(2, -1))
        flat = x.reshape(-1)
        self.mins.scatter_reduce_(0, idx, flat, "amin")
        self.maxs.scatter_reduce_(0, idx, flat, "amax")

    def finish(self) -> None:
        """Reduce the sketch over the ranks of a DDP run (once, after the pass)."""
        if D.is_sharded():
            self.counts, self.sums = D.all_reduce_sum(self.counts), D.all_reduce_sum(self.sums)
            self.mins, self.maxs = D.all_reduce_min(self.mins), D.all_reduce_max(self.maxs)

    def _table(self, t: torch.Tensor) -> torch.Tensor:
        return t.view(*t.shape[:-1], self.lo.shape[0], self.n_bins + 1)[..., : self.n_bins]

    def quantile_edges(self, n_grids: int) -> torch.Tensor:
        """(F, n_grids + 1) equal-frequency edges, as :func:`torch_amore.grids.edges.quantile_edges`, each within one
        bin width."""
        counts = self._table(self.counts)
        dt = self.lo.dtype
        cum = counts.cumsum(1)  # rows up to and with each bin
        valid = cum[:, -1:]
        q = torch.arange(n_grids + 1, dtype=dt, device=counts.device) / n_grids
        pos = q[None, :] * (valid - 1).clamp(min=0).to(dt)  # (F, G+1)
        below = pos.floor().long()
        above = torch.minimum(below + 1, (valid - 1).clamp(min=0))
        frac = pos - below.to(dt)
        v0, v1 = self._order_statistic(cum, below), self._order_statistic(cum, above)
        return v0 + (v1 - v0) * frac

    def _order_statistic(self, cum: torch.Tensor, rank: torch.Tensor) -> torch.Tensor:
        """Estimates of the order statistics of ``rank`` (F, R) (0-based): between their bin's minimum and maximum,
        by their place among the bin's values."""
        k = torch.searchsorted(cum, rank, right=True).clamp_(max=self.n_bins - 1)  # the bin holding each rank
        before = torch.where(k > 0, cum.gather(1, (k - 1).clamp(min=0)), 0)
        count = cum.gather(1, k) - before
        lo, hi = self._table(self.mins).gather(1, k), self._table(self.maxs).gather(1, k)
        share = ((rank - before).to(lo.dtype) / (count - 1).clamp(min=1).to(lo.dtype)).clamp_(0, 1)
        return torch.where(count > 1, lo + (hi - lo) * share, lo)

    def kmeans_edges(self, n_grids: int, max_iter: int = 300, tol: float = 1e-8) -> torch.Tensor:
        """(F, n_grids + 1) edges of a 1-D k-means per column on the bins (see the module), started, stopped and
        framed as :func:`torch_amore.grids.edges.kmeans_edges`."""
        lo, hi = self.lo, self.hi
        span = (hi - lo).nan_to_num(0.0)
        steps = (torch.arange(n_grids, dtype=lo.dtype, device=lo.device) + 0.5) / n_grids
        centres = lo.nan_to_num(0.0)[:, None] + span[:, None] * steps
        counts, sums = self._table(self.counts), self._table(self.sums)
        scale = D.fixed_point_scale(self.exps, lo.dtype)[:, None]
        means = D.fixed_point_value(sums, scale) / counts.clamp(min=1)
        low, high = self._table(self.mins), self._table(self.maxs)
        means = torch.where(low == high, low, means)  # one distinct value: itself, not its rounded mean
        means = means.masked_fill(counts == 0, math.inf)  # empty bins: beyond every bound, weight 0
        col_tol = tol * span
        active = torch.ones(lo.shape[0], dtype=torch.bool, device=lo.device)
        for _ in range(max_iter):
            centres = torch.sort(centres, dim=1).values
            bounds = ((centres[:, 1:] + centres[:, :-1]) / 2).contiguous()
            cluster = torch.searchsorted(bounds, means.contiguous(), right=True)  # (F, H)
            c_sums = sums.new_zeros(2, *centres.shape).scatter_add_(2, cluster.expand(2, -1, -1), sums)
            c_counts = counts.new_zeros(centres.shape).scatter_add_(1, cluster, counts)
            c_sums, c_counts = self._split_straddling(bounds, D.fixed_point_value(c_sums, scale),
                                                      c_counts.to(lo.dtype), means, low, high, counts)  # fmt: skip
            new = torch.where(c_counts > 0, c_sums / c_counts.clamp(min=1e-300), centres)
            new = torch.where(active[:, None], new, centres)
            active &= (new - centres).abs().amax(1) > col_tol
            centres = new
            if not bool(active.any()):
                break
        centres = torch.sort(centres, dim=1).values
        bounds = (centres[:, 1:] + centres[:, :-1]) / 2
        return torch.cat([lo[:, None], bounds, hi[:, None]], dim=1)

    def _split_straddling(self, bounds: torch.Tensor, c_sums: torch.Tensor, c_counts: torch.Tensor,
                          means: torch.Tensor, low: torch.Tensor, high: torch.Tensor,
                          counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """Cluster sums and counts (F, G) with the bin holding each bound (F, G - 1) split at it rather than
        assigned whole by its mean."""
        j = ((bounds - self.lo[:, None]) * self.scale[:, None]).floor_().clamp_(0, self.n_bins - 1).long()
        a, b, n, m = low.gather(1, j), high.gather(1, j), counts.gather(1, j).to(bounds.dtype), means.gather(1, j)
        straddle = (n > 1) & (a < bounds) & (bounds <= b)
        # the bin's smallest and largest values are known, the n - 2 others taken as evenly spread between them;
        # whole values move (a piecewise-constant map, as the exact one: it stops where assignments stop changing)
        share = ((b - bounds) / (b - a).clamp(min=1e-300)).clamp_(0, 1)
        inner = ((n - 2) * share).round_()  # inner values from the bound on
        went_left = m < bounds  # where the whole bin went
        up, up_sum = inner + 1, b + inner * (bounds + b) / 2  # from the bound on: the largest value and `inner`
        down, down_sum = n - up, a + (n - 2 - inner) * (a + bounds) / 2  # below it
        moved = torch.where(went_left, up, -down).masked_fill_(~straddle, 0.0)  # from cluster k to k + 1
        moved_sum = torch.where(went_left, up_sum, -down_sum).masked_fill_(~straddle, 0.0)
        c_counts, c_sums = c_counts.clone(), c_sums.clone()
        c_counts[:, :-1] -= moved
        c_counts[:, 1:] += moved
        c_sums[:, :-1] -= moved_sum
        c_sums[:, 1:] += moved_sum
        return c_sums, c_counts


def sketch_thresholds(source: BatchSource, binned: Binned, bin_strategy: str, progress: bool = False,
                      n_bins: int = SKETCH_BINS) -> HistogramSketch | None:  # fmt: skip
    """Replace the numeric features' thresholds of ``binned`` (made as uniform grids from the exact ranges) by
    ``bin_strategy``'s (``"quantile"`` or ``"kmeans"``) from one pass filling a :class:`HistogramSketch`; returns it
    (``None`` when no searched feature is numeric)."""
    num = [j for j, k in enumerate(binned.kinds) if k != "cat"]
    binned.bin_strategy = bin_strategy
    if not num:
        return None
    dt = work_dtype(binned.thresholds.device)
    lo, hi = binned.value_min[num].to(dt), binned.value_max[num].to(dt)
    sketch = HistogramSketch(lo, hi, n_bins)
    cols = torch.tensor([binned.columns[j] for j in num], device=lo.device)
    bar = progress_bar(progress, desc="grid sketch", unit="rows", total=source.rows)
    for X, _ in source.batches(f"{bin_strategy} sketch"):
        for part in X.split(max(1, (1 << 20) // max(1, X.shape[1]))):  # temporaries of about 2**20 values
            sketch.update(part.index_select(1, cols))
        bar.update(X.shape[0])
    bar.close()
    sketch.finish()
    g = binned.n_grids
    edges = sketch.quantile_edges(g) if bin_strategy == "quantile" else sketch.kmeans_edges(g)
    binned.thresholds[torch.tensor(num, device=lo.device), : g - 1] = edges[:, 1:-1].nan_to_num(math.inf)
    return sketch
