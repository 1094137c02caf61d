"""Candidate intervals from per-grid counts (Algorithms 4 and 5 of the paper), vectorized over rows and peaks.

Everything here works on count tables (one row per (node, feature) pair, one column per grid), never on samples:

1. Grid clean-up (Algorithm 4): an empty grid joins the neighbouring non-empty grid with the higher ratio (the left
   one on a tie); then consecutive grids with identical ratios merge into *segments*.
2. Peaks: segments with ratio > 1 that are strict local maxima.
3. Expansion (Algorithm 5), from every (row, peak) at once: below ``min_support`` the interval takes the neighbouring
   segment with the higher ratio (left on a tie); after, only a neighbour whose ratio is at least the interval's (so
   the ratio never drops, Proposition 1). The joining order does not depend on the counts (one sort, see
   :func:`_joining_order`), so all steps are evaluated at once, with no loop over steps.
4. An interval is kept if its support >= ``min_support``, its ratio > 1 and it does not span the row's whole
   observed range. Categorical features offer each category as a candidate.

Tensors keep fixed shapes with validity masks (:class:`CandidateTable`), so nothing waits on the device; ratio
comparisons deciding equality or "> 1" use exact integer arithmetic on the counts.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

#: Elements of the (row, peak, step) tensors of one expansion pass; larger tables are expanded in row chunks.
_EXPANSION_BUDGET = 1 << 20
#: Above this many segments per row, only the peaks are expanded (see :func:`candidate_table`).
_FEW_SEGMENTS = 512


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
    """Candidate rules of every row of a count table in fixed slots, with a validity mask.

    The row of a slot is the searched feature (the (node, feature) pair when nodes are stacked); invalid slots hold
    arbitrary values. ``ints`` stacks ``(g_low, g_high, hits, support)`` in its last dimension.
    """

    valid: torch.Tensor  # (R, S) bool
    ints: torch.Tensor  # (R, S, 4) int64: g_low, g_high, hits, support
    ratio: torch.Tensor  # (R, S) float

    def compact(self) -> Candidates:
        """The valid candidates, row by row (one host sync)."""
        row, slot = torch.nonzero(self.valid, as_tuple=True)
        return Candidates(row, *self.ints[row, slot].unbind(1), self.ratio[row, slot])

    @staticmethod
    def cat(parts: list[CandidateTable]) -> CandidateTable:
        """The slots of several tables of the same rows side by side."""
        if len(parts) == 1:
            return parts[0]
        return CandidateTable(*(torch.cat([getattr(p, f.name) for p in parts], 1) for f in fields(CandidateTable)))


@dataclass
class Segments:
    """Merged grids per row: counts, ratios and grid ranges, padded to B columns (grids past a row's own grids join
    its last segment: they hold no samples)."""

    sums: torch.Tensor  # (2, R, B) target counts and counts of each segment (0 past the last one)
    ratio: torch.Tensor  # (R, B) ratios, -1 past the last segment
    gt_one: torch.Tensor  # (R, B) exact ratio > 1
    first: torch.Tensor  # (R, B) first grid of each segment
    last: torch.Tensor  # (R, B) last grid of each segment
    n_seg: torch.Tensor  # (R,) number of segments
    seg_of_grid: torch.Tensor  # (R, B) segment index of each grid


@dataclass
class Expansion:
    """Algorithm 5's result from each (row, start segment): the interval's segments, counts, ratio and validity."""

    lo: torch.Tensor  # first segment
    hi: torch.Tensor  # last segment
    sums: torch.Tensor  # (2, ...) target count and count
    ratio: torch.Tensor
    ok: torch.Tensor  # support >= min_support, ratio > 1, not the row's whole range


#: A node's target count or sample count: one int, or one per row of a batched (node, feature) count table.
Count = int | torch.Tensor


def _per_row(value: Count, dims: int = 1) -> Count:
    """A per-row count shaped to broadcast over ``dims`` trailing dimensions; an int as it is."""
    return value.view(-1, *([1] * dims)) if isinstance(value, torch.Tensor) else value


def _rows(value: Count, r0: int, r1: int) -> Count:
    """A per-row count for rows ``r0:r1`` (an int as it is)."""
    return value[r0:r1] if isinstance(value, torch.Tensor) else value


def _ratio_gt_one(
    hits: torch.Tensor, counts: torch.Tensor, n_target: Count, n_samples: Count
) -> tuple[torch.Tensor, ...]:
    """Eq. (ratio_approx) (-1 where ``counts`` is 0) and the exact ``ratio > 1``, from the same integer products.

    The float ratio is the correctly rounded quotient of the exact products, as in :func:`probability_ratios`.
    """
    a, b = hits * n_samples, counts * n_target
    dtype = torch.float64 if hits.device.type != "mps" else torch.float32
    return (a.to(dtype) / b.to(dtype)).nan_to_num_(nan=-1.0), a > b


def merge_grids(
    tot: torch.Tensor, tgt: torch.Tensor, n_bins: torch.Tensor | None, n_target: Count, n_samples: Count
) -> Segments:
    """Algorithm 4's clean-up for all rows at once (see module docstring); per-row counts broadcast.

    ``n_bins`` (R,): grids per row (``None``: every column is a grid of every row).
    """
    n_target, n_samples = _per_row(n_target), _per_row(n_samples)
    n_rows, width = tot.shape
    g = torch.arange(width, device=tot.device).repeat(n_rows, 1)
    ratio = _ratio_gt_one(tgt, tot, n_target, n_samples)[0]
    nonempty = tot > 0  # grids past a row's own grids hold no samples
    # nearest non-empty grid at or before / at or after each grid (width: none, with ratio -inf); a non-empty grid
    # is its own nearest on both sides, an empty one joins the side with the higher ratio (the left one on a tie)
    prev_ne = torch.where(nonempty, g, -1).cummax(1).values.remainder_(width + 1)
    next_ne = torch.where(nonempty, g, width).flip(1).cummin(1).values.flip(1)
    r_ext = torch.nn.functional.pad(ratio, (0, 1), value=-torch.inf)
    take_prev = r_ext.gather(1, prev_ne) >= r_ext.gather(1, next_ne)
    owner = torch.where(take_prev, prev_ne, next_ne).clamp_(max=width - 1)  # rows without samples: all empty
    # consecutive owners with identical ratios merge (exact: a1 * b2 == a2 * b1)
    a, b = tgt.gather(1, owner), tot.gather(1, owner)
    new = a[:, 1:] * b[:, :-1] != a[:, :-1] * b[:, 1:]
    seg = torch.nn.functional.pad(new, (1, 0)).cumsum(1)  # non-decreasing: segments are runs of grids
    sums = torch.zeros(2, n_rows, width, dtype=tot.dtype, device=tot.device)
    sums.scatter_add_(2, seg.expand(2, -1, -1), torch.stack([tgt, tot]))
    first = torch.searchsorted(seg, g)
    last = torch.searchsorted(seg, g, right=True) - 1
    if n_bins is not None:  # the last segment ends at the row's last grid
        last = last.clamp_(max=n_bins.view(-1, 1) - 1)
    seg_ratio, gt_one = _ratio_gt_one(sums[0], sums[1], n_target, n_samples)
    return Segments(sums, seg_ratio, gt_one, first, last, seg[:, -1] + 1, seg)


def find_peaks(segs: Segments) -> torch.Tensor:
    """(R, B) bool: segments with ratio > 1 that are strict local maxima (rows with >= 2 segments)."""
    r = segs.ratio
    padded = torch.nn.functional.pad(r, (1, 1), value=-2.0)
    return (r > padded[:, :-2]) & (r > padded[:, 2:]) & segs.gt_one & (segs.n_seg >= 2).view(-1, 1)


def _joining_order(ratio: torch.Tensor, start: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The segments in the order Algorithm 5 would add them from each start: (segment, joins on the left, ratio).

    A greedy merge of the left and right neighbours (higher ratio first, left on a tie) is the stable merge of their
    running minima: one stable sort on (running minimum, left before right, nearest first). Padding comes last.
    """
    m1 = torch.arange(1, ratio.shape[1], device=start.device)
    p = start.unsqueeze(-1)
    left = m1 <= p  # the first `start` places are the left neighbours, nearest first, then the right ones
    seg = torch.where(left, p - m1, m1)
    r = ratio.unsqueeze(1).expand(-1, seg.shape[1], -1).gather(2, seg)  # (a gather: no per-call remainder)
    on_left = torch.where(left, r, torch.inf).cummin(-1).values
    run_min = torch.where(left, on_left, torch.where(left, torch.inf, r).cummin(-1).values)
    order = torch.sort(run_min, dim=-1, descending=True, stable=True).indices
    return seg.gather(-1, order), left.gather(-1, order), r.gather(-1, order)


