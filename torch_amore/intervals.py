"""Candidate intervals from per-grid counts (Algorithms 4 and 5 of the paper), vectorized over features.

Everything here works on the (F, B) count tables of one node of the rule tree, never on the samples:

1. Grid clean-up (Algorithm 4): an empty grid joins the neighbouring non-empty grid with the higher ratio (the left
   one on a tie); then consecutive grids with identical ratios merge. The result is a list of *segments* per feature.
2. Peaks: segments with ratio > 1 that are strict local maxima.
3. Expansion (Algorithm 5), run for every (feature, peak) pair at once: while the interval's support is below
   ``min_support`` it takes the neighbouring segment with the higher ratio; once the support suffices it takes that
   neighbour only if its ratio is at least the interval's ratio (so the ratio never drops, Proposition 1). The ratio
   of a merged interval is the ratio of its summed counts; the data are not rescanned.
4. An interval is kept if its support >= ``min_support``, its ratio > 1 and it does not span the feature's whole
   observed range. Categorical features offer each category as a candidate.

All ratio comparisons that decide equality or "> 1" use exact integer arithmetic on the counts.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_amore.ratios import probability_ratios


@dataclass
class Candidates:
    """Candidate rules at one node: searched-feature index, grid range, target count, count, ratio."""

    feature: torch.Tensor
    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor
    ratio: torch.Tensor

    def __len__(self) -> int:
        return int(self.feature.numel())

    @staticmethod
    def cat(parts: list[Candidates]) -> Candidates:
        return Candidates(*(torch.cat([getattr(p, k) for p in parts]) for k in Candidates.__dataclass_fields__))

    def select(self, keep: torch.Tensor) -> Candidates:
        """The candidates at ``keep`` (indices, or a bool mask: turned into indices once, one host sync)."""
        if keep.dtype == torch.bool:
            keep = torch.nonzero(keep, as_tuple=True)[0]
        return Candidates(*(getattr(self, k).index_select(0, keep) for k in Candidates.__dataclass_fields__))


@dataclass
class Segments:
    """Merged grids per feature: counts, ratios and grid ranges, padded to B columns."""

    hits: torch.Tensor  # (F, B) target counts
    counts: torch.Tensor  # (F, B) counts
    ratio: torch.Tensor  # (F, B) ratios, -1 for padding
    first: torch.Tensor  # (F, B) first grid of each segment
    last: torch.Tensor  # (F, B) last grid of each segment
    n_seg: torch.Tensor  # (F,) number of segments
    seg_of_grid: torch.Tensor  # (F, B) segment index of each grid (-1 for padding grids)


#: A node's target count or sample count: one int, or one per row of a batched (node, feature) count table.
Count = int | torch.Tensor


def _per_row(value: Count) -> Count:
    """A per-row count as a column, to broadcast over the grids of (R, B) tables; an int as it is."""
    return value[:, None] if isinstance(value, torch.Tensor) else value


def _at(value: Count, rows: torch.Tensor) -> Count:
    """A per-row count at the given rows (an int as it is)."""
    return value[rows] if isinstance(value, torch.Tensor) else value


def _gt_one(hits: torch.Tensor, counts: torch.Tensor, n_target: Count, n_samples: Count) -> torch.Tensor:
    """Exact ``ratio > 1``: hits / counts > n_target / n_samples."""
    return (hits * n_samples > counts * n_target) & (counts > 0)


def merge_grids(
    tot: torch.Tensor, tgt: torch.Tensor, n_bins: torch.Tensor, n_target: Count, n_samples: Count
) -> Segments:
    """Algorithm 4's clean-up for all features at once (see module docstring); per-row counts broadcast."""
    n_target, n_samples = _per_row(n_target), _per_row(n_samples)
    n_feat, width = tot.shape
    device = tot.device
    g = torch.arange(width, device=device).expand(n_feat, width)
    valid = g < n_bins[:, None]
    nonempty = (tot > 0) & valid
    ratio = probability_ratios(tgt, tot, n_target, n_samples)
    # nearest non-empty grid at or before / at or after each grid
    prev_ne = torch.cummax(torch.where(nonempty, g, torch.full_like(g, -1)), dim=1).values
    nxt = torch.where(nonempty, g, torch.full_like(g, width)).flip(1)
    next_ne = torch.cummin(nxt, dim=1).values.flip(1)
    next_ne = torch.where(next_ne < n_bins[:, None], next_ne, torch.full_like(next_ne, width))
    r_prev = ratio.gather(1, prev_ne.clamp(min=0))
    r_next = ratio.gather(1, next_ne.clamp(max=width - 1))
    has_prev, has_next = prev_ne >= 0, next_ne < width
    take_prev = has_prev & (~has_next | (r_prev >= r_next))
    owner = torch.where(nonempty, g, torch.where(take_prev, prev_ne, next_ne))
    owner = torch.where(valid & (has_prev | has_next), owner, torch.full_like(owner, -1))
    # consecutive owners with identical ratios merge (exact: a1 * b2 == a2 * b1)
    own = owner.clamp(min=0)
    a, b = tgt.gather(1, own), tot.gather(1, own)
    same_owner = owner[:, 1:] == owner[:, :-1]
    same_ratio = a[:, 1:] * b[:, :-1] == a[:, :-1] * b[:, 1:]
    starts = torch.ones_like(owner, dtype=torch.bool)
    starts[:, 1:] = ~(same_owner | same_ratio)
    starts &= owner >= 0
    seg = torch.cumsum(starts.to(torch.long), dim=1) - 1
    seg = torch.where(owner >= 0, seg, torch.full_like(seg, -1))
    n_seg = (seg.amax(dim=1) + 1).clamp(min=0)
    # per-segment sums (padding grids go to a dump column)
    dump = torch.where(seg >= 0, seg, torch.full_like(seg, width))
    hits = torch.zeros(n_feat, width + 1, dtype=torch.long, device=device).scatter_add_(1, dump, tgt * valid)
    counts = torch.zeros(n_feat, width + 1, dtype=torch.long, device=device).scatter_add_(1, dump, tot * valid)
    big = torch.full((n_feat, width + 1), width, dtype=torch.long, device=device)
    first = big.scatter_reduce(1, dump, g.contiguous(), reduce="amin", include_self=True)[:, :width]
    last = torch.full_like(big, -1).scatter_reduce(1, dump, g.contiguous(), reduce="amax", include_self=True)[:, :width]
    hits, counts = hits[:, :width], counts[:, :width]
    seg_ratio = probability_ratios(hits, counts, n_target, n_samples)
    in_range = g < n_seg[:, None]
    seg_ratio = torch.where(in_range, seg_ratio, torch.full_like(seg_ratio, -1.0))
    return Segments(hits, counts, seg_ratio, first, last, n_seg, seg)


