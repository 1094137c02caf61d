"""The ``"beam"`` search strategy: fitness-optimal intervals on fine grids, beam search and refinement.

The paper's search (``strategy="paper"``) adds, at each step, the interval with the highest probability *ratio*.
That favours narrow, near-pure regions: once a condition is almost pure no second condition can raise the ratio, and
a first condition taken from the sharpest peak can miss a broader box. The beam strategy keeps AMORE's machinery
(one vectorized histogram pass per node, intervals from grid counts, no rescans) but optimises the paper's own
objective, fitness, directly:

1. **Fine grids.** Each numeric feature is cut into ``n_fine`` (default 1024) equal-width grids by arithmetic on the
   values (one pass, no search). The lower edge of grid ``g`` is the smallest float64 whose grid index is ``g``, so
   ``x >= edge`` holds exactly for the values in grids ``>= g``.
2. **Best intervals per feature in linear time.** On the grid counts of a node (``a_g`` target, ``b_g`` all), the
   interval maximising ``sum(a_g - kappa * b_g)`` subject to ``sum(b_g) >= min_support`` is a maximum-subarray problem
   with a prefix constraint: for every end grid the best start is a prefix minimum of the cumulative sums, found with
   ``cummin`` + ``searchsorted`` for all features at once. ``kappa = 0.5`` maximises fitness; larger ``kappa`` trade
   support for confidence (a Lagrangian sweep), so confident candidates are offered too.
3. **Beam search.** Every node of the beam gets its best candidates over all remaining features; the ``beam_width``
   best rule sets by fitness go on to the next length.
4. **Refinement.** Each rule set's conditions are re-optimised in turn given the others (one single-feature histogram
   over the samples satisfying the other conditions), until nothing changes. Fitness never decreases.

Every rule set found (and all of the paper strategy's rule sets, which run too) is returned, sorted by fitness, so the
beam strategy's best fitness is never below the paper strategy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from torch_amore import distributed as D
from torch_amore.binning import Binned, _chunk_len, _work_dtype, nan_min_max
from torch_amore.ratios import grid_counts

#: Confidence weights of the candidate family: maximise sum(a - kappa * b). 0.5 is fitness.
KAPPAS = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


def _uniform_code(x: torch.Tensor, lo: torch.Tensor, scale: torch.Tensor, n_grids: int) -> torch.Tensor:
    """floor((x - lo) * scale) clamped to [0, n_grids - 1]; monotone non-decreasing in x."""
    return torch.floor((x - lo) * scale).clamp_(0, n_grids - 1)


_SIGN = -(2**63)


def _float_key(x: torch.Tensor) -> torch.Tensor:
    """Order-preserving int64 key of float64 values (-0.0 and 0.0 share the key 0)."""
    bits = x.view(torch.int64)
    return torch.where(bits < 0, -(bits & ~torch.tensor(_SIGN, device=x.device)), bits)


def _key_float(key: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_float_key`."""
    bits = torch.where(key < 0, (-key) | torch.tensor(_SIGN, device=key.device), key)
    return bits.view(torch.float64)


