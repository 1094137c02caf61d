"""The polish's sweep: coordinate ascent of several rule sets at once, one rule position per step (see
:mod:`torch_amore.strategies.polish`)."""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import replace

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.sorting import argsort_values
from torch_amore._utils.transfer import tensor_on
from torch_amore.rules.cuts import short_cut
from torch_amore.rules.masks import all_along, all_of, count_true, rule_masks
from torch_amore.rules.metrics import confidence_of_counts, confidence_ratio, fitness_of_counts, fitness_value
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.strategies.best_interval import Objective, exact_best_interval
from torch_amore.strategies.polish.cut_tables import _BIG, best_cuts
from torch_amore.strategies.polish.scanned_cuts import key_values, scanned_cuts, sorted_keys
from torch_amore.strategies.polish.sorted_columns import _CHUNK_BYTES, SortedColumns

__all__ = ["polish_many", "polish_one"]
_OK = 1 << 41  # the confidence flag of an objective key, above any 2 * hits - support
#: From this many samples on, each rule set's step sorts the values of its own samples (those satisfying its other
#: rules) instead of taking whole sorted columns: less work where the other rules hold a part of the samples.
_COMPACT_ROWS = 1 << 18


def _keys(hits: torch.Tensor, support: torch.Tensor, conf: torch.Tensor | None) -> torch.Tensor:
    """:meth:`torch_amore.strategies.best_interval.Objective.key` as one exact integer: ``_OK * confident + 2 * hits -
    support``; ``conf`` per row (broadcast), negative where there is no ``min_confidence`` (``None``: none has one)."""
    if conf is None:
        return fitness_value(hits, support)
    ratio = confidence_ratio(hits, support)  # NaN (not confident) where support is 0
    return ((conf < 0) | (ratio >= conf)).long() * _OK + fitness_value(hits, support)


def _kappa_table(goals: Sequence[float | None], device: torch.device) -> torch.Tensor:
    """(S, K) integer kappas of each goal's :meth:`Objective.kappas` (``candidates=False``), padded by repeating the
    last one (a repeat never wins: ties go to the first kappa)."""
    rows = [[round(1000 * k) for k in Objective(c).kappas(False)] for c in goals]
    width = max(len(r) for r in rows)
    return tensor_on([r + r[-1:] * (width - len(r)) for r in rows], device=device)


