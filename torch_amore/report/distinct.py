"""Distinct rule lists: near-duplicate rule sets collapsed into the fittest one.

Two rule sets are near-duplicates when the rows they cover on the searched data have a Jaccard index
``|rows(A) & rows(B)| / |rows(A) | rows(B)|`` of at least ``max_jaccard`` (two empty rule sets: 1). Visited best
first, a rule set is kept unless it is a near-duplicate of one kept already, so the result does not depend on the
input order. Without the data (an explanation read back with ``from_json``, or a streamed one, which keeps no rows),
rule sets on the same features whose conditions pairwise overlap with the same category or open sides, and whose
supports allow the Jaccard index (``min / max >= max_jaccard``, its upper bound), count as alike by their bounds.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet

#: Default Jaccard index of covered rows from which two rule sets are near-duplicates.
MAX_JACCARD = 0.9


def row_jaccard(a: torch.Tensor, b: torch.Tensor) -> float:
    """Jaccard index of two boolean row masks (1.0 when both are empty).

    Example:
        >>> import torch
        >>> row_jaccard(torch.tensor([True, True, False, False]), torch.tensor([True, True, True, False]))
        0.6666666666666666
    """
    union = int((a | b).sum())
    return 1.0 if union == 0 else int((a & b).sum()) / union


def _rank_key(rs: RuleSet) -> tuple:
    return (-rs.fitness, -rs.confidence, -rs.support, str(rs))


def _same_shape(a: Rule, b: Rule) -> bool:
    if a.is_categorical or b.is_categorical:
        return a.value == b.value
    same_sides = (a.low == -math.inf) == (b.low == -math.inf) and (a.high == math.inf) == (b.high == math.inf)
    return same_sides and max(a.low, b.low) < min(a.high, b.high)


def _bounds_alike(a: RuleSet, b: RuleSet, max_jaccard: float) -> bool:
    """Data-free proxy: same features, conditions pairwise overlapping with the same open sides, and supports whose
    ratio (the largest Jaccard index two row sets of these sizes can have) reaches ``max_jaccard``."""
    if sorted(a.features) != sorted(b.features) or len(set(a.features)) != len(a.features):
        return False
    if min(a.support, b.support) < max_jaccard * max(a.support, b.support):
        return False
    by_feature = {r.feature: r for r in b.rules}
    return all(_same_shape(r, by_feature[r.feature]) for r in a.rules)


def duplicate_reason(has_rows: bool, max_jaccard: float = MAX_JACCARD) -> str:
    """What makes a rule set a near-duplicate of a fitter one, in words: the rows' Jaccard index, or without the rows
    (:func:`duplicate_of` with ``X=None``) the bounds.

    Example:
        >>> duplicate_reason(True), duplicate_reason(False)[:40]
        ("covered rows' Jaccard index >= 0.9", 'alike bounds (the same features, overlap')
    """
    if has_rows:
        return f"covered rows' Jaccard index >= {max_jaccard:g}"
    return (
        "alike bounds (the same features, overlapping intervals open on the same sides, supports within "
        f"{max_jaccard:g} of each other; no rows are kept to compare)"
    )


def duplicate_of(rule_sets: Sequence[RuleSet], X: Any = None, *, max_jaccard: float = MAX_JACCARD) -> list[int]:
    """For each rule set, the index of the rule set that represents it (itself when it is kept).

    Args:
        rule_sets: the rule sets (any order).
        X: the (N, D) data the rules were extracted on; ``None`` falls back to comparing features and bounds.
        max_jaccard: near-duplicates have a row Jaccard index of at least this (in (0, 1]).

    Returns:
        ``out[i] == i`` for kept rule sets; otherwise the index of the fitter kept rule set it duplicates.

    Example:
        >>> import torch
        >>> X = torch.arange(100.0)[:, None]
        >>> target = X[:, 0] >= 50
        >>> a = RuleSet.from_rules([Rule(0, "x", low=50.0)], X, target)
        >>> b = RuleSet.from_rules([Rule(0, "x", low=52.0)], X, target)  # 48 of the same 50 rows
        >>> c = RuleSet.from_rules([Rule(0, "x", low=80.0)], X, target)
        >>> duplicate_of([b, c, a], X)
        [2, 1, 2]
    """
    if not isinstance(max_jaccard, (int, float)) or isinstance(max_jaccard, bool) or not 0 < max_jaccard <= 1:
        raise ValueError(f"Expected `max_jaccard` to be a number in (0, 1], but got {max_jaccard!r}.")
    rule_sets = list(rule_sets)
    for i, rs in enumerate(rule_sets):
        if not isinstance(rs, RuleSet):
            raise TypeError(f"Expected RuleSet objects in `rule_sets`, but item {i} is a {type(rs).__name__}.")
    order = sorted(range(len(rule_sets)), key=lambda i: _rank_key(rule_sets[i]))
    out = list(range(len(rule_sets)))
    kept: list[tuple[int, torch.Tensor | None]] = []
    for i in order:
        mask = rule_sets[i].mask(X) if X is not None else None
        for k, kept_mask in kept:
            if mask is not None and kept_mask is not None:
                alike = row_jaccard(mask, kept_mask) >= max_jaccard
            else:
                alike = _bounds_alike(rule_sets[i], rule_sets[k], max_jaccard)
            if alike:
                out[i] = k
                break
        else:
            kept.append((i, mask))
    return out


def distinct_rule_sets(
    rule_sets: Sequence[RuleSet],
    X: Any = None,
    *,
    max_jaccard: float = MAX_JACCARD,
    min_fitness: float | None = None,
    max_rules: int | None = None,
) -> list[RuleSet]:
    """The rule sets without near-duplicates (the fitter of each group kept), best fitness first.

    Args:
        rule_sets: the rule sets, e.g. ``explanation.rule_sets``.
        X: the (N, D) data the rules were extracted on (``None``: compare features and bounds).
        max_jaccard: two rule sets whose covered rows have a Jaccard index >= this are near-duplicates.
        min_fitness: leave out rule sets with a lower fitness (``0.0``: no negative fitness); ``None`` keeps all.
        max_rules: at most this many rule sets (the best distinct ones).

    Returns:
        The distinct rule sets, best fitness first (ties: confidence, support, text).

    Example:
        >>> import torch
        >>> X = torch.arange(100.0)[:, None]
        >>> target = X[:, 0] >= 50
        >>> found = [RuleSet.from_rules([Rule(0, "x", low=v)], X, target) for v in (50.0, 52.0, 80.0)]
        >>> found.append(RuleSet.from_rules([Rule(0, "x", high=30.0)], X, target))  # fitness -0.6
        >>> for rs in distinct_rule_sets(found, X, min_fitness=0.0):
        ...     print(rs)
        IF x >= 50 THEN target  (support=50, confidence=1.000, fitness=1.000)
        IF x >= 80 THEN target  (support=20, confidence=1.000, fitness=0.400)
    """
    if min_fitness is not None and not isinstance(min_fitness, (int, float)):
        raise TypeError(f"Expected `min_fitness` to be a number or None, but got {type(min_fitness).__name__}.")
    if max_rules is not None and (not isinstance(max_rules, int) or isinstance(max_rules, bool) or max_rules < 0):
        raise ValueError(f"Expected `max_rules` to be a non-negative int or None, but got {max_rules!r}.")
    rule_sets = list(rule_sets)
    rep = duplicate_of(rule_sets, X, max_jaccard=max_jaccard)
    kept = [rs for i, rs in enumerate(rule_sets) if rep[i] == i]
    if min_fitness is not None:
        kept = [rs for rs in kept if rs.fitness >= min_fitness]
    kept.sort(key=_rank_key)
    return kept if max_rules is None else kept[:max_rules]
