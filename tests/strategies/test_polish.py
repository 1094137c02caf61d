"""The batched polish (torch_amore.strategies.polish) against a literal brute force over all cut pairs, and the
sequential reference (polish_one, the DDP path); its guarantees; and its host syncs."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from sync_count import count_syncs

from torch_amore.rules.cuts import short_cut
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.strategies.best_interval import best_intervals
from torch_amore.strategies.polish import (
    SortedColumns,
    best_cuts,
    cut_tables,
    polish_many,
    polish_one,
    scanned_cuts,
    sorted_columns,
    sorted_keys,
    sweep,
)
from torch_amore.strategies.polish.scanned_cuts import key_values


def _data(seed: int, n: int = 240) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.empty(n, 4, dtype=torch.float64)
    X[:, 0] = torch.randint(0, 10, (n,), generator=g).double()  # ties
    X[:, 1] = torch.rand(n, generator=g, dtype=torch.float64)
    X[torch.rand(n, generator=g) < 0.1, 1] = math.nan  # missing values
    X[:, 2] = (torch.rand(n, generator=g) < 0.5).double()  # a category
    X[:, 3] = torch.randn(n, generator=g, dtype=torch.float64).round(decimals=1)
    target = ((X[:, 0] >= 3) & (X[:, 3] < 0.5)) ^ (torch.rand(n, generator=g) < 0.15)
    return X, target


def _counts(mask: torch.Tensor, target: torch.Tensor) -> tuple[int, int]:
    return int((mask & target).sum()), int(mask.sum())


def _rule_set(rules: list[Rule], X: torch.Tensor, target: torch.Tensor) -> RuleSet:
    m = RuleSet(tuple(rules), 1, 1.0, 0.0).mask(X)
    h, n = _counts(m, target)
    return RuleSet(tuple(rules), n, h / max(n, 1), (2 * h - n) / int(target.sum()))


def _starts(X: torch.Tensor, target: torch.Tensor, seed: int) -> list[RuleSet]:
    """A few rule sets of lengths 1 to 3 (a categorical rule among them) with random grid-like bounds."""
    rng = np.random.default_rng(seed)

    def interval(col: int) -> Rule:
        v = X[:, col][~torch.isnan(X[:, col])].numpy()
        lo, hi = sorted(rng.choice(np.quantile(v, [0.0, 0.1, 0.3, 0.5, 0.7, 0.9, 1.0]), 2, replace=False))
        low = -math.inf if lo == v.min() else float(lo)
        high = math.inf if hi == v.max() else float(hi)
        return Rule(col, f"x{col}", low=low, high=high if high > low else math.inf)

    cat = Rule(2, "x2", value=float(rng.integers(0, 2)), kind="cat")
    sets = [[interval(0)], [interval(3), interval(0)], [interval(1), cat, interval(3)], [cat, interval(0), interval(1)]]
    return [_rule_set(r, X, target) for r in sets]


def _literal_best(v: np.ndarray, t: np.ndarray, min_support: int) -> tuple[int, int, np.ndarray] | None:
    """Brute force over every pair of cuts between the distinct observed values ``u`` of ``v`` (``lo``/``hi``:
    prefix indices, 0 and len(u) open): the pair of largest ``2 * hits - support`` with support >= min_support,
    positive, not everything; ties as :func:`torch_amore.strategies.best_interval.best_intervals` breaks them (an end
    before the last value: the smallest end, then the largest start; the end past it only when strictly better, then the
    smallest start)."""
    u = np.unique(v)
    cb = np.concatenate([[0], np.cumsum([np.sum(v == x) for x in u])])
    ct = np.concatenate([[0], np.cumsum([np.sum(t[v == x]) for x in u])])
    U = len(u)
    best_normal, best_tail = None, None
    for hi in range(U + 1):
        for lo in range(hi):
            n, h = cb[hi] - cb[lo], ct[hi] - ct[lo]
            if n < min_support or (lo == 0 and hi == U):
                continue
            val = 2 * h - n
            if hi < U:
                if best_normal is None or val > best_normal[0] or (val == best_normal[0] and hi == best_normal[2]):
                    best_normal = (val, lo, hi)
            elif best_tail is None or val > best_tail[0]:
                best_tail = (val, lo, hi)
    best = best_normal
    if best_tail is not None and (best is None or best_tail[0] > best[0]):
        best = best_tail
    if best is None or best[0] <= 0:
        return None
    return best[1], best[2], u


def literal_polish(rs: RuleSet, X: torch.Tensor, target: torch.Tensor, min_support: int) -> RuleSet:
    """One sweep of coordinate ascent, written out: drop a rule that does nothing, else re-cut it by brute force."""
    rules = list(rs.rules)
    masks = [r.mask(X) for r in rules]

    def key(m: torch.Tensor) -> int:
        h, n = _counts(m, target)
        return 2 * h - n

    best = key(torch.stack(masks).all(0))
    for k in range(len(rules)):
        if rules[k].value is not None:
            continue
        others = torch.stack(masks[:k] + masks[k + 1 :]).all(0) if len(rules) > 1 else torch.ones_like(masks[0])
        if len(rules) > 1 and int(others.sum()) >= min_support and key(others) >= best:
            del rules[k], masks[k]
            break
        col = X[:, rules[k].feature]
        rows = others & ~torch.isnan(col)
        found = _literal_best(col[rows].numpy(), target[rows].numpy(), min_support)
        if found is None:
            continue
        lo, hi, u = found
        low = short_cut(float(u[lo - 1]), float(u[lo])) if lo > 0 else -math.inf
        high = short_cut(float(u[hi - 1]), float(u[hi])) if hi < len(u) else math.inf
        new = replace(rules[k], low=low, high=high)
        mask = new.mask(X)
        if key(torch.stack(masks[:k] + [mask] + masks[k + 1 :]).all(0)) > best:
            rules[k], masks[k] = new, mask
            best = key(torch.stack(masks).all(0))
    return _rule_set(rules, X, target)


@pytest.mark.parametrize("seed", range(6))
def test_polish_many_equals_the_literal_brute_force(seed):
    X, target = _data(seed)
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    got = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts))
    for rs, new in zip(starts, got):
        want = literal_polish(rs, X, target, 15)
        assert [str(r) for r in new.rules] == [str(r) for r in want.rules]
        assert torch.equal(new.mask(X), want.mask(X))
        h, n = _counts(new.mask(X), target)  # the counts it reports are the rows it selects
        assert (new.support, new.confidence) == (n, h / n)
        assert new.fitness == pytest.approx((2 * h - n) / n_t) and new.fitness >= rs.fitness - 1e-12


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("goal", [None, 0.7, 0.9])
def test_polish_many_equals_the_sequential_reference(seed, goal):
    X, target = _data(100 + seed)
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    goals = [goal, None, goal, goal]  # goals mixed in one batch
    got = polish_many(starts, X, target, 12, n_t, goals=goals, columns=SortedColumns(X, target))
    for rs, new, g in zip(starts, got, goals):
        want = polish_one(rs, X, target, 12, n_t, min_confidence=g)
        assert new.rules == want.rules and (new.support, new.confidence) == (want.support, want.confidence)
        if g is not None and rs.confidence >= g:
            assert new.confidence >= g  # a confident rule set stays confident
        if g is None:
            assert new.fitness >= rs.fitness - 1e-12


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("chunk", [None, 1])
def test_best_cuts_selects_the_rows_best_intervals_selects_on_distinct_values(seed, chunk, monkeypatch):
    if chunk is not None:
        monkeypatch.setattr(sweep, "_CHUNK_BYTES", chunk)  # one kappa at a time
        monkeypatch.setattr(cut_tables, "_CHUNK_BYTES", chunk)
        monkeypatch.setattr(sorted_columns, "_CHUNK_BYTES", chunk)
    g = torch.Generator().manual_seed(seed)
    n = 200
    v = torch.randint(0, 25, (n,), generator=g).double().sort().values
    inside = torch.rand(n, generator=g) < 0.7
    hit = inside & (torch.rand(n, generator=g) < (v / 25))
    allowed = torch.cat([torch.tensor([True]), v[1:] != v[:-1], torch.tensor([True])])
    kappas = (0.5, 0.7, 0.9)
    b = best_cuts(inside[None], hit[None], allowed[None], 10, torch.tensor([[500, 700, 900]]))
    u = torch.unique(v[inside])
    tot = torch.stack([(v[inside] == x).sum() for x in u])
    tgt = torch.stack([(v[hit] == x).sum() for x in u])
    ref = best_intervals(tot[None], tgt[None], torch.tensor([len(u)]), torch.tensor([False]), 10, kappas)
    for k in range(len(kappas)):
        rows = ref.kappa == k
        assert bool(b["valid"][0, k]) == bool(rows.any())
        if rows.any():
            lo, hi = int(ref.g_low[rows][0]), int(ref.g_high[rows][0])
            want = inside & (v >= u[lo]) & (v <= u[hi])
            pos = torch.arange(n)
            got = inside & (pos >= b["start"][0, k]) & (pos < b["end"][0, k])
            assert torch.equal(got, want)
            counts = (int(b["hits"][0, k]), int(b["support"][0, k]))
            assert counts == (int(ref.hits[rows][0]), int(ref.support[rows][0]))
            # the inside rows next to the cuts: the last before each cut, the first at or after it
            at = pos[inside].tolist()
            for j, cut in enumerate([int(b["start"][0, k]), int(b["end"][0, k])]):
                before, after = [p for p in at if p < cut], [p for p in at if p >= cut]
                if before:
                    assert int(b["near"][0, j * len(kappas) + k]) == before[-1]
                if after:
                    assert int(b["near"][0, (2 + j) * len(kappas) + k]) == after[0]


def test_polish_syncs_once_per_rule_position():
    X, target = _data(7, n=400)
    starts = _starts(X, target, 7)
    n_t = int(target.sum())
    polish_many(starts, X, target, 15, n_t, goals=[None, 0.8, None, 0.8])  # warm-up
    with count_syncs() as syncs:
        polish_many(starts, X, target, 15, n_t, goals=[None, 0.8, None, 0.8])
    depth = max(len(rs.rules) for rs in starts)
    assert syncs.aten == 0  # no .item(), nonzero, boolean indexing or unique
    assert 1 <= syncs.tolist <= depth  # one fetch per rule position


def _literal_tables(X: torch.Tensor, target: torch.Tensor, col: int) -> dict[str, torch.Tensor]:
    """The sorted tables of one column, written out: values ascending with NaN last (as +inf: one run)."""
    v = X[:, col].tolist()
    key = [math.inf if math.isnan(x) else x for x in v]
    order = sorted(range(len(v)), key=lambda i: key[i])
    s = [key[i] for i in order]
    allowed = [True] + [s[i] != s[i - 1] for i in range(1, len(s))] + [True]
    observed = [not math.isnan(v[i]) for i in order]
    return {"values": torch.tensor(s, dtype=X.dtype), "observed": torch.tensor(observed),
            "allowed": torch.tensor(allowed)}  # fmt: skip


@pytest.mark.parametrize("chunk", [None, 1])
def test_sorted_columns_equal_a_literal_sort(chunk, monkeypatch):
    if chunk is not None:
        monkeypatch.setattr(sweep, "_CHUNK_BYTES", chunk)  # one column sorted at a time
        monkeypatch.setattr(cut_tables, "_CHUNK_BYTES", chunk)
        monkeypatch.setattr(sorted_columns, "_CHUNK_BYTES", chunk)
    X, target = _data(3, n=120)
    columns = SortedColumns(X, target)
    columns.get([3, 0, 1], only_sort=True)
    got = columns.get([1, 2, 0, 1])  # a new column joins the cached ones
    one = columns.get([3])  # one column: views of the cache
    for r, col in enumerate([1, 2, 0, 1, 3]):
        t = {name: (got[name][r] if r < 4 else one[name][0]) for name in got}
        want = _literal_tables(X, target, col)
        key = X[:, col].nan_to_num(nan=math.inf)
        assert torch.equal(key[t["order"].long()], want["values"])  # an order that sorts the column
        assert sorted(t["order"].tolist()) == list(range(len(key)))
        assert torch.equal(t["observed"], want["observed"]) and torch.equal(t["allowed"], want["allowed"])
        assert torch.equal(t["hit"], target[t["order"].long()] & want["observed"])  # ties in any order
        assert t["column"].tolist() == [col]


@pytest.mark.parametrize("seed", range(3))
def test_polish_many_in_chunks_equals_the_literal_brute_force(seed, monkeypatch):
    X, target = _data(seed)
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    whole = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts))
    monkeypatch.setattr(sweep, "_CHUNK_BYTES", 1)  # rows, kappas, columns and rule masks one at a time
    monkeypatch.setattr(cut_tables, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(sorted_columns, "_CHUNK_BYTES", 1)
    got = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts))
    for rs, new, one in zip(starts, got, whole):
        want = literal_polish(rs, X, target, 15)
        assert [str(r) for r in new.rules] == [str(r) for r in want.rules]
        assert torch.equal(new.mask(X), want.mask(X))
        h, n = _counts(new.mask(X), target)
        assert (new.support, new.confidence) == (n, h / n)
        assert new == one


def _equals_the_sequential_reference(seed: int, goals: list) -> list[RuleSet]:
    """polish_many on ``_data(seed)`` checked rule set by rule set against polish_one; returns its result."""
    X, target = _data(seed)
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    got = polish_many(starts, X, target, 12, n_t, goals=goals)
    for rs, new, g in zip(starts, got, goals):
        want = polish_one(rs, X, target, 12, n_t, min_confidence=g)
        assert new.rules == want.rules and (new.support, new.confidence) == (want.support, want.confidence)
    return got


@pytest.mark.parametrize("seed", range(3))
def test_polish_many_in_chunks_equals_the_sequential_reference(seed, monkeypatch):
    monkeypatch.setattr(sweep, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(cut_tables, "_CHUNK_BYTES", 1)
    monkeypatch.setattr(sorted_columns, "_CHUNK_BYTES", 1)
    _equals_the_sequential_reference(200 + seed, [0.8, None, 0.7, 0.9])  # several kappas per row, one at a time


@pytest.mark.parametrize("seed", range(4))
def test_polish_many_on_each_rule_sets_own_rows_equals_the_literal_brute_force(seed, monkeypatch):
    """From ``_COMPACT_ROWS`` samples on, each step sorts the values of its rule set's own rows (no whole columns)."""
    monkeypatch.setattr(sweep, "_COMPACT_ROWS", 0)
    X, target = _data(300 + seed)
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    got = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts))
    changed = 0
    for rs, new in zip(starts, got):
        want = literal_polish(rs, X, target, 15)
        assert [str(r) for r in new.rules] == [str(r) for r in want.rules]
        assert torch.equal(new.mask(X), want.mask(X))
        h, n = _counts(new.mask(X), target)
        assert (new.support, new.confidence) == (n, h / n)
        changed += new.rules != rs.rules
    assert changed  # the polish moved some rule: the comparison is not vacuous


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("goal", [None, 0.8])
def test_polish_many_on_each_rule_sets_own_rows_equals_the_sequential_reference(seed, goal, monkeypatch):
    goals = [goal, None, 0.7, goal]
    whole = _equals_the_sequential_reference(400 + seed, goals)
    monkeypatch.setattr(sweep, "_COMPACT_ROWS", 0)
    assert _equals_the_sequential_reference(400 + seed, goals) == whole  # the same as with whole sorted columns


