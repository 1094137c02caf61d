"""Quantile and k-means grids of streamed data from a mergeable histogram sketch.

Between each numeric column's exact minimum and maximum, one pass fills :data:`SKETCH_BINS` equal-width bins per
column: per bin the count, the exact fixed-point sum of the values, the smallest and the largest value. Every part is
a sum, a minimum or a maximum, so the sketch does not depend on batches or ranks.

A **quantile** edge is within one bin width of the in-memory edge, and exact where a bin holds one distinct value.
**k-means** runs the in-memory Lloyd iterations on the bins: a bin goes whole to a cluster unless it holds values on
both sides of a cluster bound; then one more pass reads the values of such bins and their neighbours
(:data:`KMEANS_REACH` bins either side, at most :data:`KMEANS_ROUNDS` passes). Once none is missing, every iteration
adds the same exact integer sums as in memory, so the k-means edges equal the in-memory ones bit for bit (typically
4 to 6 extra passes on continuous columns). Beyond :data:`KMEANS_BUDGET` values read, or when the passes run out, a
bin without known values goes whole to the cluster of its mean, and the edges are approximate (docs/streaming.md).
"""

from __future__ import annotations

import math

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.column_stats import work_dtype
from torch_amore.data.stream_source import BatchSource
from torch_amore.grids import exact_edges as E
from torch_amore.grids.binning import Binned
from torch_amore.grids.edges import centre_edges, kmeans_start, lloyd

__all__ = ["SKETCH_BINS", "HistogramSketch", "sketch_thresholds"]

#: Histogram bins per numeric column: the grids' resolution is ``(max - min) / SKETCH_BINS``.
SKETCH_BINS = 1 << 14

#: Passes that read the values of the bins holding k-means cluster bounds, at most.
KMEANS_ROUNDS = 8

#: Each such pass also reads the bins this close to them (bounds move a few bins per iteration near the end).
KMEANS_REACH = 8

#: Bytes the values read for k-means may take (about 48 per value); beyond, the edges stay approximate.
KMEANS_BUDGET = 512 * 2**20
_BYTES_PER_VALUE = 48

