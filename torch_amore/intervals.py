"""Candidate intervals from per-grid counts (Algorithms 4 and 5 of the paper), vectorized over rows and peaks.

Everything here works on count tables, never on the samples. A table has one row per (node, feature) pair (the rule
tree stacks all nodes of a level) and one column per grid:

1. Grid clean-up (Algorithm 4): an empty grid joins the neighbouring non-empty grid with the higher ratio (the left
   one on a tie); then consecutive grids with identical ratios merge. The result is a list of *segments* per row.
2. Peaks: segments with ratio > 1 that are strict local maxima.
3. Expansion (Algorithm 5), from every (row, peak) at once: while the interval's support is below ``min_support``
   it takes the neighbouring segment with the higher ratio (the left one on a tie); once the support suffices it
   takes that neighbour only if its ratio is at least the interval's ratio (so the ratio never drops,
   Proposition 1). The ratio of a merged interval is the ratio of its summed counts; the data are not rescanned.
   The order in which the segments would join does not depend on the counts: it is the merge of the segments to
   the left and to the right of the peak, each side ranked by the running minimum of its ratios from the peak
   outwards (one sort), so all steps are evaluated at once and the first step at which the expansion stops is
   picked, with no loop over steps.
4. An interval is kept if its support >= ``min_support``, its ratio > 1 and it does not span the row's whole
   observed range. Categorical features offer each category as a candidate.

All tensors keep fixed shapes, with validity masks (:class:`CandidateTable`), so nothing here waits on the device;
:meth:`CandidateTable.compact` (one host sync) lists the valid candidates. All ratio comparisons that decide
equality or "> 1" use exact integer arithmetic on the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from torch_amore.ratios import probability_ratios

#: Elements of the (row, peak, step) tensors of one expansion pass; larger tables are expanded in row chunks.
_EXPANSION_BUDGET = 1 << 22


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


@dataclass
class CandidateTable:
    """Candidate rules of every row of a count table in fixed slots: (R, S) tensors and a validity mask.

    The row of a slot is the searched feature (the (node, feature) pair when nodes are stacked); invalid slots hold
    arbitrary values.
    """

    valid: torch.Tensor
    g_low: torch.Tensor
    g_high: torch.Tensor
    hits: torch.Tensor
    support: torch.Tensor
    ratio: torch.Tensor

    def compact(self) -> Candidates:
        """The valid candidates, row by row (one host sync)."""
        row, slot = torch.nonzero(self.valid, as_tuple=True)
        return Candidates(row, *(getattr(self, f.name)[row, slot] for f in fields(self)[1:]))

    @staticmethod
    def cat(parts: list[CandidateTable]) -> CandidateTable:
        """The slots of several tables of the same rows side by side."""
        if len(parts) == 1:
            return parts[0]
        return CandidateTable(*(torch.cat([getattr(p, f.name) for p in parts], 1) for f in fields(CandidateTable)))


@dataclass
class Segments:
    """Merged grids per row: counts, ratios and grid ranges, padded to B columns."""

    hits: torch.Tensor  # (R, B) target counts
    counts: torch.Tensor  # (R, B) counts
    ratio: torch.Tensor  # (R, B) ratios, -1 for padding
    first: torch.Tensor  # (R, B) first grid of each segment
    last: torch.Tensor  # (R, B) last grid of each segment
    n_seg: torch.Tensor  # (R,) number of segments
    seg_of_grid: torch.Tensor  # (R, B) segment index of each grid (-1 for padding grids)


@dataclass
class Expansion:
    """Algorithm 5's result from each (row, start segment): the interval's segments, counts and validity."""

    lo: torch.Tensor  # first segment
    hi: torch.Tensor  # last segment
    hits: torch.Tensor
    counts: torch.Tensor
    ok: torch.Tensor  # support >= min_support, ratio > 1, not the row's whole range


#: A node's target count or sample count: one int, or one per row of a batched (node, feature) count table.
Count = int | torch.Tensor


def _per_row(value: Count, dims: int = 1) -> Count:
    """A per-row count shaped to broadcast over ``dims`` trailing dimensions; an int as it is."""
    return value.reshape(-1, *([1] * dims)) if isinstance(value, torch.Tensor) else value


def _rows(value: Count, r0: int, r1: int) -> Count:
    """A per-row count for rows ``r0:r1`` (an int as it is)."""
    return value[r0:r1] if isinstance(value, torch.Tensor) else value


def _gt_one(hits: torch.Tensor, counts: torch.Tensor, n_target: Count, n_samples: Count) -> torch.Tensor:
    """Exact ``ratio > 1``: hits / counts > n_target / n_samples."""
    return (hits * n_samples > counts * n_target) & (counts > 0)


def merge_grids(
    tot: torch.Tensor, tgt: torch.Tensor, n_bins: torch.Tensor, n_target: Count, n_samples: Count
) -> Segments:
    """Algorithm 4's clean-up for all rows at once (see module docstring); per-row counts broadcast."""
    n_target, n_samples = _per_row(n_target), _per_row(n_samples)
    n_rows, width = tot.shape
    device = tot.device
    g = torch.arange(width, device=device).expand(n_rows, width)
    valid = g < n_bins[:, None]
    nonempty = (tot > 0) & valid
    ratio = probability_ratios(tgt, tot, n_target, n_samples)
    # nearest non-empty grid at or before / at or after each grid (width: none)
    prev_ne = torch.cummax(torch.where(nonempty, g, -1), dim=1).values
    next_ne = torch.cummin(torch.where(nonempty, g, width).flip(1), dim=1).values.flip(1)
    r_prev = ratio.gather(1, prev_ne.clamp(min=0))
    r_next = ratio.gather(1, next_ne.clamp(max=width - 1))
    has_prev, has_next = prev_ne >= 0, next_ne < width
    take_prev = has_prev & (~has_next | (r_prev >= r_next))
    owner = torch.where(nonempty, g, torch.where(take_prev, prev_ne, next_ne))
    owner = torch.where(valid & (has_prev | has_next), owner, -1)
    # consecutive owners with identical ratios merge (exact: a1 * b2 == a2 * b1)
    own = owner.clamp(min=0)
    a, b = tgt.gather(1, own), tot.gather(1, own)
    same = (owner[:, 1:] == owner[:, :-1]) | (a[:, 1:] * b[:, :-1] == a[:, :-1] * b[:, 1:])
    starts = torch.cat([owner[:, :1] >= 0, ~same & (owner[:, 1:] >= 0)], dim=1)
    seg = torch.where(owner >= 0, torch.cumsum(starts, dim=1) - 1, -1)
    n_seg = seg.amax(dim=1) + 1
    # per-segment sums (padding grids go to a dump column)
    dump = torch.where(seg >= 0, seg, width)
    sums = torch.zeros(2, n_rows, width + 1, dtype=torch.long, device=device)
    sums.scatter_add_(2, dump.expand(2, -1, -1), torch.stack([tgt, tot]) * valid)
    hits, counts = sums[0, :, :width], sums[1, :, :width]
    gc = g.contiguous()
    first = torch.full((n_rows, width + 1), width, device=device).scatter_reduce(1, dump, gc, "amin")[:, :width]
    last = torch.full((n_rows, width + 1), -1, device=device).scatter_reduce(1, dump, gc, "amax")[:, :width]
    seg_ratio = torch.where(g < n_seg[:, None], probability_ratios(hits, counts, n_target, n_samples), -1.0)
    return Segments(hits, counts, seg_ratio, first, last, n_seg, seg)