def _cuts(
    others: torch.Tensor, columns: SortedColumns, cols: list[int], min_support: int, kappas: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`best_cuts` of each row of ``others`` (S, N) on its column ``cols`` (:class:`SortedColumns`), a few rows
    at a time (each working table about ``_CHUNK_BYTES``); ``near`` becomes the values of ``X`` there (X's dtype)."""
    S, n = others.shape
    if (
        n >= _COMPACT_ROWS or columns.row_chunk is not None
    ):  # each row on its own rows only (one host sync each): no whole-column sorts or tables
        parts = [_compact_cuts(others[i], columns, cols[i], min_support, kappas[i : i + 1]) for i in range(S)]
        return {name: torch.cat([p[name] for p in parts]) for name in parts[0]} if S > 1 else parts[0]
    per = max(1, _CHUNK_BYTES // (8 * (n + 1)))  # rows at a time
    parts = []
    for i in range(0, S, per):
        one = per >= S
        t = columns.get(cols if one else cols[i : i + per])
        inside = (others if one else others[i : i + per]).gather(1, t["order"].long()) & t["observed"]
        b = best_cuts(inside, inside & t["hit"], t["allowed"], min_support, kappas if one else kappas[i : i + per])
        b["near"] = columns.X[t["order"].gather(1, b["near"]).long(), t["column"]]
        parts.append(b)
    if len(parts) == 1:
        return parts[0]
    return {name: torch.cat([p[name] for p in parts]) for name in parts[0]}


def _compact_cuts(
    others: torch.Tensor, columns: SortedColumns, col: int, min_support: int, kappas: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`best_cuts` of one row on the samples it holds (``others`` (N,)) alone, sorted by their values on
    column ``col``; ``near`` the values of ``X`` there and an open upper bound at ``N``, as :func:`_cuts` gives them.
    The same result: a cut between two of these samples is allowed where their values differ, which is where some
    cut between them is allowed among all samples; other samples only separate allowed cuts.

    Example:
        >>> X = torch.tensor([[3.0], [1.0], [2.0], [float("nan")], [5.0]])
        >>> columns = SortedColumns(X, torch.tensor([True, False, True, True, False]))
        >>> b = _compact_cuts(torch.tensor([True, True, True, True, False]), columns, 0, 1, torch.tensor([[500]]))
        >>> b["start"].tolist(), b["end"].tolist(), b["hits"].tolist(), b["near"][:, :3].tolist()  # upper bound open
        ([[1]], [[5]], [[2]], [[1.0, 3.0, 2.0]])
    """
    X, n = columns.X, others.shape[0]
    if columns.row_chunk is not None:
        return _scanned_compact_cuts(others, columns, col, min_support, kappas)
    rows = torch.nonzero(others).squeeze(1)  # the one host sync
    m = rows.numel()
    if m == 0:  # no sample: no interval
        return _no_cuts(kappas.shape[1], n, X)
    vals = X[:, col].index_select(0, rows)
    vals = vals if vals.is_floating_point() else vals.to(columns.dtype)
    order = argsort_values(vals)  # NaN last: not observed, one run with no cut inside it, as in SortedColumns
    vals = vals.index_select(0, order)
    observed = ~torch.isnan(vals)
    hit = columns.target.index_select(0, rows.index_select(0, order)) & observed
    edge = torch.ones(1, dtype=torch.bool, device=X.device)
    steps = vals.masked_fill(~observed, math.inf)
    allowed = torch.cat([edge, steps[1:] != steps[:-1], edge])
    b = best_cuts(observed[None], hit[None], allowed[None], min_support, kappas)
    b["end"] = torch.where(b["end"] == m, n, b["end"])  # the open upper bound, at N as among all samples
    b["near"] = vals.index_select(0, b["near"].view(-1)).view(1, -1)  # X's values (exact in the cut dtype)
    return b


def _no_cuts(k: int, n: int, X: torch.Tensor) -> dict[str, torch.Tensor]:
    """:func:`_compact_cuts` where no sample holds: no interval."""
    zero = torch.zeros(1, k, dtype=torch.long, device=X.device)
    return {
        "start": zero,
        "end": zero + n,
        "hits": zero,
        "support": zero,
        "valid": zero.bool(),
        "near": X.new_zeros(1, 4 * k),
    }


def _scanned_compact_cuts(
    others: torch.Tensor, columns: SortedColumns, col: int, min_support: int, kappas: torch.Tensor
) -> dict[str, torch.Tensor]:
    """:func:`_compact_cuts` in bounded memory: the samples' values sorted in place as keys and scanned
    ``columns.row_chunk`` positions at a time (:mod:`torch_amore.strategies.polish.scanned_cuts`); the same result."""
    X, n = columns.X, others.shape[0]
    keys, hit_keys = sorted_keys(X[:, col], others, columns.target, columns.row_chunk)
    m = keys.shape[0]
    if m == 0:
        return _no_cuts(kappas.shape[1], n, X)
    b = scanned_cuts(keys, hit_keys, min_support, kappas, columns.row_chunk)
    b["end"] = torch.where(b["end"] == m, n, b["end"])  # the open upper bound, at N as among all samples
    dtype = X.dtype if X.is_floating_point() else columns.dtype
    b["near"] = key_values(keys[b["near"].view(-1)]).to(dtype).view(1, -1)
    return b


def _pick(b: dict[str, torch.Tensor], keys: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Of each row's kappas (``b`` of :func:`best_cuts`; ``keys`` (S, K + 1): theirs, then that of the other rules
    alone): the best key among the valid ones, ties to the first kappa. Returns the key, whether any is valid, the
    cuts (S, 2), hits and support (S, 1) and the neighbouring values (S, 4) of that kappa."""
    width = b["start"].shape[1]
    if width == 1:  # one kappa (no min_confidence): nothing to pick
        return keys[:, 0], b["valid"][:, 0], torch.cat([b["start"], b["end"]], 1), b["hits"], b["support"], b["near"]
    rank = torch.where(b["valid"], keys[:, :-1] * width + torch.arange(width - 1, -1, -1, device=keys.device), -_BIG)
    pick = rank.argmax(1, keepdim=True)
    cuts = torch.cat([b["start"].gather(1, pick), b["end"].gather(1, pick)], 1)
    near = b["near"].gather(1, pick + torch.arange(0, 4 * width, width, device=keys.device))
    hits, support = b["hits"].gather(1, pick), b["support"].gather(1, pick)
    return keys.gather(1, pick)[:, 0], b["valid"].any(1), cuts, hits, support, near


def _step(
    masks: torch.Tensor,
    k: int,
    columns: SortedColumns,
    cols: list[int],
    target: torch.Tensor,
    min_support: int,
    several: torch.Tensor,
    conf: torch.Tensor | None,
    kappas: torch.Tensor,
    best: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One coordinate-ascent step of several rule sets (rows): position ``k`` given their other rules. ``masks``
    (S, L, N) the rules' masks, ``cols`` the column of each row's rule ``k`` (:class:`SortedColumns`). Returns the
    outcome of each row as int64 (S, 12) (flags, counts, and the new cuts' observed neighbours as float64 bits), and
    the new keys."""
    rest = [masks[:, m] for m in range(masks.shape[1]) if m != k]
    others = all_of(rest) if rest else torch.ones_like(masks[:, 0])  # (S, N); one other rule: its masks, a view
    b = _cuts(others, columns, cols, min_support, kappas)
    n_o, t_o = count_true(others)[:, None], _count_hits(others, target)[:, None]
    keys = _keys(
        torch.cat([b["hits"], t_o], 1), torch.cat([b["support"], n_o], 1), None if conf is None else conf[:, None]
    )
    key_o = keys[:, -1]
    drop = several & (n_o[:, 0] >= min_support) & (key_o >= best)
    key_f, valid, cuts, hits, support, near = _pick(b, keys)
    swap = ~drop & valid & (key_f > best)
    new_best = torch.where(drop, key_o, torch.where(swap, key_f, best))
    n = others.shape[1]
    flags = torch.stack([drop, swap, cuts[:, 0] == 0, cuts[:, 1] == n], 1).long()
    near = near.to(columns.dtype)  # those next to an open bound or an empty interval are not used
    bits = near.view(torch.int32 if near.dtype == torch.float32 else torch.int64).long()  # exact on the host
    return torch.cat([flags, torch.cat([t_o, n_o, hits, support], 1), bits], 1), new_best


def _count_hits(masks: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``count_true(masks & target)`` of (S, N) ``masks``, a part of the rows at a time where N is large."""
    n = masks.shape[1]
    if n <= _CHUNK_BYTES:
        return count_true(masks & target)
    return sum(
        count_true(masks[:, r0 : r0 + _CHUNK_BYTES] & target[r0 : r0 + _CHUNK_BYTES])
        for r0 in range(0, n, _CHUNK_BYTES)
    )


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
    columns = SortedColumns(X, target) if columns is None else columns
    feats = sorted({r.feature for rs in rule_sets for r in rs.rules})
    if X.shape[0] >= _COMPACT_ROWS and columns.row_chunk is None and len(feats) < X.shape[1]:
        # each step reads its columns several times, and one column of a wide row-major X costs nearly a pass over
        # all of it (1,000,000 x 128 float32: about 12 ms, 1 ms in a copy): on a copy of the columns the rules use
        narrow = X.index_select(1, tensor_on(feats, device=X.device))
        local = [rs.renumbered({f: i for i, f in enumerate(feats)}) for rs in rule_sets]
        done = polish_many(local, narrow, target, min_support, n_total_target, goals=goals, target_name=target_name)
        return [rs if d is loc else d.renumbered(feats) for rs, loc, d in zip(rule_sets, local, done)]
    rules = [list(rs.rules) for rs in rule_sets]
    todo = [s for s, rs in enumerate(rule_sets) if rs.rules]
    if not todo:
        return list(rule_sets)
    depth = max(len(rules[s]) for s in todo)
    flat = [r for s in todo for r in rules[s]]
    masks = _stacked_masks(flat, [len(rules[s]) for s in todo], depth, X)  # (S, L, N)
    conf = None  # the confidence goal of each rule set: -1 for none
    if any(goals[s] is not None for s in todo):
        conf = tensor_on([-1.0 if goals[s] is None else goals[s] for s in todo], dtype=torch.float64, device=X.device)
    full = all_along(masks, 1)
    best = _keys(count_true(full & target), count_true(full), conf)
    del full
    kappas = _kappa_table([goals[s] for s in todo], X.device)
    several = tensor_on([len(rules[s]) > 1 for s in todo], device=X.device)
    counts: dict[int, tuple[int, int]] = {}
    live = list(range(len(todo)))  # rows of ``masks`` still being polished
    if X.shape[0] < _COMPACT_ROWS and columns.row_chunk is None:  # (else each step sorts its rows' values only)
        columns.get([r.feature for r in flat if r.value is None], only_sort=True)  # every column at once
    for k in range(depth):
        rows = [i for i in live if k < len(rules[todo[i]]) and rules[todo[i]][k].value is None]
        if not rows:
            continue
        cols = [rules[todo[i]][k].feature for i in rows]
        if rows == list(range(len(todo))):  # every rule set takes part (the usual case): no selection
            out, best = _step(masks, k, columns, cols, target, min_support, several, conf, kappas, best)
        else:
            sel = tensor_on(rows, device=X.device)
            part = [None if t is None else t[sel] for t in (masks, several, conf, kappas, best)]
            out, new_best = _step(part[0], k, columns, cols, target, min_support, *part[1:])
            best = best.index_copy(0, sel, new_best)
        changed = _apply_step(out.tolist(), rows, todo, rules, k, counts, live, columns.dtype)
        if k + 1 < depth:
            masks = _update(masks, k, changed, X)
    out_sets = list(rule_sets)
    for s, (hits, support) in counts.items():
        out_sets[s] = RuleSet(
            rules=tuple(rules[s]),
            support=support,
            confidence=confidence_of_counts(hits, support),
            fitness=fitness_of_counts(hits, support, n_total_target),
            target_name=target_name,
        )
    return out_sets


def _stacked_masks(flat: list[Rule], lengths: list[int], depth: int, X: torch.Tensor) -> torch.Tensor:
    """The (S, L, N) masks of the rules of each rule set (``lengths``: how many of ``flat`` each holds), padded to
    ``depth`` with all-true masks; where a column exceeds ``_CHUNK_BYTES`` as float64, written in place a part of the
    rows at a time."""
    if 8 * X.shape[0] > _CHUNK_BYTES:
        masks = torch.ones(len(lengths), depth, X.shape[0], dtype=torch.bool, device=X.device)
        slots = [(s, m) for s, n_rules in enumerate(lengths) for m in range(n_rules)]
        at_s, at_m = (tensor_on(list(t), device=X.device) for t in zip(*slots))
        step = max(1, _CHUNK_BYTES // (8 * len(flat)))
        for r0 in range(0, X.shape[0], step):
            masks[at_s, at_m, r0 : r0 + step] = rule_masks(flat, X[r0 : r0 + step])
        return masks
    pad = torch.ones(1, X.shape[0], dtype=torch.bool, device=X.device)
    every = torch.cat(_rule_masks(flat, X) + [pad])
    at, i = [], 0
    for n_rules in lengths:
        at.append(list(range(i, i + n_rules)) + [len(flat)] * (depth - n_rules))
        i += n_rules
    return every[tensor_on(at, device=X.device)]


def _apply_step(
    out_rows: list[list],
    rows: list[int],
    todo: list[int],
    rules: list[list[Rule]],
    k: int,
    counts: dict[int, tuple[int, int]],
    live: list[int],
    dtype: torch.dtype,
) -> list[tuple[int, Rule | None]]:
    """The results of one step of :func:`polish_many` at position ``k``: each rule dropped or moved to its new cut
    points (``rules``, ``counts`` and ``live`` updated in place). Returns the rows that changed, with the new rule
    (``None``: dropped)."""
    changed = []
    for i, row in zip(rows, out_rows):
        s = todo[i]
        drop, swap, open_low, open_high, t_o, n_o, hits, support = row[:8]
        a_low, a_high, b_low, b_high = (_from_bits(v, dtype) for v in row[8:])
        if drop:
            del rules[s][k]
            counts[s] = (t_o, n_o)
            live.remove(i)
            changed.append((i, None))
        elif swap:
            rule = rules[s][k]
            units = (rule.scale, rule.offset)
            low = -math.inf if open_low else short_cut(a_low, b_low, *units)
            high = math.inf if open_high else short_cut(a_high, b_high, *units)
            rules[s][k] = replace(rule, low=low, high=high)
            counts[s] = (hits, support)
            changed.append((i, rules[s][k]))
    return changed


def _from_bits(bits: int, dtype: torch.dtype) -> float:
    """The float whose bits (of ``dtype``, float32 or float64) are ``bits``."""
    if dtype == torch.float32:
        return struct.unpack("<f", struct.pack("<i", bits))[0]
    return struct.unpack("<d", struct.pack("<q", bits))[0]


def _rule_masks(rules: list[Rule], X: torch.Tensor) -> list[torch.Tensor]:
    """:func:`torch_amore.rules.masks.rule_masks` of ``rules``, in parts of a few rules (it compares in a float64 copy
    of their columns: about ``_CHUNK_BYTES`` at a time)."""
    n = X.shape[0]
    if 8 * n <= _CHUNK_BYTES:
        per = max(1, _CHUNK_BYTES // (8 * n + 8))
        return [rule_masks(rules[i : i + per], X) for i in range(0, len(rules), per)]
    out = torch.empty(len(rules), n, dtype=torch.bool, device=X.device)  # long columns: a part of the rows at a time
    step = max(1, _CHUNK_BYTES // (8 * len(rules)))
    for r0 in range(0, n, step):
        out[:, r0 : r0 + step] = rule_masks(rules, X[r0 : r0 + step])
    return [out]


def _update(masks: torch.Tensor, k: int, changed: list[tuple[int, Rule | None]], X: torch.Tensor) -> torch.Tensor:
    """``masks`` with position ``k`` of the changed rows replaced: a new rule's mask, or everything (a dropped
    rule; the row is not polished further)."""
    new = [(i, r) for i, r in changed if r is not None]
    if new:
        idx = tensor_on([i for i, _ in new], device=X.device)
        parts = _rule_masks([r for _, r in new], X)
        masks[idx, k] = parts[0] if len(parts) == 1 else torch.cat(parts)
    return masks


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
    """:func:`polish_many` of one rule set, rule by rule with
    :func:`torch_amore.strategies.best_interval.exact_best_interval` on counts reduced over the shards of a DDP run (so
    a sharded run gives the single-process result; slower)."""
    if not rule_set.rules:
        return rule_set
    key = Objective(min_confidence).key
    rules = list(rule_set.rules)
    masks = [r.mask(X) for r in rules]

    def counts(mask: torch.Tensor) -> tuple[int, int]:
        both = D.all_reduce_sum(torch.stack([mask.sum(), (mask & target).sum()]))
        return int(both[1]), int(both[0])

    best = key(*counts(all_of(masks)))
    for k in range(len(rules)):
        if rules[k].value is not None:
            continue
        others = all_of(masks[:k] + masks[k + 1 :]) if len(rules) > 1 else torch.ones_like(masks[0])
        t_o, n_o = counts(others)
        if len(rules) > 1 and n_o >= min_support and key(t_o, n_o) >= best:  # the rule does nothing
            del rules[k], masks[k]
            break
        units = (rules[k].scale, rules[k].offset)
        found = exact_best_interval(
            X[others, rules[k].feature], target[others], min_support, min_confidence=min_confidence, units=units
        )
        if found is None or key(found[2], found[3]) <= best:
            continue
        rules[k] = replace(rules[k], low=found[0], high=found[1])
        masks[k] = rules[k].mask(X)
        best = key(*counts(all_of(masks)))
    if rules == list(rule_set.rules):
        return rule_set
    hits, support = counts(all_of(masks))
    return RuleSet(
        rules=tuple(rules),
        support=support,
        confidence=confidence_of_counts(hits, support),
        fitness=fitness_of_counts(hits, support, n_total_target),
        target_name=target_name,
    )
