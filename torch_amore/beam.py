"""The ``"beam"`` search strategy: fitness-optimal intervals on fine grids, beam search and refinement.

The paper's search (``strategy="paper"``) adds, at each step, the interval with the highest probability *ratio*.
That favours narrow, near-pure regions: once a condition is almost pure no second condition can raise the ratio, and
a first condition taken from the sharpest peak can miss a broader box. The beam strategy keeps AMORE's machinery
(vectorized histogram passes, intervals from grid counts, no rescans of the data per candidate) but optimises the
paper's own objective, fitness, directly:

1. **Fine grids.** Each numeric feature is cut into ``n_fine`` equal-width grids by arithmetic on the values (one
   pass, no search; :func:`default_n_fine`: about 32 samples a grid, 256 to 1024). The lower edge of grid ``g`` is
   the smallest float64 whose grid index is ``g``, so ``x >= edge`` holds exactly for the values in grids ``>= g``.
2. **Best intervals per feature in linear time.** On the grid counts of a node (``a_g`` target, ``b_g`` all), the
   interval maximising ``sum(a_g - kappa * b_g)`` subject to ``sum(b_g) >= min_support`` is a maximum-subarray problem
   with a prefix constraint: for every end grid the best start is a prefix minimum of the cumulative sums, found with
   ``cummin`` + ``searchsorted`` for all features and nodes at once (:func:`best_intervals`). ``kappa = 0.5``
   maximises fitness; larger kappas trade support for confidence (a Lagrangian sweep); smaller ones, down to the
   target's base rate (weighted relative accuracy), give broad regions of high lift.
3. **Beam search.** All nodes of the beam are counted in one batched pass; each gets its ``beam_width`` best children
   by fitness (and by confidence-then-fitness with ``min_confidence``); before the last length a few children of high
   lift (:class:`Lift`) join them, so that a condition weak alone can be sharpened by the next one.
4. **Refinement.** The children's conditions are re-optimised in turn given the others (coordinate ascent, all
   children at once: one weighted ``bincount`` per condition position and round) until nothing changes; fitness never
   decreases. The ``beam_width`` best rule sets go on to the next length.
5. **Polish** (:meth:`torch_amore.search._Extractor.polish`): the best rule sets are re-cut between observed values,
   at the shortest number that selects the same samples (:func:`torch_amore.cuts.short_cut`).

Every rule set found (and all of the paper strategy's rule sets, which run too) is returned, sorted by fitness, so the
beam strategy's best fitness is never below the paper strategy's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from torch_amore import distributed as D
from torch_amore._progress import progress_bar
from torch_amore.binning import Binned, _chunk_len, _work_dtype, nan_min_max
from torch_amore.cuts import short_cut
from torch_amore.ratios import group_grid_counts

#: Confidence weights of the candidate family: maximise sum(a - kappa * b). 0.5 is fitness.
KAPPAS = (0.2, 0.35, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


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
    codes_t: torch.Tensor = None  # (F', N) the codes, one contiguous row per feature (``codes`` is its transpose)
    _known: dict = field(default_factory=dict, repr=False)  # (feature, grid) -> threshold, filled by prefetch

    def threshold(self, j: torch.Tensor | int, g: torch.Tensor | int) -> torch.Tensor:
        """Lower edge of cell ``g`` of searched feature ``j`` (the smallest float64 whose code is >= ``g``)."""
        j = torch.as_tensor(j, device=self.lo.device).reshape(-1)
        g = torch.as_tensor(g, device=self.lo.device).reshape(-1).expand_as(j)
        return _grid_starts(self.lo[j], self.hi[j], self.scale[j], g, self.n_grids)

    def prefetch(self, pairs: list[tuple[int, int]]) -> None:
        """Compute the thresholds of many ``(feature, grid)`` pairs in one batched call, for :meth:`interval_bounds`."""
        todo = sorted({p for p in pairs if p not in self._known and 0 < p[1] < self.n_grids})
        if todo:
            values = self.threshold([p[0] for p in todo], [p[1] for p in todo]).tolist()
            self._known.update(zip(todo, values))

    def _edge(self, j: int, g: int) -> float:
        if (j, g) not in self._known:
            self._known[(j, g)] = float(self.threshold(j, g)[0])
        return self._known[(j, g)]

    def interval_bounds(self, j: int, g_low: int, g_high: int) -> tuple[float, float]:
        if bool(self.is_cat[j]):
            return super().interval_bounds(j, g_low, g_high)
        low = self._edge(j, g_low) if g_low > 0 else float("-inf")
        high = self._edge(j, g_high + 1) if g_high < int(self.n_bins[j]) - 1 else float("inf")
        return low, high


def default_n_fine(n_samples: int) -> int:
    """Fine grids per feature for ``n_samples`` samples: about 32 samples a grid on average, as a power of two
    between 256 and 1024 (finer grids cost time and gain nothing once cells hold a handful of samples; the exact
    polish of the best rule sets cuts between observed values anyway).

    Example:
        >>> [default_n_fine(n) for n in (1_000, 20_000, 70_000)]
        [256, 512, 1024]
    """
    cells = max(1, n_samples // 32)
    return min(1024, max(256, 1 << (cells.bit_length() - 1)))


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
    codes_t = torch.empty(sub.shape[::-1], dtype=torch.int16, device=device)  # column-major: features are rows
    step = _chunk_len(sub.shape[0], sub.shape[1])
    is_cat = base.is_cat
    for r0 in range(0, sub.shape[0], step):
        chunk = sub[r0 : r0 + step].to(dt)
        c = _uniform_code(chunk, lo0, scale, n_fine)
        c = torch.where(is_cat, base.codes[r0 : r0 + step].to(dt), c)
        c.masked_fill_(torch.isnan(chunk), nan_code)
        codes_t[:, r0 : r0 + step] = c.to(torch.int16).T
    thresholds = torch.full((len(columns), width - 1), math.inf, dtype=dt, device=device)
    thresholds[is_cat, : base.n_bins_max - 1] = base.thresholds[is_cat]
    n_bins = torch.where(is_cat, base.n_bins, torch.full_like(base.n_bins, n_fine))
    categories = torch.full((len(columns), width), math.nan, dtype=dt, device=device)
    categories[:, : base.n_bins_max] = base.categories
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
    )


@dataclass
class _Best:
    """Best interval per (feature, kappa) row: grid range, target count, count, and the kappa's index."""

    feature: torch.Tensor
    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor
    kappa: torch.Tensor

    @staticmethod
    def concat(parts: list[_Best], features: list[torch.Tensor], kappa_offsets: list[int]) -> _Best:
        """The rows of ``parts`` together, each part's feature indices mapped through ``features`` (an index tensor
        per part) and its kappa indices shifted by ``kappa_offsets``."""
        return _Best(
            feature=torch.cat([f[p.feature] for p, f in zip(parts, features)]),
            g_low=torch.cat([p.g_low for p in parts]),
            g_high=torch.cat([p.g_high for p in parts]),
            hits=torch.cat([p.hits for p in parts]),
            support=torch.cat([p.support for p in parts]),
            kappa=torch.cat([p.kappa + k for p, k in zip(parts, kappa_offsets)]),
        )


