"""Why an explanation's rule sets may be useless, said to the user (a ``UserWarning`` and the explanation's
``message``): the outlier case of local rules, ``min_support`` above the subgroup, no rule set of positive fitness."""

from __future__ import annotations


def guardrail(rule_sets: list, min_count: int, n: int, size: int, *, local: bool) -> str:
    """Why the rule sets may be useless: the outlier case of local rules, ``min_support`` above the subgroup, or no
    rule set with positive fitness ('' when none applies).

    Example:
        >>> guardrail([], 30, 1000, 20, local=False)[:76]
        'Rule sets may be useless: min_support (30 samples) exceeds the subgroup (20 '
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
