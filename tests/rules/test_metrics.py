"""Functional metrics and Proposition 1, with property-based tests."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings

import torch_amore as ta
from torch_amore.grids.intervals import candidate_intervals
from torch_amore.grids.ratios import probability_ratios


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
