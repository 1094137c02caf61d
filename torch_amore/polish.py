"""Polish: coordinate ascent of rule sets on observed values, several rule sets at once.

Each numeric rule in turn gets the interval that is best given the other rules (cut between observed values rather
than on a grid), or is dropped when it does nothing: the other rules alone are at least as good and keep
``min_support`` samples. One sweep over the rules (the grid searches before it have converged already). Fitness
never decreases, and with ``min_confidence`` a confident rule set stays confident (rule sets are compared by
:class:`torch_amore.beam.Objective`).

In one process all rule sets move together, one rule position per step: each column is argsorted once
(:class:`SortedColumns`), the best interval over a column's sorted values restricted to the other rules' rows comes
from prefix sums on fixed-size tensors (:func:`best_cuts`, cuts only between distinct values), decisions are taken on
device, and one ``.tolist()`` per step brings the few numbers the host needs (the new cuts' observed neighbours, for
:func:`torch_amore.cuts.short_cut`). A sharded (DDP) run polishes rule set by rule set with
:func:`torch_amore.beam.exact_best_interval` on reduced counts (:func:`polish_one`): the single-process result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import torch

from torch_amore import distributed as D
from torch_amore.beam import Objective, exact_best_interval
from torch_amore.cuts import short_cut
from torch_amore.rules import RuleSet

__all__ = ["SortedColumns", "best_cuts", "polish_many", "polish_one"]

_BIG = 1 << 62  # beyond any weight: marks cuts that are not allowed
_OK = 1 << 41  # the confidence flag of an objective key, above any 2 * hits - support


class SortedColumns:
    """Ascending orders (stable, NaN last) and sorted values of columns of ``X``, one argsort per column, cached.

    Example:
        >>> X = torch.tensor([[3.0, 1.0], [1.0, float("nan")], [2.0, 0.0]])
        >>> order, values = SortedColumns(X).get([0, 1])
        >>> order.tolist(), values[1].tolist()
        ([[1, 2, 0], [2, 0, 1]], [0.0, 1.0, nan])
    """

    def __init__(self, X: torch.Tensor) -> None:
        self.X = X
        self.dtype = torch.float32 if X.device.type == "mps" else torch.float64
        self._cached: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, cols: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """(len(cols), N) orders and sorted values of the columns ``cols`` (new columns argsorted together)."""
        new = sorted({c for c in cols if c not in self._cached})
        if new:
            values = self.X[:, new].to(self.dtype).t()
            order = torch.argsort(values, dim=1, stable=True)
            ordered = values.gather(1, order)
            for i, c in enumerate(new):
                self._cached[c] = (order[i], ordered[i])
        return torch.stack([self._cached[c][0] for c in cols]), torch.stack([self._cached[c][1] for c in cols])


def _keys(hits: torch.Tensor, support: torch.Tensor, conf: torch.Tensor) -> torch.Tensor:
    """:meth:`torch_amore.beam.Objective.key` as one exact integer: ``_OK * confident + 2 * hits - support``;
    ``conf`` per row (broadcast), negative where there is no ``min_confidence``."""
    ratio = hits.to(torch.float64) / support.clamp(min=1).to(torch.float64)
    ok = (conf < 0) | ((support > 0) & (ratio >= conf))
    return ok.long() * _OK + 2 * hits - support


def best_cuts(
    inside: torch.Tensor, hit: torch.Tensor, allowed: torch.Tensor, min_support: int, kappas: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per row and kappa, the interval of positions ``start <= i < end`` maximising
    ``sum(1000 * hit - kappas * inside)`` with at least ``min_support`` rows inside, cut only where ``allowed``.

    ``inside``/``hit`` (S, N) are 0/1 flags in sorted order, ``allowed`` (S, N + 1) the cut positions (between
    distinct values; 0 and N always), ``kappas`` (S, K) integer weights (1000 * kappa). The interval holding every
    row is no condition and is left out; ties and the opening of bounds with nothing beyond them follow
    :func:`torch_amore.beam.best_intervals`, so the rows selected are the ones it selects on the distinct values.
    Returns ``start``, ``end``, ``hits``, ``support`` and ``valid`` (a positive value), each (S, K).

    Example:
        >>> inside = torch.ones(1, 5, dtype=torch.long); hit = torch.tensor([[0, 1, 1, 0, 0]])
        >>> allowed = torch.ones(1, 6, dtype=torch.bool)
        >>> b = best_cuts(inside, hit, allowed, 1, torch.tensor([[500]]))
        >>> b["start"].tolist(), b["end"].tolist(), b["hits"].tolist(), b["valid"].tolist()
        ([[1]], [[3]], [[2]], [[True]])
    """
    S, N = inside.shape
    K = kappas.shape[1]
    zero = inside.new_zeros(S, 1, dtype=torch.long)
    cb = torch.cat([zero, inside.long().cumsum(1)], 1)  # (S, N + 1) rows before each cut
    ct = torch.cat([zero, hit.long().cumsum(1)], 1)
    total = cb[:, -1:]
    pw = 1000 * ct[:, None, :] - kappas[:, :, None] * cb[:, None, :]  # (S, K, N + 1)
    run_min, arg_min = torch.cummin(torch.where(allowed[:, None, :], pw, _BIG), dim=2)
    last = torch.searchsorted(cb, cb - min_support, right=True) - 1  # the last start keeping min_support rows
    m = last.clamp(min=0)
    normal = allowed & (last >= 0) & (cb < total)  # ends that leave some row out after them
    value = pw - run_min.gather(2, m[:, None, :].expand(S, K, N + 1))
    best_val, end = torch.where(normal[:, None, :], value, -_BIG).max(dim=2)
    start = arg_min.gather(2, m.gather(1, end)[:, :, None])[:, :, 0]
    # the end past the last row: the start must leave some row out before it
    pos = torch.arange(N + 1, device=inside.device)
    tail_ok = allowed & (cb > 0) & (pos[None, :] <= last[:, -1:])
    tail_min, tail_start = torch.where(tail_ok[:, None, :], pw, _BIG).min(dim=2)
    tail_val = pw[:, :, -1] - tail_min
    use_tail = tail_val > best_val
    best_val = torch.where(use_tail, tail_val, best_val)
    start = torch.where(use_tail, tail_start, start)
    end = torch.where(use_tail, N, end)
    start = torch.where(cb.gather(1, start) == 0, 0, start)  # nothing below: open
    end = torch.where(cb.gather(1, end) == total, N, end)  # nothing above: open
    hits = ct.gather(1, end) - ct.gather(1, start)
    support = cb.gather(1, end) - cb.gather(1, start)
    return {"start": start, "end": end, "hits": hits, "support": support, "valid": (best_val > 0) & (end > start)}


