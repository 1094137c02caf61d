"""Functional metrics and Proposition 1, with property-based tests."""

from __future__ import annotations

import math

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings

import torch_amore as ta
from torch_amore.grids.intervals import candidate_intervals
from torch_amore.grids.ratios import probability_ratios
from torch_amore.rules import metrics as M


@given(st.lists(st.tuples(st.booleans(), st.booleans()), min_size=1, max_size=200))
def test_metrics_match_definitions(pairs):
    mask = torch.tensor([p[0] for p in pairs])
    target = torch.tensor([p[1] for p in pairs])
    s = sum(p[0] for p in pairs)
    hits = sum(p[0] and p[1] for p in pairs)
    misses = sum(p[0] and not p[1] for p in pairs)
    n_t = sum(p[1] for p in pairs)
    assert int(ta.support(mask)) == s
    assert float(ta.confidence(mask, target)) == pytest.approx(hits / s if s else 0.0)
    if n_t:
        assert float(ta.fitness(mask, target)) == pytest.approx((hits - misses) / n_t)
    else:
        with pytest.raises(ValueError):
            ta.fitness(mask, target)


@given(
    st.integers(0, 50),
    st.integers(1, 50),
    st.integers(0, 50),
    st.integers(1, 50),
    st.integers(1, 100),
    st.integers(101, 400),
)
def test_proposition_1(a_hits, a_n, b_hits, b_n, n_target, n_samples):
    """Merging two disjoint intervals gives a ratio between theirs (summed counts)."""
    a_hits, b_hits = min(a_hits, a_n), min(b_hits, b_n)
    r = probability_ratios(
        torch.tensor([a_hits, b_hits, a_hits + b_hits]), torch.tensor([a_n, b_n, a_n + b_n]), n_target, n_samples
    ).tolist()
    lo, hi = min(r[0], r[1]), max(r[0], r[1])
    if lo < hi:
        assert lo < r[2] < hi
    else:
        assert r[2] == pytest.approx(lo)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(2, 12), st.integers(1, 60), st.sampled_from(["paper", "beam"]))
def test_random_rule_sets_are_exact(seed, n_grids, min_support, strategy):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(300, 3, generator=g, dtype=torch.float64)
    target = (X[:, 0] + 0.3 * torch.rand(300, generator=g, dtype=torch.float64)) > 0.8
    if target.all() or not target.any():
        return
    for rs in ta.extract_rules(X, target, max_length=2, min_support=min_support, n_grids=n_grids, strategy=strategy):
        mask = rs.mask(X)
        assert rs.support == int(mask.sum()) >= min_support
        assert rs.confidence == pytest.approx(float((mask & target).sum()) / rs.support)
        assert rs.fitness == pytest.approx(float((mask & target).sum() - (mask & ~target).sum()) / float(target.sum()))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=2, max_size=12), st.integers(1, 80))
def test_expansion_never_lowers_ratio_once_support_is_met(grids, min_support):
    """Every candidate interval has ratio > 1, support >= s_min, and its ratio is the ratio of its summed counts."""
    tot = torch.tensor([[max(a, b) for a, b in grids]])
    tgt = torch.tensor([[min(a, b) for a, b in grids]])
    n, t = int(tot.sum()), int(tgt.sum())
    if t == 0 or t == n:
        return
    c = candidate_intervals(
        tot, tgt, torch.tensor([len(grids)]), torch.tensor([False]), torch.tensor([True]), min_support, t, n
    )
    for lo, hi, hits, sup, ratio in zip(
        c.g_low.tolist(), c.g_high.tolist(), c.hits.tolist(), c.support.tolist(), c.ratio.tolist()
    ):
        assert sup == int(tot[0, lo : hi + 1].sum()) >= min_support
        assert hits == int(tgt[0, lo : hi + 1].sum())
        assert ratio == pytest.approx((hits / sup) / (t / n)) and ratio > 1
        assert not (lo == 0 and hi == len(grids) - 1)


