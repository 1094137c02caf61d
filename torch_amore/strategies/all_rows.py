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

import torch

from torch_amore._utils import distributed as D
from torch_amore.grids.binning import Binned
from torch_amore.grids.pair_counts import pair_histograms
from torch_amore.grids.ratios import group_grid_counts

__all__ = ["AllRows"]

#: The 2-D counts of all pairs of numeric features are shared while there are at most this many (their cost grows
#: with the square of their number; a search pairs at most :data:`torch_amore.strategies.seeding.SEED_FEATURES`).
SHARED_PAIR_FEATURES = 256


class AllRows:
    """The target-independent counts of one fine binning's rows, each made on first use and kept.

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

    @property
    def counts(self) -> torch.Tensor:
        """(F, W) rows per fine grid of every feature (missing values counted nowhere)."""
        if self._counts is None:
            codes_t = self.fine.codes_t
            rows = torch.arange(codes_t.shape[1], device=codes_t.device)
            self._counts = group_grid_counts(codes_t, rows, torch.zeros_like(rows), 1, self.fine.n_bins_max)[0]
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
        return self._grams[key]
