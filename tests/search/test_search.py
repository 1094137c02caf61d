"""extract_rules: the paper's diabetes result, agreement with a literal loop implementation, invariants."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

import torch_amore as ta
from torch_amore.rules.metrics import rule_metrics

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from naive_amore import naive_extract, uniform_edges  # noqa: E402


def independent_metrics(mask: np.ndarray, target: np.ndarray) -> tuple[int, float, float]:
    """Support, confidence, fitness by the paper's formulas, in numpy."""
    mask, target = np.asarray(mask, bool), np.asarray(target, bool)
    s = int(mask.sum())
    hits = int((mask & target).sum())
    return s, hits / s if s else 0.0, (hits - int((mask & ~target).sum())) / int(target.sum())


def assert_metrics_match(rule_sets, X, target):
    Xn = X.numpy() if isinstance(X, torch.Tensor) else np.asarray(X)
    tn = target.numpy() if isinstance(target, torch.Tensor) else np.asarray(target)
    for rs in rule_sets:
        mask = np.ones(len(Xn), bool)
        for r in rs.rules:  # recompute the mask from the bounds, not through Rule.mask
            col = Xn[:, r.feature].astype(np.float64)
            if r.value is not None:
                mask &= col == r.value
            else:
                mask &= (col >= r.low) & (col < r.high)
        s, c, f = independent_metrics(mask, tn)
        assert rs.support == s
        assert rs.confidence == pytest.approx(c, abs=1e-12)
        assert rs.fitness == pytest.approx(f, abs=1e-12)
        assert np.array_equal(rs.mask(X).cpu().numpy(), mask)


def diabetes_kwargs(d):
    return dict(
        feature_names=[str(n) for n in d["feature_names"]],
        feature_types=[str(t) for t in d["feature_types"]],
        feature_scale=d["raw_max"] - d["raw_min"],
        feature_offset=d["raw_min"],
    )


@pytest.mark.slow
def test_paper_diabetes_table(diabetes_task):
    d = diabetes_task
    rule_sets = ta.extract_rules(
        d["X"],
        d["target"],
        max_length=1,
        min_support=2000,
        n_grids=7,
        bin_strategy="uniform",
        top_k=3,
        strategy="paper",
        **diabetes_kwargs(d),
    )
    best = rule_sets[0]
    assert len(best.rules) == 1
    rule = best.rules[0]
    assert rule.name == "HbA1c_level"
    # the paper's grid edge is 4/7 (6.643 in raw units); the stored bound is the shortest number between the observed
    # values on either side of it (6.6 and 6.8): the same samples, printed faithfully
    assert rule.high == math.inf
    assert torch.equal(rule.mask(d["X"]), torch.as_tensor(d["X"])[:, rule.feature] >= 4 / 7)
    assert str(rule) == "HbA1c_level >= 6.7"
    assert (best.support, round(best.confidence, 3), round(best.fitness, 3)) == (2736, 0.993, 0.202)
    assert_metrics_match(rule_sets, d["X"], d["target"])
    assert [rs.fitness for rs in rule_sets] == sorted((rs.fitness for rs in rule_sets), reverse=True)


@pytest.mark.slow
def test_diabetes_longer_rules_satisfy_constraints(diabetes_task):
    d = diabetes_task
    rule_sets = ta.extract_rules(
        d["X"], d["target"], max_length=3, min_support=1000, n_grids=10, bin_strategy="kmeans", **diabetes_kwargs(d)
    )
    assert rule_sets
    for rs in rule_sets:
        assert 1 <= len(rs) <= 3 and rs.support >= 1000
        assert len(set(rs.features)) == len(rs)
        assert all(r > 1 for r in rs.ratios)
    assert_metrics_match(rule_sets, d["X"], d["target"])
    test = [rs.evaluate(d["X_test"], d["prob_test"] > float(d["threshold"])) for rs in rule_sets[:3]]
    assert all(0 < m.confidence <= 1 for m in test)


