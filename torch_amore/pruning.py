"""Every condition earns its place: conditions that add less than ``min_gain`` fitness are dropped.

A rule set printed as ``age >= -1.35 AND HbA1c_level >= 1.1`` tells a reader that age matters; when the age condition
removes 4 rows of 1,167 for a fitness gain of 0.00004 it does not. Like scikit-learn's ``min_impurity_decrease`` for
a split, :func:`prune_rule_sets` asks of every condition of a rule set that removing it lowers the rule set's fitness
by at least ``min_gain``, measured on the data searched (the shorter rule set's support, confidence and fitness are
recomputed from the rules' masks). A condition that does not earn its place is dropped, the least useful first (the
smallest gain; ties: the later condition), and the shorter rule set is examined again, until every condition earns
its place or one condition is left. A condition without which the rule set's confidence falls below
``min_confidence`` earns its place whatever its gain.

The counts of all the shorter rule sets of one round are computed together (chunks of rule-set masks, one host sync
each) and summed over the shards of a DDP run, so a sharded run prunes as one process does.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torch_amore import distributed as D
from torch_amore.masks import count_true, rule_set_masks
from torch_amore.metrics import confidence_of_counts, fitness_of_counts
from torch_amore.rules import Rule, RuleSet

__all__ = ["prune_rule_sets"]

#: Bytes of rule-set masks built at once.
_MASK_BYTES = 1 << 26


def _counts(
    rule_sets: list[tuple[Rule, ...]], X: torch.Tensor, target: torch.Tensor
) -> list[tuple[int, int]]:
    """(hits, support) of each conjunction of rules on ``(X, target)``, summed over DDP shards."""
    if not rule_sets:
        return []
    per = max(1, _MASK_BYTES // max(1, X.shape[0]))
    parts = []
    for i in range(0, len(rule_sets), per):
        masks = rule_set_masks([RuleSet(r, 0, 0.0, 0.0) for r in rule_sets[i : i + per]], X)
        parts.append(torch.stack([count_true(masks & target), count_true(masks)]))
    both = D.all_reduce_sum(torch.cat(parts, 1)).tolist()
    return list(zip(both[0], both[1]))


def prune_rule_sets(
    rule_sets: Sequence[RuleSet],
    X: torch.Tensor,
    target: torch.Tensor,
    n_target: int,
    *,
    min_gain: float,
    min_confidence: float | None = None,
) -> list[RuleSet]:
    """``rule_sets`` in order, each without the conditions that do not earn ``min_gain`` fitness (see the module
    docstring); a rule set that loses a condition is measured again on ``(X, target)`` (``n_target``: the subgroup's
    size over all shards) and keeps its ``target_name`` and ``optimum`` (its per-step ``ratios`` no longer apply and
    are dropped). ``min_gain <= 0`` returns them as they are.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
        >>> target = torch.tensor([False, True, True, True, False])
        >>> a, b = Rule(0, "a", low=0.5), Rule(1, "b", low=0.5)
        >>> rs = RuleSet((a, b), 2, 1.0, 2 / 3)  # b drops one target row: a alone is fitter
        >>> print(prune_rule_sets([rs], X, target, 3, min_gain=0.001)[0])
        IF a >= 0.5 THEN target  (support=3, confidence=1.000, fitness=1.000)
    """
    out = list(rule_sets)
    if min_gain <= 0:
        return out
    bar = min_gain * n_target  # gains compared in counts: fitness x n_target = 2 hits - support
    current = {i: rs.rules for i, rs in enumerate(out) if len(rs.rules) >= 2}
    measured: dict[int, tuple[int, int]] = {}
    first = list(current)
    for i, counts in zip(first, _counts([current[i] for i in first], X, target)):
        measured[i] = counts
    while current:
        order = sorted(current)
        subs = [current[i][:k] + current[i][k + 1 :] for i in order for k in range(len(current[i]))]
        sub_counts = iter(_counts(subs, X, target))
        nxt: dict[int, tuple[Rule, ...]] = {}
        for i in order:
            rules, (hits, support) = current[i], measured[i]
            value = 2 * hits - support
            worst: tuple[float, int, tuple[int, int]] | None = None
            for k in range(len(rules)):
                sub_hits, sub_support = next(sub_counts)
                gain = value - (2 * sub_hits - sub_support)
                if gain >= bar:
                    continue
                if min_confidence is not None and confidence_of_counts(sub_hits, sub_support) < min_confidence:
                    continue  # without it the rule set is no longer confident enough
                if worst is None or (gain, -k) <= (worst[0], -worst[1]):
                    worst = (gain, k, (sub_hits, sub_support))
            if worst is None:
                continue
            _, k, counts = worst
            current_rules = rules[:k] + rules[k + 1 :]
            measured[i] = counts
            if len(current_rules) >= 2:
                nxt[i] = current_rules
            rs = out[i]
            out[i] = RuleSet(
                rules=current_rules,
                support=counts[1],
                confidence=confidence_of_counts(*counts),
                fitness=fitness_of_counts(*counts, n_target),
                target_name=rs.target_name,
                optimum=rs.optimum,
            )
        current = nxt
    return out