def _expand_chunk(
    sums: torch.Tensor,
    ratio: torch.Tensor,
    start: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local: bool,
) -> Expansion:
    """:func:`expand_intervals` on a chunk of rows (the segments' sums and ratios, sliced alike)."""
    seg, went_left, r_next = _joining_order(ratio, start)
    sums = sums.unsqueeze(2)  # (2, R, 1, B)
    at = torch.cat([start.unsqueeze(-1), seg], -1)  # per row and start: the start, then the segments as they join
    joined = sums.expand(-1, -1, at.shape[1], -1).gather(3, at.expand(sums.shape[0], -1, -1, -1))
    states = joined.cumsum(-1)  # (2, R, P, B): target count and count after 0, 1, ... joins
    n_left = torch.nn.functional.pad(went_left, (1, 0)).cumsum(-1)
    m_r = torch.nn.functional.pad(r_next, (0, 1), value=-1.0)  # the next neighbour's ratio (-1: none)
    r, gt_one = _ratio_gt_one(states[0], states[1], _per_row(n_target, 2), _per_row(n_samples, 2))
    enough, more = states[1] >= min_support, m_r >= 0  # no neighbour left: the whole range
    stop = ~more | enough if local else ~more | (enough & ~(gt_one & (m_r >= r)))
    steps = stop.to(torch.uint8).argmax(-1, keepdim=True)  # the first state that does not go on
    # gather the final state's target count, count, left joins and validity in one go
    ok = (enough & gt_one & more).unsqueeze(0)
    final = torch.cat([states, n_left.unsqueeze(0), ok]).gather(-1, steps.expand(4, -1, -1, -1)).squeeze(-1)
    lo = start - final[2]
    return Expansion(lo, lo + steps.squeeze(-1), final[:2], r.gather(-1, steps).squeeze(-1), final[3] > 0)


