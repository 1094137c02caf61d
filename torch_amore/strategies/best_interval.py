"""Fitness-optimal intervals on grid counts, in linear time: for every end grid the best start is a prefix
minimum of the cumulative sums (a maximum-subarray problem with a support constraint), for all features and nodes at
once; the objectives the beam ranks by (:class:`Objective`, :class:`Lift`) and the exact best interval on observed
values that polishing uses.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.column_stats import work_dtype
from torch_amore.grids.edges import nan_min_max
from torch_amore.grids.fine_grid import uniform_code
from torch_amore.rules.cuts import short_cut
from torch_amore.rules.metrics import confidence_of_counts, confidence_ratio, fitness_value

#: Confidence weights of the candidate family: maximise sum(a - kappa * b). 0.5 is fitness.
KAPPAS = (0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass
class _Best:
    """Best interval per (feature, kappa) row: grid range, target count, count, and the kappa's index."""

    feature: torch.Tensor
    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor
    kappa: torch.Tensor


#: Elements of the (features x kappas x grids) tables that :func:`best_intervals` handles at once (at most; the beam
#: passes :func:`table_budget` of its data: small data gets small tables).
_BEST_BUDGET = 1 << 22


_BEST_BUDGET_MIN = 1 << 20

#: On a CPU, tables of at most :data:`_CPU_BLOCK_GRIDS` grids are taken in blocks of at most this many elements
#: whatever the budget: a block's (rows x kappas x grids) float32 table (1 MiB) then stays in a core's L2 cache. On one
#: thread, the 2,560 rows of 20 nodes of 128 features (2 kappas) take about half the time on 256 or 512 grids (48
#: against 85 ms, 101 against 178 ms in blocks of 2**20 elements); on 1,024 grids blocks make no difference (and cost
#: operations). A permutation of ``permutations=`` expands that many seed nodes.
_CPU_BLOCK = 1 << 18
_CPU_BLOCK_GRIDS = 512