def find_peaks(segs: Segments, n_target: Count, n_samples: Count) -> torch.Tensor:
    """(R, B) bool: segments with ratio > 1 that are strict local maxima (rows with >= 2 segments)."""
    n_target, n_samples = _per_row(n_target), _per_row(n_samples)
    r = segs.ratio
    n_rows, width = r.shape
    g = torch.arange(width, device=r.device).expand(n_rows, width)
    pad = torch.full_like(r[:, :1], -2.0)
    is_peak = (r > torch.cat([pad, r[:, :-1]], dim=1)) & (r > torch.cat([r[:, 1:], pad], dim=1))
    is_peak &= _gt_one(segs.hits, segs.counts, n_target, n_samples)
    return is_peak & (g < segs.n_seg[:, None]) & (segs.n_seg[:, None] >= 2)


def _joining_order(segs: Segments, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The segments in the order Algorithm 5 would add them from each start: (segment, joins on the left, ratio).

    Algorithm 5 always takes the neighbour with the higher ratio (left on a tie): a greedy merge of the left and
    right neighbours (nearest first). A greedy merge of two sequences is the stable merge of their running minima,
    so one stable sort on (running minimum, left before right, nearest first) gives the order. Padding segments
    (ratio -1) come last.
    """
    n_rows, n_start = start.shape
    width = segs.ratio.shape[1]
    m = torch.arange(width - 1, device=start.device)
    p = start[:, :, None]
    left = m < p  # the first `start` places are the left neighbours, nearest first, then the right ones
    seg = torch.where(left, p - 1 - m, m + 1)
    r = segs.ratio.gather(1, seg.view(n_rows, -1)).view(seg.shape)
    run_min = torch.where(
        left, torch.where(left, r, torch.inf).cummin(-1).values, torch.where(left, torch.inf, r).cummin(-1).values
    )
    order = torch.sort(run_min, dim=-1, descending=True, stable=True).indices
    return seg.gather(-1, order), left.gather(-1, order), r.gather(-1, order)


def _expand_chunk(
    segs: Segments, start: torch.Tensor, min_support: int, n_target: Count, n_samples: Count, local: bool
) -> Expansion:
    """:func:`expand_intervals` on a chunk of rows (``segs`` and ``start`` sliced alike)."""
    n_rows, n_start = start.shape
    seg, went_left, r_next = _joining_order(segs, start)
    flat = seg.view(n_rows, -1)

    def running(table: torch.Tensor) -> torch.Tensor:  # (R, P, W): counts after 0..W-1 joins
        joined = table.gather(1, flat).view(seg.shape)
        return torch.cat([table.gather(1, start)[:, :, None], joined], dim=-1).cumsum(-1)

    hits, cnt = running(segs.hits), running(segs.counts)
    n_left = torch.cat([torch.zeros_like(went_left[:, :, :1]), went_left], dim=-1).cumsum(-1)
    m_r = torch.cat([r_next, torch.full_like(r_next[:, :, :1], -1.0)], dim=-1)  # the next neighbour's ratio
    n_t, n_s = _per_row(n_target, 2), _per_row(n_samples, 2)
    enough = cnt >= min_support
    if local:  # stop as soon as the support suffices
        go_on = ~enough & (m_r >= 0)
    else:
        r = probability_ratios(hits, cnt, n_t, n_s)
        go_on = (~enough | _gt_one(hits, cnt, n_t, n_s)) & (m_r >= 0) & ~(enough & (m_r < r))
    steps = (~go_on).to(torch.uint8).argmax(-1, keepdim=True)  # the first state that does not go on
    hits, cnt = hits.gather(-1, steps)[..., 0], cnt.gather(-1, steps)[..., 0]
    n_left, steps = n_left.gather(-1, steps)[..., 0], steps[..., 0]
    lo, hi = start - n_left, start + steps - n_left
    n_t, n_s = _per_row(n_target), _per_row(n_samples)
    whole = (lo == 0) & (hi == segs.n_seg[:, None] - 1)
    ok = (cnt >= min_support) & _gt_one(hits, cnt, n_t, n_s) & ~whole
    return Expansion(lo, hi, hits, cnt, ok)


def expand_intervals(
    segs: Segments,
    start: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local: bool = False,
) -> Expansion:
    """Algorithm 5 from every (row, start segment) at once, ``start`` being (R, P) segment indices.

    With ``local=True`` the expansion stops as soon as the support reaches ``min_support`` (local rules keep the
    interval around the sample's own grid as tight as the support allows). Per-row counts are per row of ``segs``.
    Rows are processed in chunks of a bounded number of elements (a host-known count: no sync).
    """
    n_rows, n_start = start.shape
    width = segs.ratio.shape[1]
    step = max(1, _EXPANSION_BUDGET // max(1, n_start * width))
    parts = []
    for r0 in range(0, n_rows, step):
        r1 = min(n_rows, r0 + step)
        sub = segs if (r0, r1) == (0, n_rows) else Segments(*(getattr(segs, f.name)[r0:r1] for f in fields(segs)))
        n_t, n_s = _rows(n_target, r0, r1), _rows(n_samples, r0, r1)
        parts.append(_expand_chunk(sub, start[r0:r1], min_support, n_t, n_s, local))
    if len(parts) == 1:
        return parts[0]
    return Expansion(*(torch.cat([getattr(p, f.name) for p in parts]) for f in fields(Expansion)))


def _first_of_each(lo: torch.Tensor, hi: torch.Tensor, valid: torch.Tensor, width: int) -> torch.Tensor:
    """``valid`` without the slots repeating the (lo, hi) of a valid slot further left in the same row."""
    n_start = lo.shape[1]
    key = lo * width + hi
    same = key[:, :, None] == key[:, None, :]
    earlier = torch.ones(n_start, n_start, dtype=torch.bool, device=lo.device).tril(-1)
    return valid & ~(same & earlier & valid[:, None, :]).any(-1)


def _numeric_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    num: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local_codes: torch.Tensor | None,
) -> CandidateTable:
    """Numeric candidates: one slot per possible peak (+ one for a local sample's own interval)."""
    segs = merge_grids(tot, tgt, n_bins, n_target, n_samples)
    peaks = find_peaks(segs, n_target, n_samples) & num[:, None]
    width = tot.shape[1]
    n_peak = (width + 1) // 2  # strict local maxima of at most `width` segments
    peaks, start = torch.sort(peaks.to(torch.uint8), dim=1, descending=True, stable=True)
    start, valid = start[:, :n_peak], peaks[:, :n_peak].bool()
    ex = expand_intervals(segs, start, min_support, n_target, n_samples)
    valid = _first_of_each(ex.lo, ex.hi, valid & ex.ok, width)
    table = _table(segs, ex, valid, n_target, n_samples)
    if local_codes is None:
        return table
    lc = local_codes[:, None]
    table.valid &= (table.g_low <= lc) & (lc <= table.g_high)
    s_loc = segs.seg_of_grid.gather(1, lc.clamp(0, width - 1))
    need = num[:, None] & ~table.valid.any(1, keepdim=True) & (lc >= 0) & (s_loc >= 0)
    ex = expand_intervals(segs, s_loc.clamp(min=0), min_support, n_target, n_samples, local=True)
    return CandidateTable.cat([table, _table(segs, ex, need & ex.ok, n_target, n_samples)])


def _table(segs: Segments, ex: Expansion, valid: torch.Tensor, n_target: Count, n_samples: Count) -> CandidateTable:
    """The candidate table of expanded intervals."""
    ratio = probability_ratios(ex.hits, ex.counts, _per_row(n_target), _per_row(n_samples))
    return CandidateTable(valid, segs.first.gather(1, ex.lo), segs.last.gather(1, ex.hi), ex.hits, ex.counts, ratio)


def _categorical_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    cat: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local_codes: torch.Tensor | None,
) -> CandidateTable:
    """Categorical candidates: one slot per category."""
    g = torch.arange(tot.shape[1], device=tot.device).expand_as(tot)
    n_t, n_s = _per_row(n_target), _per_row(n_samples)
    ok = cat[:, None] & (g < n_bins[:, None]) & (tot >= min_support) & _gt_one(tgt, tot, n_t, n_s)
    ok &= tot < tot.sum(1, keepdim=True)  # not every non-missing sample
    if local_codes is not None:
        ok &= g == local_codes[:, None]
    return CandidateTable(ok, g, g, tgt, tot, probability_ratios(tgt, tot, n_t, n_s))


def candidate_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor,
    is_cat: torch.Tensor,
    allowed: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    *,
    local_codes: torch.Tensor | None = None,
    numeric_width: int | None = None,
    numeric: bool = True,
    categorical: bool = True,
) -> CandidateTable:
    """All valid candidate rules of every row, in fixed slots (see :func:`candidate_intervals`); no host sync.

    Args:
        numeric_width: grids of the widest numeric feature (default: all columns), to keep the expansion small when
            categorical features have many more categories.
        numeric, categorical: ``False`` skips the numeric / categorical candidates (when the caller knows that no
            row is one).
        The others: as in :func:`candidate_intervals`.
    """
    parts = []
    if numeric:
        w = tot.shape[1] if numeric_width is None else numeric_width
        lc = None if local_codes is None else local_codes
        parts.append(
            _numeric_table(
                tot[:, :w], tgt[:, :w], n_bins.clamp(max=w), allowed & ~is_cat, min_support, n_target, n_samples, lc
            )
        )
    if categorical or not parts:
        parts.append(
            _categorical_table(tot, tgt, n_bins, allowed & is_cat, min_support, n_target, n_samples, local_codes)
        )
    return CandidateTable.cat(parts)


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
    """All valid candidate rules at a node (numeric intervals and categories), row by row.

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
    return candidate_table(
        tot, tgt, n_bins, is_cat, allowed, min_support, n_target, n_samples, local_codes=local_codes
    ).compact()