@pytest.mark.parametrize("seed", range(12))
def test_matches_literal_loop_implementation(seed):
    g = torch.Generator().manual_seed(seed)
    n = int(torch.randint(200, 700, (1,), generator=g))
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    X[:, 3] = (X[:, 3] > 0.5).double()
    X[:, 1] = torch.round(X[:, 1] * 5) / 5
    X[torch.rand(n, 4, generator=g) < 0.05] = float("nan")
    target = ((X[:, 0] > 0.5) & (X[:, 3] == 1)) | (torch.rand(n, generator=g) < 0.1)
    n_grids = int(torch.randint(2, 9, (1,), generator=g))
    min_support = int(torch.randint(5, 80, (1,), generator=g))
    types = ["float", "float", "float", "cat"]
    ours = ta.extract_rules(
        X,
        target,
        max_length=2,
        min_support=min_support,
        n_grids=n_grids,
        top_k=2,
        feature_types=types,
        strategy="paper",
        min_gain=0,  # the paper's rule tree as it is: no condition dropped for a small gain
    )
    ref = naive_extract(
        X,
        target,
        edges=uniform_edges(X, n_grids),
        is_cat=[t == "cat" for t in types],
        max_length=2,
        min_support=min_support,
        top_k=2,
    )
    # our bounds are snapped to short numbers between observed values: compare the rows each condition selects
    Xn = X.numpy()

    def rows(f, low, high, value):
        col = Xn[:, f]
        m = col == value if value is not None else (col >= low) & (col < high)
        return f, m.tobytes()

    mine = {
        frozenset(rows(r.feature, r.low, r.high, r.value) for r in rs.rules): (rs.support, rs.confidence) for rs in ours
    }
    theirs = {frozenset(rows(*c) for c in path): (b, a / b) for path, b, a in ref}
    assert len(mine) == len(ours)  # no two rule sets of ours select the same rows per condition
    assert mine == theirs
    assert_metrics_match(ours, X, target)


def test_planted_box_is_found(box_data):
    X, target = box_data
    best = ta.extract_rules(X, target, max_length=2, min_support=100, n_grids=10, strategy="paper")[0]
    assert sorted(best.features) == [0, 2]
    assert best.confidence > 0.9
    lows = {r.feature: r for r in best.rules}
    assert lows[0].low >= 0.55 and lows[2].high <= 0.55  # inside or on the planted box
    assert_metrics_match([best], X, target)


def test_deterministic_and_dtype_and_container_invariant(box_data):
    X64, target = box_data
    X32 = X64.float()
    X64 = X32.double()  # the same numbers in both dtypes
    kw = dict(max_length=2, min_support=60, n_grids=8, top_k=3)
    runs = {
        "first": ta.extract_rules(X64, target, **kw),
        "again": ta.extract_rules(X64, target, **kw),
        "float32": ta.extract_rules(X32, target, **kw),
        "numpy": ta.extract_rules(X64.numpy(), target.numpy(), **kw),
        "frame": ta.extract_rules(pd.DataFrame(X64.numpy(), columns=[f"feature_{i}" for i in range(4)]), target, **kw),
    }
    reference = runs["first"]
    assert len(reference) > 3
    for name, result in runs.items():
        assert result == reference, name
        assert [str(r) for r in result] == [str(r) for r in reference], name


@pytest.mark.parametrize("strategy", ["uniform", "quantile", "kmeans"])
def test_strategies_float32_equals_float64(strategy, box_data):
    X, target = box_data
    X32 = X.float()
    a = ta.extract_rules(X32, target, max_length=2, min_support=50, n_grids=6, bin_strategy=strategy)
    b = ta.extract_rules(X32.double(), target, max_length=2, min_support=50, n_grids=6, bin_strategy=strategy)
    assert a == b and a
    assert_metrics_match(a, X32.double(), target)


def test_dataframe_names_and_fraction_support(box_data):
    X, target = box_data
    frame = pd.DataFrame(X.numpy(), columns=["a", "b", "c", "d"])
    rule_sets = ta.extract_rules(frame, target, min_support=0.05)
    assert {r.name for rs in rule_sets for r in rs.rules} <= {"a", "b", "c", "d"}
    assert all(rs.support >= math.ceil(0.05 * len(frame)) for rs in rule_sets)


def test_features_subset_is_respected(box_data):
    X, target = box_data
    rule_sets = ta.extract_rules(X, target, features=[1, 2, 3], min_support=50)
    assert rule_sets and all(set(rs.features) <= {1, 2, 3} for rs in rule_sets)


def test_categorical_and_integer_features():
    g = torch.Generator().manual_seed(3)
    n = 3000
    color = torch.randint(0, 4, (n,), generator=g).double()  # categories 0..3
    age = torch.randint(18, 90, (n,), generator=g).double()
    noise = torch.rand(n, generator=g, dtype=torch.float64)
    X = torch.stack([color, age, noise], 1)
    target = (color == 2) & (age > 50)
    rule_sets = ta.extract_rules(
        X,
        target,
        max_length=2,
        min_support=100,
        feature_types=["cat", "int", "float"],
        feature_names=["color", "age", "noise"],
    )
    best = rule_sets[0]
    by_name = {r.name: r for r in best.rules}
    assert by_name["color"].value == 2.0 and str(by_name["color"]) == "color == 2"
    age_rule = by_name["age"]
    assert float(age_rule.low).is_integer() and age_rule.high == math.inf
    assert str(age_rule) == f"age >= {int(age_rule.low)}"
    assert_metrics_match(rule_sets, X, target)