def find_peaks(segs: Segments, n_target: Count, n_samples: Count) -> torch.Tensor:
    """(F, B) bool: segments with ratio > 1 that are strict local maxima (features with >= 2 segments)."""
    n_target, n_samples = _per_row(n_target), _per_row(n_samples)
    r = segs.ratio
    n_feat, width = r.shape
    g = torch.arange(width, device=r.device).expand(n_feat, width)
    left = torch.cat([torch.full_like(r[:, :1], -2.0), r[:, :-1]], dim=1)
    right = torch.cat([r[:, 1:], torch.full_like(r[:, :1], -2.0)], dim=1)
    is_peak = (r > left) & (r > right) & _gt_one(segs.hits, segs.counts, n_target, n_samples)
    return is_peak & (g < segs.n_seg[:, None]) & (segs.n_seg[:, None] >= 2)


def expand_intervals(
    segs: Segments,
    feature: torch.Tensor,
    start: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local: bool = False,
) -> Candidates:
    """Algorithm 5 from every (feature, start segment) pair at once; returns only the valid intervals.

    With ``local=True`` the expansion stops as soon as the support reaches ``min_support`` (local rules keep the
    interval around the sample's own grid as tight as the support allows). Per-row counts are per row of ``segs``.
    """
    f, lo, hi = feature, start.clone(), start.clone()
    n_target, n_samples = _at(n_target, f), _at(n_samples, f)
    hits = segs.hits[f, lo].clone()
    cnt = segs.counts[f, lo].clone()
    n_seg = segs.n_seg[f]
    alive = torch.ones_like(f, dtype=torch.bool)
    width = segs.ratio.shape[1]
    for _ in range(width):
        going = alive & ((cnt < min_support) | _gt_one(hits, cnt, n_target, n_samples))
        r = probability_ratios(hits, cnt, n_target, n_samples)
        has_left, has_right = lo > 0, hi + 1 < n_seg
        r_left = torch.where(has_left, segs.ratio[f, (lo - 1).clamp(min=0)], torch.full_like(r, -1.0))
        r_right = torch.where(has_right, segs.ratio[f, (hi + 1).clamp(max=width - 1)], torch.full_like(r, -1.0))
        take_left = has_left & (~has_right | (r_left >= r_right))
        m_r = torch.where(take_left, r_left, r_right)
        enough = cnt >= min_support
        stop = ~(has_left | has_right) | (enough & (torch.ones_like(enough) if local else (m_r < r)))
        step = going & ~stop
        if not bool(step.any()):
            break
        new_lo = torch.where(step & take_left, lo - 1, lo)
        new_hi = torch.where(step & ~take_left, hi + 1, hi)
        joined = torch.where(take_left, new_lo, new_hi)
        hits = torch.where(step, hits + segs.hits[f, joined], hits)
        cnt = torch.where(step, cnt + segs.counts[f, joined], cnt)
        lo, hi, alive = new_lo, new_hi, step
    whole = (lo == 0) & (hi == n_seg - 1)
    ok = (cnt >= min_support) & _gt_one(hits, cnt, n_target, n_samples) & ~whole
    out = Candidates(
        feature=f,
        g_low=segs.first[f, lo],
        g_high=segs.last[f, hi],
        hits=hits,
        support=cnt,
        ratio=probability_ratios(hits, cnt, n_target, n_samples),
    )
    return out.select(ok)


