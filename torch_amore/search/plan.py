"""The plan of one search: the options and everything derived from them and the converted data, resolved once.

:func:`torch_amore.extract_rules`, :meth:`torch_amore.RegionalRuleExplainer.explain` (in memory and streamed) and the
Lightning callback each build one :class:`SearchPlan` from the converted data; the binning and the strategies read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from torch_amore._utils import distributed as D
from torch_amore.data import arguments as A
from torch_amore.data import memory as M
from torch_amore.data.local_x import to_local_x
from torch_amore.search.extractor import capped_max_length
from torch_amore.search.options import SearchOptions, auto_min_support
from torch_amore.strategies.exact_cost import check_budget


@dataclass(frozen=True)
class SearchPlan:
    """What a search resolved once.

    Attributes:
        options: the checked options, ``max_length`` capped at the number of searched features.
        n_rows: the number of rows (over all ranks of a DDP run).
        columns: the indices of the searched features.
        names: the names of all features.
        min_support: the count meant by a given ``min_support`` (``None``: the default, taken from the subgroup's
            size by :meth:`support_count`).
        local_x: the sample of local rules (F,), or ``None``.
        target_name: the subgroup's name in printed rules.
        search_bytes: the working memory one search of the plan needs on its local rows, as made
            (:func:`torch_amore.data.memory.search_memory`; a plan :meth:`on_rows` of fewer rows keeps it: a bound).
    """

    options: SearchOptions
    n_rows: int
    columns: tuple[int, ...]
    names: tuple[str, ...]
    min_support: int | None
    local_x: torch.Tensor | None = None
    target_name: str = "target"
    search_bytes: int = 0

    @classmethod
    def make(
        cls,
        n_rows: int,
        n_features: int,
        options: SearchOptions,
        *,
        features: Any = None,
        feature_names: Sequence[str] | None = None,
        frame_names: list[str] | None = None,
        local_x: Any = None,
        target_name: str | None = "target",
        columns: Sequence[int] | None = None,
        counted: tuple[int, int | None] | None = None,
    ) -> SearchPlan:
        """The plan of ``n_rows`` local rows of ``n_features`` features (converted already).

        ``columns``: ``features`` resolved already; ``counted``: ``(rows, count)``, the ``min_support`` count
        resolved already on this many local rows, taken when they are ``n_rows``. A bad value, and an exact search
        over its budget, fail here, before any binning.

        Example:
            >>> plan = SearchPlan.make(1000, 3, SearchOptions(max_length=5, min_support=0.1), features=[0, 2])
            >>> plan.options.max_length, plan.columns, plan.min_support, plan.names
            (2, (0, 2), 100, ('feature_0', 'feature_1', 'feature_2'))
        """
        columns = A.resolve_features(features, n_features) if columns is None else columns
        options = capped_max_length(options, len(columns))
        n_all = D.global_count(n_rows)  # all shards of a DDP run
        if counted is not None and counted[0] == n_rows:
            min_support = counted[1]
        else:
            min_support = options.given_support_count(n_all)  # a bad count fails before the binning
        if options.strategy == "exact":  # refused before any binning when it would take too long
            check_budget(n_all, len(columns), options.n_grids, options.max_length, options.exact_budget)
        local = to_local_x(local_x, n_features, frame_names)  # a pandas Series by its labels, X's columns
        if local is not None and bool(torch.isinf(local).any()):
            raise ValueError("Expected `local_x` to hold finite values (NaN marks a missing value).")
        names = A.resolve_names(feature_names, frame_names, n_features)
        o = options
        kw = {"strategy": o.strategy, "max_length": o.max_length, "top_k": o.top_k, "bin_strategy": o.bin_strategy}
        search_bytes = M.search_memory(n_rows, len(columns), o.n_grids, **kw)
        if target_name is not None and not isinstance(target_name, str):
            raise TypeError(f"Expected `target_name` to be a string, but got {target_name!r}.")
        target_name = "target" if target_name is None else target_name  # the default of every entry point
        return cls(options, n_all, tuple(columns), tuple(names), min_support, local, target_name, search_bytes)

    def on_rows(self, n_rows: int, options: SearchOptions) -> SearchPlan:
        """The plan on ``n_rows`` of its rows (e.g. a half-sample) with ``options``, ``min_support`` counted there."""
        return replace(self, options=options, n_rows=n_rows, min_support=options.given_support_count(n_rows))

    def support_count(self, subgroup_size: int) -> int:
        """The ``min_support`` count of the search: the given one, else :func:`auto_min_support`'s."""
        return auto_min_support(self.n_rows, subgroup_size) if self.min_support is None else self.min_support