#: Elements of the (features x kappas x grids) tables that :func:`best_intervals` handles at once.
_BEST_BUDGET = 1 << 20


def best_intervals(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    min_support: int,
    kappas: tuple[float, ...] = KAPPAS,
    *,
    positive: bool = True,
) -> _Best:
    """For every feature and kappa, the interval of grids maximising sum(tgt - kappa * tot) with support >= s_min.

    Intervals spanning all grids of a feature (no condition at all) are dropped, and so are intervals with no positive
    value unless ``positive=False`` (a condition that is bad alone may be good beside others). Categorical features
    offer single categories only.

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
                positive=positive,
            )
            for f0 in range(0, n_feat, block)
        ]
        every = torch.arange(n_feat, device=device)
        blocks = [every[f0 : f0 + block] for f0 in range(0, n_feat, block)]
        return _Best.concat(parts, blocks, [0] * len(parts))
    # exact integer weights 1000 * a - round(1000 * kappa) * b (kappa has at most three decimals), held in float64
    # (exact below 2**53; float32 on MPS) so that infeasible entries can be -inf; a start s and an end e (prefix
    # indices, 0..G) delimit the grids s..e-1
    n_k = len(kappas)
    # float32 is exact while |weights| < 2**24: twice as fast on the big tables of small data
    small = 2000 * int(tot.sum(1).max()) < (1 << 24) if n_feat else True
    fdt = torch.float32 if small else _work_dtype(device)
    k = torch.tensor([round(1000 * kp) for kp in kappas], dtype=fdt, device=device)
    zero = torch.zeros(n_feat, 1, dtype=torch.long, device=device)
    ct = torch.cat([zero, torch.cumsum(tgt, 1)], 1)  # (F, G+1)
    cb = torch.cat([zero, torch.cumsum(tot, 1)], 1)
    total = cb.gather(1, n_bins[:, None])  # (F, 1) the node's non-missing samples
    pw = (1000 * ct).to(fdt)[:, None, :] - k[None, :, None] * cb.to(fdt)[:, None, :]  # (F, K, G+1)
    run_min, arg_min = torch.cummin(pw, dim=2)
    last = torch.searchsorted(cb, cb - min_support, right=True) - 1  # (F, G+1) the last start with support >= s_min
    m = last.clamp(min=0)
    # ends that leave out some sample after them: the best start is a prefix minimum
    off = torch.zeros(n_feat, 1, width + 1, dtype=fdt, device=device)
    normal = off.masked_fill(~((last >= 0) & (cb < total))[:, None, :], -math.inf)
    value = pw - run_min.gather(2, m[:, None, :].expand(n_feat, n_k, width + 1)) + normal
    best_val, best_end = value.max(dim=2)  # (F, K)
    best_start = arg_min.gather(2, m.gather(1, best_end)[:, :, None])[:, :, 0]
    # the end past the last sample: the start must leave out some sample before it (else it is no condition at all)
    ends = torch.arange(width + 1, device=device)
    starts = off.masked_fill(~((cb > 0) & (ends[None, :] <= last.gather(1, n_bins[:, None])))[:, None, :], math.inf)
    tail_min, tail_start = (pw + starts).min(dim=2)
    tail_val = pw.gather(2, n_bins[:, None, None].expand(n_feat, n_k, 1))[:, :, 0] - tail_min
    use_tail = tail_val > best_val
    best_val = torch.where(use_tail, tail_val, best_val)
    best_start = torch.where(use_tail, tail_start, best_start)
    nb = n_bins[:, None].expand(n_feat, n_k)
    best_end = torch.where(use_tail, nb, best_end)
    # a bound with no sample of this node beyond it opens up (the same samples, a simpler rule)
    best_start = torch.where(cb.gather(1, best_start) == 0, torch.zeros_like(best_start), best_start)
    best_end = torch.where(cb.gather(1, best_end) == total, nb, best_end)
    g_low, g_high = best_start, best_end - 1
    if bool(is_cat.any()):  # categorical features: single categories only
        w = (1000 * tgt).to(fdt)[:, None, :] - k[None, :, None] * tot.to(fdt)[:, None, :]  # (F, K, G)
        everything = cb[:, -1:]  # a category holding every non-missing sample is no condition
        fits = (tot >= min_support) & (tot < everything)
        cat_val, cat_best = (w + off[:, :, :-1].masked_fill(~fits[:, None, :], -math.inf)).max(dim=2)
        cat = is_cat[:, None]
        best_val = torch.where(cat, cat_val, best_val)
        g_low = torch.where(cat, cat_best, g_low)
        g_high = torch.where(cat, cat_best, g_high)
    val, g_low, g_high = best_val.reshape(-1), g_low.reshape(-1), g_high.reshape(-1)
    ok = ((val > 0) if positive else (val > -math.inf)) & (g_high >= g_low)
    feature = torch.arange(n_feat, device=device).repeat_interleave(n_k)
    kappa = torch.arange(n_k, device=device).repeat(n_feat)
    g_low, g_high, feature, kappa = g_low[ok], g_high[ok], feature[ok], kappa[ok]
    hits = ct[feature, g_high + 1] - ct[feature, g_low]
    support = cb[feature, g_high + 1] - cb[feature, g_low]
    return _Best(feature, g_low, g_high, hits, support, kappa)


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
        ok = self.min_confidence is None or (support > 0 and hits / support >= self.min_confidence)
        return ok, 2 * hits - support

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
        return 1000 * hits - self.k * support, 2 * hits - support

    def kappas(self, candidates: bool = True) -> tuple[float, ...]:
        return (self.k / 1000,)


@dataclass
class _State:
    conds: tuple[tuple[int, int, int], ...]  # (searched feature, g_low, g_high), sorted by feature
    hits: int
    support: int
    rows: torch.Tensor | None = None  # the samples satisfying ``conds`` (beam nodes only)


def _masked_counts(
    idx: torch.Tensor, inside: torch.Tensor, target: torch.Tensor, size: int, weight_dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """``bincount`` of ``idx`` where ``inside``, and where ``inside`` and the target (``idx`` is ``(S, N)`` flattened,
    ``target`` is ``(N,)``): exact counts from 0/1 weights, or, where weighted ``bincount`` is not allowed (CUDA under
    ``torch.use_deterministic_algorithms``), from indices moved to a spare bin."""
    flags = inside.view(-1, target.numel())
    if idx.is_cuda and torch.are_deterministic_algorithms_enabled():
        spare = torch.full_like(idx, size)
        tot = torch.bincount(torch.where(flags.reshape(-1), idx, spare), minlength=size + 1)[:size]
        tgt = torch.bincount(torch.where((flags & target).reshape(-1), idx, spare), minlength=size + 1)[:size]
        return tot, tgt
    w = flags.to(weight_dtype)
    tot = torch.bincount(idx, weights=w.view(-1), minlength=size).round_().long()
    tgt = torch.bincount(idx, weights=(w * target).view(-1), minlength=size).round_().long()
    return tot, tgt


#: Elements of the (conditions x states x samples) tables of one refinement batch (about 1 GiB of working memory).
_REFINE_BUDGET = 1 << 27


class BeamSearch:
    """Beam search with fitness-optimal intervals and refinement on a fine binning (see module docstring).

    The nodes of one length are expanded together: one batched histogram pass (:func:`group_grid_counts`) and one
    :func:`best_intervals` call for all of them; the children are refined together, one weighted ``bincount`` per
    condition position and round.
    """

    def __init__(
        self,
        fine: Binned,
        target: torch.Tensor,
        n_target: int,
        beam_width: int = 5,
        min_confidence: float | None = None,
    ) -> None:
        self.fine = fine
        self.target = target
        self.n_target = n_target
        self.beam_width = beam_width
        self.width = fine.n_bins_max
        self.objectives = [Objective()] + ([Objective(min_confidence)] if min_confidence is not None else [])
        # plus the target's base rate (maximising sum(a - rate * b) is weighted relative accuracy, the broad regions
        # of high lift that subgroup discovery and tree splits favour) and half-way to 0.5
        rate = n_target / max(1, D.global_count(fine.codes.shape[0]))
        rate, half = round(min(0.999, max(0.001, rate)), 3), round(min(0.999, max(0.001, (rate + 0.5) / 2)), 3)
        self.lift = Lift(rate)
        self.kappas = tuple(sorted(set(self.objectives[-1].kappas()) | {rate, half}))

    def _mask(self, cond: tuple[int, int, int]) -> torch.Tensor:
        j, lo, hi = cond
        c = self.fine.codes_t[j]
        return (c >= lo) & (c <= hi)

    def _rows_for(self, conds) -> torch.Tensor:
        mask = torch.ones(self.fine.codes.shape[0], dtype=torch.bool, device=self.fine.codes.device)
        for cond in conds:
            mask &= self._mask(cond)
        return torch.nonzero(mask, as_tuple=True)[0]

    def _candidates(
        self, beam: list[_State], tot: torch.Tensor, tgt: torch.Tensor, min_support: int, lift: bool
    ) -> _Best:
        """Candidate intervals of every (node, feature) row of ``tot``/``tgt``: the kappas of the objectives for all
        features, the other kappas of :data:`KAPPAS` only for each node's ``beam_width + 1`` features of highest
        fitness (a candidate never has a higher fitness than its feature's kappa-0.5 interval, so the others could
        not make a node's top ``beam_width``)."""
        fine = self.fine
        device = tot.device
        n_feat, g = len(fine.columns), len(beam)
        n_bins, is_cat = fine.n_bins.repeat(g), fine.is_cat.repeat(g)
        main = self.objectives[-1].kappas(False)  # 0.5 first
        if lift:  # the base rate's intervals of every feature: candidates for the nodes of high lift
            main = main + tuple(kp for kp in self.lift.kappas() if kp not in main)
        rest = tuple(kp for kp in self.kappas if kp not in main)
        b = best_intervals(tot, tgt, n_bins, is_cat, min_support, main, positive=False)
        if not rest:
            return b
        top = self.beam_width + 1
        if n_feat > top:
            score = torch.full((g * n_feat,), -math.inf, dtype=torch.float64, device=device)
            half = b.kappa == 0
            score[b.feature[half]] = (2 * b.hits[half] - b.support[half]).double()
            for k, parent in enumerate(beam):
                for j, _, _ in parent.conds:
                    score[k * n_feat + j] = -math.inf
            order = torch.sort(score.view(g, n_feat), dim=1, descending=True, stable=True).indices[:, :top]
            sel = (torch.arange(g, device=device)[:, None] * n_feat + order).reshape(-1)
        else:
            sel = torch.arange(g * n_feat, device=device)
        b2 = best_intervals(tot[sel], tgt[sel], n_bins[sel], is_cat[sel], min_support, rest, positive=False)
        return _Best.concat([b, b2], [torch.arange(g * n_feat, device=device), sel], [0, len(main)])

    def _expand(self, beam: list[_State], min_support: int, seen: set, chooser: list) -> dict[tuple, _State]:
        """The best children of every node of the beam: per ``(objective, width)`` of ``chooser``, ``width`` per
        node."""
        fine = self.fine
        codes = fine.codes
        n_feat = len(fine.columns)
        g = len(beam)
        rows = torch.cat([s.rows for s in beam])
        groups = torch.repeat_interleave(
            torch.arange(g, device=codes.device), torch.tensor([s.rows.numel() for s in beam], device=codes.device)
        )
        t = self.target[rows]
        tot = group_grid_counts(fine.codes_t, rows, groups, g, self.width).view(g * n_feat, self.width)
        tgt = group_grid_counts(fine.codes_t, rows[t], groups[t], g, self.width).view(g * n_feat, self.width)
        b = self._candidates(beam, tot, tgt, min_support, any(obj is self.lift for obj, _ in chooser))
        node, feats = (b.feature // n_feat).tolist(), (b.feature % n_feat).tolist()
        lows, highs, hits, sups = b.g_low.tolist(), b.g_high.tolist(), b.hits.tolist(), b.support.tolist()
        per_node: list[list[int]] = [[] for _ in range(g)]
        for i, k in enumerate(node):
            per_node[k].append(i)
        children: dict[tuple, _State] = {}
        for k, parent in enumerate(beam):
            used = {c[0] for c in parent.conds}
            cand = [i for i in per_node[k] if feats[i] not in used]
            for obj, width in chooser:
                cand.sort(key=lambda i: (obj.key(hits[i], sups[i]), hits[i], -feats[i], -lows[i]), reverse=True)
                taken = 0
                for i in cand:
                    if taken == width:
                        break
                    conds = tuple(sorted(parent.conds + ((feats[i], lows[i], highs[i]),)))
                    if conds in seen or (conds in children and obj is chooser[0][0]):
                        continue  # the same interval from another kappa or another parent
                    taken += 1
                    if conds not in children:
                        children[conds] = _State(conds, hits[i], sups[i])
        return children

    def _refine(self, states: list[_State], min_support: int, obj: Objective) -> list[_State]:
        """Coordinate ascent, all states at once: re-optimise each condition given the others until nothing changes.

        The codes of the states' features and whether each sample satisfies each condition are gathered once,
        (L, S, N); for condition position ``k`` one weighted ``bincount`` counts, for every state still changing, the
        samples satisfying its other conditions per grid of condition ``k``'s feature.
        """
        if not states or len(states[0].conds) < 2:
            return states  # a single condition is already the best interval of its feature
        n_rows = self.fine.codes_t.shape[1]
        per_call = max(1, _REFINE_BUDGET // (len(states[0].conds) * max(1, n_rows)))
        if len(states) > per_call:  # bounded working memory: states in batches
            return [
                s
                for i in range(0, len(states), per_call)
                for s in self._refine(states[i : i + per_call], min_support, obj)
            ]
        fine = self.fine
        device = fine.codes_t.device
        n_states, length = len(states), len(states[0].conds)
        feats = torch.tensor([[c[0] for c in s.conds] for s in states], device=device)  # (S, L)
        lows = [[c[1] for c in s.conds] for s in states]
        highs = [[c[2] for c in s.conds] for s in states]
        score = [(s.hits, s.support) for s in states]
        n = fine.codes_t.shape[1]
        # exact integer counts from float weights: float32 below 2**24 samples
        wdt = torch.float32 if n < (1 << 24) or device.type == "mps" else torch.float64
        codes = fine.codes_t.index_select(0, feats.T.reshape(-1)).view(length, n_states, n).to(torch.int32)  # (L, S, N)
        bounds = torch.tensor([lows, highs], device=device, dtype=codes.dtype).permute(0, 2, 1)[..., None]
        sat = (codes >= bounds[0]) & (codes <= bounds[1])  # (L, S, N)
        wide = self.width + 1  # the code ``width`` (missing) lands in a column that is dropped
        target = self.target
        live = list(range(n_states))
        for _ in range(8):
            changed: set[int] = set()
            cur = torch.tensor(live, device=device)
            whole = len(live) == n_states
            sub_codes = codes if whole else codes.index_select(1, cur)  # the states still changing
            sub_sat = sat if whole else sat.index_select(1, cur)
            offsets = torch.arange(len(live), device=device, dtype=torch.int32)[:, None] * wide
            for k in range(length):
                others = [m for m in range(length) if m != k]
                inside = sub_sat[others[0]]
                for m in others[1:]:
                    inside = inside & sub_sat[m]
                idx = (sub_codes[k] + offsets).view(-1)
                tot, tgt = _masked_counts(idx, inside.view(-1), target, len(live) * wide, wdt)
                tot = D.all_reduce_sum(tot).view(len(live), wide)[:, : self.width]
                tgt = D.all_reduce_sum(tgt).view(len(live), wide)[:, : self.width]
                fk = feats[cur, k]
                b = best_intervals(
                    tot, tgt, fine.n_bins[fk], fine.is_cat[fk], min_support, obj.kappas(False), positive=False
                )
                best: dict[int, tuple] = {}
                rows = zip(b.feature.tolist(), b.g_low.tolist(), b.g_high.tolist(), b.hits.tolist(), b.support.tolist())
                for p, lo, hi, h, sup in rows:
                    s, key = live[p], obj.key(h, sup)
                    if key > obj.key(*score[s]) and (p not in best or key > best[p][0]):
                        best[p] = (key, lo, hi, h, sup)
                for p, (_, lo, hi, h, sup) in best.items():
                    s = live[p]
                    lows[s][k], highs[s][k], score[s] = lo, hi, (h, sup)
                    changed.add(s)
                    c = sub_codes[k, p]
                    sub_sat[k, p] = (c >= lo) & (c <= hi)
            if not whole:
                sat.index_copy_(1, cur, sub_sat)
            live = sorted(changed)
            if not live:
                break
        out = []
        for s, state in enumerate(states):
            conds = tuple(zip(feats[s].tolist(), lows[s], highs[s]))
            out.append(_State(conds, *score[s]) if score[s] != (state.hits, state.support) else state)
        return out

    def seed_states(self, conds: list[tuple[int, int, int]]) -> list[_State]:
        """Beam nodes of single conditions (fine grids), counted in one pass: e.g. the conditions of the exact
        search's best pairs on a coarse grid, which a beam ranking nodes by their own fitness may drop."""
        if not conds:
            return []
        masks = torch.stack([self._mask(c) for c in conds])  # (S, N)
        both = D.all_reduce_sum(torch.stack([(masks & self.target).sum(1), masks.sum(1)]))
        hits, support = both.tolist()
        return [
            _State((c,), h, n, torch.nonzero(m, as_tuple=True)[0])
            for c, h, n, m in zip(conds, hits, support, masks)
        ]

    def run(
        self, *, max_length: int, min_support: int, progress: bool = False, seeds: list[tuple[tuple, ...]] = ()
    ) -> list[_State]:
        """The best rule sets of every length (``beam_width`` per objective), unsorted, without those that a rule set
        with one condition fewer matches or beats in both fitness and confidence (a condition that adds nothing).
        ``seeds``: pairs of conditions (fine grids) whose conditions join the beam after the first length, whatever
        their rank, unless the beam already holds a node on one of their features (its expansion covers the pair)."""
        bar = progress_bar(progress, total=max_length, desc="beam search lengths", unit="length")
        n = self.fine.codes.shape[0]
        device = self.fine.codes.device
        beam = [_State((), self.n_target, D.global_count(n), torch.arange(n, device=device))]
        found: dict[tuple, _State] = {}  # every rule set visited
        best: dict[tuple, _State] = {}  # the best of each length and objective
        for length in range(1, max_length + 1):
            chooser = [
                (obj, self.beam_width if i == 0 else max(1, self.beam_width // 2))
                for i, obj in enumerate(self.objectives)
            ]
            if length < max_length:  # a few nodes of high lift too (see :class:`Lift`)
                chooser.append((self.lift, max(1, self.beam_width // 2)))
            children = self._expand(beam, min_support, set(found), chooser)
            if not children:
                break
            for state in children.values():
                found.setdefault(state.conds, state)
            # every child is refined before the beam is chosen: a refined rule set can overtake its siblings
            chosen: dict[tuple, _State] = {}
            for obj in self.objectives:
                # children on the same features tend to climb to the same optimum: refine the best of each set
                first: dict[tuple, _State] = {}
                for st in sorted(children.values(), key=lambda s: obj.key(s.hits, s.support), reverse=True):
                    first.setdefault(tuple(c[0] for c in st.conds), st)
                refined: dict[tuple, _State] = {st.conds: st for st in children.values()}
                for state in self._refine(list(first.values()), min_support, obj):
                    refined.setdefault(state.conds, state)
                    found.setdefault(state.conds, state)
                ranked = sorted(refined.values(), key=lambda s: s.conds)  # ties: the smaller conditions first
                ranked.sort(key=lambda s: obj.key(s.hits, s.support), reverse=True)
                for state in ranked[: self.beam_width]:
                    chosen.setdefault(state.conds, state)
                    best.setdefault(state.conds, state)
            if length < max_length:
                level = sorted((st for st in found.values() if len(st.conds) == length), key=lambda s: s.conds)
                level.sort(key=lambda s: self.lift.key(s.hits, s.support), reverse=True)
                for state in level[: max(1, self.beam_width // 2)]:
                    chosen.setdefault(state.conds, state)
            beam = [_State(s.conds, s.hits, s.support, self._rows_for(s.conds)) for s in chosen.values()]
            if length == 1 and max_length > 1:  # seed pairs none of whose features the beam expands already
                held = {c[0] for conds in chosen for c in conds}
                new = [c for pair in seeds if not any(c[0] in held for c in pair) for c in pair]
                beam += [st for st in self.seed_states(list(dict.fromkeys(new))) if st.support]
            bar.update(1)
        bar.close()
        return self._without_idle_conditions(best, found)

    def _without_idle_conditions(self, best: dict[tuple, _State], found: dict[tuple, _State]) -> list[_State]:
        """``best``'s rule sets, each replaced by its rule set with one condition fewer while that one has at least its
        fitness and confidence (exact integer comparisons; counted when the search did not visit it)."""
        out: dict[tuple, _State] = {}
        for state in best.values():
            changed = True
            while changed and len(state.conds) > 1:
                changed = False
                for k in range(len(state.conds)):
                    conds = state.conds[:k] + state.conds[k + 1 :]
                    sub = found.get(conds)
                    if sub is None:
                        rows = self._rows_for(conds)
                        both = D.all_reduce_sum(
                            torch.stack([self.target[rows].sum(), torch.tensor(rows.numel(), device=rows.device)])
                        )
                        sub = found[conds] = _State(conds, int(both[0]), int(both[1]))
                    if (
                        2 * sub.hits - sub.support >= 2 * state.hits - state.support
                        and sub.hits * state.support >= state.hits * sub.support
                    ):
                        state, changed = sub, True
                        break
            out.setdefault(state.conds, state)
        return list(out.values())


def _best_of_row(
    counts: torch.Tensor, hits: torch.Tensor, min_support: int, objective: Objective
) -> tuple[int, int, int, int] | None:
    """The interval of grids of one feature's counts that ``objective`` ranks highest over its kappas (ties: the
    smallest kappa), as ``(g_low, g_high, hits, support)``; ``None`` when no proper interval has positive value."""
    device = counts.device
    no = torch.tensor([False], device=device)
    b = best_intervals(counts[None], hits[None], torch.tensor([counts.numel()], device=device), no, min_support,
                       kappas=objective.kappas(False))  # fmt: skip
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
    scale = torch.tensor(n_cells / (hi - lo), dtype=torch.float64, device=device)
    lo_t = torch.tensor(lo, dtype=torch.float64, device=device)
    cell = _uniform_code(v, lo_t, scale, n_cells).to(torch.long)
    counts = D.all_reduce_sum(torch.bincount(cell, minlength=n_cells))
    hits = D.all_reduce_sum(torch.bincount(cell[t], minlength=n_cells))
    found = _best_of_row(counts, hits, min_support, objective)
    if found is None:
        return None
    lo_g, hi_g, n_hits, support = found

    def cut(g: int) -> float:  # between the values in cells < g and those in cells >= g
        inf = torch.tensor([math.inf], dtype=torch.float64, device=device)
        below = v[cell < g].max().reshape(1) if bool((cell < g).any()) else -inf
        above = v[cell >= g].min().reshape(1) if bool((cell >= g).any()) else inf
        a, c = float(D.all_reduce_max(below)[0]), float(D.all_reduce_min(above)[0])
        return short_cut(a, c, *units)

    low = cut(lo_g) if lo_g > 0 else -math.inf
    high = cut(hi_g + 1) if hi_g + 1 < n_cells else math.inf
    return low, high, n_hits, support