@pytest.mark.parametrize("seed", range(3))
def test_polish_many_of_a_wide_x_on_its_rules_columns_equals_the_literal_brute_force(seed, monkeypatch):
    """From ``_COMPACT_ROWS`` samples on, the rule sets are polished on a copy of the columns they use, renumbered to
    it and back: the rules keep X's feature numbers."""
    monkeypatch.setattr(sweep, "_COMPACT_ROWS", 0)
    X, target = _data(500 + seed)
    noise = torch.rand(len(X), 3, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    wide = torch.cat([noise[:, :2], X, noise[:, 2:]], 1)  # X's columns at 2..5 of 7
    starts = _starts(X, target, seed)
    moved = [replace(rs, rules=tuple(replace(r, feature=r.feature + 2) for r in rs.rules)) for rs in starts]
    got = polish_many(moved, wide, target, 15, int(target.sum()), goals=[None] * len(moved))
    changed = 0
    for rs, start, new in zip(starts, moved, got):
        want = literal_polish(rs, X, target, 15)
        assert [r.feature for r in new.rules] == [r.feature + 2 for r in want.rules]
        assert [(r.low, r.high, r.value) for r in new.rules] == [(r.low, r.high, r.value) for r in want.rules]
        assert torch.equal(new.mask(wide), want.mask(X))
        changed += new.rules != start.rules
    assert changed  # the polish moved some rule: the comparison is not vacuous


def test_compact_cuts_with_no_row_is_not_valid():
    X, target = _data(0)
    b = sweep._compact_cuts(torch.zeros(len(X), dtype=torch.bool), SortedColumns(X, target), 1, 1,
                             torch.tensor([[500, 700]]))  # fmt: skip
    assert b["valid"].tolist() == [[False, False]] and b["support"].tolist() == [[0, 0]]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("row_chunk", [1, 7, 1000])
def test_scanned_polish_equals_the_literal_brute_force(seed, row_chunk):
    """With ``row_chunk`` (codes on disk) each step sorts its rule set's values as keys in place and scans them in
    chunks: the literal brute force's rules, and the same rule sets as with whole sorted columns."""
    X, target = _data(500 + seed)
    X[::17, 0] = -0.0  # signed zeros, equal to 0.0
    starts = _starts(X, target, seed)
    n_t = int(target.sum())
    whole = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts))
    columns = SortedColumns(X, target, row_chunk=row_chunk)
    got = polish_many(starts, X, target, 15, n_t, goals=[None] * len(starts), columns=columns)
    changed = 0
    for rs, new, one in zip(starts, got, whole):
        want = literal_polish(rs, X, target, 15)
        assert [str(r) for r in new.rules] == [str(r) for r in want.rules]
        h, n = _counts(new.mask(X), target)
        assert (new.support, new.confidence) == (n, h / n)
        assert new == one
        changed += new.rules != rs.rules
    assert changed