def _kappa_table(goals: Sequence[float | None], device: torch.device) -> torch.Tensor:
    """(S, K) integer kappas of each goal's :meth:`Objective.kappas` (``candidates=False``), padded by repeating the
    last one (a repeat never wins: ties go to the first kappa)."""
    rows = [[round(1000 * k) for k in Objective(c).kappas(False)] for c in goals]
    width = max(len(r) for r in rows)
    return torch.tensor([r + r[-1:] * (width - len(r)) for r in rows], device=device)


class _Step:
    """One coordinate-ascent step of several rule sets: rule position ``k`` of each, given its other rules."""

    def __init__(self, X: torch.Tensor, target: torch.Tensor, columns: SortedColumns, min_support: int) -> None:
        self.X, self.target, self.columns, self.min_support = X, target, columns, min_support

    def __call__(
        self, masks: torch.Tensor, k: int, cols: list[int], several: list[bool], conf: torch.Tensor,
        kappas: torch.Tensor, best: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """``masks`` (S, L, N) of the rule sets taking part; returns (S, 12) float64 outcomes (see :func:`_fields`)
        and the new keys."""
        others = torch.cat([masks[:, :k], masks[:, k + 1 :]], 1).all(1)  # (S, N)
        n_o, t_o = others.sum(1), (others & self.target).sum(1)
        key_o = _keys(t_o, n_o, conf)
        drop = torch.tensor(several, device=masks.device) & (n_o >= self.min_support) & (key_o >= best)
        order, values = self.columns.get(cols)
        missing = torch.isnan(values)
        inside = others.gather(1, order) & ~missing
        hit = inside & self.target[order]
        v = values.masked_fill(missing, math.inf)  # one run of missing values: no cut inside it
        allowed = torch.ones(order.shape[0], order.shape[1] + 1, dtype=torch.bool, device=order.device)
        allowed[:, 1:-1] = v[:, 1:] != v[:, :-1]
        b = best_cuts(inside, hit, allowed, self.min_support, kappas)
        keys = _keys(b["hits"], b["support"], conf[:, None])
        width = kappas.shape[1]
        rank = torch.where(b["valid"], keys * width + (width - 1 - torch.arange(width, device=keys.device)), -_BIG)
        pick = rank.argmax(1, keepdim=True)  # the best key, ties: the first kappa
        found = b["valid"].any(1)
        key_f = keys.gather(1, pick)[:, 0]
        swap = ~drop & found & (key_f > best)
        new_best = torch.where(drop, key_o, torch.where(swap, key_f, best))
        start, end = b["start"].gather(1, pick), b["end"].gather(1, pick)
        idx = torch.arange(order.shape[1], device=order.device)
        n = order.shape[1]
        before = torch.cat([torch.full_like(start, -1), torch.where(inside, idx, -1).cummax(1).values], 1)
        after = torch.cat([torch.where(inside, idx, n).flip(1).cummin(1).values.flip(1), torch.full_like(start, n)], 1)
        cuts = torch.cat([start, end], 1)  # (S, 2)
        below = v.gather(1, before.gather(1, cuts).clamp(min=0))  # the largest value inside below each cut
        above = v.gather(1, after.gather(1, cuts).clamp(max=n - 1))  # the smallest one from it on
        open_ = torch.stack([start[:, 0] == 0, end[:, 0] == n], 1)
        fields = [drop, swap, t_o, n_o, b["hits"].gather(1, pick)[:, 0], b["support"].gather(1, pick)[:, 0]]
        out = torch.stack([f.to(torch.float64) for f in fields], 1)
        out = torch.cat([out, open_.to(torch.float64), below.to(torch.float64), above.to(torch.float64)], 1)
        return out, new_best


def polish_many(
    rule_sets: Sequence[RuleSet],
    X: torch.Tensor,
    target: torch.Tensor,
    min_support: int,
    n_total_target: int,
    *,
    goals: Sequence[float | None],
    columns: SortedColumns | None = None,
    target_name: str = "target",
) -> list[RuleSet]:
    """Polish every rule set of ``rule_sets`` (``goals``: the ``min_confidence`` of each, or ``None``) in one
    process: one sweep of coordinate ascent over the rule positions, all rule sets at once, one host sync per
    position. Returns the polished rule sets in order (a rule set that did not change is returned as it is)."""
    columns = SortedColumns(X) if columns is None else columns
    rules = [list(rs.rules) for rs in rule_sets]
    todo = [s for s, rs in enumerate(rule_sets) if rs.rules]
    if not todo:
        return list(rule_sets)
    depth = max(len(rules[s]) for s in todo)
    every = torch.ones(X.shape[0], dtype=torch.bool, device=X.device)
    masks = torch.stack([torch.stack([r.mask(X) for r in rules[s]] + [every] * (depth - len(rules[s])))
                         for s in todo])  # fmt: skip  # (S, L, N)
    conf = torch.tensor([-1.0 if goals[s] is None else goals[s] for s in todo], dtype=torch.float64, device=X.device)
    full = masks.all(1)
    best = _keys((full & target).sum(1), full.sum(1), conf)
    kappas = _kappa_table([goals[s] for s in todo], X.device)
    counts: dict[int, tuple[int, int]] = {}
    live = list(range(len(todo)))  # rows of ``masks`` still being polished
    step = _Step(X, target, columns, min_support)
    for k in range(depth):
        rows = [i for i in live if k < len(rules[todo[i]]) and rules[todo[i]][k].value is None]
        if not rows:
            continue
        sel = torch.tensor(rows, device=X.device)
        out, new_best = step(masks[sel], k, [rules[todo[i]][k].feature for i in rows],
                             [len(rules[todo[i]]) > 1 for i in rows], conf[sel], kappas[sel], best[sel])  # fmt: skip
        best = best.index_copy(0, sel, new_best)
        for i, row in zip(rows, out.tolist()):
            s = todo[i]
            drop, swap, t_o, n_o, hits, support, open_low, open_high, a_low, a_high, b_low, b_high = row
            if drop:
                del rules[s][k]
                counts[s] = (int(t_o), int(n_o))
                live.remove(i)
            elif swap:
                rule = rules[s][k]
                units = (rule.scale, rule.offset)
                low = -math.inf if open_low else short_cut(a_low, b_low, *units)
                high = math.inf if open_high else short_cut(a_high, b_high, *units)
                rules[s][k] = replace(rule, low=low, high=high)
                masks[i, k] = rules[s][k].mask(X)
                counts[s] = (int(hits), int(support))
    out_sets = list(rule_sets)
    for s, (hits, support) in counts.items():
        out_sets[s] = RuleSet(
            rules=tuple(rules[s]),
            support=support,
            confidence=hits / support,
            fitness=(2 * hits - support) / n_total_target,
            target_name=target_name,
        )
    return out_sets


def polish_one(
    rule_set: RuleSet,
    X: torch.Tensor,
    target: torch.Tensor,
    min_support: int,
    n_total_target: int,
    *,
    min_confidence: float | None = None,
    target_name: str = "target",
) -> RuleSet:
    """:func:`polish_many` of one rule set, rule by rule with :func:`torch_amore.beam.exact_best_interval` on counts
    reduced over the shards of a DDP run (so a sharded run gives the single-process result; slower)."""
    if not rule_set.rules:
        return rule_set
    key = Objective(min_confidence).key
    rules = list(rule_set.rules)
    masks = [r.mask(X) for r in rules]

    def counts(mask: torch.Tensor) -> tuple[int, int]:
        both = D.all_reduce_sum(torch.stack([mask.sum(), (mask & target).sum()]))
        return int(both[1]), int(both[0])

    best = key(*counts(torch.stack(masks).all(0)))
    for k in range(len(rules)):
        if rules[k].value is not None:
            continue
        others = torch.stack(masks[:k] + masks[k + 1 :]).all(0) if len(rules) > 1 else torch.ones_like(masks[0])
        t_o, n_o = counts(others)
        if len(rules) > 1 and n_o >= min_support and key(t_o, n_o) >= best:  # the rule does nothing
            del rules[k], masks[k]
            break
        units = (rules[k].scale, rules[k].offset)
        found = exact_best_interval(X[others, rules[k].feature], target[others], min_support,
                                    min_confidence=min_confidence, units=units)  # fmt: skip
        if found is None or key(found[2], found[3]) <= best:
            continue
        rules[k] = replace(rules[k], low=found[0], high=found[1])
        masks[k] = rules[k].mask(X)
        best = key(*counts(torch.stack(masks).all(0)))
    if rules == list(rule_set.rules):
        return rule_set
    hits, support = counts(torch.stack(masks).all(0))
    return RuleSet(
        rules=tuple(rules),
        support=support,
        confidence=hits / support,
        fitness=(2 * hits - support) / n_total_target,
        target_name=target_name,
    )