def expand_intervals(
    segs: Segments,
    start: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local: bool = False,
) -> Expansion:
    """Algorithm 5 from every (row, start segment) at once, ``start`` being (R, P) segment indices.

    With ``local=True`` the expansion stops as soon as the support reaches ``min_support``. Rows are processed in
    chunks of a bounded number of elements (no sync).
    """
    n_rows, n_start = start.shape
    width = segs.ratio.shape[1]
    if n_start * width > _EXPANSION_BUDGET:  # many segments: blocks of starts, so that each chunk stays bounded
        block = max(1, _EXPANSION_BUDGET // width)
        parts = [
            expand_intervals(segs, start[:, p0 : p0 + block], min_support, n_target, n_samples, local)
            for p0 in range(0, n_start, block)
        ]
        return _cat_expansions(parts, 1)
    step = max(1, _EXPANSION_BUDGET // max(1, n_start * width))
    if step >= n_rows:
        return _expand_chunk(segs.sums, segs.ratio, start, min_support, n_target, n_samples, local)
    parts = []
    for r0 in range(0, n_rows, step):
        r1 = min(n_rows, r0 + step)
        n_t, n_s = _rows(n_target, r0, r1), _rows(n_samples, r0, r1)
        parts.append(_expand_chunk(segs.sums[:, r0:r1], segs.ratio[r0:r1], start[r0:r1], min_support, n_t, n_s, local))
    return _cat_expansions(parts, 0)


def _cat_expansions(parts: list[Expansion], dim: int) -> Expansion:
    """Expansions of chunks of rows (``dim=0``) or of starts (``dim=1``) put together."""
    names = [f.name for f in fields(Expansion)]
    return Expansion(*(torch.cat([getattr(p, name) for p in parts], dim + (name == "sums")) for name in names))


def _first_of_each(lo: torch.Tensor, hi: torch.Tensor, valid: torch.Tensor, width: int) -> torch.Tensor:
    """``valid`` without the slots repeating the (lo, hi) of a valid slot further left in the same row."""
    n_start = lo.shape[1]
    key = torch.where(valid, lo * width + hi, -1 - torch.arange(n_start, device=lo.device))  # invalid: all distinct
    return valid & ~(key.unsqueeze(2) == key.unsqueeze(1)).tril_(-1).any(-1)


def _numeric_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor | None,
    num: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local_codes: torch.Tensor | None,
) -> CandidateTable:
    """Numeric candidates: one slot per segment that may be a peak (+ one for a local sample's own interval)."""
    segs = merge_grids(tot, tgt, n_bins, n_target, n_samples)
    width = tot.shape[1]
    peaks = find_peaks(segs) & num.view(-1, 1)
    start = torch.arange(width, device=tot.device).expand(tot.shape[0], -1)
    if width > _FEW_SEGMENTS:  # every segment a start would cost width**2: only the peaks (one sync, many grids only)
        n_peaks = max(1, int(peaks.sum(1).max()))
        start = torch.sort(peaks.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :n_peaks]
        peaks = peaks.gather(1, start)  # the peaks first, in order; the other slots are not peaks
    ex = expand_intervals(segs, start, min_support, n_target, n_samples)
    valid = _first_of_each(ex.lo, ex.hi, peaks & ex.ok, width)
    table = _table(segs, ex, valid)
    if local_codes is None:
        return table
    lc = local_codes.view(-1, 1)
    table.valid &= (table.ints[..., 0] <= lc) & (lc <= table.ints[..., 1])
    s_loc = segs.seg_of_grid.gather(1, lc.clamp(0, width - 1))
    need = num.view(-1, 1) & ~table.valid.any(1, keepdim=True) & (lc >= 0)
    ex = expand_intervals(segs, s_loc, min_support, n_target, n_samples, local=True)
    return CandidateTable.cat([table, _table(segs, ex, need & ex.ok)])


def _table(segs: Segments, ex: Expansion, valid: torch.Tensor) -> CandidateTable:
    """The candidate table of expanded intervals."""
    ints = torch.stack([segs.first.gather(1, ex.lo), segs.last.gather(1, ex.hi), ex.sums[0], ex.sums[1]], -1)
    return CandidateTable(valid, ints, ex.ratio)


def _categorical_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    cat: torch.Tensor,
    min_support: int,
    n_target: Count,
    n_samples: Count,
    local_codes: torch.Tensor | None,
) -> CandidateTable:
    """Categorical candidates: one slot per category (columns past a feature's categories hold no samples: no
    candidate, as ratio > 1 needs a sample)."""
    g = torch.arange(tot.shape[1], device=tot.device).expand_as(tot)
    ratio, gt_one = _ratio_gt_one(tgt, tot, _per_row(n_target), _per_row(n_samples))
    ok = cat.view(-1, 1) & (tot >= min_support) & gt_one
    ok &= tot < tot.sum(1, keepdim=True)  # not every non-missing sample
    if local_codes is not None:
        ok &= g == local_codes.view(-1, 1)
    return CandidateTable(ok, torch.stack([g, g, tgt, tot], -1), ratio)


def candidate_table(
    tot: torch.Tensor,
    tgt: torch.Tensor,
    n_bins: torch.Tensor | None,
    is_cat: torch.Tensor | None,
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
            row is one; ``is_cat`` may then be ``None``).
        n_bins: as in :func:`candidate_intervals`, or ``None`` when every numeric row has ``numeric_width`` grids.
        The others: as in :func:`candidate_intervals`.
    """
    parts = []
    if numeric:
        w = tot.shape[1] if numeric_width is None else numeric_width
        num = allowed & ~is_cat if categorical else allowed
        tables = (tot[:, :w], tgt[:, :w]) if w < tot.shape[1] else (tot, tgt)
        nb = n_bins.clamp(max=w) if categorical and n_bins is not None else n_bins
        parts.append(_numeric_table(*tables, nb, num, min_support, n_target, n_samples, local_codes))
    if categorical:
        cat = allowed & is_cat if numeric else allowed
        parts.append(_categorical_table(tot, tgt, cat, min_support, n_target, n_samples, local_codes))
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
