"""How the beam strategy counts its nodes (:class:`NodeCounts`): the per-grid counts of the rows a node's conditions
select, outside the target and inside it, for all nodes of one length in one pass.

The rows come from one ``nonzero`` over the nodes' stacked masks (or, with ``row_chunk``, the codes are read a chunk
of rows at a time), and one batched ``bincount`` counts them. A block of consecutive features of few grids
(:func:`narrow_block`: the one-hot columns of a categorical table) is counted on its own grids: by one matrix
product of the nodes' masks with the block's one-hot codes where those are small, else by its own pass. The counts
are integers, the same whichever way they are made.
"""

from __future__ import annotations

import torch

from torch_amore._utils import distributed as D
from torch_amore.grids.box_counts import box_counts, box_masks
from torch_amore.grids.ratios import group_grid_counts

__all__ = ["NARROW_BINS", "NARROW_BLOCK", "NARROW_HOT", "NodeCounts", "narrow_block"]


#: A block of consecutive features of at most :data:`NARROW_BINS` grids each, at least :data:`NARROW_BLOCK` long,
#: has its best intervals computed on its own grids (its tables that much narrower than the widest feature's).
NARROW_BINS = 16
NARROW_BLOCK = 32


def narrow_block(n_bins: list[int] | None) -> tuple[int, int, int] | None:
    """``(start, stop, grids)``: the longest run of at least :data:`NARROW_BLOCK` consecutive features of at most
    :data:`NARROW_BINS` grids, and the most grids among them; ``None`` where there is none.

    Example:
        >>> narrow_block([1024] * 3 + [2] * 40 + [3] + [1024])
        (3, 44, 3)
        >>> narrow_block([1024, 2, 2]) is None
        True
    """
    best, start = None, 0
    for f, n in enumerate([*(n_bins or []), NARROW_BINS + 1]):
        if n > NARROW_BINS:
            if f - start >= NARROW_BLOCK and (best is None or f - start > best[1] - best[0]):
                best = (start, f, max(n_bins[start:f]))
            start = f + 1
    return best


#: Elements of the one-hot codes of a block of few grids that :meth:`NodeCounts._narrow_hot` keeps (32 MiB as float32):
#: a node's counts on them are one matrix product, many times faster than a ``bincount`` pass over its samples.
NARROW_HOT = 1 << 23


