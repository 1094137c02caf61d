"""The extractor behind :func:`torch_amore.search.extract.extract_rules`: the binned data of one call and the
strategies run on it (tree, beam, exact optimum, polish, pruning), and the scope every search runs in.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from itertools import groupby
from typing import Any

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.threads import beside, done, parallel_pass, search_threads
from torch_amore.grids.binning import Binned
from torch_amore.grids.box_counts import box_counts
from torch_amore.grids.fine_grid import default_n_fine, fine_binning
from torch_amore.grids.ratios import grid_and_target_counts
from torch_amore.rules.masks import drop_same_mask
from torch_amore.rules.metrics import confidence_of_counts, fitness_of_counts
from torch_amore.rules.pruning import prune_rule_sets
from torch_amore.rules.rules import RuleSet
from torch_amore.search.options import SearchOptions
from torch_amore.search.readable import ReadableRules
from torch_amore.strategies.all_rows import AllRows
from torch_amore.strategies.beam import BeamSearch
from torch_amore.strategies.exact import exact_search
from torch_amore.strategies.exact_cost import estimate_cost
from torch_amore.strategies.polish import SortedColumns, polish_many, polish_one
from torch_amore.strategies.seeding import pair_seeds, seed_affordable
from torch_amore.strategies.tree import grow_tree, insertion_order


def sort_rule_sets(rule_sets) -> list[RuleSet]:
    """Unique rule sets, best fitness first (ties: higher confidence, larger support, fewer rules, then text)."""
    unique: dict[frozenset, RuleSet] = {}
    for rs in rule_sets:
        unique.setdefault(frozenset(rs.rules), rs)
    ranked = sorted(unique.values(), key=lambda r: (-r.fitness, -r.confidence, -r.support, len(r.rules)))
    out: list[RuleSet] = []
    for _, tied in groupby(ranked, key=lambda r: (r.fitness, r.confidence, r.support, len(r.rules))):
        tied = list(tied)
        out += sorted(tied, key=str) if len(tied) > 1 else tied  # the text only where needed: it is slow to make
    return out


def _two_feature_sets(ranked: list[RuleSet]) -> list[RuleSet]:
    """The first rule set and the first one on other features: those worth polishing (rule sets on the same features
    mostly polish to the same optimum)."""
    out = ranked[:1]
    for rs in ranked[1:]:
        if frozenset(rs.features) != frozenset(out[0].features):
            return out + [rs]
    return out


def _to_polish(
    tagged: list[tuple[int, RuleSet]],
    optima: dict[int, list[RuleSet]],
    max_length: int,
    min_confidence: float | None,
) -> list[tuple[RuleSet, float | None]]:
    """What the search at each shorter ``max_length`` would have found and polished is a candidate here too: the
    best two-feature-set picks of every length (and the confident ones, with their goal), once each."""
    chosen: dict[tuple, tuple[RuleSet, float | None]] = {}  # to polish, once each
    for length in range(1, max_length + 1):
        part = [rs for at, rs in tagged if at <= length] + [
            rs for k, opt in optima.items() if k <= length for rs in opt
        ]
        ranked = sort_rule_sets(part)
        picks = [(rs, None) for rs in _two_feature_sets(ranked)]
        if min_confidence is not None:
            confident = _two_feature_sets([rs for rs in ranked if rs.confidence >= min_confidence])
            picks += [(rs, min_confidence) for rs in confident]
        for rs, goal in picks:
            chosen.setdefault((rs.rules, goal), (rs, goal))
    return list(chosen.values())


#: How deep (x ``top_k``) the exact strategy searches at most for ``top_k`` rule sets that survive the ``min_gain``
#: pruning (which collapses some into shorter ones): it doubles its ``top_k`` until every rule set not searched ranks
#: below those kept.
EXACT_PRUNED_DEPTH = 64


class Extractor:
    """Runs the rule tree on binned data; shared by :func:`extract_rules` and the hyperparameter search."""

    #: Count the searches' nodes from their conditions, this many rows of codes at a time, instead of keeping their
    #: rows (:func:`torch_amore.grids.box_counts.box_counts`: for codes on disk); ``None``: keep the rows.
    row_chunk: int | None = None

    def __init__(
        self,
        binned: Binned,
        target: torch.Tensor,
        names: Sequence[str],
        scale: Sequence[float],
        offset: Sequence[float],
        target_name: str = "target",
        X: torch.Tensor | None = None,
    ) -> None:
        self.binned = binned
        self.X = X
        self.target = target
        self.names = list(names)
        self.scale = list(scale)
        self.offset = list(offset)
        self.target_name = target_name
        self.n_total_target = int(D.all_reduce_sum(target.sum()))  # D: sums over the shards of a DDP run
        self._root: tuple[torch.Tensor, torch.Tensor] | None = None
        self.readable = ReadableRules(X, self.names, self.scale, self.offset)  # grid intervals -> readable rules

    def root_counts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-grid counts of all samples and of the target at the root (cached: independent of min_support)."""
        if self._root is None and self.row_chunk is not None:
            b = self.binned
            counts, _ = box_counts(b.codes, self.target, [()], b.n_bins_max, self.row_chunk)
            self._root = (counts[0, 0] + counts[0, 1], counts[0, 1])
        if self._root is None:
            self._root = grid_and_target_counts(self.binned.codes, self.target, self.binned.n_bins_max)
        return self._root

    def run(self, *, local_codes: list[int] | None = None, **limits: Any) -> list[RuleSet]:
        """Rule sets of the paper's rule tree (:func:`torch_amore.strategies.tree.grow_tree`, whose keywords
        ``max_length``, ``min_support``, ``top_k`` and ``progress`` are ``limits``), best fitness first."""
        chosen = grow_tree(
            self.binned,
            self.target,
            self.root_counts(),
            self.n_total_target,
            local_codes=local_codes,
            row_chunk=self.row_chunk,
            **limits,
        )
        found: dict[frozenset, RuleSet] = {}
        conds = sorted({s[:3] for c in chosen for s in c.steps})
        rules = dict(zip(conds, self.readable.rules(self.binned, conds, local=local_codes is not None)))
        for c in sorted(chosen, key=insertion_order):  # a rule set met twice: as the depth-first walk met it first
            rs_rules = tuple(rules[s[:3]] for s in c.steps)
            key = frozenset(rs_rules)
            if key not in found:
                found[key] = RuleSet(
                    rules=rs_rules,
                    support=c.support,
                    confidence=confidence_of_counts(c.hits, c.support),
                    fitness=fitness_of_counts(c.hits, c.support, self.n_total_target),
                    ratios=tuple(s[3] for s in c.steps),
                    target_name=self.target_name,
                )
        return sort_rule_sets(found.values())

    def extract(
        self, options: SearchOptions, *, min_support: int, local_codes: list[int] | None = None
    ) -> list[RuleSet]:
        """Rule sets of ``options.strategy`` (see :func:`extract_rules`), best fitness first; ``min_support`` is the
        count meant by ``options.min_support`` on the data (``min_confidence`` steers the beam; it does not filter).

        Every strategy is monotone in ``max_length``: its candidates include those of the same search at every
        shorter length, so the best fitness never drops when one more condition is allowed. Then every condition must
        earn ``options.min_gain``.
        """
        o = options  # max_length capped by the plan (:class:`torch_amore.search.plan.SearchPlan`)
        if o.strategy == "exact":
            return self._extract_exact(o, min_support, local_codes)
        if o.strategy == "beam" and local_codes is None:
            rule_sets, optimal = self._extract_beam(o, min_support)
        else:  # the rule tree, and the grid's optimum
            rule_sets = self._tree(o, min_support, local_codes)
            optimal = self.grid_optimum(o, min_support) if local_codes is None else []
            if o.min_gain > 0:
                rule_sets = self.finish(rule_sets, o)
        if optimal:  # every result says how far it is from the best the grid can express
            rule_sets = [replace(rs, optimum=optimal[0].optimum) for rs in rule_sets]
        return rule_sets

    def _extract_exact(self, o: SearchOptions, min_support: int, local_codes: list[int] | None) -> list[RuleSet]:
        """The exact strategy of :meth:`extract`."""
        if local_codes is not None:
            raise ValueError("strategy='exact' does not support `local_x`; use strategy='beam' or 'paper'.")
        budget = o.exact_budget
        if o.min_gain <= 0:
            return self.run_exact(max_length=o.max_length, min_support=min_support, top_k=o.top_k, budget=budget)
        # pruning collapses some of the top_k into shorter rule sets (or drops them as the same rows): search deeper
        # until every rule set not searched ranks below the top_k kept (each pool's last value is their bar)
        k = o.top_k
        while True:
            pools = self.exact_pools(max_length=o.max_length, min_support=min_support, top_k=k, budget=budget)
            kept = self.finish([rs for pool in pools for rs in pool], o)[: o.top_k]
            bars = [pool[-1].fitness for pool in pools if len(pool) >= k]  # pools cut at k: more rule sets below
            # settled: nothing pruned or dropped among the best (the search's own top_k, ties in its order), or
            # every rule set not seen ranks below the last kept
            unchanged = kept == pools[0][: o.top_k] and len(pools[0]) >= o.top_k
            settled = unchanged or (len(kept) == o.top_k and all(kept[-1].fitness > bar for bar in bars))
            incomplete = not pools[0] or pools[0][0].optimum is None  # none found, or stopped by the budget
            if not bars or settled or incomplete or k >= EXACT_PRUNED_DEPTH * o.top_k:
                return kept
            k *= 2

    def _tree(self, o: SearchOptions, min_support: int, local_codes: list[int] | None) -> list[RuleSet]:
        """The rule tree of :meth:`run` with the options of ``o``."""
        return self.run(
            max_length=o.max_length,
            min_support=min_support,
            top_k=o.top_k,
            local_codes=local_codes,
            progress=o.progress,
        )

    def _extract_beam(self, o: SearchOptions, min_support: int) -> tuple[list[RuleSet], list[RuleSet]]:
        """The beam strategy of :meth:`extract`: the rule tree, the grid's optima and the beam, the best of each
        length polished; with the grid's optimum at ``max_length`` (if one was searched)."""

        def tree_and_optima() -> tuple[list[RuleSet], dict[int, list[RuleSet]]]:
            # the grid's optimum of every length up to 2 is a candidate (length 1 always: one pass over counts)
            return self._tree(o, min_support, None), self.grid_optima(o, min_support)

        # independent: on small data the tree and the grid's optima run beside the beam (progress bars: one
        # after the other)
        later = beside(tree_and_optima, self.binned.codes.numel()) if not o.progress else done(tree_and_optima())
        # pairs weak alone but strong together seed the beam unless the grid's optimum of pairs is a candidate
        beam = functools.partial(
            self.run_beam,
            max_length=o.max_length,
            min_support=min_support,
            beam_width=o.beam_width,
            min_confidence=o.min_confidence,
            progress=o.progress,
        )
        seed = o.max_length >= 2 and not self.optimum_affordable(o.replace(max_length=2))
        tagged = beam(seed=seed)
        rule_sets, optima = later()
        if o.max_length >= 2 and not seed and not optima[2]:  # that optimum found nothing: the beam as it runs
            tagged = beam(seed=True)  # without one
        optimal = optima.get(o.max_length, [])
        for k in optima:
            if k < o.max_length:  # a candidate; its optimum is that of a shorter search
                optima[k] = [replace(rs, optimum=None) for rs in optima[k]]
        to_polish = _to_polish(tagged, optima, o.max_length, o.min_confidence)
        polished = self.polish(
            [rs for rs, _ in to_polish], min_support, min_confidence=[g for _, g in to_polish]
        )  # all at once
        found = [rs for _, rs in tagged] + [rs for opt in optima.values() for rs in opt]
        return self.finish(rule_sets + found + polished, o), optimal

    def finish(self, rule_sets: list[RuleSet], options: SearchOptions) -> list[RuleSet]:
        """Every condition earning ``options.min_gain``, rule sets sorted and those selecting the same samples kept
        once, the shortest."""
        if options.min_gain > 0:
            rule_sets = self.prune(rule_sets, options)
        return self.drop_same_mask(sort_rule_sets(rule_sets))

    def prune(self, rule_sets: list[RuleSet], options: SearchOptions) -> list[RuleSet]:
        """:func:`torch_amore.rules.pruning.prune_rule_sets` on the searched data."""
        if self.X is None:
            return rule_sets
        return prune_rule_sets(
            rule_sets,
            self.X,
            self.target,
            self.n_total_target,
            min_gain=options.min_gain,
            min_confidence=options.min_confidence,
        )

    def drop_same_mask(self, rule_sets: list[RuleSet]) -> list[RuleSet]:
        """:func:`torch_amore.rules.masks.drop_same_mask` on the searched data."""
        return drop_same_mask(rule_sets, self.X)

    def grid_optimum(self, options: SearchOptions, min_support: int) -> list[RuleSet]:
        """The best rule set on the search's grid, its fitness in ``optimum``, when affordable; else ``[]``."""
        o = options
        if not self.optimum_affordable(o):
            return []
        found = self.run_exact(
            max_length=o.max_length,
            min_support=min_support,
            top_k=1,
            budget=o.optimum_budget if o.max_length > 1 else 1 << 62,
        )
        return [rs for rs in found if rs.optimum is not None]

    def grid_optima(self, options: SearchOptions, min_support: int) -> dict[int, list[RuleSet]]:
        """:meth:`grid_optimum` at each ``max_length`` 1 and 2 up to ``options.max_length`` (keyed by it), from one
        exact search where the longer one is affordable (its pool of single conditions is the shorter one's)."""
        o = options
        out = {k: [] for k in (1, 2) if k <= o.max_length}
        two = o.replace(max_length=2)
        if o.max_length >= 2 and self.optimum_affordable(two):
            found = self.run_exact(
                max_length=2, min_support=min_support, top_k=1, budget=o.optimum_budget, shorter=True
            )
            complete = [rs for rs in found if rs.optimum is not None]
            if complete:  # the best of the pairs' search, then of the singles' (with its own optimum)
                out[2] = complete[:1]
                out[1] = [replace(rs, optimum=rs.fitness) for rs in complete[1:2]]
            return out
        out[1] = self.grid_optimum(o.replace(max_length=1), min_support)
        return out

    def optimum_affordable(self, options: SearchOptions) -> bool:
        """Whether :meth:`grid_optimum` searches: ``options.optimum_budget > 0`` and either ``max_length == 1`` (one
        pass over the per-grid counts) or ``max_length == 2`` and an estimated work of at most the budget."""
        o = options
        if o.optimum_budget <= 0 or o.max_length > 2:
            return False
        if o.max_length == 1:
            return True
        n_rows, n_feat = D.global_count(self.binned.codes.shape[0]), self.binned.codes.shape[1]
        return estimate_cost(n_rows, n_feat, self.binned.n_bins_max, o.max_length) <= o.optimum_budget

    def exact_pools(self, *, max_length: int, min_support: int, top_k: int, budget: int) -> list[list[RuleSet]]:
        """The ``top_k`` best rule sets of at most ``max_length`` conditions, then those of each shorter length, as
        pools (each best first), as :meth:`run_exact` with ``shorter`` returns them one after the other."""
        return self._exact(max_length, min_support, top_k, budget, shorter=True)

    def run_exact(
        self, *, max_length: int, min_support: int, top_k: int, budget: int, shorter: bool = False
    ) -> list[RuleSet]:
        """The ``top_k`` best rule sets on the grid (:mod:`torch_amore.strategies.exact`), best first; each carries the
        optimum (the first one's fitness) when the search was complete. ``shorter``: followed by the ``top_k`` best of
        each shorter ``max_length`` (the pools a search at that length returns)."""
        return [rs for pool in self._exact(max_length, min_support, top_k, budget, shorter) for rs in pool]

    def _exact(self, max_length: int, min_support: int, top_k: int, budget: int, shorter: bool) -> list[list[RuleSet]]:
        """The pools of :meth:`exact_pools` (only the first without ``shorter``)."""
        found = exact_search(
            self.binned,
            self.target,
            max_length=max_length,
            min_support=min_support,
            top_k=top_k,
            budget=budget,
            grid_counts=self.root_counts(),
        )
        optimum = fitness_of_counts(*found.boxes[0][:2], self.n_total_target) if found.boxes else None
        pools = [found.boxes] + (found.shorter if shorter else [])
        conds = sorted({c for pool in pools for _, _, box in pool for c in box})
        rules = dict(zip(conds, self.readable.rules(self.binned, conds)))
        optimum = optimum if found.complete else None
        return [[self._rule_set([rules[c] for c in box], h, n, optimum) for h, n, box in pool] for pool in pools]

    def _rule_set(self, rules: list, hits: int, support: int, optimum: float | None = None) -> RuleSet:
        """The rule set of ``rules`` from its counts on the searched data."""
        confidence, fitness = confidence_of_counts(hits, support), fitness_of_counts(hits, support, self.n_total_target)
        return RuleSet(tuple(rules), support, confidence, fitness, target_name=self.target_name, optimum=optimum)

    def fine(self, n_fine: int) -> Binned:
        """The fine equal-width binning of the beam strategy (cached per ``n_fine``)."""
        cache = self.__dict__.setdefault("_fine", {})
        if n_fine not in cache:
            with parallel_pass(self.X.numel()):
                cache[n_fine] = fine_binning(self.X, self.binned, n_fine)
        return cache[n_fine]

    def run_beam(
        self,
        *,
        max_length: int,
        min_support: int,
        beam_width: int = 5,
        n_fine: int | None = None,
        min_confidence: float | None = None,
        progress: bool = False,
        seed: bool = True,
    ) -> list[tuple[int, RuleSet]]:
        """Rule sets of the beam strategy (:mod:`torch_amore.strategies.beam`), unsorted, each with the length at which
        the beam chose it. ``n_fine`` defaults to :func:`torch_amore.grids.fine_grid.default_n_fine`; ``seed=False``
        skips the pair seeding (:mod:`torch_amore.strategies.seeding`)."""
        if n_fine is None:
            n_fine = default_n_fine(D.global_count(self.binned.codes.shape[0]))
        fine = self.fine(n_fine)
        shared = self.__dict__.get("_all_rows")  # all rows' counts, shared by the searches of several targets
        all_rows = None if shared is None else shared.setdefault(n_fine, AllRows(fine))
        search = BeamSearch(
            fine,
            self.target,
            self.n_total_target,
            beam_width=beam_width,
            min_confidence=min_confidence,
            row_chunk=self.row_chunk,
            all_rows=all_rows,
        )
        n, n_feat = D.global_count(fine.codes.shape[0]), len(fine.columns)
        seeded = seed and max_length >= 2 and seed_affordable(n, n_feat)  # pairs weak alone, strong together
        # twice the beam's width of pairs: on a 128-d latent layer at min_support twice the subgroup, five miss the
        # exhaustive pair optimum (0.119 against 0.137) that ten reach
        given = {} if all_rows is None else {"all_rows": all_rows, "target_counts": search.root_target_counts()}
        seeds = pair_seeds(fine, self.target, min_support, 2 * beam_width, **given) if seeded else []
        states = search.run_by_length(max_length=max_length, min_support=min_support, progress=progress, seeds=seeds)
        conds = sorted({c for _, st in states for c in st.conds})
        made = dict(zip(conds, self.readable.rules(fine, conds)))
        return [(length, self._rule_set([made[c] for c in st.conds], st.hits, st.support)) for length, st in states]

    def polish(
        self,
        rule_sets: Sequence[RuleSet],
        min_support: int,
        *,
        min_confidence: float | None | Sequence[float | None] = None,
    ) -> list[RuleSet]:
        """Coordinate ascent on observed values (:mod:`torch_amore.strategies.polish`): re-cut each interval given the
        other rules, or drop it; all ``rule_sets`` at once. ``min_confidence``: one for all, or one per rule set.
        Fitness never decreases, a confident rule set stays confident, and a sharded run gives the single-process
        result.
        """
        rule_sets = list(rule_sets)
        if not rule_sets:
            return rule_sets
        goals = list(min_confidence) if isinstance(min_confidence, Sequence) else [min_confidence] * len(rule_sets)
        return self.polish_goals(rule_sets, min_support, goals)

    def polish_goals(self, rule_sets: list[RuleSet], min_support: int, goals: list[float | None]) -> list[RuleSet]:
        """:meth:`polish` of the (non-empty) ``rule_sets``, ``goals`` the ``min_confidence`` of each, on the searched
        data (unchanged without it)."""
        if self.X is None:
            return rule_sets
        if not D.is_sharded() and "_columns" not in self.__dict__:
            self._columns = SortedColumns(self.X, self.target)  # argsorted columns, kept for later calls
        return self.polish_on(rule_sets, self.X, min_support, goals, columns=self.__dict__.get("_columns"))

    def polish_on(
        self,
        rule_sets: list[RuleSet],
        X: torch.Tensor,
        min_support: int,
        goals: list[float | None],
        *,
        columns: SortedColumns | None = None,
    ) -> list[RuleSet]:
        """The polish of :meth:`polish_goals` on the observed values ``X``: all at once in one process (``columns``:
        ``X``'s argsorted columns when kept), one by one in a sharded run."""
        if D.is_sharded():
            return [
                polish_one(
                    rs, X, self.target, min_support, self.n_total_target, min_confidence=c, target_name=self.target_name
                )
                for rs, c in zip(rule_sets, goals)
            ]
        return polish_many(
            rule_sets,
            X,
            self.target,
            min_support,
            self.n_total_target,
            goals=goals,
            columns=columns,
            target_name=self.target_name,
        )