def _dedupe(c: Candidates, width: int) -> Candidates:
    if len(c) == 0:
        return c
    key = (c.feature * (width + 1) + c.g_low) * (width + 1) + c.g_high
    _, inverse = torch.unique(key, return_inverse=True)
    first = torch.full((int(inverse.max()) + 1,), len(c), dtype=torch.long, device=key.device)
    first = first.scatter_reduce(0, inverse, torch.arange(len(c), device=key.device), reduce="amin")
    return c.select(torch.sort(first).values)


def candidate_intervals(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    allowed: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local_codes: torch.Tensor | None = None,
) -> Candidates:
    """All valid candidate rules at a node (numeric intervals and categories), unsorted.

    The rows of the tables may also be the (node, feature) pairs of several nodes (flattened), with per-row
    ``n_target``/``n_samples``: the rule tree counts all nodes of a level at once this way.

    Args:
        tot, tgt: (F, B) per-grid counts of the node's samples and of its target samples.
        n_bins: (F,) number of grids per feature.
        is_cat: (F,) categorical features.
        allowed: (F,) features that may still be used on this path.
        min_support: minimum support of an interval.
        n_target, n_samples: target samples and samples at the node (ints, or (F,) tensors: one per row).
        local_codes: (F,) the local sample's grid per feature (-1 where missing): only candidates containing it.

    Example:
        >>> import torch
        >>> tot = torch.tensor([[10, 10, 10, 10]])
        >>> tgt = torch.tensor([[0, 1, 9, 8]])
        >>> c = candidate_intervals(tot, tgt, torch.tensor([4]), torch.tensor([False]), torch.tensor([True]),
        ...                         min_support=15, n_target=18, n_samples=40)
        >>> (c.g_low.tolist(), c.g_high.tolist(), c.support.tolist(), c.hits.tolist())
        ([2], [3], [20], [17])
    """
    device = tot.device
    width = tot.shape[1]
    parts: list[Candidates] = []
    num = allowed & ~is_cat
    if bool(num.any()):
        segs = merge_grids(tot, tgt, n_bins, n_target, n_samples)
        peaks = find_peaks(segs, n_target, n_samples) & num[:, None]
        f, s = torch.nonzero(peaks, as_tuple=True)
        found = _dedupe(expand_intervals(segs, f, s, min_support, n_target, n_samples), width)
        if local_codes is not None:
            lc = local_codes[found.feature]
            found = found.select((found.g_low <= lc) & (lc <= found.g_high))
            covered = torch.zeros(tot.shape[0], dtype=torch.bool, device=device)
            covered[found.feature] = True
            need = num & ~covered & (local_codes >= 0)
            f_loc = torch.nonzero(need, as_tuple=True)[0]
            if f_loc.numel():
                s_loc = segs.seg_of_grid[f_loc, local_codes[f_loc]]
                keep = s_loc >= 0
                extra = expand_intervals(segs, f_loc[keep], s_loc[keep], min_support, n_target, n_samples, local=True)
                found = Candidates.cat([found, extra])
        parts.append(found)
    cat = allowed & is_cat
    if bool(cat.any()):
        g = torch.arange(width, device=device).expand_as(tot)
        non_missing = tot.sum(1, keepdim=True)
        ok = (
            cat[:, None]
            & (g < n_bins[:, None])
            & (tot >= min_support)
            & _gt_one(tgt, tot, _per_row(n_target), _per_row(n_samples))
            & (tot < non_missing)
        )
        if local_codes is not None:
            ok &= g == local_codes[:, None]
        f, gg = torch.nonzero(ok, as_tuple=True)
        ratio = probability_ratios(tgt[f, gg], tot[f, gg], _at(n_target, f), _at(n_samples, f))
        parts.append(Candidates(f, gg, gg, tgt[f, gg], tot[f, gg], ratio))
    if not parts:
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return Candidates(empty, empty, empty, empty, empty, torch.zeros(0, dtype=torch.float64, device=device))
    return Candidates.cat(parts)