def test_nan_is_missing_not_error(box_data):
    X, target = box_data
    X = X.clone()
    X[::7, 0] = float("nan")
    rule_sets = ta.extract_rules(X, target, min_support=50)
    assert rule_sets
    for rs in rule_sets:
        assert not bool((rs.mask(X) & torch.isnan(X[:, 0])).any()) or 0 not in rs.features
    assert_metrics_match(rule_sets, X, target)


def test_local_rules_contain_the_sample(box_data):
    X, target = box_data
    inside = int(torch.nonzero(target)[0])
    rule_sets = ta.extract_rules(X, target, max_length=2, min_support=50, local_x=X[inside])
    assert rule_sets
    for rs in rule_sets:
        assert all(r.contains(float(X[inside, r.feature])) for r in rs.rules)
        assert bool(rs.mask(X[inside : inside + 1])[0])
    assert_metrics_match(rule_sets, X, target)


def test_local_rules_may_be_empty_for_an_outlier():
    X = torch.linspace(0, 1, 1000, dtype=torch.float64)[:, None]
    target = X[:, 0] > 0.8
    assert ta.extract_rules(X, target, max_length=1, min_support=50, local_x=torch.tensor([0.05])) == []


def test_local_rule_from_own_grid_when_no_peak_contains_it():
    # two modes; the sample sits in the weaker one, which still has ratio > 1
    g = torch.Generator().manual_seed(1)
    x = torch.rand(4000, generator=g, dtype=torch.float64)
    p = torch.where(x > 0.8, 0.95, torch.where((x > 0.3) & (x < 0.4), 0.5, 0.05))
    target = torch.rand(4000, generator=g, dtype=torch.float64) < p
    X = x[:, None]
    glob = ta.extract_rules(X, target, max_length=1, min_support=200, top_k=1, n_grids=10)
    loc = ta.extract_rules(X, target, max_length=1, min_support=200, top_k=1, n_grids=10, local_x=[0.35])
    assert glob and loc and glob[0] != loc[0]
    assert loc[0].rules[0].contains(0.35) and not glob[0].rules[0].contains(0.35)
    assert_metrics_match(loc, X, target)


@pytest.mark.parametrize(
    "kwargs, exc, words",
    [
        (dict(X=torch.rand(10)), ValueError, "shape (N, F)"),
        (dict(target=torch.ones(5, dtype=torch.bool)), ValueError, "one entry per row"),
        (dict(target=torch.zeros(100, dtype=torch.bool)), ValueError, "empty"),
        (dict(target=torch.ones(100, dtype=torch.bool)), ValueError, "covers all"),
        (dict(min_support=0), ValueError, "min_support"),
        (dict(min_support=101), ValueError, "min_support"),
        (dict(min_support=1.5), ValueError, "min_support"),
        (dict(n_grids=1), ValueError, "n_grids"),
        (dict(bin_strategy="equal"), ValueError, "bin_strategy"),
        (dict(max_length=0), ValueError, "max_length"),
        (dict(top_k=0), ValueError, "top_k"),
        (dict(feature_names=["a"]), ValueError, "feature_names"),
        (dict(feature_types=["float"]), ValueError, "feature_types"),
        (dict(feature_types=["float", "bool", "float"]), ValueError, "feature_types"),
        (dict(X=np.array([["a", "b", "c"]] * 100)), TypeError, "numeric"),
        (dict(features=[0, 7]), ValueError, "features"),
        (dict(local_x=torch.rand(2)), ValueError, "local_x"),
        (dict(target=torch.arange(100)), TypeError, "boolean"),
        (dict(X="data"), TypeError, "X"),
    ],
)
def test_bad_input_raises_clear_error(kwargs, exc, words):
    g = torch.Generator().manual_seed(0)
    args = dict(X=torch.rand(100, 3, generator=g), target=torch.arange(100) % 3 == 0)
    args.update(kwargs)
    with pytest.raises(exc, match=None) as info:
        ta.extract_rules(args.pop("X"), args.pop("target"), **args)
    assert words in str(info.value)


def test_infinite_values_are_rejected():
    X = torch.rand(50, 2)
    X[3, 1] = float("inf")
    with pytest.raises(ValueError, match="inf"):
        ta.extract_rules(X, torch.arange(50) % 2 == 0)


def test_rule_metrics_roundtrip_through_functional(box_data):
    X, target = box_data
    for rs in ta.extract_rules(X, target, min_support=50):
        m = rule_metrics(rs.mask(X), target)
        assert (m.support, m.confidence, m.fitness) == pytest.approx((rs.support, rs.confidence, rs.fitness))
