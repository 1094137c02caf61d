"""The same search on other targets over the same rows, without binning again (:class:`NullSearch`): the null
distribution of the search-aware p-value (:mod:`torch_amore.search.significance`).

What does not depend on the target is made once and shared by every search: the search's plan
(:class:`torch_amore.search.plan.SearchPlan`), the grid codes and their edges
(:func:`torch_amore.search.extract.bin_plan`), the readable bounds, the beam's fine grids and the per-grid counts of
all rows. Each target then costs its own per-grid target counts and the strategies (tree, grid optima, beam, polish,
pruning), which depend on it throughout. The result of each search is the one :func:`torch_amore.extract_rules` gives
on the same rows, target and options (the tests replay it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from torch_amore._utils import distributed as D
from torch_amore.grids.binning import Binned
from torch_amore.grids.ratios import grid_counts
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import bin_plan
from torch_amore.search.extractor import Extractor, search_scope
from torch_amore.search.options import SearchOptions
from torch_amore.search.plan import SearchPlan
from torch_amore.search.readable import Cond, ReadableRules
from torch_amore.strategies.polish.sorted_columns import SortedColumns

__all__ = ["NullSearch"]

#: Bytes of the polish's sorted columns kept for the searches of other targets (:class:`_KeptColumns`).
KEPT_COLUMN_BYTES = 1 << 28


class _KeptRules(ReadableRules):
    """:class:`ReadableRules` that keep the rule of each condition they made: the searches of other targets meet
    the same conditions again. A condition's rule depends on its binning and bounds alone, and the binnings live as
    long as the :class:`NullSearch` that holds them (they key the kept rules). Every edge of a feature is fetched
    with its first one on binnings of any size, for the same reason."""

    all_edges_grids = math.inf

    def __init__(self, made: ReadableRules) -> None:
        super().__init__(made.X, made.names, made.scale, made.offset)
        self._kept: dict[tuple[int, bool], dict[tuple, Rule]] = {}

    def rules(self, binned: Binned, conds: Sequence[Cond], *, local: bool = False) -> list[Rule]:
        """:meth:`ReadableRules.rules`, each condition's rule made once."""
        conds = [tuple(int(v) for v in c) for c in conds]
        kept = self._kept.setdefault((id(binned), local), {})
        new = [c for c in dict.fromkeys(conds) if c not in kept]
        if new:
            kept.update(zip(new, super().rules(binned, new, local=local)))
        return [kept[c] for c in conds]


class _KeptColumns(SortedColumns):
    """:class:`SortedColumns` whose tables that do not depend on the target (each column's order, observed values
    and allowed cuts) are kept in ``kept`` for the searches of other targets (while they take at most
    :data:`KEPT_COLUMN_BYTES`); only the target's flags in that order are made for each target. The same tables."""

    _KEPT = ("order", "observed", "allowed", "column")

    def __init__(self, X: torch.Tensor, target: torch.Tensor, kept: dict[int, dict[str, torch.Tensor]]) -> None:
        super().__init__(X, target)
        self._kept = kept

    def _sort(self, cols: list[int]) -> dict[str, torch.Tensor]:
        new = [c for c in cols if c not in self._kept]
        room = KEPT_COLUMN_BYTES - len(self._kept) * 7 * self.X.shape[0]  # 7 bytes per row and column
        if new and len(new) * 7 * self.X.shape[0] > room:
            return super()._sort(cols)
        if new:
            made = super()._sort(new)
            for i, c in enumerate(new):
                self._kept[c] = {name: made[name][i : i + 1] for name in self._KEPT}
        tables = {name: torch.cat([self._kept[c][name] for c in cols]) for name in self._KEPT}
        tables["hit"] = self.target[tables["order"].long()] & tables["observed"]
        return tables


