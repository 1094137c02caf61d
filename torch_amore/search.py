"""The public :func:`extract_rules`: validate, bin, run the strategies, turn their results into rule sets.

The paper's rule tree (Algorithms 2 and 3) lives in :mod:`torch_amore.tree`: starting from all samples, each node's
samples are counted per grid of every remaining feature, the counts become candidate intervals
(:func:`torch_amore.intervals.candidate_intervals`), the ``top_k`` candidates with the highest probability ratios
open child nodes until rule sets reach ``max_length`` rules, all nodes of a level at once. Every node of the tree is a
candidate rule set. The beam strategy (:mod:`torch_amore.beam`) adds fitness-optimal intervals. The result is sorted
by fitness, best first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch

from torch_amore import _validation as V
from torch_amore import distributed as D
from torch_amore._typing import ArrayLike, MaskLike
from torch_amore.beam import (
    BeamSearch,
    Objective,
    default_n_fine,
    exact_best_interval,
    fine_binning,
    sorted_best_interval,
)
from torch_amore.binning import Binned, bin_features
from torch_amore.column_stats import column_stats
from torch_amore.cuts import short_cut
from torch_amore.exact import check_budget, estimate_cost, exact_search
from torch_amore.options import SearchOptions
from torch_amore.ratios import grid_counts
from torch_amore.rules import Rule, RuleSet
from torch_amore.seeding import pair_seeds, seed_affordable
from torch_amore.threads import parallel_pass, search_threads
from torch_amore.tree import grow_tree, insertion_order


def sort_rule_sets(rule_sets) -> list[RuleSet]:
    """Unique rule sets, best fitness first (ties: higher confidence, larger support, then text)."""
    unique: dict[frozenset, RuleSet] = {}
    for rs in rule_sets:
        unique.setdefault(frozenset(rs.rules), rs)
    return sorted(unique.values(), key=lambda r: (-r.fitness, -r.confidence, -r.support, str(r)))


def _drop_same_mask(rule_sets: list[RuleSet], X: torch.Tensor | None) -> list[RuleSet]:
    """Keep the first of rule sets on the same features that select exactly the same samples."""
    if X is None:
        return rule_sets
    kept: list[RuleSet] = []
    groups: dict[tuple, list[RuleSet]] = {}  # kept rule sets per (features, support, confidence)
    masks: dict[int, torch.Tensor] = {}  # computed only when two rule sets share a key

    def mask(rs: RuleSet) -> torch.Tensor:
        if id(rs) not in masks:
            masks[id(rs)] = rs.mask(X)
        return masks[id(rs)]

    for rs in rule_sets:
        key = (frozenset(rs.features), rs.support, rs.confidence)
        same = groups.setdefault(key, [])
        if same:
            m = mask(rs)
            equal = D.all_ranks(torch.tensor([torch.equal(m, mask(o)) for o in same]))  # equal on every DDP shard
            if bool(equal.any()):
                continue
        same.append(rs)
        kept.append(rs)
    return kept


def _two_feature_sets(ranked: list[RuleSet]) -> list[RuleSet]:
    """The first rule set and the first one on other features: those worth polishing (rule sets on the same features
    mostly polish to the same optimum)."""
    out = ranked[:1]
    for rs in ranked[1:]:
        if frozenset(rs.features) != frozenset(out[0].features):
            return out + [rs]
    return out


def _between(a: float, b: float, bound: float, units: tuple[float, float]) -> float:
    """A short cut in ``(a, b]`` (:func:`torch_amore.cuts.short_cut`) for a grid edge ``bound`` whose observed
    neighbours are ``a < bound <= b``; with no value on one side, a short number beyond the other one."""
    if not math.isfinite(a) and not math.isfinite(b):
        return bound
    if not math.isfinite(a):
        a = b - abs(b) - 1.0
    elif not math.isfinite(b):
        b = a + abs(a) + 1.0
    return short_cut(a, b, *units) if math.isfinite(a) and math.isfinite(b) and a < b else bound


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

    def root_counts(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-grid counts of all samples and of the target at the root (cached: independent of min_support)."""
        if self._root is None:
            b = self.binned
            t_rows = torch.nonzero(self.target, as_tuple=True)[0]
            self._root = (grid_counts(b.codes, None, b.n_bins_max), grid_counts(b.codes, t_rows, b.n_bins_max))
        return self._root

    def _sorted_column(self, col: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices of column ``col``'s non-missing values in ascending order (stable), and the sorted values in the
        binning's float dtype (cached: polish and snapping need them again and again)."""
        cache = self.__dict__.setdefault("_sorted", {})
        if col not in cache:
            values = self.X[:, col].to(self.binned.thresholds.dtype)
            order = torch.argsort(values, stable=True)  # NaN last
            order = order[: int((~torch.isnan(values)).sum())]
            cache[col] = (order, values[order])
        return cache[col]

    def _snap_edges(self, binned: Binned, pairs: list[tuple[int, int]]) -> None:
        """The observed neighbours of many grid edges ``(feature, grid)`` of ``binned`` (the paper's grids or the
        beam's fine ones) at once: the largest value below the edge and the smallest one from it on, from per-grid
        minima and maxima (one scatter each per feature not seen before, one reduction). :meth:`_snap` cuts between
        them at the shortest number (:func:`torch_amore.cuts.short_cut`: the same samples)."""
        numeric = [not c for c in binned.is_cat.tolist()]
        n_bins = binned.n_bins.tolist()
        pairs = sorted({(j, g) for j, g in pairs if numeric[j] and 0 < g < n_bins[j]})
        if hasattr(binned, "prefetch"):
            binned.prefetch(pairs)
        if self.X is None or not pairs:
            return
        tables = self.__dict__.setdefault("_edge_tables", {}).setdefault(id(binned), (binned, {}))[1]
        self._edge_tables_for(binned, sorted({j for j, _ in pairs} - set(tables)), tables)
        neighbours = self.__dict__.setdefault("_neighbours", {})
        for j, g in pairs:
            bound = binned.interval_bounds(j, g, n_bins[j] - 1)[0]
            below, above = tables[j]
            neighbours[(binned.columns[j], bound)] = (below[g - 1], above[g])  # infinite where there is none

    def _edge_tables_for(self, binned: Binned, feats: list[int], tables: dict) -> None:
        """Per feature, the largest observed value in grids <= g and the smallest in grids >= g (lists by g)."""
        if not feats:
            return
        dt = binned.thresholds.dtype
        width = binned.n_bins_max + 1
        lows = torch.full((len(feats), width), math.inf, dtype=dt, device=self.X.device)
        highs = torch.full((len(feats), width), -math.inf, dtype=dt, device=self.X.device)
        codes_t = getattr(binned, "codes_t", None)
        for r, j in enumerate(feats):
            values = self.X[:, binned.columns[j]].to(dt)
            codes = (codes_t[j] if codes_t is not None else binned.codes[:, j]).long()
            lows[r].scatter_reduce_(0, codes, values, "amin")  # NaN: the last cell, unused
            highs[r].scatter_reduce_(0, codes, values, "amax")
        lows = D.all_reduce_min(lows[:, :-1].contiguous())  # over the shards of a DDP run
        highs = D.all_reduce_max(highs[:, :-1].contiguous())
        above = lows.flip(1).cummin(1).values.flip(1).tolist()  # the smallest value in grids >= g
        below = highs.cummax(1).values.tolist()  # the largest value in grids <= g
        for r, j in enumerate(feats):
            tables[j] = (below[r], above[r])

    def _snap(self, col: int, bound: float, side: str = "any") -> float:
        """A readable bound selecting the same samples as ``bound`` (see :meth:`_snap_edges`), else ``bound``.
        ``side="low"``/``"high"``: also every value the grid edge keeps above/below it (the local sample's)."""
        cache = self.__dict__.setdefault("_snaps", {})
        key = (col, bound, side)
        if key not in cache:
            if (col, bound) not in self.__dict__.get("_neighbours", {}):
                return bound
            a, b = self._neighbours[(col, bound)]
            if side == "low":  # keeps the values >= bound inside
                b = min(b, bound)
            elif side == "high":  # keeps the values < bound inside
                a = max(a, math.nextafter(bound, -math.inf))
            cache[key] = _between(a, b, bound, (self.scale[col], self.offset[col]))
        return cache[key]

    def _rule(
        self, j: int, g_low: int, g_high: int, binned: Binned | None = None, snap: bool = True, local: bool = False
    ) -> Rule:
        """The rule of grids ``g_low..g_high`` of searched feature ``j``, its bounds snapped to readable numbers that
        select the same samples (``local``: and keep every value of those grids inside, e.g. a local sample's)."""
        b = self.binned if binned is None else binned
        col = b.columns[j]
        kind = b.kinds[j]
        name, scale, offset = self.names[col], self.scale[col], self.offset[col]
        if bool(b.is_cat[j]):
            return Rule(col, name, value=float(b.categories[j, g_low]), kind="cat", scale=scale, offset=offset)
        low, high = b.interval_bounds(j, g_low, g_high)
        if snap and self.X is not None:
            known = self.__dict__.get("_neighbours", {})
            if any(math.isfinite(v) and (col, v) not in known for v in (low, high)):
                self._snap_edges(b, [(j, g_low), (j, g_high + 1)])
            low = self._snap(col, low, "low" if local else "any")
            high = self._snap(col, high, "high" if local else "any")
        if kind == "int" and b.int_valued[j] and scale == 1.0 and offset == 0.0:
            # on integer-valued data, x >= low <=> x >= ceil(low) and x < high <=> x < ceil(high)
            low = math.ceil(low) if low > -math.inf else low
            high = math.ceil(high) if high < math.inf else high
        elif kind == "int" and not b.int_valued[j] and scale == 1.0 and offset == 0.0:
            kind = "float"
        return Rule(col, name, low=low, high=high, kind=kind, scale=scale, offset=offset)

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
        rules: dict[tuple[int, int, int], Rule] = {}
        found: dict[frozenset, RuleSet] = {}
        local = local_codes is not None
        edges = {(j, g) for c in chosen for j, lo, hi, _ in c.steps for g in (lo, hi + 1)}
        self._snap_edges(self.binned, sorted(edges))  # every bound's neighbours in one batched pass
        for c in sorted(chosen, key=insertion_order):  # a rule set met twice: as the depth-first walk met it first
            for j, g_low, g_high, _ in c.steps:
                if (j, g_low, g_high) not in rules:
                    rules[(j, g_low, g_high)] = self._rule(j, g_low, g_high, local=local)
            rs_rules = tuple(rules[s[:3]] for s in c.steps)
            key = frozenset(rs_rules)
            if key not in found:
                found[key] = RuleSet(
                    rules=rs_rules,
                    support=c.support,
                    confidence=c.hits / c.support,
                    fitness=(2 * c.hits - c.support) / self.n_total_target,
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
        result.
        """
        o = options
        if o.strategy == "exact":
            if local_codes is not None:
                raise ValueError("strategy='exact' does not support `local_x`; use strategy='beam' or 'paper'.")
            return self.run_exact(max_length=o.max_length, min_support=min_support, top_k=o.top_k,
                                  budget=o.exact_budget)  # fmt: skip
        rule_sets = self.run(
            max_length=o.max_length, min_support=min_support, top_k=o.top_k, local_codes=local_codes,
            progress=o.progress,
        )  # fmt: skip
        optimal = self.grid_optimum(o, min_support) if local_codes is None else []
        if o.strategy == "beam" and local_codes is None:
            found = self.run_beam(
                max_length=o.max_length, min_support=min_support, beam_width=o.beam_width,
                min_confidence=o.min_confidence, progress=o.progress,
            ) + optimal  # fmt: skip
            ranked = sort_rule_sets(found)
            polished = [self.polish(rs, min_support) for rs in _two_feature_sets(ranked)]
            if o.min_confidence is not None:
                confident = _two_feature_sets([rs for rs in ranked if rs.confidence >= o.min_confidence])
                polished += [self.polish(rs, min_support, min_confidence=o.min_confidence) for rs in confident]
            rule_sets = _drop_same_mask(sort_rule_sets(rule_sets + found + polished), self.X)
        if optimal:  # every result says how far it is from the best the grid can express
            rule_sets = [replace(rs, optimum=optimal[0].optimum) for rs in rule_sets]
        return rule_sets

    def grid_optimum(self, options: SearchOptions, min_support: int) -> list[RuleSet]:
        """The best rule set on the search's grid (:mod:`torch_amore.exact`), its fitness in ``optimum``, when that is
        affordable: ``max_length <= 2`` and an estimated work (:func:`torch_amore.exact.estimate_cost`) of at most
        ``options.optimum_budget``; else (or when no rule set has ``min_support`` samples) ``[]``."""
        o = options
        n_rows, n_feat = D.global_count(self.binned.codes.shape[0]), self.binned.codes.shape[1]
        if o.max_length > 2 or estimate_cost(n_rows, n_feat, self.binned.n_bins_max, o.max_length) > o.optimum_budget:
            return []
        found = self.run_exact(max_length=o.max_length, min_support=min_support, top_k=1, budget=o.optimum_budget)
        return [rs for rs in found if rs.optimum is not None]

    def run_exact(self, *, max_length: int, min_support: int, top_k: int, budget: int) -> list[RuleSet]:
        """The ``top_k`` best rule sets on the grid (:mod:`torch_amore.exact`), best first; each carries the optimum
        (the first one's fitness) when the search was complete."""
        found = exact_search(
            self.binned, self.target, max_length=max_length, min_support=min_support, top_k=top_k, budget=budget
        )
        optimum = (2 * found.boxes[0][0] - found.boxes[0][1]) / self.n_total_target if found.boxes else None
        self._snap_edges(self.binned, sorted({(j, g) for _, _, conds in found.boxes for j, lo, hi in conds
                                              for g in (lo, hi + 1)}))  # fmt: skip
        out = []
        for hits, support, conds in found.boxes:
            out.append(
                RuleSet(
                    rules=tuple(self._rule(j, lo, hi) for j, lo, hi in conds),
                    support=support,
                    confidence=hits / support,
                    fitness=(2 * hits - support) / self.n_total_target,
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
    ) -> list[RuleSet]:
        """Rule sets of the beam strategy (:mod:`torch_amore.beam`), unsorted. ``n_fine`` defaults to
        :func:`torch_amore.beam.default_n_fine` of the number of samples."""
        if n_fine is None:
            n_fine = default_n_fine(D.global_count(self.binned.codes.shape[0]))
        fine = self.fine(n_fine)
        search = BeamSearch(
            fine, self.target, self.n_total_target, beam_width=beam_width, min_confidence=min_confidence
        )
        n, n_feat = D.global_count(fine.codes.shape[0]), len(fine.columns)
        seeded = max_length >= 2 and seed_affordable(n, n_feat)  # pairs weak alone but strong together
        seeds = pair_seeds(fine, self.target, min_support, beam_width) if seeded else []
        states = search.run(max_length=max_length, min_support=min_support, progress=progress, seeds=seeds)
        self._snap_edges(fine, [(j, g) for st in states for j, lo, hi in st.conds for g in (lo, hi + 1)])
        out = []
        for st in states:
            rules = tuple(self._rule(j, lo, hi, fine) for j, lo, hi in st.conds)
            out.append(
                RuleSet(
                    rules=rules,
                    support=st.support,
                    confidence=st.hits / st.support,
                    fitness=(2 * st.hits - st.support) / self.n_total_target,
                    target_name=self.target_name,
                )
            )
        return out

    def polish(
        self, rule_set: RuleSet, min_support: int, rounds: int = 1, *, min_confidence: float | None = None
    ) -> RuleSet:
        """Coordinate ascent on observed values: re-cut each interval given the other rules, or drop it.

        Each numeric rule in turn gets the fitness-optimal interval over the values of the samples satisfying the
        other rules (:func:`torch_amore.beam.exact_best_interval`), cut between observed values rather than on a grid
        (``rounds`` sweeps over the rules, one by default: the grid search before it has converged already). Fitness
        never decreases (with ``min_confidence``: a confident rule set stays confident). It needs only counts, minima
        and maxima, so a sharded (DDP) run gives the single-process result.
        """
        if self.X is None or not rule_set.rules:
            return rule_set
        X, target = self.X, self.target
        key = Objective(min_confidence).key
        rules = list(rule_set.rules)
        masks = [r.mask(X) for r in rules]

        def counts(mask: torch.Tensor) -> tuple[int, int]:
            both = D.all_reduce_sum(torch.stack([mask.sum(), (mask & target).sum()]))
            return int(both[1]), int(both[0])

        best = key(*counts(torch.stack(masks).all(0)))
        for _ in range(rounds):
            changed = False
            for k in range(len(rules)):
                if k >= len(rules) or rules[k].value is not None:
                    continue
                others = torch.ones_like(masks[0])
                for j, m in enumerate(masks):
                    if j != k:
                        others &= m
                t_o, n_o = counts(others)
                if len(rules) > 1 and n_o >= min_support and key(t_o, n_o) >= best:  # the rule does nothing
                    del rules[k], masks[k]
                    best, changed = key(t_o, n_o), True
                    break
                col, units = rules[k].feature, (rules[k].scale, rules[k].offset)
                if D.is_sharded():
                    found = exact_best_interval(
                        X[others, col], target[others], min_support, min_confidence=min_confidence, units=units
                    )
                else:  # the cached order of the column, restricted to the other rules' samples: no sort
                    order = self._sorted_column(col)[0]
                    sel = order[others[order]]
                    objective = Objective(min_confidence)
                    found = sorted_best_interval(X[sel, col].double(), target[sel], min_support, objective, units)
                if found is None or key(found[2], found[3]) <= best:
                    continue
                low, high, _, _ = found
                rules[k] = replace(rules[k], low=low, high=high)
                masks[k] = rules[k].mask(X)
                best, changed = key(*counts(torch.stack(masks).all(0))), True
            if not changed:
                break
        if rules == list(rule_set.rules):
            return rule_set
        hits, support = counts(torch.stack(masks).all(0))
        return RuleSet(
            rules=tuple(rules),
            support=support,
            confidence=hits / support,
            fitness=(2 * hits - support) / self.n_total_target,
            target_name=self.target_name,
        )


def prepare(
    X: ArrayLike,
    target: MaskLike,
    options: SearchOptions | None = None,
    *,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    target_name: str = "target",
) -> _Extractor:
    """Validate the data arguments and bin the features (the part of :func:`extract_rules` that depends on neither
    ``min_support`` nor ``max_length``): ``options.n_grids``, ``bin_strategy``, ``feature_types`` and the units.

    The facts that the checks, the inferred feature types and the uniform grids need come from one fused pass over
    ``X`` and one transfer to the host (:func:`torch_amore.column_stats.column_stats`)."""
    options = SearchOptions() if options is None else options
    n_grids = V.check_n_grids(options.n_grids)
    X, frame_names = V.to_tensor_2d(X)
    V.check_not_empty(X)
    n, n_features = X.shape
    names = V.resolve_names(feature_names, frame_names, n_features)
    columns = V.resolve_features(features, n_features)
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
    o = options
    V.check_memory(n, len(columns), X.device, n_grids=n_grids, strategy=o.strategy, max_length=o.max_length,
                   top_k=o.top_k, bin_strategy=o.bin_strategy)  # fmt: skip
    lo, hi = [facts.lo[c] for c in columns], [facts.hi[c] for c in columns]
    V.check_observed(lo, columns, n_features)
    V.check_range(lo, hi, [facts.overflow[c] for c in columns], columns)
    V.check_units([facts.spread[c] for c in columns], columns, scale, offset)
    types = given if given is not None else (facts.units or facts).kinds()
    kinds = [types[c] for c in columns]
    with parallel_pass(X.numel()):
        binned = bin_features(X, columns, kinds, n_grids=n_grids, bin_strategy=options.bin_strategy, stats=stats)
    return _Extractor(binned, target_t, names, scale, offset, target_name=target_name, X=X)


def extract_rules(
    X: ArrayLike,
    target: MaskLike,
    *,
    options: SearchOptions | None = None,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: ArrayLike | None = None,
    target_name: str = "target",
    **search_options: Any,
) -> list[RuleSet]:
    """Regional rules for a target subgroup: conjunctions of at most ``max_length`` conditions with at least
    ``min_support`` samples, found by AMORE's probability-ratio search.

    Args:
        X: (N, F) features: a torch tensor (the search runs on its device), numpy array or pandas DataFrame (column
            names become feature names). NaN marks a missing value; it satisfies no rule.
        target: (N,) boolean subgroup, e.g. "the model predicts class c".
        options: a :class:`torch_amore.SearchOptions`; keyword arguments below override its fields.
        features: indices of the features to build rules from (e.g. ``select_features(...).features``).
        feature_names: names used when printing (default: DataFrame columns, else ``feature_{i}``).
        local_x: one sample (F,): only rules whose conditions contain it (local rules); may return ``[]`` when the
            sample is an outlier of the subgroup.
        target_name: name of the subgroup in printed rules.
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
    X_t, frame_names = V.to_tensor_2d(X)
    V.check_not_empty(X_t)
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
    with search_threads(X_t.device):  # small operations on one thread (see torch_amore.threads)
        extractor = prepare(X_t, target, options, features=features, feature_names=names, target_name=target_name)
        local_codes = extractor.binned.encode_sample(local) if local is not None else None
        min_s = options.support_count(n_all, extractor.n_total_target)
        rule_sets = extractor.extract(options, min_support=min_s, local_codes=local_codes)
    min_confidence = options.min_confidence
    if min_confidence is not None:
        rule_sets = [rs for rs in rule_sets if rs.confidence >= min_confidence]
    return rule_sets