def table_budget(n_values: int) -> int:
    """Elements of the best-interval tables handled at once for binned data of ``n_values`` codes: a sixteenth of
    them, between 2**20 and 2**22 (about 8 tables of 8 bytes each are alive at once: at most half the data's bytes
    as float32, or 64 MiB).

    Example:
        >>> table_budget(10_000 * 1_024) == 2**20, table_budget(100_000 * 1_024) == 2**22
        (True, True)
    """
    return min(_BEST_BUDGET, max(_BEST_BUDGET_MIN, n_values // 16))


@dataclass
class DenseBest:
    """Best interval per (row, kappa) of :func:`best_intervals_dense`: (R, K) tensors, ``valid`` where an interval
    qualifies (the others hold arbitrary grids and counts)."""

    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor
    valid: torch.Tensor

    @staticmethod
    def cat(parts: list[DenseBest]) -> DenseBest:
        """The rows of ``parts`` stacked (one part is returned as it is)."""
        if len(parts) == 1:
            return parts[0]
        return DenseBest(*(torch.cat([getattr(p, k) for p in parts]) for k in DenseBest.__dataclass_fields__))

    def compact(self) -> _Best:
        """The valid entries as a :class:`_Best`, rows in order and kappas in order within a row (one host sync)."""
        feature, kappa = torch.nonzero(self.valid, as_tuple=True)
        return _Best(
            feature,
            self.g_low[feature, kappa],
            self.g_high[feature, kappa],
            self.hits[feature, kappa],
            self.support[feature, kappa],
            kappa,
        )


def best_intervals(*args: Any, **kwargs: Any) -> _Best:
    """The valid (feature, kappa) entries of :func:`best_intervals_dense` (same arguments), compacted (one host sync).

    Example:
        >>> import torch
        >>> tot = torch.tensor([[10, 10, 10, 10]]); tgt = torch.tensor([[1, 9, 8, 2]])
        >>> b = best_intervals(tot, tgt, torch.tensor([4]), torch.tensor([False]), 5, kappas=(0.5,))
        >>> (b.g_low.tolist(), b.g_high.tolist(), b.hits.tolist(), b.support.tolist())
        ([1], [2], [17], [20])
    """
    return best_intervals_dense(*args, **kwargs).compact()


def best_intervals_dense(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    min_support: int,
    kappas: tuple[float, ...] = KAPPAS,
    *,
    positive: bool = True,
    max_count: int | None = None,
    any_cat: bool | None = None,
    budget: int | None = None,
) -> DenseBest:
    """For every row (feature) and kappa, the interval of grids maximising sum(tgt - kappa * tot) with support >=
    s_min, as (R, K) tensors with a validity mask.

    Intervals spanning all grids of a feature (no condition at all) are not valid, and neither are intervals with no
    positive value unless ``positive=False`` (a condition that is bad alone may be good beside others). Categorical
    features offer single categories only. No host sync when the host knows ``max_count`` (a bound on any row's total
    count; it picks exact float32 sums when small, else the sum is read once) and ``any_cat`` (whether some row is
    categorical; else ``is_cat.any()`` is read once). Rows are taken in blocks whose tables hold at most ``budget``
    elements (default ``2**22``; on a CPU, of few grids, at most :data:`_CPU_BLOCK`).

    Example:
        >>> import torch
        >>> tot = torch.tensor([[10, 10, 10, 10]]); tgt = torch.tensor([[1, 9, 8, 2]])
        >>> d = best_intervals_dense(tot, tgt, torch.tensor([4]), torch.tensor([False]), 5, (0.5, 0.95),
        ...                          max_count=40, any_cat=False)
        >>> d.valid.tolist(), d.g_low[:, 0].tolist(), d.g_high[:, 0].tolist(), d.hits[:, 0].tolist()
        ([[True, False]], [1], [2], [17])
    """
    n_feat, width = tot.shape
    if max_count is None:
        max_count = int(tot.sum(1).max()) if n_feat else 0
    if any_cat is None:
        any_cat = bool(is_cat.any()) if n_feat else False
    budget = _BEST_BUDGET if budget is None else budget
    if tot.device.type == "cpu" and width <= _CPU_BLOCK_GRIDS:
        budget = min(budget, _CPU_BLOCK)
    block = max(1, budget // ((len(kappas) + 1) * (width + 1)))  # the (R, K, G+1) and (R, G+1) tables
    if n_feat <= block:
        return _best_block(tot, tgt, n_bins, is_cat, min_support, kappas, positive, max_count, any_cat)
    parts = [
        _best_block(
            tot[f0 : f0 + block],
            tgt[f0 : f0 + block],
            n_bins[f0 : f0 + block],
            is_cat[f0 : f0 + block],
            min_support,
            kappas,
            positive,
            max_count,
            any_cat,
        )
        for f0 in range(0, max(1, n_feat), block)
    ]
    return DenseBest.cat(parts)


@functools.lru_cache(maxsize=64)
def _kappa_weights(kappas: tuple[float, ...], device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """(1, K, 1) integer weights ``-round(1000 * kappa)`` in ``dtype`` (cached: one tensor per kappas, device and
    dtype)."""
    return tensor_on([-round(1000 * kp) for kp in kappas], dtype=dtype, device=device).view(1, -1, 1)


@functools.lru_cache(maxsize=64)
def _positions(n: int, device: torch.device) -> torch.Tensor:
    """(1, 1, n) ``0..n-1`` (cached)."""
    return torch.arange(n, device=device).view(1, 1, n)


@functools.lru_cache(maxsize=16)
def _infinity(device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """A 0-d ``inf`` of ``dtype`` on ``device`` (cached: ``torch.where`` with ``out=`` takes no Python scalar)."""
    return tensor_on(math.inf, dtype=dtype, device=device)


def _over_kappas(t: torch.Tensor, n_k: int) -> torch.Tensor:
    """An (R, 1, X) table as (R, n_k, X) for a gather: a view (no copy), or the table itself when ``n_k`` is 1."""
    return t if t.shape[1] == n_k else t.expand(-1, n_k, -1)


def _best_block(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    min_support: int,
    kappas: tuple[float, ...],
    positive: bool,
    max_count: int,
    any_cat: bool,
) -> DenseBest:
    """:func:`best_intervals_dense` on one block of rows (few tensor ops: the beam calls it once per condition and
    round of refinement)."""
    n_feat, width = tot.shape
    device = tot.device
    # exact integer weights 1000 * a - round(1000 * kappa) * b (kappa has at most three decimals), computed in int64
    # and held in float64 (exact below 2**53; float32 on MPS) so that infeasible entries can be -inf; float32 is exact
    # while |weights| < 2**24: twice as fast on the big tables of small data. A start s and an end e (prefix indices,
    # 0..G) delimit the grids s..e-1. Tables are (R, K, G+1), one plane per kappa; what does not depend on kappa
    # (prefix counts, the last start keeping min_support, which starts and ends qualify) is (R, G+1), computed once.
    fdt = torch.float32 if 2000 * max_count < (1 << 24) else work_dtype(device)
    neg_k = _kappa_weights(tuple(kappas), device, fdt)  # (1, K, 1)
    ct = torch.nn.functional.pad(tgt.cumsum(1), (1, 0))  # (R, G+1)
    cb = torch.nn.functional.pad(tot.cumsum(1), (1, 0))
    # the last start with support >= s_min, per end; (R, 1, G+1) like every table that does not depend on kappa
    # (the comparisons broadcast them over the kappas)
    last = (torch.searchsorted(cb, cb - min_support, right=True) - 1).unsqueeze(1)
    ct3, cb3 = ct.unsqueeze(1), cb.unsqueeze(1)
    nb3 = n_bins.view(-1, 1, 1)
    total = cb3.gather(2, nb3)  # (R, 1, 1) the node's non-missing samples
    m = last.clamp(min=0)
    # the (R, K, G+1) table built straight in fdt (exact integers: fused or not, the same sums); later tables reuse
    # memory where they can
    pw = torch.addcmul(ct3.to(fdt).mul_(1000), cb3.to(fdt), neg_k)  # (R, K, G+1)
    run_min, arg_min = torch.cummin(pw, dim=2)
    # ends that leave out some sample after them: the best start is a prefix minimum
    no_end = (last < 0) | (cb3 >= total)
    n_k = pw.shape[1]
    mk, cbk = _over_kappas(m, n_k), _over_kappas(cb3, n_k)  # gathers take them expanded (take_along_dim would
    value = run_min.gather(2, mk)  # broadcast too, but adds a remainder operation per call)
    value = torch.sub(pw, value, out=value).masked_fill_(no_end, -math.inf)
    best_val, best_end = value.max(dim=2, keepdim=True)  # (R, K, 1)
    best_start = arg_min.gather(2, mk.gather(2, best_end))
    # the end past the last sample: the start must leave out some sample before it (else it is no condition at all)
    no_start = (cb3 <= 0) | (_positions(width + 1, device) > last.gather(2, nb3))
    tail_min, tail_start = torch.where(no_start, _infinity(device, fdt), pw, out=run_min).min(dim=2, keepdim=True)
    tail_val = pw.gather(2, _over_kappas(nb3, n_k)) - tail_min
    use_tail = tail_val > best_val
    best_val = torch.where(use_tail, tail_val, best_val)
    best_start = torch.where(use_tail, tail_start, best_start)
    # a bound with no sample of this node beyond it opens up (the same samples, a simpler rule)
    g_low = best_start.masked_fill(cbk.gather(2, best_start) == 0, 0)
    g_high = torch.where(use_tail | (cbk.gather(2, best_end) == total), nb3, best_end) - 1
    if any_cat:  # categorical features: single categories only
        w = torch.addcmul(tgt.unsqueeze(1).to(fdt).mul_(1000), tot.unsqueeze(1).to(fdt), neg_k)  # (R, K, G)
        fits = (tot >= min_support) & (tot < cb[:, -1:])  # a category holding every non-missing sample: no condition
        cat_val, cat_best = w.masked_fill(~fits.unsqueeze(1), -math.inf).max(dim=2, keepdim=True)
        cat = is_cat.view(-1, 1, 1)
        best_val = torch.where(cat, cat_val, best_val)
        g_low = torch.where(cat, cat_best, g_low)
        g_high = torch.where(cat, cat_best, g_high)
    valid = ((best_val > 0) if positive else (best_val > -math.inf)) & (g_high >= g_low)
    g_high = torch.maximum(g_high, g_low)  # arbitrary but in range where not valid
    edges = torch.cat([g_low, g_high + 1], 2)
    hits, support = (c.gather(2, edges).diff(dim=2) for c in (_over_kappas(ct3, n_k), cbk))
    return DenseBest(*torch.cat([g_low, g_high, hits, support], 2).unbind(2), valid.squeeze(2))


def confidence_kappa(min_confidence: float) -> float:
    """The smallest kappa with three decimals that is >= ``min_confidence`` (at most 0.999): an interval with a
    positive value ``sum(a - kappa * b)`` then has confidence > kappa >= ``min_confidence``."""
    return min(0.999, math.ceil(1000 * min_confidence - 1e-9) / 1000)


class Objective:
    """How rule sets are compared: by fitness, or (with ``min_confidence``) confident ones first, then by fitness.

    Keys are tuples (larger is better) of exact integers and a flag, so comparisons are deterministic.
    """

    def __init__(self, min_confidence: float | None = None) -> None:
        self.min_confidence = min_confidence

    def key(self, hits: int, support: int) -> tuple[bool, int]:
        ok = self.min_confidence is None or (support > 0 and confidence_of_counts(hits, support) >= self.min_confidence)
        return ok, fitness_value(hits, support)

    def tensor_key(self, hits: torch.Tensor, support: torch.Tensor, n: int) -> list[tuple[torch.Tensor, int, int]]:
        """:meth:`key` on int64 tensors of counts at most ``n``, as ``(values, low, high)`` parts (for
        :func:`packed_keys`): the same order (the float division is IEEE-rounded alike in Python and torch)."""
        if self.min_confidence is None:
            ok = torch.ones_like(hits)
        else:
            ok = (confidence_ratio(hits, support) >= self.min_confidence).long()  # never where support is 0
        return [(ok, 0, 1), (fitness_value(hits, support), -n, n)]

    def tensor_score(
        self, hits: torch.Tensor, support: torch.Tensor, valid: torch.Tensor | None = None
    ) -> torch.Tensor:
        """:meth:`key` as one int64 per entry (counts below 2**40), the lowest where not ``valid``."""
        score = fitness_value(hits, support)
        if self.min_confidence is not None:
            score = score + (confidence_ratio(hits, support) >= self.min_confidence).long() * (1 << 42)
        return score if valid is None else score.masked_fill(~valid, -(1 << 50))

    def kappas(self, candidates: bool = True) -> tuple[float, ...]:
        """The kappas whose best intervals are offered: all of :data:`KAPPAS` as candidates for new conditions, or
        (``candidates=False``) only those that can win under this objective: 0.5 is the fitness optimum, and
        kappas >= ``min_confidence`` give confident intervals."""
        if self.min_confidence is None:
            return KAPPAS if candidates else (0.5,)
        c = confidence_kappa(self.min_confidence)
        extra = {c, round(c + (1 - c) / 2, 3)}
        return tuple(sorted(set(KAPPAS if candidates else (0.5,)) | extra))


class Lift:
    """Ranks rule sets by their excess of target samples over the base rate, ``hits - rate * support`` (weighted
    relative accuracy times N), then by fitness: broad regions of high lift, as a tree split or subgroup discovery
    would choose. The beam keeps a few such nodes before the last length, so that later conditions can cut their
    non-target samples away (conditions that are weak alone but strong together). Only for choosing nodes."""

    def __init__(self, rate: float) -> None:
        self.k = round(1000 * rate)

    def key(self, hits: int, support: int) -> tuple[int, int]:
        return 1000 * hits - self.k * support, fitness_value(hits, support)

    def tensor_key(self, hits: torch.Tensor, support: torch.Tensor, n: int) -> list[tuple[torch.Tensor, int, int]]:
        """:meth:`key` on int64 tensors (see :meth:`Objective.tensor_key`)."""
        return [(1000 * hits - self.k * support, -self.k * n, 1000 * n), (fitness_value(hits, support), -n, n)]

    def kappas(self, candidates: bool = True) -> tuple[float, ...]:
        return (self.k / 1000,)


def packed_keys(parts: list[tuple[torch.Tensor, int, int]]) -> list[torch.Tensor]:
    """Lexicographic integer keys ``(values, low, high)`` (most significant first) combined into as few int64 keys as
    fit below 2**62, in the same lexicographic order."""
    out: list[torch.Tensor] = []
    cur, span = None, 1
    for values, low, high in parts:
        size = high - low + 1
        if cur is not None and span * size < (1 << 62):
            cur, span = cur * size + (values - low), span * size
        else:
            if cur is not None:
                out.append(cur)
            cur, span = values - low, size
    out.append(cur)
    return out


def _descending_order(keys: list[torch.Tensor]) -> torch.Tensor:
    """Per row of (R, C) keys, the column order by the keys descending, lexicographically (first key most
    significant), ties in column order: stable sorts from the least significant key up."""
    order = None
    for key in reversed(keys):
        if order is None:
            order = torch.argsort(key, dim=1, descending=True, stable=True)
        else:
            order = order.gather(1, torch.argsort(key.gather(1, order), dim=1, descending=True, stable=True))
    return order


def fetch_length(width: int, n_kappas: int) -> int:
    """Candidates per node and objective that :meth:`BeamSearch._expand` fetches at once: ``width`` children and the
    same interval from each other kappa beside each, plus two children of other nodes (more is rare and costs one
    more fetch).

    Example:
        >>> fetch_length(5, 10)
        70
    """
    return (width + 2) * n_kappas


def _best_of_row(
    counts: torch.Tensor, hits: torch.Tensor, min_support: int, objective: Objective
) -> tuple[int, int, int, int] | None:
    """The interval of grids of one feature's counts that ``objective`` ranks highest over its kappas (ties: the
    smallest kappa), as ``(g_low, g_high, hits, support)``; ``None`` when no proper interval has positive value."""
    device = counts.device
    no = tensor_on([False], device=device)
    b = best_intervals(
        counts[None],
        hits[None],
        tensor_on([counts.numel()], device=device),
        no,
        min_support,
        kappas=objective.kappas(False),
        any_cat=False,
    )
    rows = list(zip(b.g_low.tolist(), b.g_high.tolist(), b.hits.tolist(), b.support.tolist()))
    if not rows:
        return None
    keys = [objective.key(h, n) for _, _, h, n in rows]
    return rows[max(range(len(rows)), key=lambda r: (keys[r], -r))]


def sorted_best_interval(
    v: torch.Tensor, t: torch.Tensor, min_support: int, objective: Objective, units: tuple[float, float] = (1.0, 0.0)
) -> tuple[float, float, int, int] | None:
    """:func:`exact_best_interval` in one process on values ``v`` sorted ascending (no NaN) and their target flags
    ``t``: every distinct value is its own grid, so the cuts are exact. ``units``: the printed units' (scale, offset),
    for :func:`short_cut`."""
    if v.numel() == 0:
        return None
    uniq, counts = torch.unique_consecutive(v, return_counts=True)
    # target count per distinct value: differences of the running target count at each run's end (values are sorted)
    ends = torch.cumsum(t.to(torch.long), 0)[torch.cumsum(counts, 0) - 1]
    hits = torch.diff(ends, prepend=ends.new_zeros(1))
    found = _best_of_row(counts, hits, min_support, objective)
    if found is None:
        return None
    lo_g, hi_g, n_hits, support = found
    low = short_cut(float(uniq[lo_g - 1]), float(uniq[lo_g]), *units) if lo_g > 0 else -math.inf
    high = short_cut(float(uniq[hi_g]), float(uniq[hi_g + 1]), *units) if hi_g + 1 < uniq.numel() else math.inf
    return low, high, n_hits, support


def exact_best_interval(
    values: torch.Tensor,
    is_target: torch.Tensor,
    min_support: int,
    n_cells: int = 1 << 20,
    *,
    min_confidence: float | None = None,
    units: tuple[float, float] = (1.0, 0.0),
) -> tuple[float, float, int, int] | None:
    """The fitness-optimal interval ``low <= x < high`` of one feature, cut between observed values.

    The interval maximising ``sum(2 * target - 1)`` with support >= ``min_support`` is found on the counts of the
    distinct values (:func:`best_intervals`, kappa = 0.5), and each finite bound is placed between the largest value
    below it and the smallest value above it, as short as possible (:func:`short_cut`). In one process the distinct
    values come from a sort. Under a sharded (DDP) run, where no rank sees all values, the range is split into
    ``n_cells`` (default 2**20) equal cells and the ranks reduce cell counts, minima and maxima: the same answer
    whenever no cell holds two distinct values that the best cut should separate (values closer than a millionth of
    the range). With ``min_confidence``, intervals at least that confident are preferred (the kappa sweep of
    :class:`Objective`). ``units`` are the printed units' (scale, offset) for :func:`short_cut`. Returns
    ``(low, high, hits, support)`` with infinite bounds where open, or ``None`` when no proper interval has positive
    value (including when the best is no condition at all).

    Example:
        >>> import torch
        >>> v = torch.tensor([0.1, 0.2, 0.3, 0.4, 0.5], dtype=torch.float64)
        >>> exact_best_interval(v, torch.tensor([False, True, True, False, False]), 1)
        (0.2, 0.4, 2, 2)
    """
    keep = ~torch.isnan(values)
    v, t = values[keep].to(torch.float64), is_target[keep]
    objective = Objective(min_confidence)
    if not D.is_sharded():
        order = torch.argsort(v, stable=True)
        return sorted_best_interval(v[order], t[order], min_support, objective, units)
    lo, hi = nan_min_max(v[:, None])
    lo, hi = float(lo[0]), float(hi[0])
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo == hi:
        return None
    device = v.device
    scale = tensor_on(n_cells / (hi - lo), dtype=torch.float64, device=device)
    lo_t = tensor_on(lo, dtype=torch.float64, device=device)
    cell = uniform_code(v, lo_t, scale, n_cells).to(torch.long)
    counts = D.all_reduce_sum(counting.bincount(cell, n_cells))
    hits = D.all_reduce_sum(counting.bincount(cell[t], n_cells))
    found = _best_of_row(counts, hits, min_support, objective)
    if found is None:
        return None
    lo_g, hi_g, n_hits, support = found

    def cut(g: int) -> float:  # between the values in cells < g and those in cells >= g
        inf = tensor_on([math.inf], dtype=torch.float64, device=device)
        below = v[cell < g].max().reshape(1) if bool((cell < g).any()) else -inf
        above = v[cell >= g].min().reshape(1) if bool((cell >= g).any()) else inf
        a, c = float(D.all_reduce_max(below)[0]), float(D.all_reduce_min(above)[0])
        return short_cut(a, c, *units)

    low = cut(lo_g) if lo_g > 0 else -math.inf
    high = cut(hi_g + 1) if hi_g + 1 < n_cells else math.inf
    return low, high, n_hits, support
