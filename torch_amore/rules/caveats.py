"""Caveats of a search's result: the reasons to read its rule sets with care, in words, from their counts alone.

:func:`caveats` lists them (useless rule sets, a best rule set at the base rate, a leaking feature) for
``extract_rules`` and ``explain``, which issue them as one ``UserWarning`` per call. Rule sets are named ``#i+1`` for
``rule_sets[i]``, as in every display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch_amore.rules.metrics import hits_of_rates, wilson_interval
from torch_amore.rules.rules import RuleSet

#: The confidence level of the interval of :func:`at_base_rate`.
LEVEL = 0.95
#: A one-condition rule set whose rows match the subgroup with a Jaccard index >= this leaks the target.
LEAK_JACCARD = 0.95
#: At most this many rule sets are named in one caveat.
_NAMED = 5


def confidence_interval(rule_set: RuleSet, level: float = LEVEL) -> tuple[float, float]:
    """The Wilson score interval of a rule set's confidence (its hits among its ``support`` rows); (nan, nan) for an
    empty rule set.

    Example:
        >>> low, high = confidence_interval(RuleSet((), support=50, confidence=0.9, fitness=0.5))
        >>> round(low, 4), round(high, 4)
        (0.7864, 0.9565)
    """
    return wilson_interval(hits_of_rates(rule_set.confidence, rule_set.support), rule_set.support, level)


def at_base_rate(rule_set: RuleSet, base_rate: float | None, level: float = LEVEL) -> bool:
    """Whether the interval of the rule set's confidence (:func:`confidence_interval`) contains ``base_rate`` (False
    when either is unknown).

    Example:
        >>> at_base_rate(RuleSet((), support=50, confidence=0.9, fitness=0.5), 0.8)
        True
        >>> at_base_rate(RuleSet((), support=50, confidence=0.9, fitness=0.5), 0.5)
        False
    """
    if base_rate is None or math.isnan(base_rate):
        return False
    low, high = confidence_interval(rule_set, level)
    return bool(low <= base_rate <= high)


def subgroup_jaccard(rule_set: RuleSet, size: int) -> float:
    """The Jaccard index of the rule set's rows and the subgroup's ``size`` rows: ``hits / (support + size - hits)``.

    Example:
        >>> subgroup_jaccard(RuleSet((), support=100, confidence=0.98, fitness=0.9), 100)  # 98 of 102 rows shared
        0.9607843137254902
    """
    hits = hits_of_rates(rule_set.confidence, rule_set.support)
    union = rule_set.support + size - hits
    return hits / union if union else 1.0


def _positions(indices: Sequence[int]) -> str:
    shown = ", ".join(f"#{i + 1}" for i in indices[:_NAMED])
    return shown + (f" and {len(indices) - _NAMED} more" if len(indices) > _NAMED else "")


def useless_reason(rule_sets: Sequence[RuleSet], n: int, size: int, *, min_count: int, local: bool) -> str:
    """Why the rule sets may be useless: the outlier case of local rules, ``min_support`` above the subgroup, or no
    rule set with positive fitness ('' when none applies).

    Example:
        >>> useless_reason([], 100, 10, min_count=5, local=False)[:60]
        'Rule sets may be useless: no rule set reaches positive fitne'
    """
    if local:
        if rule_sets:
            return ""
        return (
            "No local rules: the sample is an outlier of the subgroup — no interval containing it raises the "
            "subgroup's share above its base rate with enough support (try a smaller min_support)."
        )
    reasons = []
    if min_count > size:
        reasons.append(
            f"min_support ({min_count} samples) exceeds the subgroup ({size} of {n} samples): every rule set holds "
            "samples outside it, and above twice the subgroup its fitness is negative; pass a smaller min_support "
            "(the default, None, takes at most half the subgroup)"
        )
    best = rule_sets[0].fitness if rule_sets else None
    if best is None or best <= 0:
        found = "no rule set" if best is None else f"the best has fitness {best:.3f}"
        reasons.append(
            f"no rule set reaches positive fitness ({found}; the subgroup is {size} of {n} samples, base rate "
            f"{size / n:.2%}): try a smaller min_support, a larger max_length or n_grids, or features on which the "
            "subgroup separates"
        )
    return "Rule sets may be useless: " + "; ".join(reasons) + "." if reasons else ""


def base_rate_reason(rule_sets: Sequence[RuleSet], n: int, size: int, level: float = LEVEL) -> str:
    """When the best rule set is at the base rate (:func:`at_base_rate`, with positive fitness): says so, naming every
    rule set of positive fitness that is ('' when the best is not): on their rows the subgroup is not measurably more
    frequent than anywhere.

    Example:
        >>> found = [RuleSet((), support=92, confidence=0.924, fitness=0.9)]  # 85 of 92 rows, base rate 0.92
        >>> base_rate_reason(found, 100, 92)[:72]
        'Rule set #1 may describe the data rather than the subgroup: the 95% Wils'
    """
    if not n or not rule_sets:
        return ""
    base = size / n
    flagged = [i for i, rs in enumerate(rule_sets) if rs.fitness > 0 and at_base_rate(rs, base, level)]
    if not flagged or flagged[0] != 0:
        return ""
    best = rule_sets[0]
    low, high = confidence_interval(best, level)
    many = len(flagged) > 1
    return (
        f"Rule set{'s' if many else ''} {_positions(flagged)} may describe the data rather than the subgroup: the "
        f"{level:.0%} Wilson interval of {'their' if many else 'its'} confidence contains the base rate {base:.3f} "
        f"(#1: confidence {best.confidence:.3f} [{low:.3f}, {high:.3f}] on {best.support} rows, lift "
        f"{best.confidence / base:.3f}), so the subgroup is not measurably more frequent on these rows than on all "
        "rows."
    )


def leak_reason(rule_sets: Sequence[RuleSet], size: int, min_jaccard: float = LEAK_JACCARD) -> str:
    """The features that alone reproduce the subgroup, as a feature that encodes the target does: one-condition rule
    sets whose rows match it with a Jaccard index >= ``min_jaccard`` (the first of each feature; '' when none). Rules
    on a model's decision are meant to reproduce it: ``explain`` and the Lightning callback leave this caveat out.

    Example:
        >>> from torch_amore.rules.rule import Rule
        >>> found = [RuleSet((Rule(3, "label_yes", value=1.0, kind="cat"),), support=100, confidence=1.0, fitness=1.0)]
        >>> leak_reason(found, 100)[:56]
        "Feature 'label_yes' may leak the target: rule set #1 (la"
    """
    seen: set[int] = set()
    parts = []
    for i, rs in enumerate(rule_sets):
        if len(rs) != 1 or rs.rules[0].feature in seen:
            continue
        rule, jaccard = rs.rules[0], subgroup_jaccard(rs, size)
        if jaccard >= min_jaccard:
            seen.add(rule.feature)
            parts.append(
                f"Feature {rule.name!r} may leak the target: rule set #{i + 1} ({rule.format()}) on this feature "
                f"alone covers rows whose Jaccard index with the subgroup is {jaccard:.3f} (>= {min_jaccard:g}); if "
                "it encodes the target, leave it out of the features."
            )
    return " ".join(parts)


def caveats(
    rule_sets: Sequence[RuleSet], n: int, size: int, *, min_count: int, local: bool = False
) -> list[tuple[str, str]]:
    """Every reason to read the rule sets with care, as (kind, sentence) pairs ([] when there is none): ``"useless"``
    (:func:`useless_reason`), ``"base_rate"`` (:func:`base_rate_reason`) and ``"leak"`` (:func:`leak_reason`).

    Args:
        rule_sets: a search's rule sets, best first (named ``#i+1`` for ``rule_sets[i]``).
        n: the number of rows searched; size: the subgroup's rows among them.
        min_count: ``min_support`` as a row count.
        local: whether these are local rules (:meth:`RegionalRuleExplainer.explain_local`).

    Example:
        >>> from torch_amore.rules.rule import Rule
        >>> leak = RuleSet((Rule(0, "y", value=1.0, kind="cat"),), support=40, confidence=1.0, fitness=1.0)
        >>> [(kind, reason[:24]) for kind, reason in caveats([leak], 1000, 40, min_count=20)]
        [('leak', "Feature 'y' may leak the")]
    """
    if not n:
        return []
    reasons = [("useless", useless_reason(rule_sets, n, size, min_count=min_count, local=local))]
    if size:
        reasons += [("base_rate", base_rate_reason(rule_sets, n, size)), ("leak", leak_reason(rule_sets, size))]
    return [(kind, text) for kind, text in reasons if text]