class NullSearch:
    """The search of ``extract_rules(X, target, options=options, ...)`` made ready for any target of ``X``'s rows.

    Args:
        X: (N, F) the searched rows (a floating tensor, checked by the caller's search); in a sharded (DDP) run, this
            rank's rows, every rank calling with its part of the same targets (the search of the shards together).
        target: (N,) a boolean target of those rows; the others have the same number of target rows (permutations),
            so the default ``min_support`` is the same for all.
        options: the search's options (the evidence fields are ignored).
        features, feature_names, local_x, target_name: as in :func:`torch_amore.extract_rules`.
        plan: the search's plan (:class:`torch_amore.search.plan.SearchPlan`) of these rows, resolved already (then
            ``options`` and the columns are the plan's).
        base: the :class:`Extractor` of that plan's search on ``target`` (:func:`torch_amore.search.extract.search_plan`
            returns it): its codes, fine grids, counts of all rows and the polish's sorted columns are taken as they
            are, not made again (the sorted columns move to the tables kept for every target).

    Example:
        >>> import torch
        >>> from torch_amore import extract_rules
        >>> X = torch.rand(500, 3, generator=torch.Generator().manual_seed(0))
        >>> t = X[:, 0] > 0.8
        >>> null = NullSearch(X, t, SearchOptions(min_support=20))
        >>> null.search(t)[0] == extract_rules(X, t, min_support=20)[0]
        True
    """

    #: Whether the searches share the counts of all rows, the readable rules and the polish's sorted columns
    #: (``False``: each makes its own, the reference that ``benchmarks/bench_significance.py`` times beside them; the
    #: rule sets are the same).
    share_all_rows: bool = True

    def __init__(
        self,
        X: torch.Tensor,
        target: torch.Tensor,
        options: SearchOptions,
        *,
        features: Sequence[int] | None = None,
        feature_names: Sequence[str] | None = None,
        local_x: Any = None,
        target_name: str = "target",
        plan: SearchPlan | None = None,
        base: Extractor | None = None,
    ) -> None:
        named = {"features": features, "feature_names": feature_names, "local_x": local_x, "target_name": target_name}
        with warnings.catch_warnings():  # the search on the real target gave them
            warnings.simplefilter("ignore")
            plan = SearchPlan.make(X.shape[0], X.shape[1], options, **named) if plan is None else plan
        self.options, self.device = plan.options, X.device
        with search_scope(X.device):
            self.base = bin_plan(X, target, plan) if base is None else base
            made = self.base.__dict__.pop("_columns", None)  # the polish's sorted columns of the real target: their
            if isinstance(made, SortedColumns):  # tables that do not depend on it serve every target (not made again)
                self.base.__dict__.setdefault("_sorted", {}).update(made.sorted_tables())
            self.all_counts = self.base.root_counts()[0]  # all rows per grid: the same for every target
            local = plan.local_x
            self.local_codes = self.base.binned.encode_sample(local) if local is not None else None
        self.readable = _KeptRules(self.base.readable)
        self.min_support = plan.support_count(self.base.n_total_target)  # over all ranks' rows in a sharded run
        self.target_name = plan.target_name

    def extractor(self, target: torch.Tensor) -> Extractor:
        """An :class:`Extractor` of ``target`` sharing the codes, readable bounds, fine grids and all-row counts."""
        b = self.base
        ex = Extractor(b.binned, target, b.names, b.scale, b.offset, target_name=self.target_name, X=b.X)
        ex.__dict__["_fine"] = b.__dict__.setdefault("_fine", {})  # fine grids depend on X alone
        ex.readable = self.readable if self.share_all_rows else b.readable
        if self.share_all_rows:
            ex.__dict__["_all_rows"] = b.__dict__.setdefault("_all_rows", {})  # so do the counts of all their rows
            if b.X is not None and not D.is_sharded():  # and the polish's sorted columns (one process)
                ex._columns = _KeptColumns(b.X, target, b.__dict__.setdefault("_sorted", {}))
        t_rows = torch.nonzero(target, as_tuple=True)[0]
        ex._root = (self.all_counts, grid_counts(b.binned.codes, t_rows, b.binned.n_bins_max))
        return ex

    def search(self, target: torch.Tensor) -> list[RuleSet]:
        """The rule sets ``extract_rules`` returns for ``target`` on these rows, best first."""
        with search_scope(self.device):
            found = self.extractor(target.to(self.device)).extract(
                self.options, min_support=self.min_support, local_codes=self.local_codes
            )
        if self.options.min_confidence is not None:
            found = [rs for rs in found if rs.confidence >= self.options.min_confidence]
        return found

    def best_fitness(self, target: torch.Tensor) -> float:
        """The best fitness the search finds for ``target`` (``-inf`` when it returns no rule set)."""
        found = self.search(target)
        return found[0].fitness if found else -math.inf