def _grid_starts(lo: torch.Tensor, hi: torch.Tensor, scale: torch.Tensor, g: torch.Tensor, n_fine: int) -> torch.Tensor:
    """For each entry, the smallest float64 ``x`` with ``_uniform_code(x, lo, scale, n_fine) >= g`` (1 <= g < n_fine).

    All arguments are 1-D tensors of the same length (one entry per wanted threshold). Bisection on the floats'
    order (int64 keys), started from a tight bracket around ``lo + g / scale`` and run only on the entries not yet
    resolved. Entries with ``scale == 0`` (a constant column) get ``+inf``.
    """
    lo_f, hi_f, sc, g = lo.double(), hi.double(), scale.double(), g.double()
    live = sc > 0

    def reaches(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return _uniform_code(x, lo_f[idx], sc[idx], n_fine) >= g[idx]

    x0 = lo_f + g / sc.clamp(min=1e-300)
    d = 16 * torch.finfo(torch.float64).eps * (lo_f.abs() + x0.abs() + 1 / sc.clamp(min=1e-300))
    every = torch.arange(g.numel(), device=lo.device)
    low, high = (x0 - d).clamp(min=lo_f), (x0 + d).clamp(max=hi_f)
    good = ~reaches(low, every) & reaches(high, every)  # the tight bracket holds the answer
    lo_k = torch.where(good, _float_key(low), _float_key(lo_f))  # code(lo) = 0 < g
    hi_k = torch.where(good, _float_key(high), _float_key(hi_f))  # code(hi) = n_fine - 1 >= g
    todo = torch.nonzero(live & (hi_k - 1 > lo_k), as_tuple=True)[0]
    while todo.numel():
        a, b = lo_k[todo], hi_k[todo]
        mid = (a >> 1) + (b >> 1) + (a & b & 1)  # no a + b: it could overflow int64
        hit = reaches(_key_float(mid), todo)
        hi_k[todo] = torch.where(hit, mid, b)
        lo_k[todo] = torch.where(hit, a, mid)
        todo = todo[hi_k[todo] - 1 > lo_k[todo]]
    return torch.where(live, _key_float(hi_k), torch.full_like(g, math.inf))


@dataclass
class FineBinned(Binned):
    """A :class:`Binned` whose numeric grids are ``n_fine`` equal-width cells by arithmetic.

    The thresholds of numeric features are computed only when asked for (:meth:`threshold`), since a search needs
    a handful of them; ``thresholds`` holds the categorical features' thresholds (``+inf`` for numeric rows).
    """

    lo: torch.Tensor = None  # (F',) float64 column minima
    hi: torch.Tensor = None  # (F',) float64 column maxima
    scale: torch.Tensor = None  # (F',) cells per unit (0 for a constant column)

    def threshold(self, j: torch.Tensor | int, g: torch.Tensor | int) -> torch.Tensor:
        """Lower edge of cell ``g`` of searched feature ``j`` (the smallest float64 whose code is >= ``g``)."""
        j = torch.as_tensor(j, device=self.lo.device).reshape(-1)
        g = torch.as_tensor(g, device=self.lo.device).reshape(-1).expand_as(j)
        return _grid_starts(self.lo[j], self.hi[j], self.scale[j], g, self.n_grids)

    def interval_bounds(self, j: int, g_low: int, g_high: int) -> tuple[float, float]:
        if bool(self.is_cat[j]):
            return super().interval_bounds(j, g_low, g_high)
        low = float(self.threshold(j, g_low)[0]) if g_low > 0 else float("-inf")
        high = float(self.threshold(j, g_high + 1)[0]) if g_high < int(self.n_bins[j]) - 1 else float("inf")
        return low, high


def fine_binning(X: torch.Tensor, base: Binned, n_fine: int = 1024) -> FineBinned:
    """Fine equal-width grids for the numeric features of ``base`` (categorical features keep their categories).

    Codes come from arithmetic, and each threshold is the smallest float64 reaching its grid, so codes and thresholds
    agree exactly (``x >= threshold(f, g)`` iff ``code >= g``).
    """
    device = X.device
    dt = _work_dtype(device)
    columns = base.columns
    sub = X if list(columns) == list(range(X.shape[1])) else X[:, columns]
    lo, hi = nan_min_max(sub)
    span = (hi - lo).nan_to_num(0.0)
    scale = torch.where(span > 0, n_fine / span.clamp(min=1e-300), torch.zeros_like(span))
    lo0 = lo.nan_to_num(0.0)
    width = max(n_fine, base.n_bins_max)
    nan_code = width
    codes = torch.empty(sub.shape, dtype=torch.int16, device=device)
    step = _chunk_len(sub.shape[0], sub.shape[1])
    is_cat = base.is_cat
    for r0 in range(0, sub.shape[0], step):
        chunk = sub[r0 : r0 + step].to(dt)
        c = _uniform_code(chunk, lo0, scale, n_fine)
        c = torch.where(is_cat, base.codes[r0 : r0 + step].to(dt), c)
        c.masked_fill_(torch.isnan(chunk), nan_code)
        codes[r0 : r0 + step] = c.to(torch.int16)
    thresholds = torch.full((len(columns), width - 1), math.inf, dtype=dt, device=device)
    thresholds[is_cat, : base.n_bins_max - 1] = base.thresholds[is_cat]
    n_bins = torch.where(is_cat, base.n_bins, torch.full_like(base.n_bins, n_fine))
    categories = torch.full((len(columns), width), math.nan, dtype=dt, device=device)
    categories[:, : base.n_bins_max] = base.categories
    return FineBinned(
        codes=codes,
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
    )


@dataclass
class _Best:
    """Best interval per (feature, kappa) row: grid range, target count, count."""

    feature: torch.Tensor
    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor


#: Elements of the (features x kappas x grids) tables that :func:`best_intervals` handles at once.
_BEST_BUDGET = 1 << 20

#: Integer sentinels for infeasible weights (the weights are exact int64 sums).
_NEG, _POS = -(1 << 62), 1 << 62


def best_intervals(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    min_support: int,
    kappas: tuple[float, ...] = KAPPAS,
) -> _Best:
    """For every feature and kappa, the interval of grids maximising sum(tgt - kappa * tot) with support >= s_min.

    Intervals spanning all grids of a feature (no condition at all) are dropped, as are intervals with no positive
    value. Categorical features offer single categories only.

    Example:
        >>> import torch
        >>> tot = torch.tensor([[10, 10, 10, 10]]); tgt = torch.tensor([[1, 9, 8, 2]])
        >>> b = best_intervals(tot, tgt, torch.tensor([4]), torch.tensor([False]), 5, kappas=(0.5,))
        >>> (b.g_low.tolist(), b.g_high.tolist(), b.hits.tolist(), b.support.tolist())
        ([1], [2], [17], [20])
    """
    device = tot.device
    n_feat, width = tot.shape
    block = max(1, _BEST_BUDGET // (len(kappas) * (width + 1)))
    if n_feat > block:  # bounded working memory: features in blocks
        parts = [
            best_intervals(
                tot[f0 : f0 + block],
                tgt[f0 : f0 + block],
                n_bins[f0 : f0 + block],
                is_cat[f0 : f0 + block],
                min_support,
                kappas,
            )
            for f0 in range(0, n_feat, block)
        ]
        offsets = range(0, n_feat, block)
        return _Best(
            feature=torch.cat([p.feature + f0 for p, f0 in zip(parts, offsets)]),
            g_low=torch.cat([p.g_low for p in parts]),
            g_high=torch.cat([p.g_high for p in parts]),
            hits=torch.cat([p.hits for p in parts]),
            support=torch.cat([p.support for p in parts]),
        )
    # exact integer weights: 1000 * a - round(1000 * kappa) * b (kappa has at most three decimals)
    k = torch.tensor([round(1000 * kp) for kp in kappas], dtype=torch.long, device=device)
    w = (1000 * tgt[:, None, :] - k[None, :, None] * tot[:, None, :]).reshape(n_feat * len(kappas), width)
    counts = tot.repeat_interleave(len(kappas), dim=0)
    zero = torch.zeros(w.shape[0], 1, dtype=w.dtype, device=device)
    pw = torch.cat([zero, torch.cumsum(w, 1)], 1)  # (R, G+1)
    pb = torch.cat([zero.long(), torch.cumsum(counts, 1)], 1)
    run_min, arg_min = torch.cummin(pw, dim=1)
    last_start = torch.searchsorted(pb, pb - min_support, right=True) - 1  # (R, G+1): feasible starts 0..m
    feasible = last_start >= 0
    m = last_start.clamp(min=0)
    value = torch.where(feasible, pw - run_min.gather(1, m), torch.full_like(pw, _NEG))
    start = arg_min.gather(1, m)
    # an interval holding every sample of the node is no condition at all: an end past the last sample needs a start
    # after the first sample
    total = pb.gather(1, n_bins.repeat_interleave(len(kappas))[:, None])
    run_min1, arg_min1 = torch.cummin(torch.where(pb > 0, pw, torch.full_like(pw, _POS)), dim=1)
    value1 = torch.where(feasible, pw - run_min1.gather(1, m), torch.full_like(pw, _NEG))
    value1 = torch.where(run_min1.gather(1, m) == _POS, torch.full_like(pw, _NEG), value1)
    end_idx = torch.arange(width + 1, device=device)
    nb = n_bins.repeat_interleave(len(kappas))
    at_end = pb >= total
    value = torch.where(at_end, value1, value)
    start = torch.where(at_end, arg_min1.gather(1, m), start)
    value = torch.where(end_idx[None, :] > nb[:, None], torch.full_like(value, _NEG), value)
    cat_rows = is_cat.repeat_interleave(len(kappas))
    # categorical features: single categories only
    everything = counts.sum(1, keepdim=True)  # a category holding every non-missing sample is no condition
    single = torch.where((counts >= min_support) & (counts < everything), w, torch.full_like(w, _NEG))
    best_cat_val, best_cat = single.max(dim=1)
    best_val, best_end = value.max(dim=1)
    best_start = start.gather(1, best_end[:, None])[:, 0]
    # a bound with no sample of this node beyond it opens up (the same samples, a simpler rule)
    below = pb.gather(1, best_start[:, None])[:, 0]
    above = pb.gather(1, nb[:, None])[:, 0] - pb.gather(1, best_end[:, None])[:, 0]
    best_start = torch.where(below == 0, torch.zeros_like(best_start), best_start)
    best_end = torch.where(above == 0, nb, best_end)
    vacuous = (best_start == 0) & (best_end == nb)  # no condition at all on this node's samples
    g_low = torch.where(cat_rows, best_cat, best_start)
    g_high = torch.where(cat_rows, best_cat, best_end - 1)
    val = torch.where(cat_rows, best_cat_val, torch.where(vacuous, torch.full_like(best_val, _NEG), best_val))
    ok = (val > 0) & (g_high >= g_low)
    feature = torch.arange(n_feat, device=device).repeat_interleave(len(kappas))
    g_low, g_high, feature = g_low[ok], g_high[ok], feature[ok]
    cum_t = torch.cat([torch.zeros(n_feat, 1, dtype=torch.long, device=device), torch.cumsum(tgt, 1)], 1)
    cum_b = torch.cat([torch.zeros(n_feat, 1, dtype=torch.long, device=device), torch.cumsum(tot, 1)], 1)
    hits = cum_t[feature, g_high + 1] - cum_t[feature, g_low]
    support = cum_b[feature, g_high + 1] - cum_b[feature, g_low]
    return _Best(feature, g_low, g_high, hits, support)


@dataclass
class _State:
    conds: tuple[tuple[int, int, int], ...]  # (searched feature, g_low, g_high), sorted by feature
    rows: torch.Tensor
    hits: int
    support: int


class BeamSearch:
    """Beam search with fitness-optimal intervals and refinement on a fine binning (see module docstring)."""

    def __init__(self, fine: Binned, target: torch.Tensor, n_target: int, beam_width: int = 5) -> None:
        self.fine = fine
        self.target = target
        self.n_target = n_target
        self.beam_width = beam_width
        self.width = fine.n_bins_max

    def _rows_for(self, conds, exclude: int | None = None) -> torch.Tensor:
        codes = self.fine.codes
        mask = torch.ones(codes.shape[0], dtype=torch.bool, device=codes.device)
        for j, lo, hi in conds:
            if j == exclude:
                continue
            c = codes[:, j]
            mask &= (c >= lo) & (c <= hi)
        return torch.nonzero(mask, as_tuple=True)[0]

    def _fitness(self, hits: int, support: int) -> float:
        return (2 * hits - support) / self.n_target

    def _counts(self, rows: torch.Tensor, codes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t_rows = rows[self.target[rows]]
        return grid_counts(codes, rows, self.width), grid_counts(codes, t_rows, self.width)

    def _refine(self, state: _State, min_support: int) -> _State:
        fine = self.fine
        conds = list(state.conds)
        best_hits, best_support = state.hits, state.support
        for _ in range(8):
            changed = False
            for k, (j, _, _) in enumerate(conds):
                others = self._rows_for(conds, exclude=j)
                tot, tgt = self._counts(others, fine.codes[:, j : j + 1])
                b = best_intervals(tot, tgt, fine.n_bins[j : j + 1], fine.is_cat[j : j + 1], min_support)
                if len(b.feature) == 0:
                    continue
                fit = (2 * b.hits - b.support).tolist()
                i = max(range(len(fit)), key=lambda r: (fit[r], -r))
                new_hits, new_support = int(b.hits[i]), int(b.support[i])
                if 2 * new_hits - new_support > 2 * best_hits - best_support:
                    conds[k] = (j, int(b.g_low[i]), int(b.g_high[i]))
                    best_hits, best_support = new_hits, new_support
                    changed = True
            if not changed:
                break
        if (best_hits, best_support) == (state.hits, state.support):
            return state
        conds_t = tuple(sorted(conds))
        return _State(conds_t, self._rows_for(conds_t), best_hits, best_support)

    def run(self, *, max_length: int, min_support: int) -> list[_State]:
        fine = self.fine
        n = fine.codes.shape[0]
        device = fine.codes.device
        n_feat = len(fine.columns)
        root = _State((), torch.arange(n, device=device), self.n_target, n)
        beam = [root]
        found: dict[tuple, _State] = {}
        for _ in range(max_length):
            children: dict[tuple, _State] = {}
            for node in beam:
                tot, tgt = self._counts(node.rows, fine.codes)
                allowed = torch.ones(n_feat, dtype=torch.bool, device=device)
                for j, _, _ in node.conds:
                    allowed[j] = False
                b = best_intervals(tot, tgt, fine.n_bins, fine.is_cat, min_support)
                keep = allowed[b.feature]
                feats, lows, highs = b.feature[keep].tolist(), b.g_low[keep].tolist(), b.g_high[keep].tolist()
                hits, sups = b.hits[keep].tolist(), b.support[keep].tolist()
                order = sorted(range(len(feats)), key=lambda i: (-(2 * hits[i] - sups[i]), -hits[i], feats[i], lows[i]))
                taken = 0
                for i in order:
                    if taken == self.beam_width:
                        break
                    conds = tuple(sorted(node.conds + ((feats[i], lows[i], highs[i]),)))
                    if conds in children or conds in found:
                        continue  # the same interval from another kappa, or from another parent
                    taken += 1
                    code = fine.codes[node.rows, feats[i]]
                    rows = node.rows[(code >= lows[i]) & (code <= highs[i])]
                    children[conds] = _State(conds, rows, hits[i], sups[i])
            # every child is refined before the beam is chosen: a refined rule set can overtake its siblings
            refined: dict[tuple, _State] = {}
            for state in children.values():
                found.setdefault(state.conds, state)
                better = self._refine(state, min_support)
                refined.setdefault(better.conds, better)
            ranked = sorted(refined.values(), key=lambda s: (-self._fitness(s.hits, s.support), s.conds))
            beam = ranked[: self.beam_width]
            for state in ranked:
                found.setdefault(state.conds, state)
            if not beam:
                break
        return list(found.values())


def _midpoint(a: float, b: float) -> float:
    """A float m with a < m <= b (the half-way point, or b when a and b are adjacent floats)."""
    m = a + (b - a) / 2
    return m if a < m <= b else b


def _sorted_best_interval(v: torch.Tensor, t: torch.Tensor, min_support: int) -> tuple[float, float, int, int] | None:
    """One process: every distinct value is its own grid (a sort), so the cuts are exact."""
    if v.numel() == 0:
        return None
    order = torch.argsort(v, stable=True)
    v, t = v[order], t[order].to(torch.long)
    uniq, inverse, counts = torch.unique_consecutive(v, return_inverse=True, return_counts=True)
    hits = torch.zeros(uniq.numel(), dtype=torch.long, device=v.device).index_add_(0, inverse, t)
    b = best_intervals(
        counts[None],
        hits[None],
        torch.tensor([uniq.numel()], device=v.device),
        torch.tensor([False], device=v.device),
        min_support,
        kappas=(0.5,),
    )
    if len(b.feature) == 0:
        return None
    lo_g, hi_g = int(b.g_low[0]), int(b.g_high[0])
    low = _midpoint(float(uniq[lo_g - 1]), float(uniq[lo_g])) if lo_g > 0 else -math.inf
    high = _midpoint(float(uniq[hi_g]), float(uniq[hi_g + 1])) if hi_g + 1 < uniq.numel() else math.inf
    return low, high, int(b.hits[0]), int(b.support[0])


def exact_best_interval(
    values: torch.Tensor, is_target: torch.Tensor, min_support: int, n_cells: int = 1 << 20
) -> tuple[float, float, int, int] | None:
    """The fitness-optimal interval ``low <= x < high`` of one feature, cut between observed values.

    The interval maximising ``sum(2 * target - 1)`` with support >= ``min_support`` is found on the counts of the
    distinct values (:func:`best_intervals`, kappa = 0.5), and each finite bound is placed half-way between the largest
    value below it and the smallest value above it, as a decision tree does. In one process the distinct values come
    from a sort. Under a sharded (DDP) run, where no rank sees all values, the range is split into ``n_cells``
    (default 2**20) equal cells and the ranks reduce cell counts, minima and maxima: the same answer whenever no cell
    holds two distinct values that the best cut should separate (values closer than a millionth of the range). Returns
    ``(low, high, hits, support)`` with infinite bounds where open, or ``None`` when no proper interval has positive
    value (including when the best is no condition at all).

    Example:
        >>> import torch
        >>> v = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=torch.float64)
        >>> exact_best_interval(v, torch.tensor([False, True, True, False, False]), 1)
        (0.15000000000000002, 0.35, 2, 2)
    """
    keep = ~torch.isnan(values)
    v, t = values[keep].to(torch.float64), is_target[keep]
    if not D.is_sharded():
        return _sorted_best_interval(v, t, min_support)
    lo, hi = nan_min_max(v[:, None])
    lo, hi = float(lo[0]), float(hi[0])
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        return None
    device = v.device
    scale = torch.tensor(n_cells / (hi - lo), dtype=torch.float64, device=device)
    lo_t = torch.tensor(lo, dtype=torch.float64, device=device)
    cell = _uniform_code(v, lo_t, scale, n_cells).to(torch.long)
    counts = D.all_reduce_sum(torch.bincount(cell, minlength=n_cells))
    hits = D.all_reduce_sum(torch.bincount(cell[t], minlength=n_cells))
    b = best_intervals(
        counts[None],
        hits[None],
        torch.tensor([n_cells], device=device),
        torch.tensor([False], device=device),
        min_support,
        kappas=(0.5,),
    )
    if len(b.feature) == 0:
        return None
    lo_g, hi_g = int(b.g_low[0]), int(b.g_high[0])

    def cut(g: int) -> float:  # half-way between the values in cells < g and those in cells >= g
        inf = torch.tensor([math.inf], dtype=torch.float64, device=device)
        below = v[cell < g].max().reshape(1) if bool((cell < g).any()) else -inf
        above = v[cell >= g].min().reshape(1) if bool((cell >= g).any()) else inf
        a, c = float(D.all_reduce_max(below)[0]), float(D.all_reduce_min(above)[0])
        return _midpoint(a, c)

    low = cut(lo_g) if lo_g > 0 else -math.inf
    high = cut(hi_g + 1) if hi_g + 1 < n_cells else math.inf
    return low, high, int(b.hits[0]), int(b.support[0])