@contextmanager
def search_scope(device: torch.device | str = "cpu") -> Iterator[None]:
    """The scope every search runs in: small operations on one CPU thread, under :func:`torch.inference_mode` (about a
    tenth less time per call on small data). Nothing the search returns holds an inference tensor.

    Example:
        >>> import torch
        >>> with search_scope("cpu"):
        ...     torch.is_inference_mode_enabled()
        True
    """
    with search_threads(device), torch.inference_mode():
        yield


def capped_max_length(options: SearchOptions, n_searched: int, *, warn: bool = True) -> SearchOptions:
    """``options`` with ``max_length`` at most ``n_searched``, the number of features searched (one condition per
    feature), with a ``UserWarning`` unless ``warn=False`` or it is the default 2 on a single feature.

    Example:
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     capped_max_length(SearchOptions(max_length=100), 4).max_length
        4
        >>> print(caught[0].message)
        max_length=100 is more than the 4 searched features, and a rule set has at most one condition per feature: \
max_length=4 is used.
    """
    if options.max_length <= n_searched or n_searched < 1:
        return options
    if warn and options.max_length > max(n_searched, SearchOptions.max_length):  # not the default on one feature
        warnings.warn(
            f"max_length={options.max_length} is more than the {n_searched} searched features, and a rule set has at "
            f"most one condition per feature: max_length={n_searched} is used.",
            UserWarning,
            stacklevel=3,
        )
    return options.replace(max_length=n_searched)