#: Beyond the budget, the edges were within this many bin widths of the in-memory ones in the tests (an observation
#: on Gaussian and planted data, not a bound).
APPROXIMATE_BINS = 8


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
        self.exps = E.fixed_point_exponents(lo, hi)
        n_feat, device, dt = lo.shape[0], lo.device, lo.dtype
        width = n_bins + 1  # the last: missing values
        self.offsets = torch.arange(n_feat, device=device) * width
        self.counts = torch.zeros(n_feat * width, dtype=torch.int64, device=device)
        self.sums = torch.zeros(2, n_feat * width, dtype=torch.int64, device=device)
        self.mins = torch.full((n_feat * width,), math.inf, dtype=dt, device=device)
        self.maxs = torch.full((n_feat * width,), -math.inf, dtype=dt, device=device)
        self._values: tuple | None = None  # (keys, features, values, limbs, cells) of the bins whose values are known

    def update(self, X: torch.Tensor) -> None:
        """Add the rows ``X`` (n, F) (NaN: missing)."""
        idx, flat = self.bin_keys(X)
        self.counts += counting.bincount(idx, self.counts.numel())
        vals = flat.view(X.shape).nan_to_num(0.0)
        self.sums.index_add_(1, idx, E.to_fixed_point(vals, self.exps).view(2, -1))
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
        q = E.divide(torch.arange(n_grids + 1, dtype=dt, device=counts.device), n_grids)
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
        return self.kmeans(n_grids, max_iter, tol)[0]

    def kmeans(self, n_grids: int, max_iter: int = 300, tol: float = 1e-8) -> tuple[torch.Tensor, torch.Tensor]:
        """The edges of :meth:`kmeans_edges` and the keys (feature * (bins + 1) + bin) of the bins that held a
        cluster bound without their values known (none: the edges equal the in-memory ones)."""
        lo, hi = self.lo, self.hi
        centres, col_tol = kmeans_start(lo, hi, n_grids, tol)
        counts, sums = self._table(self.counts), self._table(self.sums)
        scale = E.fixed_point_scale(self.exps, lo.dtype)[:, None]
        low, high = self._table(self.mins), self._table(self.maxs)
        means = E.fixed_point_value(sums, scale) / counts.clamp(min=1)
        means = torch.where(low == high, low, means)  # one distinct value: itself, not its rounded mean
        pad = torch.nn.functional.pad
        tables = {
            "counts": counts,
            "sums": sums,
            "low": low,
            "high": high,
            "mean": means,
            "known": self._resolved_table(),
            "cum_counts": pad(counts.cumsum(1), (1, 0)),
            "cum_sums": pad(sums.cumsum(2), (1, 0)),
        }
        needed = torch.zeros(counts.numel(), dtype=torch.bool, device=lo.device)

        def cluster_means(centres: torch.Tensor, bounds: torch.Tensor) -> torch.Tensor:
            c_sums, c_counts = self._cluster_sums(bounds.contiguous(), tables, needed)
            new = E.fixed_point_value(c_sums, scale)
            return torch.where(c_counts > 0, new / c_counts.clamp(min=1), centres)

        centres = lloyd(centres, cluster_means, col_tol, max_iter)
        keys = torch.nonzero(needed).squeeze(1)
        keys = keys // self.n_bins * (self.n_bins + 1) + keys % self.n_bins
        return centre_edges(lo, centres, hi), keys

    def _cluster_sums(self, bounds: torch.Tensor, tables: dict, needed: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Exact fixed-point sums and counts of the values per cluster (F, G) (cluster ``c``: ``c`` bounds ``<= x``).
        A bound's bin with values on both sides adds its known values one by one (:meth:`resolve`), or goes whole to
        the cluster of its mean and is marked in ``needed`` (F * bins,)."""
        t = tables
        n_feat, g = bounds.shape[0], bounds.shape[1] + 1
        at = ((bounds - self.lo[:, None]) * self.scale[:, None]).floor_().clamp_(0, self.n_bins - 1).long()
        full = torch.full((n_feat, 1), self.n_bins, dtype=torch.long, device=at.device)
        start = torch.cat([torch.zeros_like(full), at + 1], 1)  # each cluster's bins strictly between bounds' bins
        stop = torch.maximum(torch.cat([at, full], 1), start)
        c_counts = t["cum_counts"].gather(1, stop) - t["cum_counts"].gather(1, start)
        c_sums = t["cum_sums"].gather(2, stop.expand(2, -1, -1)) - t["cum_sums"].gather(2, start.expand(2, -1, -1))
        # the bounds' own bins (the first bound of each): all bounds in the same bin compared with its values
        first = torch.cat([torch.ones_like(full, dtype=torch.bool), at[:, 1:] != at[:, :-1]], 1)
        same = at[:, :, None] == at[:, None, :]  # (F, G-1, G-1)
        k = torch.arange(g - 1, device=at.device).expand_as(at)
        low, high, mean = (t[name].gather(1, at) for name in ("low", "high", "mean"))
        n, known = t["counts"].gather(1, at), t["known"].gather(1, at)

        def cluster_of(x: torch.Tensor) -> torch.Tensor:  # k bounds in earlier bins, and those in this bin <= x
            return k + (same & (bounds[:, None, :] <= x[:, :, None])).sum(2)

        split = (same & (low[:, :, None] < bounds[:, None, :]) & (bounds[:, None, :] <= high[:, :, None])).any(2)
        split &= first & (n > 0)
        whole = first & ~(split & known)
        # only a bin's first bound adds its bin (a later one adds 0, at a cluster index that must stay in range)
        cluster = torch.where(first, torch.where(split, cluster_of(mean), cluster_of(low)), 0)
        c_counts.scatter_add_(1, cluster, n * whole)
        c_sums.scatter_add_(2, cluster.expand(2, -1, -1), t["sums"].gather(2, at.expand(2, -1, -1)) * whole)
        cells = torch.arange(n_feat, device=at.device)[:, None] * self.n_bins + at
        needed[cells[split & ~known]] = True
        if self._values is not None and bool((split & known).any()):
            _, f, v, limbs, cell = self._values
            sel = torch.isin(cell, cells[split & known])
            f, v, limbs = f[sel], v[sel], limbs[:, sel]
            to = f * g + (v[:, None] >= bounds[f]).sum(1)  # each known value's cluster
            c_counts.view(-1).index_add_(0, to, torch.ones_like(to))
            c_sums.reshape(2, -1).index_add_(1, to, limbs)
        return c_sums, c_counts

    def _resolved_table(self) -> torch.Tensor:
        """(F, bins) whether each bin's values are known."""
        known = torch.zeros(self.lo.shape[0] * self.n_bins, dtype=torch.bool, device=self.counts.device)
        if self._values is not None:
            known[self._values[4]] = True
        return known.view(self.lo.shape[0], self.n_bins)

    def around(self, keys: torch.Tensor, reach: int) -> torch.Tensor:
        """The bin keys within ``reach`` bins of ``keys`` on the same feature whose values are not known yet."""
        width = self.n_bins + 1
        f, j = keys // width, keys % width
        j = (j[:, None] + torch.arange(-reach, reach + 1, device=keys.device)).clamp_(0, self.n_bins - 1)
        near = torch.unique(f[:, None] * width + j)
        if self._values is not None:
            near = near[~torch.isin(near, self._values[0])]
        return near

    def bin_keys(self, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The bin key (feature * (bins + 1) + bin) of every value of ``X`` (n, F) and the values in the work dtype,
        both flattened row-major (missing values in each feature's last bin)."""
        x = X.to(self.lo.dtype)
        missing = torch.isnan(x)
        b = ((x - self.lo) * self.scale).floor_().clamp_(0, self.n_bins - 1).masked_fill_(missing, self.n_bins)
        return (b.long() + self.offsets).view(-1), x.reshape(-1)

    def resolve(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Add the values (and their bin keys) of bins that held a cluster bound, all of each bin's values (over all
        ranks of a DDP run: gathered here)."""
        if D.is_sharded():
            parts = [None] * D.world_size()
            torch.distributed.all_gather_object(parts, (keys.cpu(), values.cpu()))
            keys = torch.cat([k for k, _ in parts]).to(self.lo.device)
            values = torch.cat([v for _, v in parts]).to(self.lo.device)
        if self._values is not None:
            keys, values = torch.cat([self._values[0], keys]), torch.cat([self._values[2], values])
        f, j = keys // (self.n_bins + 1), keys % (self.n_bins + 1)
        observed = j < self.n_bins  # not a missing value
        keys, values, f, j = keys[observed], values[observed], f[observed], j[observed]
        limbs = E.to_fixed_point(values, self.exps[f], dim=0)
        self._values = (keys, f, values, limbs, f * self.n_bins + j)


def sketch_thresholds(
    source: BatchSource, binned: Binned, bin_strategy: str, progress: bool = False, n_bins: int = SKETCH_BINS
) -> HistogramSketch | None:
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
    cols = tensor_on([binned.columns[j] for j in num], device=lo.device)
    bar = progress_bar(progress, desc="grid sketch", unit="rows", total=source.rows)
    for X, _ in source.batches(f"{bin_strategy} sketch"):
        for part in _pieces(X):
            sketch.update(part.index_select(1, cols))
        bar.update(X.shape[0])
        del X, part  # freed before the source makes the next batch
    bar.close()
    sketch.finish()
    g = binned.n_grids
    if bin_strategy == "quantile":
        edges = sketch.quantile_edges(g)
    else:
        edges = _exact_kmeans(source, sketch, cols, g, progress)
    binned.thresholds[tensor_on(num, device=lo.device), : g - 1] = edges[:, 1:-1].nan_to_num(math.inf)
    return sketch


def _pieces(X: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The rows of a batch (at least one), about 2**20 values at a time: the temporaries of a piece stay small."""
    return X.split(max(1, (1 << 20) // max(1, X.shape[1])))


def _exact_kmeans(
    source: BatchSource, sketch: HistogramSketch, cols: torch.Tensor, n_grids: int, progress: bool
) -> torch.Tensor:
    """k-means edges of the sketch; while its iterations met bins holding a bound whose values are unknown, one
    more pass reads those bins' values (at most :data:`KMEANS_ROUNDS` passes; then the bins without values count
    whole in the cluster of their mean)."""
    for _ in range(KMEANS_ROUNDS):
        edges, keys = sketch.kmeans(n_grids)
        if keys.numel() == 0:
            return edges
        keys = sketch.around(keys, KMEANS_REACH)  # bounds move a few bins at a time: read their neighbours too
        held = 0 if sketch._values is None else sketch._values[2].numel()
        if (held + int(sketch.counts[keys].sum())) * _BYTES_PER_VALUE > KMEANS_BUDGET:
            break  # the iterations then take those bins whole: approximate edges
        found_keys, found_values = [], []
        bar = progress_bar(progress, desc=f"k-means bins ({keys.numel()})", unit="rows", total=source.rows)
        for X, _ in source.batches("k-means bins"):
            for part in _pieces(X):
                key, values = sketch.bin_keys(part.index_select(1, cols))
                hit = torch.isin(key, keys)
                found_keys.append(key[hit])
                found_values.append(values[hit])
            bar.update(X.shape[0])
            del X, part, key, values, hit  # freed before the source makes the next batch
        bar.close()
        sketch.resolve(torch.cat(found_keys), torch.cat(found_values))
    return sketch.kmeans(n_grids)[0]