@pytest.mark.parametrize("goal", [None, 0.8])
def test_scanned_polish_equals_the_sequential_reference_with_confidence_goals(goal):
    X, target = _data(600)
    starts = _starts(X, target, 1)
    assert len(starts) >= 2  # the comparison below is not vacuous
    goals = [goal, None, 0.7, goal][: len(starts)] + [None] * max(0, len(starts) - 4)
    n_t = int(target.sum())
    columns = SortedColumns(X, target, row_chunk=13)
    got = polish_many(starts, X, target, 12, n_t, goals=goals, columns=columns)
    for rs, new, g in zip(starts, got, goals):
        want = polish_one(rs, X, target, 12, n_t, min_confidence=g)
        assert new.rules == want.rules and (new.support, new.confidence) == (want.support, want.confidence)


@pytest.mark.parametrize("seed", range(40))
def test_scanned_cuts_equal_best_cuts_on_ties_nan_and_any_min_support(seed):
    """scanned_cuts against best_cuts on the same sorted samples: many ties, NaN, signed zeros, every min_support
    from 1 to beyond the samples, several kappas, chunks of 1 to 8 positions."""
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 80, (1,), generator=g))
    v = torch.randint(0, int(torch.randint(1, 12, (1,), generator=g)), (n,), generator=g).float() - 3
    if seed % 3 == 0:
        v = torch.randn(n, generator=g)
    if seed % 2:  # 8-byte keys (4-byte ones for float32)
        v = v.double()
    v[torch.rand(n, generator=g) < 0.15] = math.nan
    v[torch.rand(n, generator=g) < 0.1] = -0.0
    t = torch.rand(n, generator=g) < float(torch.rand(1, generator=g))
    kappas = torch.randint(1, 1000, (1, int(torch.randint(1, 4, (1,), generator=g))), generator=g)
    order = torch.from_numpy(np.argsort(v.numpy(), kind="stable"))  # NaN last
    vals = v[order]
    observed = ~torch.isnan(vals)
    steps = vals.masked_fill(~observed, math.inf)
    allowed = torch.cat([torch.ones(1, dtype=torch.bool), steps[1:] != steps[:-1], torch.ones(1, dtype=torch.bool)])
    keys, hit_keys = sorted_keys(v, torch.ones(n, dtype=torch.bool), t, int(torch.randint(1, 9, (1,), generator=g)))
    for min_support in range(1, n + 2):
        ref = best_cuts(observed[None], (t[order] & observed)[None], allowed[None], min_support, kappas)
        got = scanned_cuts(keys, hit_keys, min_support, kappas, int(torch.randint(1, 9, (1,), generator=g)))
        for name in ("start", "end", "hits", "support", "valid"):
            assert torch.equal(got[name], ref[name]), (name, min_support)
        near = key_values(keys[got["near"].view(-1)])
        assert near.dtype == (torch.float32 if v.dtype == torch.float32 else torch.float64)
        assert torch.equal(near.nan_to_num(99.0), vals[ref["near"].view(-1)].nan_to_num(99.0))