def test_metric_errors():
    with pytest.raises(TypeError, match="boolean"):
        ta.confidence(torch.tensor([1, 0]), torch.tensor([True, False]))
    with pytest.raises(ValueError, match="same length"):
        ta.confidence(torch.tensor([True]), torch.tensor([True, False]))
    assert np.isclose(float(ta.confidence(torch.tensor([False]), torch.tensor([True]))), 0.0)


def _plain_counts(pairs: list[tuple[bool, bool]]) -> tuple[int, int, int, int]:
    """(support, hits, target size, samples) of ``(in mask, in target)`` pairs, counted in plain Python."""
    return (
        sum(1 for m, _ in pairs if m),
        sum(1 for m, t in pairs if m and t),
        sum(1 for _, t in pairs if t),
        len(pairs),
    )


@given(st.lists(st.tuples(st.booleans(), st.booleans()), max_size=200))
def test_count_forms_match_the_masks(pairs):
    """Recall, lift, base rate, the integer fitness and its optimistic bound, recomputed from the masks."""
    s, hits, n_t, n = _plain_counts(pairs)
    misses = sum(1 for m, t in pairs if m and not t)
    assert M.fitness_value(hits, s) == hits - misses
    assert M.recall(hits, n_t) == (hits / n_t if n_t else 0.0)
    assert M.base_rate(n_t, n) == (n_t / n if n else 0.0)
    conf = hits / s if s else 0.0
    assert M.confidence_of_counts(hits, s) == conf
    assert M.hits_of_rates(conf, s) == hits  # the counts come back from the rounded rate
    rate = n_t / n if n else 0.0
    if rate:
        assert M.lift(conf, rate) == conf / rate
        # lift > 1 exactly when the rule set's share of target samples beats the data's
        assert (M.lift(conf, rate) > 1) == (hits * n > n_t * s)
    else:
        assert math.isnan(M.lift(conf, rate)) and math.isnan(M.lift(conf, None))
    # the optimistic bound: no rule set inside the mask (a subset of its samples) has a higher fitness value
    inside = [i for i, (m, _) in enumerate(pairs) if m]
    for keep in range(0, len(inside) + 1, max(1, len(inside) // 4)):
        sub = [pairs[i] for i in inside[:keep]]
        sub_s, sub_hits = len(sub), sum(1 for _, t in sub if t)
        assert M.fitness_value(sub_hits, sub_s) <= M.fitness_bound(hits)
        if n_t:
            assert M.fitness_of_counts(sub_hits, sub_s, n_t) <= M.recall(hits, n_t)


@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=50))
def test_tensor_forms_match_the_count_forms(rows):
    """The tensor forms the searches use, elementwise against the Python count forms."""
    hits = torch.tensor([min(h, s) for h, s in rows])
    support = torch.tensor([s for _, s in rows])
    ratio = M.confidence_ratio(hits, support).tolist()
    value = M.fitness_value(hits, support).tolist()
    bound = M.fitness_bound(hits).tolist()
    for (h, s), r, v, b in zip(zip(hits.tolist(), support.tolist()), ratio, value, bound):
        assert math.isnan(r) if s == 0 else r == h / s
        assert v == 2 * h - s and b == h >= v
    n_t, n = (torch.tensor(float(sum(c.tolist())), dtype=torch.float64) for c in (hits, support))
    assert M.base_rate(n_t, n).item() == (n_t.item() / n.item() if n.item() else 0.0)


def test_lift_and_recall_of_a_rule_set():
    """The explanation's lift and recall of a rule set, from its mask: (hits / support) / (T / N) and hits / T."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(500, 2, generator=g)
    target = X[:, 0] > 0.7
    rs = ta.RuleSet.from_rules([ta.Rule(0, "x", low=0.6)], X, target)
    mask, t = rs.mask(X).tolist(), target.tolist()
    hits = sum(1 for m, y in zip(mask, t) if m and y)
    assert M.hits_of_rates(rs.confidence, rs.support) == hits
    assert M.recall(hits, sum(t)) == hits / sum(t)
    assert M.lift(rs.confidence, M.base_rate(sum(t), len(t))) == (hits / sum(mask)) / (sum(t) / len(t))
