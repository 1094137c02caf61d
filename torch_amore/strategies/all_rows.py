"""The counts of all rows that the beam strategy makes whatever the target (:class:`AllRows`): made once and shared by
the searches of other targets on the same rows (the permutations of
:class:`torch_amore.search.null_search.NullSearch`), so that each of those counts only its target rows.

Each search of the beam strategy counts, on its fine grids, every row per grid at the root of the beam and for the
pair seeds' ranking, and the 2-D counts of every row in the seeds' coarse cells of its most promising pairs of
features (:mod:`torch_amore.strategies.seeding`). None of these depends on the target: the root's counts outside the
target are all rows' counts less the target's, and the seeds' pairs are a part of the 2-D counts of every pair of
numeric features. The counts are integers, so a search that reads them here finds exactly what it finds counting them
itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from torch_amore._utils import distributed as D
from torch_amore.grids.binning import Binned
from torch_amore.grids.box_counts import box_masks
from torch_amore.grids.pair_counts import pair_histograms
from torch_amore.grids.ratios import group_grid_counts

if TYPE_CHECKING:
    from torch_amore.strategies.beam import BeamSearch

__all__ = ["AllRows"]

#: The 2-D counts of all pairs of numeric features are shared while there are at most this many (their cost grows
#: with the square of their number; a search pairs at most :data:`torch_amore.strategies.seeding.SEED_FEATURES`).
SHARED_PAIR_FEATURES = 256
#: Bytes of the per-cell counts kept for the seeds' conditions (:meth:`AllRows.cell_counts`); beyond, they are counted.
CELL_BYTES = 1 << 28


class AllRows:
    """The target-independent counts of one fine binning's rows, each made on first use and kept. Searches side by
    side on threads may share one: what it keeps is the same whichever makes it, made before it is read, and its
    dicts are copied before a loop reads them.

    Args:
        fine: the beam's fine binning (:func:`torch_amore.grids.fine_grid.fine_binning`) of the searched rows (in a
            sharded run, this rank's: the counts are summed over the ranks).

    Example:
        >>> import torch
        >>> from torch_amore.grids.binning import bin_features
        >>> from torch_amore.grids.fine_grid import fine_binning
        >>> X = torch.rand(1000, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
        >>> shared = AllRows(fine_binning(X, bin_features(X, [0, 1, 2], ["float"] * 3), 256))
        >>> shared.counts.shape, shared.counts.sum(1).tolist()
        (torch.Size([3, 256]), [1000, 1000, 1000])
    """

    def __init__(self, fine: Binned) -> None:
        self.fine = fine
        self._counts: torch.Tensor | None = None
        self._grams: dict[tuple, torch.Tensor] = {}
        self._supports: dict[tuple, torch.Tensor] = {}
        self._lut: dict[int, torch.Tensor] = {}  # feature -> its seeds' coarse cell of every fine grid
        self._cells: dict[int, torch.Tensor] = {}  # feature -> (cells, F, W) counts of all rows per cell
        self._lut_host: dict[int, list[int]] = {}
        self._n_cells = 0

    @property
    def counts(self) -> torch.Tensor:
        """(F, W) rows per fine grid of every feature (missing values counted nowhere)."""
        if self._counts is None:
            codes_t = self.fine.codes_t
            groups = torch.zeros(codes_t.shape[1], dtype=torch.long, device=codes_t.device)
            self._counts = group_grid_counts(codes_t, None, groups, 1, self.fine.n_bins_max)[0]  # every row, in place
        return self._counts

    def target_counts(self, target: torch.Tensor) -> torch.Tensor:
        """(F, W) target rows per fine grid of every feature (one pass over the target's rows: not kept)."""
        codes_t = self.fine.codes_t
        t_rows = torch.nonzero(target, as_tuple=True)[0]
        return group_grid_counts(codes_t, t_rows, torch.zeros_like(t_rows), 1, self.fine.n_bins_max)[0]

    def pair_counts(
        self, numeric: tuple[int, ...], lut: torch.Tensor, width: int, exact32: bool
    ) -> torch.Tensor | None:
        """(F', width, F', width) 2-D counts of all rows in the coarse cells ``lut`` of every pair of the numeric
        features ``numeric`` (rows of ``lut``; :func:`torch_amore.grids.pair_counts.pair_histograms`), or ``None``
        where there are more than :data:`SHARED_PAIR_FEATURES` of them. ``lut`` must follow from the binning alone
        (the seeds' cells are cut from :attr:`counts`): the counts are kept per ``numeric``, ``width`` and
        ``exact32``."""
        if len(numeric) > SHARED_PAIR_FEATURES:
            return None
        key = (numeric, width, exact32)
        if key not in self._grams:
            codes_t = self.fine.codes_t
            if len(numeric) < codes_t.shape[0]:
                codes_t = codes_t[torch.tensor(numeric, device=codes_t.device)]
            self._grams[key] = D.all_reduce_sum(pair_histograms(codes_t, lut, width, None, exact32=exact32))
            self._n_cells = width  # before the cells: a search beside this one reads them (cells_of, cell_counts)
            self._lut.update(zip(numeric, lut))
        return self._grams[key]

    def pair_supports(self, numeric: tuple[int, ...], lut: torch.Tensor, exact32: bool) -> torch.Tensor | None:
        """(F' (F' - 1) / 2, nI, nI) all rows in every rectangle of the seeds' coarse cells ``lut`` of every pair of
        the numeric features ``numeric`` (:func:`torch_amore.strategies.seeding.rectangle_counts` of
        :meth:`pair_counts`, pairs in the order of :func:`torch.triu_indices`), made once; ``None`` where
        :meth:`pair_counts` is."""
        from torch_amore.strategies.seeding import SEED_GRIDS, rectangle_counts

        grams = self.pair_counts(numeric, lut, SEED_GRIDS, exact32)
        if grams is None:
            return None
        key = (numeric, exact32)
        if key not in self._supports:
            jj, kk = torch.triu_indices(len(numeric), len(numeric), 1, device=grams.device)
            self._supports[key] = rectangle_counts(grams[jj, :, kk, :], exact32=exact32)
        return self._supports[key]

    def cells_of(self, cond: tuple[int, int, int]) -> tuple[int, int, int] | None:
        """``(feature, first cell, last cell)`` where the fine condition ``cond`` selects exactly the rows of a range
        of its feature's seed cells (a seed's condition), else ``None``."""
        j, lo, hi = cond
        if j not in self._lut:
            return None
        if j not in self._lut_host:
            self._lut_host[j] = self._lut[j].tolist()
        lut = self._lut_host[j]
        first, last = lut[lo], lut[hi]
        if (lo > 0 and lut[lo - 1] == first) or (hi + 1 < len(lut) and lut[hi + 1] == last):
            return None  # a cell the condition cuts
        return j, first, last

    def cell_counts(self, j: int) -> torch.Tensor | None:
        """(cells, F, W) rows per fine grid of every feature in each seed cell of feature ``j`` (one pass over all
        rows, kept), or ``None`` once :data:`CELL_BYTES` are kept."""
        if j not in self._cells:
            codes_t, n_cells = self.fine.codes_t, self._n_cells
            size = n_cells * codes_t.shape[0] * self.fine.n_bins_max * 4
            if size + sum(c.numel() * 4 for c in list(self._cells.values())) > CELL_BYTES:
                return None
            cell = self._lut[j][codes_t[j].long()]  # missing values: cell ``n_cells``, counted nowhere
            rows = torch.nonzero(cell < n_cells, as_tuple=True)[0]
            counts = group_grid_counts(codes_t, rows, cell[rows], n_cells, self.fine.n_bins_max)
            self._cells[j] = counts.to(torch.int32 if codes_t.shape[1] < (1 << 31) else torch.int64)  # half the bytes
        return self._cells[j]

    def seed_counts(self, nodes: list[tuple], search: BeamSearch) -> torch.Tensor:
        """``search``'s node counts (:meth:`torch_amore.strategies.beam.BeamSearch._node_counts`) of the seeds'
        single conditions ``nodes``: where one selects a range of its feature's seed cells whose counts are kept, all
        rows' counts are the sum over those cells and only the target's rows are counted (the others: all rows' less
        the target's; the same integers); the other nodes are counted as ever."""
        cells = [self.cells_of(c) for (c,) in nodes]
        kept = [None if c is None else self.cell_counts(c[0]) for c in cells]
        if all(k is None for k in kept):
            return search._node_counts(nodes)
        t_rows = torch.nonzero(search.target, as_tuple=True)[0]
        codes_t = self.fine.codes_t.index_select(1, t_rows)  # (F, T): the target's rows
        groups, rows = torch.nonzero(box_masks(codes_t, nodes, column_major=True), as_tuple=True)
        tgt = group_grid_counts(codes_t, rows, groups, len(nodes), self.fine.n_bins_max)
        counted = [nodes[i] for i, k in enumerate(kept) if k is None]
        if counted:  # both parts of the others, summed
            both = search._node_counts(counted)
            rest = iter(both[: len(counted)] + both[len(counted) :])
        every = [next(rest) if k is None else k[c[1] : c[2] + 1].sum(0) for k, c in zip(kept, cells)]
        return torch.cat([torch.stack(every) - tgt, tgt])
