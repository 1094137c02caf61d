"""Counts for the exact search: the grid with empty grids merged, and the 2-D counts of every pair of features.

:func:`compress` recodes the samples so that each feature's grids all hold a sample. :class:`PairCounts` gives the
cumulative 2-D counts (all and target samples) of any block of pairs of features: from a one-hot matrix product when
the grids are few (<= 8) or on CUDA, else from ``bincount`` over int32 pair indices, chunked. Every count is summed
across DDP ranks.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.threads import parallel_pass
from torch_amore._utils.transfer import tensor_on
from torch_amore.grids.binning import Binned
from torch_amore.grids.ratios import grid_counts

#: Elements of the temporary tables handled at once.
_CHUNK = 1 << 22
#: Up to this many samples the bincount path counts all pairs of a chunk in one call (fewer operations; the same
#: time at 70,000 rows); above it, pair by pair of an anchor feature from slices (no copies: the passes dominate).
_FEW_ROWS = 1 << 17


@dataclass
class ExactGrid:
    """The grid with empty grids merged: compressed codes and marginal prefix counts.

    Attributes:
        codes_t: (F, N) int32 compressed codes, one row per feature; ``n_max`` marks a missing value.
        n_bins: (F,) non-empty grids per feature.
        orig: (F, n_max) the original grid of each compressed one (-1 past ``n_bins``).
        is_cat: (F,) categorical features.
        cb, ct: (F, n_max + 1) cumulative counts of all and of the target samples (DDP sums).
        n_max: the most non-empty grids of any feature.
        n_rows: samples over all ranks.
    """

    codes_t: torch.Tensor
    n_bins: torch.Tensor
    orig: torch.Tensor
    is_cat: torch.Tensor
    cb: torch.Tensor
    ct: torch.Tensor
    n_max: int
    n_rows: int


def compress(
    binned: Binned,
    target: torch.Tensor,
    counts: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    recode: bool = True,
) -> ExactGrid:
    """Merge each feature's empty grids (counted over all ranks) and recode the samples; ``counts``: the per-grid
    counts of all and of the target samples (:func:`torch_amore.grids.ratios.grid_counts`) when known. ``recode=False``
    leaves the samples out (``codes_t`` has no columns): single conditions need only the counts."""
    codes = binned.codes
    device = codes.device
    n, n_feat = codes.shape
    width = binned.n_bins_max
    if counts is None:
        t_rows = torch.nonzero(target, as_tuple=True)[0]
        counts = grid_counts(codes, None, width), grid_counts(codes, t_rows, width)
    tot, tgt = counts
    nonempty = tot > 0
    n_bins = nonempty.sum(1)
    n_max = max(1, int(n_bins.max()))
    rank = nonempty.long().cumsum(1) - 1
    index = torch.where(nonempty, rank, torch.full_like(rank, n_max))  # empty grids: a dump column
    lut = torch.cat([index, torch.full((n_feat, 1), n_max, dtype=torch.long, device=device)], 1)
    flat = lut.to(torch.int32).reshape(-1)  # (feature, code) -> compressed code at feature * (width + 1) + code
    offsets = torch.arange(n_feat, dtype=torch.int32, device=device)[:, None] * (width + 1)
    codes_t = torch.empty(n_feat, n if recode else 0, dtype=torch.int32, device=device)
    step = max(1, _CHUNK // max(1, n))
    for f0 in range(0, n_feat if recode else 0, step):
        # int32 (f, n), contiguous: its flat view indexes the table, the result lands in place
        part = codes[:, f0 : f0 + step].t().to(torch.int32, memory_format=torch.contiguous_format)
        part += offsets[f0 : f0 + step]
        torch.index_select(flat, 0, part.view(-1), out=codes_t[f0 : f0 + step].view(-1))
    grids = torch.arange(width, device=device).expand(n_feat, width)
    orig = torch.full((n_feat, n_max + 1), -1, dtype=torch.long, device=device)
    orig.scatter_(1, index, torch.where(nonempty, grids, torch.full_like(grids, -1)))
    zero = torch.zeros(n_feat, 1, dtype=torch.long, device=device)
    tot_c = torch.zeros(n_feat, n_max + 1, dtype=torch.long, device=device).scatter_add_(1, index, tot)[:, :n_max]
    tgt_c = torch.zeros(n_feat, n_max + 1, dtype=torch.long, device=device).scatter_add_(1, index, tgt)[:, :n_max]
    return ExactGrid(
        codes_t=codes_t,
        n_bins=n_bins,
        orig=orig[:, :n_max],
        is_cat=binned.is_cat,
        cb=torch.cat([zero, tot_c.cumsum(1)], 1),
        ct=torch.cat([zero, tgt_c.cumsum(1)], 1),
        n_max=n_max,
        n_rows=D.global_count(n),
    )


class PairCounts:
    """Cumulative 2-D counts ``C[p, a, b]`` (all samples, and target samples) of pairs of features ``p = (j, k)``:
    the samples with ``code_j < a`` and ``code_k < b``, summed across DDP ranks."""

    def __init__(self, grid: ExactGrid, target: torch.Tensor) -> None:
        self.grid = grid
        self.target = target
        self._ordered_codes: tuple[torch.Tensor, ...] | None = None  # see _ordered
        self._index: torch.Tensor | None = None  # see _index_buffer
        n_feat, width = grid.codes_t.shape[0], grid.n_max
        device = grid.codes_t.device
        # small grids: one one-hot product gives every pair at once (BLAS beats bincount below ~9 grids, CUDA always)
        self.by_matmul = (width <= 8 or device.type == "cuda") and (n_feat * width) ** 2 <= (1 << 26)
        self._gram = None
        if self.by_matmul:
            lut = torch.arange(width + 1, device=device).expand(n_feat, -1)
            exact32 = grid.n_rows < (1 << 24)
            self._gram = tuple(
                D.all_reduce_sum(pair_histograms(grid.codes_t, lut, width, cols, exact32=exact32))
                for cols in (None, torch.nonzero(target, as_tuple=True)[0])
            )

    def _ordered(self, order: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """For the features in ``order`` (cached per ``order``): their codes doubled plus ``row x cells`` (each row a
        block of ``cells`` bins of its own), and ``2 (n_max + 1) code + is_target``: summed over the features ``b``
        and ``a`` of a pair, the doubled pair cell plus the target bit, in ``b``'s block (:meth:`_bincount` moves it
        to the pair's). int32 where every sum fits, else int64."""
        cache = self._ordered_codes
        if cache is None or cache[0] is not order:
            n_feat, wd = len(order), self.grid.n_max + 1
            cells = 2 * wd * wd
            dtype = self.grid.codes_t.dtype if (2 * n_feat + 3) * cells < 2**31 else torch.long
            codes = self.grid.codes_t.index_select(0, order).to(dtype)  # a fresh copy: shifted in place
            scaled = torch.add(self.target.to(dtype), codes, alpha=2 * wd)
            rows = torch.arange(n_feat, device=codes.device, dtype=dtype)[:, None]
            codes.mul_(2).add_(rows * cells)
            self._ordered_codes = cache = (order, codes, scaled)
        return cache[1], cache[2]

    def _index_buffer(self, size: int, dtype: torch.dtype) -> torch.Tensor:
        """(size,) scratch of :meth:`_bincount`, reused by its chunks: each fresh buffer of many MB costs page faults
        (freed memory of that size goes back to the system), about as long as filling it."""
        buf = self._index
        if buf is None or buf.dtype != dtype or buf.numel() < size:
            self._index = buf = torch.empty(size, dtype=dtype, device=self.grid.codes_t.device)
        return buf[:size]

    def _bincount(self, order: torch.Tensor, p0: int, p1: int) -> torch.Tensor:
        """(P, n_max, n_max, 2) counts of the other and of the target samples of the pairs ``p0..p1-1`` of
        ``triu_indices(F, F, 1)`` over the features in ``order``: pair ``(a, b)`` is ``(order[a], order[b])``,
        counted with rows of ``order[a]``'s grids. One count of every sample: the target bit is the index's last."""
        codes, scaled = self._ordered(order)
        n_feat, n = codes.shape
        wd = self.grid.n_max + 1
        cells = 2 * wd * wd
        # int32 indices unless the chunk's bins overflow them (tens of thousands of grids)
        dtype = codes.dtype if (p1 - p0) * cells < 2**31 else torch.long
        if n <= _FEW_ROWS and (p1 - p0) * n <= _CHUNK:  # few rows: every pair in one bincount (few operations)
            idx = self._index_buffer((p1 - p0) * n, dtype).view(p1 - p0, n)
            anchors = list(_anchors(p0, p1, n_feat))
            a0, a1 = (anchors[0][0], anchors[-1][0] + 1) if anchors else (0, 0)
            # per anchor a: its cells and target bits, moved from b's block to that of the pair (a, b) in this chunk,
            # pair triu_start(a) + b - a - 1 (the same shift for every b)
            shift = [(triu_start(a, n_feat) - a - 1 - p0) * cells for a in range(a0, a1)]
            lifted = torch.add(scaled[a0:a1], tensor_on(shift, dtype=dtype, device=codes.device)[:, None])
            for a, lo, hi, b0 in anchors:  # (a, b > a): slices of the codes, no gathered copies
                torch.add(codes[b0 : b0 + hi - lo], lifted[a - a0], out=idx[lo - p0 : hi - p0])
            out = counting.bincount(idx.view(-1), (p1 - p0) * cells)
            return D.all_reduce_sum(out.view(-1, wd, wd, 2)[:, :-1, :-1])
        out = torch.zeros((p1 - p0) * cells, dtype=torch.long, device=codes.device)
        if n:
            for a, lo, hi, b0 in _anchors(p0, p1, n_feat):  # the pairs (a, b > a) of this chunk: b contiguous
                step = max(1, _CHUNK // n)
                for q in range(lo, hi, step):  # bounded memory
                    q1 = min(hi, q + step)
                    b = b0 + q - lo  # the rows b..: their blocks from 0 (b's own offset taken off)
                    idx = torch.add(codes[b : b + q1 - q], scaled[a] - b * cells)
                    out[(q - p0) * cells : (q1 - p0) * cells] += counting.bincount(idx.view(-1), (q1 - q) * cells)
        return D.all_reduce_sum(out.view(-1, wd, wd, 2)[:, :-1, :-1])  # a view: cumulate copies it once

    def prefix(
        self, order: torch.Tensor, p0: int, p1: int
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The pairs ``p0..p1-1`` of ``triu_indices(F, F, 1)`` over the features in ``order``: their features
        ``(j, k)`` (either may be the smaller) and (P, n_max + 1, n_max + 1) cumulative counts of all and of the
        target samples, axes ``(j, k)`` (int32 when the counts fit)."""
        a, b = torch.triu_indices(len(order), len(order), 1, device=order.device)
        j, k = order[a[p0:p1]], order[b[p0:p1]]
        if self._gram is not None:
            tot, tgt = (g[j, :, k, :] for g in self._gram)
        else:
            both = self._bincount(order, p0, p1)
            tgt, tot = both[..., 1], both.sum(3)  # each sample counted once
        small = self.grid.n_rows < (1 << 29)  # 2 * hits - support fits int32: half the memory traffic
        return j, k, cumulate(tot, small), cumulate(tgt, small)


def _cell_starts(lut: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
    """(F, width + 1) first code of each cell of a non-decreasing ``lut`` (cell ``c`` holds the codes ``i`` with
    ``starts[c] <= i < starts[c + 1]``), in ``dtype`` (the codes' dtype) where every start fits it, else int64."""
    cells = torch.arange(width + 1, device=lut.device)
    starts = (lut[:, None, :] < cells[None, :, None]).sum(2)  # at most lut.shape[1]
    fits = dtype.is_floating_point or lut.shape[1] <= torch.iinfo(dtype).max
    return starts.to(dtype) if fits else starts  # (a mixed-dtype comparison is slower, but an overflow is wrong)


def pair_histograms(
    codes_t: torch.Tensor, lut: torch.Tensor, width: int, cols: torch.Tensor | None = None, *, exact32: bool = True
) -> torch.Tensor:
    """(F, width, F, width) 2-D counts of the cells of every pair of features, from one-hot matrix products.

    Sample ``i`` lies in cell ``lut[f, codes_t[f, i]]`` of feature ``f`` (``lut`` non-decreasing; a cell of ``width``
    or more is counted nowhere). Each chunk of rows becomes a one-hot matrix; only the blocks on and above the
    diagonal of the symmetric gram are multiplied. ``cols`` picks the samples (all when ``None``). This process's
    counts only; ``exact32``: float32 products, exact while every count is below 2**24 (else float64).

    Example:
        >>> codes_t = torch.tensor([[0, 1, 1, 2], [1, 1, 0, 0]])  # feature 0: code 2 is missing
        >>> pair_histograms(codes_t, torch.tensor([[0, 1, 2], [0, 1, 2]]), 2)[0, :, 1, :].tolist()
        [[0, 1], [1, 1]]
    """
    n_feat, n = codes_t.shape
    device = codes_t.device
    dt = torch.float32 if exact32 else torch.float64
    n_cols = n_feat * width
    starts = _cell_starts(lut, width, codes_t.dtype)
    first, after = starts[:, :-1, None], starts[:, 1:, None]  # (F, width, 1)
    out = torch.zeros(n_cols, n_cols, dtype=dt, device=device)
    edges = _blocks(n_cols)
    rows = n if cols is None else cols.numel()
    step = max(1, _CHUNK // max(1, 2 * n_cols))
    hot = torch.empty(n_feat, width, min(step, rows), dtype=dt, device=device)  # (feature, cell) x rows
    above = torch.empty_like(hot)
    with parallel_pass(n_feat * rows):  # large data: comparisons and products on the caller's threads
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            if cols is None:
                part = codes_t[:, None, r0:r1]
            else:
                part = torch.gather(codes_t, 1, cols[r0:r1].expand(n_feat, -1))[:, None, :]
            h = hot[:, :, : r1 - r0]
            torch.ge(part, first, out=h).sub_(torch.ge(part, after, out=above[:, :, : r1 - r0]))  # float outputs: fast
            h = h.reshape(n_cols, r1 - r0)
            for i, (a0, a1) in enumerate(edges):
                for b0, b1 in edges[i:]:
                    out[a0:a1, b0:b1] += h[a0:a1] @ h[b0:b1].T
    for i, (a0, a1) in enumerate(edges):  # the blocks below the diagonal, by symmetry
        for b0, b1 in edges[i + 1 :]:
            out[b0:b1, a0:a1] = out[a0:a1, b0:b1].T
    return out.reshape(n_feat, width, n_feat, width).round().long()


def _blocks(n: int, size: int = 256) -> list[tuple[int, int]]:
    """``[0, n)`` in about equal blocks of at most ``size`` (one block when ``n <= size``)."""
    count = -(-n // size)
    edges = [n * i // count for i in range(count + 1)]
    return list(zip(edges[:-1], edges[1:]))


def _anchors(p0: int, p1: int, n: int) -> Iterator[tuple[int, int, int, int]]:
    """The pairs ``p0..p1-1`` of ``triu_indices(n, n, 1)`` grouped by their first feature ``a``: ``(a, lo, hi,
    b0)``, pairs ``lo..hi-1`` being ``(a, b0), (a, b0 + 1), ...``.

    Example:
        >>> list(_anchors(2, 5, 4))  # pairs (0, 3), (1, 2), (1, 3)
        [(0, 2, 3, 3), (1, 3, 5, 2)]
    """
    a = triu_row(p0, n)
    while a < n - 1 and triu_start(a, n) < p1:
        lo, hi = max(p0, triu_start(a, n)), min(p1, triu_start(a + 1, n))
        yield a, lo, hi, a + 1 + lo - triu_start(a, n)
        a += 1


def triu_start(a: int, n: int) -> int:
    """Index of the pair ``(a, a + 1)`` in ``triu_indices(n, n, 1)`` order."""
    return a * n - a * (a + 1) // 2


def triu_row(p: int, n: int) -> int:
    """The first feature of pair ``p`` in ``triu_indices(n, n, 1)`` order."""
    a = 0
    while a < n - 1 and triu_start(a + 1, n) <= p:
        a += 1
    return a


def cumulate(h: torch.Tensor, small: bool = False) -> torch.Tensor:
    """(P, A + 1, B + 1) 2-D prefix sums of counts (P, A, B), zero-padded (int32 when ``small``)."""
    dt = torch.int32 if small else torch.long
    out = torch.zeros(h.shape[0], h.shape[1] + 1, h.shape[2] + 1, dtype=dt, device=h.device)
    inner = out[:, 1:, 1:]
    inner.copy_(h).cumsum_(2).cumsum_(1)  # in place: no temporaries
    return out