class NodeCounts:
    """The node counts of :class:`torch_amore.strategies.beam.BeamSearch`, which sets what they read: ``codes_t``
    (F, N) the fine codes column-major, ``target`` (N,) bool, ``width`` the grids of the widest feature, ``narrow``
    (:func:`narrow_block` of the features' grids), ``row_chunk`` and ``n_rows`` (all ranks' rows)."""

    codes_t: torch.Tensor
    target: torch.Tensor
    width: int
    narrow: tuple[int, int, int] | None
    row_chunk: int | None
    n_rows: int

    def _node_masks(self, nodes: list[tuple]) -> torch.Tensor:
        """(G, N) bool: the samples satisfying each node's conditions
        (:func:`torch_amore.grids.box_counts.box_masks`)."""
        return box_masks(self.codes_t, nodes, column_major=True)

    def _node_rows(self, nodes: list[tuple], masks: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """The samples of every node and each one's node (``rows``, ``groups``), from one ``nonzero`` (of the
        nodes' ``masks`` when given)."""
        if masks is None and all(not c for c in nodes):
            n = self.codes_t.shape[1]
            rows = torch.arange(n, device=self.codes_t.device).repeat(len(nodes))
            return rows, torch.arange(len(nodes), device=rows.device).repeat_interleave(n)
        groups, rows = torch.nonzero(self._node_masks(nodes) if masks is None else masks, as_tuple=True)
        return rows, groups

    def _node_counts(self, nodes: list[tuple]) -> torch.Tensor:
        """(2 G, F, width) per-grid counts of the G ``nodes``: of each node's samples outside the target, then of its
        target samples; from the nodes' rows, or with ``row_chunk`` from their conditions, chunk by chunk
        (:func:`torch_amore.grids.box_counts.box_counts`). A block of features of few grids (:func:`narrow_block`,
        the one-hot columns of a categorical table) is counted on its own grids: by one matrix product of the nodes'
        masks with the block's one-hot codes where those are small (:meth:`_narrow_hot`), else by its own
        ``bincount`` pass; the same counts (no sample lies beyond a feature's grids, missing values in none)."""
        g = len(nodes)
        if self.row_chunk is not None:
            counts, _ = box_counts(self.codes_t, self.target, nodes, self.width, self.row_chunk, column_major=True)
            return torch.cat([counts[:, 0], counts[:, 1]])
        if self.narrow is None and nodes == [()]:  # the root: every row once, in order (nothing gathered)
            return group_grid_counts(self.codes_t, None, self.target, 2, self.width)  # target: group 1
        if self.narrow is None:
            rows, groups = self._node_rows(nodes)
            t = self.target[rows].to(groups.dtype)
            return group_grid_counts(self.codes_t, rows, groups + g * t, 2 * g, self.width)  # target: g + node
        a, b, w = self.narrow
        codes_t, hot = self.codes_t, self._narrow_hot()
        n_feat, device = codes_t.shape[0], codes_t.device
        masks = None
        if hot is not None:
            masks = (
                self._node_masks(nodes)
                if any(nodes)
                else torch.ones(g, codes_t.shape[1], dtype=torch.bool, device=device)
            )
        rows, groups = self._node_rows(nodes, masks)
        groups = groups + g * self.target[rows].to(groups.dtype)  # target samples: g + node
        out = torch.zeros(2 * g, n_feat, self.width, dtype=torch.long, device=device)
        for f0, f1 in ((0, a), (b, n_feat)):
            if f1 > f0:
                out[:, f0:f1] = group_grid_counts(codes_t[f0:f1], rows, groups, 2 * g, self.width)
        if hot is None:
            out[:, a:b, :w] = group_grid_counts(self._narrow_codes(), rows, groups, 2 * g, w)
        else:  # (2 G, N) which samples each count takes, times (N, block x w) one-hot codes: exact integer sums
            member = torch.cat([masks & ~self.target, masks & self.target]).to(hot.dtype)
            block = D.all_reduce_sum((member @ hot).round_().long())
            out[:, a:b, :w] = block.view(2 * g, b - a, w)
        return out

    def _narrow_codes(self) -> torch.Tensor:
        """The codes of the block of ``narrow`` (:func:`narrow_block`) with a missing value's code lowered to the
        block's grids (the column its counts drop); made once."""
        if "_narrow_t" not in self.__dict__:
            a, b, w = self.narrow
            self._narrow_t = self.codes_t[a:b].clamp(max=w)
        return self._narrow_t

    def _narrow_hot(self) -> torch.Tensor | None:
        """(N, block x w) the one-hot codes of the block of ``narrow`` (a row per sample, a column per feature and
        grid; missing values in none), made once, in float32 (exact integer sums below 2**24 samples, float64
        above); ``None`` where it would hold more than :data:`NARROW_HOT` elements."""
        if "_hot" not in self.__dict__:
            a, b, w = self.narrow
            n = self.codes_t.shape[1]
            self._hot = None
            if n * (b - a) * w <= NARROW_HOT:
                dt = torch.float32 if self.n_rows < (1 << 24) else torch.float64
                cells = torch.arange(w, dtype=self.codes_t.dtype, device=self.codes_t.device)
                hot = torch.empty(n, b - a, w, dtype=dt, device=self.codes_t.device)  # written in its final layout
                self._hot = torch.eq(self.codes_t[a:b].t().unsqueeze(2), cells, out=hot).view(n, -1)
        return self._hot
