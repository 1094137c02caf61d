"""The public :func:`extract_rules`: validate, bin, run the strategies, turn their results into rule sets.

The paper's rule tree (Algorithms 2 and 3) lives in :mod:`torch_amore.tree`: starting from all samples, each node's
samples are counted per grid of every remaining feature, the counts become candidate intervals
(:func:`torch_amore.intervals.candidate_intervals`), the ``top_k`` candidates with the highest probability ratios
open child nodes until rule sets reach ``max_length`` rules, all nodes of a level at once. Every node of the tree is a
candidate rule set. The beam strategy (:mod:`torch_amore.beam`) adds fitness-optimal intervals, and its best rule sets
are polished on observed values (:mod:`torch_amore.polish`). Grid intervals become rules with readable bounds that
select the same samples (:mod:`torch_amore.readable`); rule sets selecting the same samples are kept once
(:func:`torch_amore.masks.drop_same_mask`). The result is sorted by fitness, best first.
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

from torch_amore import _validation as V
from torch_amore import distributed as D
from torch_amore import memory as M
from torch_amore._typing import ArrayLike, MaskLike
from torch_amore.beam import BeamSearch
from torch_amore.binning import Binned, bin_features
from torch_amore.column_stats import column_stats
from torch_amore.exact import check_budget, estimate_cost, exact_search
from torch_amore.fine_grid import default_n_fine, fine_binning
from torch_amore.masks import drop_same_mask
from torch_amore.metrics import confidence_of_counts, fitness_of_counts
from torch_amore.options import SearchOptions
from torch_amore.polish import SortedColumns, polish_many, polish_one
from torch_amore.pruning import prune_rule_sets
from torch_amore.ratios import grid_counts
from torch_amore.readable import ReadableRules
from torch_amore.rules import RuleSet
from torch_amore.seeding import pair_seeds, seed_affordable
from torch_amore.stream_source import is_source
from torch_amore.threads import beside, done, parallel_pass, search_threads
from torch_amore.tree import grow_tree, insertion_order


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


class _Extractor:
    """Runs the rule tree on binned data; shared by :func:`extract_rules` and the hyperparameter search."""

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
        if self._root is None:
            b = self.binned
            t_rows = torch.nonzero(self.target, as_tuple=True)[0]
            self._root = (grid_counts(b.codes, None, b.n_bins_max), grid_counts(b.codes, t_rows, b.n_bins_max))
        return self._root

    def run(
        self,
        *,
        max_length: int,
        min_support: int,
        top_k: int,
        local_codes: list[int] | None = None,
        progress: bool = False,
    ) -> list[RuleSet]:
        """Rule sets of the paper's rule tree (:func:`torch_amore.tree.grow_tree`), best fitness first."""
        chosen = grow_tree(
            self.binned, self.target, self.root_counts(), self.n_total_target, max_length=max_length,
            min_support=min_support, top_k=top_k, local_codes=local_codes, progress=progress,
        )  # fmt: skip
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
        count meant by ``options.min_support`` on the data.

        ``options.min_confidence`` steers the beam strategy towards confident rule sets too; it does not filter the
        result. Every strategy that searches is monotone in ``max_length``: its candidates include those of the same
        search at every shorter length (the beam searches each length alike whatever ``max_length``, the grid's
        optima of lengths 1 and 2 and the pair seeds are candidates at every longer length, and the best of what
        each shorter search found is polished too; the exact strategy keeps the pool of each shorter length), so the
        best fitness never drops when one more condition is allowed. Then every condition must earn
        ``options.min_gain`` (:func:`torch_amore.pruning.prune_rule_sets`).
        """
        o = capped_max_length(options, self.binned.codes.shape[1], warn=False)
        if o.strategy == "exact":
            if local_codes is not None:
                raise ValueError("strategy='exact' does not support `local_x`; use strategy='beam' or 'paper'.")
            found = self.run_exact(max_length=o.max_length, min_support=min_support, top_k=o.top_k,
                                   budget=o.exact_budget, shorter=o.min_gain > 0)  # fmt: skip
            return self.finish(found, o)[: o.top_k] if o.min_gain > 0 else found

        def tree_only() -> list[RuleSet]:  # the rule tree
            return self.run(
                max_length=o.max_length, min_support=min_support, top_k=o.top_k, local_codes=local_codes,
                progress=o.progress,
            )  # fmt: skip

        def paper() -> tuple[list[RuleSet], list[RuleSet]]:  # the rule tree, and the grid's optimum
            return tree_only(), self.grid_optimum(o, min_support) if local_codes is None else []

        optimal: list[RuleSet] = []
        if o.strategy == "beam" and local_codes is None:
            def tree_and_optima() -> tuple[list[RuleSet], dict[int, list[RuleSet]]]:
                # the grid's optimum of every length up to 2 is a candidate (length 1 always: one pass over counts)
                return tree_only(), self.grid_optima(o, min_support)

            # independent: on small data the tree and the grid's optima run beside the beam (progress bars: one
            # after the other)
            later = beside(tree_and_optima, self.binned.codes.numel()) if not o.progress else done(tree_and_optima())
            # pairs weak alone but strong together seed the beam unless the grid's optimum of pairs is a candidate
            beam = functools.partial(
                self.run_beam, max_length=o.max_length, min_support=min_support, beam_width=o.beam_width,
                min_confidence=o.min_confidence, progress=o.progress,
            )  # fmt: skip
            seed = o.max_length >= 2 and not self.optimum_affordable(o.replace(max_length=2))
            tagged = beam(seed=seed)
            rule_sets, optima = later()
            if o.max_length >= 2 and not seed and not optima[2]:  # that optimum found nothing: the beam as it runs
                tagged = beam(seed=True)  # without one
            optimal = optima.get(o.max_length, [])
            for k in optima:
                if k < o.max_length:  # a candidate; its optimum is that of a shorter search
                    optima[k] = [replace(rs, optimum=None) for rs in optima[k]]
            # what the search at each shorter max_length would have found and polished is a candidate here too
            chosen: dict[tuple, tuple[RuleSet, float | None]] = {}  # to polish, once each
            for length in range(1, o.max_length + 1):
                part = [rs for at, rs in tagged if at <= length] + [rs for k, opt in optima.items() if k <= length
                                                                     for rs in opt]  # fmt: skip
                ranked = sort_rule_sets(part)
                picks = [(rs, None) for rs in _two_feature_sets(ranked)]
                if o.min_confidence is not None:
                    confident = _two_feature_sets([rs for rs in ranked if rs.confidence >= o.min_confidence])
                    picks += [(rs, o.min_confidence) for rs in confident]
                for rs, goal in picks:
                    chosen.setdefault((rs.rules, goal), (rs, goal))
            to_polish = list(chosen.values())
            polished = self.polish([rs for rs, _ in to_polish], min_support,
                                   min_confidence=[g for _, g in to_polish])  # all at once  # fmt: skip
            found = [rs for _, rs in tagged] + [rs for opt in optima.values() for rs in opt]
            rule_sets = self.finish(rule_sets + found + polished, o)
        else:
            rule_sets, optimal = paper()
            if o.min_gain > 0:
                rule_sets = self.finish(rule_sets, o)
        if optimal:  # every result says how far it is from the best the grid can express
            rule_sets = [replace(rs, optimum=optimal[0].optimum) for rs in rule_sets]
        return rule_sets

    def finish(self, rule_sets: list[RuleSet], options: SearchOptions) -> list[RuleSet]:
        """Every condition earning ``options.min_gain`` (:meth:`prune`), rule sets sorted (:func:`sort_rule_sets`)
        and those selecting the same samples kept once, the shortest (:meth:`drop_same_mask`)."""
        if options.min_gain > 0:
            rule_sets = self.prune(rule_sets, options)
        return self.drop_same_mask(sort_rule_sets(rule_sets))

    def prune(self, rule_sets: list[RuleSet], options: SearchOptions) -> list[RuleSet]:
        """:func:`torch_amore.pruning.prune_rule_sets` on the searched data."""
        if self.X is None:
            return rule_sets
        return prune_rule_sets(rule_sets, self.X, self.target, self.n_total_target, min_gain=options.min_gain,
                               min_confidence=options.min_confidence)  # fmt: skip

    def drop_same_mask(self, rule_sets: list[RuleSet]) -> list[RuleSet]:
        """:func:`torch_amore.masks.drop_same_mask` on the searched data."""
        return drop_same_mask(rule_sets, self.X)

    def grid_optimum(self, options: SearchOptions, min_support: int) -> list[RuleSet]:
        """The best rule set on the search's grid (:mod:`torch_amore.exact`), its fitness in ``optimum``, when that is
        affordable (:meth:`optimum_affordable`); else (or when no rule set has ``min_support`` samples) ``[]``."""
        o = options
        if not self.optimum_affordable(o):
            return []
        found = self.run_exact(max_length=o.max_length, min_support=min_support, top_k=1, budget=o.optimum_budget
                               if o.max_length > 1 else 1 << 62)  # fmt: skip
        return [rs for rs in found if rs.optimum is not None]

    def grid_optima(self, options: SearchOptions, min_support: int) -> dict[int, list[RuleSet]]:
        """:meth:`grid_optimum` at each ``max_length`` 1 and 2 up to ``options.max_length`` (keyed by it), from one
        exact search where the longer one is affordable (its pool of single conditions is the shorter one's)."""
        o = options
        out = {k: [] for k in (1, 2) if k <= o.max_length}
        two = o.replace(max_length=2)
        if o.max_length >= 2 and self.optimum_affordable(two):
            found = self.run_exact(max_length=2, min_support=min_support, top_k=1, budget=o.optimum_budget,
                                   shorter=True)  # fmt: skip
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

    def run_exact(
        self, *, max_length: int, min_support: int, top_k: int, budget: int, shorter: bool = False
    ) -> list[RuleSet]:
        """The ``top_k`` best rule sets on the grid (:mod:`torch_amore.exact`), best first; each carries the optimum
        (the first one's fitness) when the search was complete. ``shorter``: followed by the ``top_k`` best of each
        shorter ``max_length`` (the pools a search at that length returns)."""
        found = exact_search(self.binned, self.target, max_length=max_length, min_support=min_support, top_k=top_k,
                             budget=budget, grid_counts=self.root_counts())  # fmt: skip
        optimum = fitness_of_counts(*found.boxes[0][:2], self.n_total_target) if found.boxes else None
        boxes = found.boxes + ([b for pool in found.shorter for b in pool] if shorter else [])
        conds = sorted({c for _, _, box in boxes for c in box})
        rules = dict(zip(conds, self.readable.rules(self.binned, conds)))
        out = []
        for hits, support, box in boxes:
            out.append(
                RuleSet(
                    rules=tuple(rules[c] for c in box),
                    support=support,
                    confidence=confidence_of_counts(hits, support),
                    fitness=fitness_of_counts(hits, support, self.n_total_target),
                    target_name=self.target_name,
                    optimum=optimum if found.complete else None,
                )
            )
        return out

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
        """Rule sets of the beam strategy (:mod:`torch_amore.beam`), unsorted, each with the length at which the beam
        chose it (:meth:`torch_amore.beam.BeamSearch.run_by_length`: a search at a shorter ``max_length`` returns those
        chosen up to its length). ``n_fine`` defaults to :func:`torch_amore.fine_grid.default_n_fine` of the number of
        samples; ``seed=False`` skips the pair seeding (:mod:`torch_amore.seeding`, for ``max_length >= 2``), e.g. when
        the grid's optimum is a candidate already."""
        if n_fine is None:
            n_fine = default_n_fine(D.global_count(self.binned.codes.shape[0]))
        fine = self.fine(n_fine)
        search = BeamSearch(
            fine, self.target, self.n_total_target, beam_width=beam_width, min_confidence=min_confidence
        )
        n, n_feat = D.global_count(fine.codes.shape[0]), len(fine.columns)
        seeded = seed and max_length >= 2 and seed_affordable(n, n_feat)  # pairs weak alone, strong together
        # twice the beam's width of pairs: on a 128-d latent layer at min_support twice the subgroup, five miss the
        # exhaustive pair optimum (0.119 against 0.137) that ten reach
        seeds = pair_seeds(fine, self.target, min_support, 2 * beam_width) if seeded else []
        states = search.run_by_length(max_length=max_length, min_support=min_support, progress=progress, seeds=seeds)
        conds = sorted({c for _, st in states for c in st.conds})
        made = dict(zip(conds, self.readable.rules(fine, conds)))
        out = []
        for length, st in states:
            rs = RuleSet(
                rules=tuple(made[c] for c in st.conds),
                support=st.support,
                confidence=confidence_of_counts(st.hits, st.support),
                fitness=fitness_of_counts(st.hits, st.support, self.n_total_target),
                target_name=self.target_name,
            )
            out.append((length, rs))
        return out

    def polish(
        self,
        rule_sets: Sequence[RuleSet],
        min_support: int,
        *,
        min_confidence: float | None | Sequence[float | None] = None,
    ) -> list[RuleSet]:
        """Coordinate ascent on observed values (:mod:`torch_amore.polish`): re-cut each interval given the other
        rules, or drop it; all ``rule_sets`` at once. ``min_confidence``: one for all, or one per rule set.

        Each numeric rule in turn gets the fitness-optimal interval over the values of the samples satisfying the
        other rules (:func:`torch_amore.beam.exact_best_interval`), cut between observed values rather than on a grid
        (one sweep over the rules: the grid search before it has converged already). Fitness never decreases (with
        ``min_confidence``: a confident rule set stays confident). A sharded (DDP) run gives the single-process
        result.
        """
        rule_sets = list(rule_sets)
        if self.X is None or not rule_sets:
            return rule_sets
        goals = (list(min_confidence) if isinstance(min_confidence, Sequence)
                 else [min_confidence] * len(rule_sets))  # fmt: skip
        if D.is_sharded():
            return [polish_one(rs, self.X, self.target, min_support, self.n_total_target, min_confidence=c,
                               target_name=self.target_name) for rs, c in zip(rule_sets, goals)]  # fmt: skip
        if "_columns" not in self.__dict__:
            self._columns = SortedColumns(self.X, self.target)  # argsorted columns, kept for later calls
        return polish_many(rule_sets, self.X, self.target, min_support, self.n_total_target, goals=goals,
                           columns=self._columns, target_name=self.target_name)  # fmt: skip


def _no_target(target: Any) -> None:
    if target is not None:
        raise ValueError(
            "Expected `target=None` with a source of batches: each batch carries its target, (X_batch, target_batch)."
        )


@contextmanager
def search_scope(device: torch.device | str = "cpu") -> Iterator[None]:
    """The scope every search runs in: small operations on one CPU thread (:func:`torch_amore.threads.search_threads`)
    under :func:`torch.inference_mode` (no autograd bookkeeping: about a tenth less time per call on small data).
    Tensors made inside are inference tensors; nothing the search returns holds one.

    Example:
        >>> import torch
        >>> with search_scope("cpu"):
        ...     torch.is_inference_mode_enabled()
        True
    """
    with search_threads(device), torch.inference_mode():
        yield


def capped_max_length(options: SearchOptions, n_searched: int, *, warn: bool = True) -> SearchOptions:
    """``options`` with ``max_length`` at most ``n_searched``, the number of features searched: a rule set has at most
    one condition per feature, so a longer ``max_length`` finds nothing more. A larger one is capped, with a
    ``UserWarning`` (unless ``warn=False``, or it is the default 2 on a single feature).

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


def prepare(
    X: ArrayLike | Any,
    target: MaskLike | None = None,
    options: SearchOptions | None = None,
    *,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    target_name: str = "target",
    memory_checked: bool = False,
) -> _Extractor:
    """Validate the data arguments and bin the features (the part of :func:`extract_rules` that depends on neither
    ``min_support`` nor ``max_length``): ``options.n_grids``, ``bin_strategy``, ``feature_types`` and the units.

    The facts that the checks, the inferred feature types and the uniform grids need come from one fused pass over
    ``X`` and one transfer to the host (:func:`torch_amore.column_stats.column_stats`). The memory the search needs
    is checked first (:func:`torch_amore.memory.check_memory`; ``memory_checked``: the caller did so). ``X`` may
    also be a source of ``(X_batch, target_batch)`` batches with ``target=None``
    (:func:`torch_amore.stream.prepare_stream`)."""
    options = SearchOptions() if options is None else options
    if is_source(X):  # batches larger than memory (:mod:`torch_amore.stream`)
        _no_target(target)
        from torch_amore.stream import prepare_stream

        return prepare_stream(X, options, features=features, feature_names=feature_names, target_name=target_name)
    n_grids = V.check_n_grids(options.n_grids)
    target = V.align_rows(target, X, "target")
    X, frame_names = V.to_tensor_2d(X)
    V.check_not_empty(X)
    n, n_features = X.shape
    names = V.resolve_names(feature_names, frame_names, n_features)
    columns = V.resolve_features(features, n_features)
    options = capped_max_length(options, len(columns))  # before the memory estimate, which grows with it
    o = options
    if not memory_checked:  # before the target's checks and the pass over X
        M.check_memory(X, n_grids=n_grids, strategy=o.strategy, max_length=o.max_length, top_k=o.top_k,
                       bin_strategy=o.bin_strategy, features=columns)  # fmt: skip
    scale = V.resolve_affine(options.feature_scale, "feature_scale", n_features, 1.0)
    offset = V.resolve_affine(options.feature_offset, "feature_offset", n_features, 0.0)
    target_t = V.to_target(target, n, X.device)
    given = None if options.feature_types is None else V.resolve_feature_types(options.feature_types, X)
    # types are inferred in the user's units when feature_scale/feature_offset are given
    in_units = given is None and (any(s != 1.0 for s in scale) or any(o != 0.0 for o in offset))
    with parallel_pass(X.numel()):  # all columns: +-inf anywhere in X is an error
        stats = column_stats(X, units=(scale, offset) if in_units else None)
    facts = stats.fetch()
    V.check_finite(X, any_inf=any(facts.has_inf))
    lo, hi = [facts.lo[c] for c in columns], [facts.hi[c] for c in columns]
    V.check_observed(lo, columns, n_features)
    V.check_range(lo, hi, [facts.overflow[c] for c in columns], columns)
    V.check_units([facts.spread[c] for c in columns], columns, scale, offset)
    types = given if given is not None else (facts.units or facts).kinds()
    kinds = [types[c] for c in columns]
    with parallel_pass(X.numel()):
        binned = bin_features(X, columns, kinds, n_grids=n_grids, bin_strategy=options.bin_strategy, stats=stats)
    return _Extractor(binned, target_t, names, scale, offset, target_name=target_name, X=X)


def _is_2d(X: Any) -> bool:
    """Whether ``X`` has a two-dimensional ``shape`` (anything else is left to :func:`V.to_tensor_2d`'s checks)."""
    return len(getattr(X, "shape", ())) == 2


def extract_rules(
    X: ArrayLike | Any,
    target: MaskLike | None = None,
    *,
    options: SearchOptions | None = None,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: ArrayLike | None = None,
    target_name: str = "target",
    codes_dir: str | None = None,
    **search_options: Any,
) -> list[RuleSet]:
    """Regional rules for a target subgroup: conjunctions of at most ``max_length`` conditions with at least
    ``min_support`` samples, found by AMORE's probability-ratio search.

    Args:
        X: (N, F) features: a torch tensor (the search runs on its device), numpy array or pandas DataFrame (column
            names become feature names). NaN marks a missing value; it satisfies no rule. Or, for data larger than
            memory, a re-iterable source of ``(X_batch, target_batch)`` batches (a DataLoader without shuffling, a
            Dataset, or a callable returning a fresh iterator), with ``target=None``: the search then runs on each
            value's grid code (:mod:`torch_amore.stream`; docs/streaming.md).
        target: (N,) boolean subgroup, e.g. "the model predicts class c" (``None`` for a source of batches).
        options: a :class:`torch_amore.SearchOptions`; keyword arguments below override its fields.
        features: indices of the features to build rules from (e.g. ``select_features(...).features``).
        feature_names: names used when printing (default: DataFrame columns, else ``feature_{i}``).
        local_x: one sample (F,): only rules whose conditions contain it (local rules); may return ``[]`` when the
            sample is an outlier of the subgroup.
        target_name: name of the subgroup in printed rules.
        codes_dir: with a source of batches, keep the grid codes in memory-mapped files of a fresh folder inside this
            existing folder (removed afterwards, also on an error) rather than in memory.
        **search_options: any field of :class:`torch_amore.SearchOptions` (an unknown name is a ``TypeError``):

            * ``max_length``: l_max, the most conditions in a rule set (default 2).
            * ``min_support``: s_min, an int count or a float fraction of N in (0, 1); default ``None``: 5 % of N
              but at most half the subgroup (:func:`torch_amore.options.auto_min_support`).
            * ``n_grids``: n_g, initial value grids per numeric feature (default 10).
            * ``bin_strategy``: ``"uniform"`` (default), ``"quantile"`` or ``"kmeans"``.
            * ``top_k``: K, candidate rules kept at each node of the rule tree (default 3).
            * ``strategy``: ``"paper"`` runs the paper's ratio-driven rule tree exactly (Algorithms 2-5).
              ``"beam"`` (default) runs it too and adds a beam search over fitness-optimal intervals on fine grids
              with refinement (:mod:`torch_amore.beam`), so its best fitness is never below the paper strategy's.
              ``"exact"`` returns the ``top_k`` rule sets of highest fitness on the grid (``n_grids``,
              ``bin_strategy``), provably (:mod:`torch_amore.exact`; ``max_length`` <= 3, no ``local_x``); a search
              whose estimated work exceeds ``exact_budget`` is refused up front (``max_length`` <= 2) or stopped
              with a warning and the best bound not explored (``max_length`` = 3).
            * ``min_confidence``: keep only rule sets with at least this confidence (in [0, 1]); the beam strategy
              also looks for the fittest rule sets that are this confident.
            * ``beam_width``: rule sets kept per length by the beam strategy (default 5).
            * ``feature_types``: per feature ``"float"``, ``"int"`` or ``"cat"``; default inferred (only 0/1
              values: cat; integer values: int; else float), in original units when ``feature_scale`` or
              ``feature_offset`` is given (a standardized 0/1 column stays a 0/1 category).
            * ``feature_scale``, ``feature_offset``: print bounds in original units, ``raw = x * scale + offset``.
            * ``progress``: progress bars over the nodes of the rule tree and the lengths of the beam search.
            * ``exact_budget``: the work allowed to ``strategy="exact"`` (grid-cell updates; default 2e9).

    Returns:
        Rule sets sorted by fitness, best first. Their support, confidence and fitness are measured on ``(X, target)``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(1000, 3, generator=g)
        >>> target = (X[:, 0] > 0.7) & (X[:, 2] < 0.5)
        >>> best = extract_rules(X, target, max_length=2, min_support=50, n_grids=10)[0]
        >>> print(best)
        IF feature_0 >= 0.7 AND feature_2 < 0.5 THEN target  (support=156, confidence=1.000, fitness=1.000)
    """
    options = SearchOptions.resolve(options, **search_options)
    if is_source(X):  # batches larger than memory (:mod:`torch_amore.stream`)
        _no_target(target)
        from torch_amore.stream import extract_stream

        return extract_stream(X, options, features=features, feature_names=feature_names, local_x=local_x,
                              target_name=target_name, codes_dir=codes_dir)  # fmt: skip
    if codes_dir is not None:
        raise ValueError("Expected `codes_dir` only with a source of batches; X in memory needs no codes on disk.")
    if target is None:
        raise TypeError("Expected `target`, the (N,) boolean subgroup of the rows of X, but got None.")
    o = options
    searched = V.resolve_features(features, X.shape[1]) if features is not None and _is_2d(X) else None
    M.check_memory(X, n_grids=o.n_grids, strategy=o.strategy, max_length=o.max_length, top_k=o.top_k,
                   bin_strategy=o.bin_strategy, features=searched)  # before the conversion copies X  # fmt: skip
    target = V.align_rows(target, X, "target")  # a pandas Series by its index when X is a DataFrame
    X_t, frame_names = V.to_tensor_2d(X)
    V.check_not_empty(X_t)
    options = capped_max_length(options, len(V.resolve_features(features, X_t.shape[1])))
    n_all = D.global_count(X_t.shape[0])
    if options.min_support is not None:  # a bad count fails before the binning
        V.resolve_min_support(options.min_support, n_all)
    if options.strategy == "exact":  # refused before any binning when it would take too long
        n_feat = X_t.shape[1] if features is None else len(features)
        check_budget(n_all, n_feat, options.n_grids, options.max_length, options.exact_budget)
    local = V.to_local_x(local_x, X_t.shape[1])
    if local is not None and bool(torch.isinf(local).any()):
        raise ValueError("Expected `local_x` to hold finite values (NaN marks a missing value).")
    names = V.resolve_names(feature_names, frame_names, X_t.shape[1])
    with search_scope(X_t.device):  # one thread for small operations, no autograd bookkeeping
        extractor = prepare(X_t, target, options, features=features, feature_names=names, target_name=target_name,
                            memory_checked=True)
        local_codes = extractor.binned.encode_sample(local) if local is not None else None
        min_s = options.support_count(n_all, extractor.n_total_target)
        rule_sets = extractor.extract(options, min_support=min_s, local_codes=local_codes)
    min_confidence = options.min_confidence
    if min_confidence is not None:
        rule_sets = [rs for rs in rule_sets if rs.confidence >= min_confidence]
    return rule_sets
