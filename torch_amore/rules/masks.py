"""Masks of many rules and rule sets at once (:func:`rule_masks`, :func:`rule_set_masks`), and
:func:`drop_same_mask`, which keeps the shortest of rule sets that select the same rows.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet

__all__ = ["all_along", "all_of", "count_true", "drop_same_mask", "rule_masks", "rule_set_masks"]


def all_along(masks: torch.Tensor, dim: int) -> torch.Tensor:
    """``masks.all(dim)`` of a bool tensor, by elementwise ands over a short ``dim`` and by the minimum of its bytes
    over a long one (torch's bool reductions on CPU are 30 to 70 times slower).

    Example:
        >>> m = torch.tensor([[[True, False], [True, True]]])
        >>> all_along(m, 1).tolist(), all_along(m, 2).tolist()
        ([[True, False]], [[False, True]])
    """
    size = masks.shape[dim]
    if size == 0:
        return torch.ones(masks.shape[:dim] + masks.shape[dim + 1 :], dtype=torch.bool, device=masks.device)
    if size <= 8:
        return all_of(masks.unbind(dim))
    return masks.view(torch.uint8).amin(dim).bool()


def all_of(masks: Sequence[torch.Tensor]) -> torch.Tensor:
    """Where every one of ``masks`` (a non-empty sequence of same-shape bool tensors) holds, by elementwise ands (the
    first mask itself when there is one: not to be written to).

    Example:
        >>> all_of([torch.tensor([True, True, False]), torch.tensor([True, False, False])]).tolist()
        [True, False, False]
    """
    return functools.reduce(torch.logical_and, masks)


def count_true(masks: torch.Tensor) -> torch.Tensor:
    """Per row of (R, N) bool ``masks``, its number of True as int64 (its bytes summed into int32 where that cannot
    overflow).

    Example:
        >>> count_true(torch.tensor([[True, False, True], [False, False, False]])).tolist()
        [2, 0]
    """
    if masks.shape[1] >= 2**31:
        return masks.sum(1)
    return masks.view(torch.uint8).sum(1, dtype=torch.int32).long()


def rule_masks(rules: Sequence[Rule], X: torch.Tensor) -> torch.Tensor:
    """(len(rules), N) :meth:`Rule.mask <torch_amore.rules.rule.Rule.mask>` of each rule, batched on a floating ``X``.

    Example:
        >>> X = torch.tensor([[0.5, 1.0], [2.0, 0.0], [float("nan"), 1.0]])
        >>> rule_masks([Rule(0, "a", low=1.0), Rule(1, "b", value=1.0, kind="cat")], X).tolist()
        [[False, True, False], [True, False, True]]
    """
    if not X.is_floating_point() or X.device.type == "mps":
        return torch.stack([r.mask(X) for r in rules])
    nan = math.nan
    bounds = tensor_on(
        [
            [r.low, r.high if r.high < math.inf else nan, nan, r.feature]
            if r.value is None
            else [nan, nan, r.value, r.feature]
            for r in rules
        ],
        dtype=torch.float64,
        device=X.device,
    )
    low, high, value, feature = bounds.unsqueeze(2).unbind(1)
    cols = X.t().index_select(0, feature.view(-1).long()).to(torch.float64)  # (R, N); along dim 1: 3x slower
    interval = (cols >= low) & ~(cols >= high)  # NaN never reaches low; an open top bounds nothing
    return torch.where(torch.isnan(value), interval, cols == value)


def rule_set_masks(rule_sets: Sequence[RuleSet], X: torch.Tensor) -> torch.Tensor:
    """(len(rule_sets), N) :meth:`torch_amore.rules.rules.RuleSet.mask` of each rule set (all rules masked at once).

    Example:
        >>> X = torch.tensor([[0.5, 1.0], [2.0, 0.0], [3.0, 1.0]])
        >>> a, b = Rule(0, "a", low=1.0), Rule(1, "b", value=1.0, kind="cat")
        >>> rule_set_masks([RuleSet((a, b), 1, 1.0, 1.0), RuleSet((), 3, 1.0, 1.0)], X).tolist()
        [[False, False, True], [True, True, True]]
    """
    flat = [r for rs in rule_sets for r in rs.rules]
    depth = max([len(rs.rules) for rs in rule_sets] + [1])
    every = torch.ones(1, X.shape[0], dtype=torch.bool, device=X.device)
    table = torch.cat([rule_masks(flat, X), every]) if flat else every
    at, i = [], 0
    for rs in rule_sets:
        at.append(list(range(i, i + len(rs.rules))) + [len(flat)] * (depth - len(rs.rules)))
        i += len(rs.rules)
    return all_along(table[tensor_on(at, device=X.device)], 1)


#: ``compare(rule_sets, later, earlier)`` of :func:`drop_same_mask`: for each pair ``(later[p], earlier[p])`` of
#: indices into ``rule_sets``, whether the two select the same samples (on every DDP shard).
MaskComparison = Callable[[list[RuleSet], torch.Tensor, torch.Tensor], list[bool]]


def drop_same_mask(
    rule_sets: list[RuleSet], X: torch.Tensor | None, *, compare: MaskComparison | None = None
) -> list[RuleSet]:
    """The rule sets in order, less those that select exactly the same samples (on every DDP shard) as another one
    with the same support and confidence on the same features or a subset or superset of them: of such a group the
    shortest is kept (ties: the earliest). ``compare`` replaces the comparison of the masks on ``X``.

    Example:
        >>> X = torch.tensor([[0.0, 5.0], [1.0, 5.0], [2.0, 5.0], [3.0, 5.0]])
        >>> a = RuleSet((Rule(0, "x", low=1.5),), 2, 1.0, 1.0)
        >>> b = RuleSet((Rule(0, "x", low=1.2),), 2, 1.0, 1.0)  # the same rows, other text
        >>> c = RuleSet((Rule(0, "x", low=1.5), Rule(1, "y", low=4.0)), 2, 1.0, 1.0)  # y adds nothing
        >>> [str(rs) for rs in drop_same_mask([c, a, b], X)]
        ['IF x >= 1.5 THEN target  (support=2, confidence=1.000, fitness=1.000)']
    """
    if X is None and compare is None:
        return rule_sets
    groups: dict[tuple, list[int]] = {}
    for i, rs in enumerate(rule_sets):
        groups.setdefault((rs.support, rs.confidence), []).append(i)
    feats = [frozenset(rs.features) for rs in rule_sets]
    pairs = [
        (i, e)
        for members in groups.values()
        for n, i in enumerate(members)
        for e in members[:n]
        if feats[i] <= feats[e] or feats[e] <= feats[i]
    ]
    if not pairs:
        return rule_sets
    involved = sorted({i for pair in pairs for i in pair})
    row = {i: r for r, i in enumerate(involved)}
    chosen = [rule_sets[i] for i in involved]
    later, earlier = torch.tensor([[row[i] for i, _ in pairs], [row[e] for _, e in pairs]])
    equal = (compare or functools.partial(_same_masks, X))(chosen, later, earlier)
    keeper = list(range(len(rule_sets)))  # each rule set's group, by its representative (union-find)

    def find(i: int) -> int:
        while keeper[i] != i:
            keeper[i] = keeper[keeper[i]]
            i = keeper[i]
        return i

    def rank(i: int) -> tuple[int, int]:
        return len(rule_sets[i].rules), i

    for (i, e), eq in zip(pairs, equal):
        if eq:
            a, b = find(i), find(e)
            if a != b:
                keep, drop = (a, b) if rank(a) < rank(b) else (b, a)
                keeper[drop] = keep
    return [rs for i, rs in enumerate(rule_sets) if find(i) == i]


def _same_masks(X: torch.Tensor, rule_sets: list[RuleSet], later: torch.Tensor, earlier: torch.Tensor) -> list[bool]:
    """Whether ``rule_sets[later[p]]`` and ``rule_sets[earlier[p]]`` select the same rows of ``X`` (on every DDP
    shard), for each pair ``p``."""
    masks = rule_set_masks(rule_sets, X)
    later, earlier = later.to(X.device), earlier.to(X.device)
    return D.all_ranks(all_along(masks[later] == masks[earlier], 1)).tolist()
