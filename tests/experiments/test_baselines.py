"""Decision-tree baseline: exact conversion of sklearn's splits, metrics from masks, the grid search."""

from __future__ import annotations

import itertools
import math
import re
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.tree import DecisionTreeClassifier

from torch_amore import RuleSet, decision_tree_rules, decision_tree_search
from torch_amore.experiments.baselines import _split_boundary
from torch_amore.rules.cuts import format_bound

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def _toy(n: int = 3000, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = np.column_stack(
        [
            rng.normal(size=n),  # continuous float64, not float32-representable
            rng.uniform(0, 1, size=n),
            rng.integers(0, 20, size=n).astype(float),  # integer-valued
            rng.integers(0, 2, size=n).astype(float),  # binary one-hot style
        ]
    )
    logit = 2.0 * X[:, 0] - 3.0 * (X[:, 1] - 0.5) + 0.2 * (X[:, 2] - 10) + 1.5 * X[:, 3]
    target = logit + rng.normal(scale=0.8, size=n) > 1.0
    return X, target


def _reference_metrics(mask: np.ndarray, target: np.ndarray) -> tuple[int, float, float]:
    s = int(mask.sum())
    h = int((mask & target).sum())
    return s, (h / s if s else 0.0), (h - (s - h)) / int(target.sum())


def _node_masks(X, target, **params) -> list[np.ndarray]:
    """Decision-path membership of every non-root node of an independently fitted tree."""
    clf = DecisionTreeClassifier(random_state=0, **params).fit(X, target)
    path = clf.decision_path(X).toarray().astype(bool)
    return [path[:, k] for k in range(1, path.shape[1])]


def test_split_boundary_reproduces_float32_comparison():
    rng = np.random.default_rng(1)
    f32 = rng.normal(scale=3, size=200).astype(np.float32)
    nxt = np.nextafter(f32, np.float32(np.inf))
    thresholds = np.concatenate(
        [
            f32.astype(np.float64),  # sklearn's fallback: a float32 value itself
            f32.astype(np.float64) / 2 + nxt.astype(np.float64) / 2,  # the usual midpoint of two float32 values
            rng.normal(scale=3, size=200),  # arbitrary float64
            [0.0, -0.0, 0.5, 1e-30],
        ]
    )
    for thr in thresholds:
        b = _split_boundary(float(thr))
        t32 = np.float32(thr)
        probes = [float(thr), b, math.nextafter(b, -math.inf), math.nextafter(b, math.inf)]
        for v in (t32, np.nextafter(t32, np.float32(-np.inf)), np.nextafter(t32, np.float32(np.inf))):
            mid_lo = (float(v) + float(np.nextafter(v, np.float32(-np.inf)))) / 2
            mid_hi = (float(v) + float(np.nextafter(v, np.float32(np.inf)))) / 2
            probes += [float(v), mid_lo, mid_hi, math.nextafter(mid_hi, math.inf), math.nextafter(mid_lo, -math.inf)]
        for x in probes:
            assert (np.float32(x) <= thr) == (x < b), (thr, x, b)


@pytest.mark.parametrize("max_depth", [1, 3, 5])
def test_rule_set_masks_equal_decision_paths_and_metrics(max_depth):
    X, target = _toy()
    rule_sets = decision_tree_rules(X, target, max_depth=max_depth, min_samples_leaf=20)
    masks = _node_masks(X, target, max_depth=max_depth, min_samples_leaf=20)
    assert len(rule_sets) == len(masks)
    remaining = {m.tobytes(): m for m in masks}
    for rs in rule_sets:
        got = rs.mask(X).numpy()
        assert got.tobytes() in remaining, f"no tree node has the samples of {rs}"
        del remaining[got.tobytes()]
        s, c, f = _reference_metrics(got, target)
        assert rs.support == s
        assert rs.confidence == pytest.approx(c, abs=1e-12)
        assert rs.fitness == pytest.approx(f, abs=1e-12)
        # one rule per feature, at most max_depth of them
        assert len({r.feature for r in rs.rules}) == len(rs.rules) <= max_depth
    assert not remaining
    fitness = [rs.fitness for rs in rule_sets]
    assert fitness == sorted(fitness, reverse=True)


def test_float32_input_matches_decision_paths():
    X, target = _toy(seed=3)
    X32 = torch.from_numpy(X).float()
    rule_sets = decision_tree_rules(X32, torch.from_numpy(target), max_depth=4, min_samples_leaf=10)
    masks = {m.tobytes() for m in _node_masks(X32.numpy(), target, max_depth=4, min_samples_leaf=10)}
    assert {rs.mask(X32).numpy().tobytes() for rs in rule_sets} == masks


def test_same_feature_twice_on_a_path_merges_into_one_interval():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, size=(2000, 1))
    target = (x[:, 0] > 0.3) & (x[:, 0] < 0.6)
    rule_sets = decision_tree_rules(x, target, max_depth=2, min_samples_leaf=5)
    best = rule_sets[0]
    assert len(best.rules) == 1
    rule = best.rules[0]
    assert math.isfinite(rule.low) and math.isfinite(rule.high)
    assert rule.low == pytest.approx(0.3, abs=0.01) and rule.high == pytest.approx(0.6, abs=0.01)
    assert best.confidence == 1.0 and best.fitness == 1.0
    masks = {m.tobytes() for m in _node_masks(x, target, max_depth=2, min_samples_leaf=5)}
    assert {rs.mask(x).numpy().tobytes() for rs in rule_sets} == masks


def test_categorical_and_integer_rules_print_naturally():
    X, target = _toy(seed=4)
    names = ["z", "u", "count", "flag"]
    rule_sets = decision_tree_rules(
        X, target, max_depth=5, min_samples_leaf=20, feature_names=names, feature_types=["float", "float", "int", "cat"]
    )
    flags = [r for rs in rule_sets for r in rs.rules if r.feature == 3]
    assert flags and all(r.is_categorical and r.value in (0.0, 1.0) for r in flags)
    counts = [r for rs in rule_sets for r in rs.rules if r.feature == 2]
    for r in counts:
        assert r.kind == "int"
        assert "." not in r.format()  # integer bounds
        assert np.array_equal(r.mask(X).numpy(), ((X[:, 2] >= r.low) & (X[:, 2] < r.high)))


def test_features_subset_names_and_units():
    X, target = _toy(seed=5)
    scale = [2.0, 10.0, 1.0, 1.0]
    offset = [1.0, 0.0, 0.0, 0.0]
    rule_sets = decision_tree_rules(
        X,
        target,
        max_depth=2,
        min_samples_leaf=30,
        features=[1, 2],
        feature_names=["a", "b", "c", "d"],
        feature_scale=scale,
        feature_offset=offset,
        target_name="positive",
    )
    for rs in rule_sets:
        assert {r.feature for r in rs.rules} <= {1, 2}
        assert str(rs).endswith(")") and "THEN positive" in str(rs)
    masks = {m.tobytes() for m in _node_masks(X[:, [1, 2]], target, max_depth=2, min_samples_leaf=30)}
    assert {rs.mask(X).numpy().tobytes() for rs in rule_sets} == masks
    b_rules = [r for rs in rule_sets for r in rs.rules if r.feature == 1]
    assert b_rules
    r = b_rules[0]
    bound = r.low if math.isfinite(r.low) else r.high
    assert f"{bound * 10.0:.3f}".rstrip("0").rstrip(".") in r.format()  # printed in raw units


def _fewest_digits(lo: Fraction, hi: Fraction) -> int:
    """The fewest significant digits of a decimal in ``(lo, hi]``, by trying every length and exponent."""
    if lo < 0 <= hi:
        return 1  # 0
    top = max(abs(lo), abs(hi))
    for k in range(1, 25):
        for e in range(math.floor(math.log10(top)) + 1, -330, -1):
            step = Fraction(10) ** (e - k + 1)
            m = math.floor(hi / step)
            if abs(m) < 10**k and m * step > lo:
                return k
    raise AssertionError("no decimal found")


def _digits(text: str) -> int:
    return len(Decimal(text).normalize().as_tuple().digits)


@pytest.mark.parametrize("units", [False, True])
def test_bounds_print_as_the_shortest_decimal_selecting_the_same_rows(units):
    """Issue 28: a split's bound prints as AMORE's do (``z >= 7.08``, not ``z >= 7.081634283065796``): the text maps
    back to the stored bound exactly, and no shorter decimal (in printed units) lies between the split's neighbours."""
    X, target = _toy(seed=7)
    scale, offset = ([3.0, 0.1, 1.0, 1.0], [-2.0, 5.0, 0.0, 0.0]) if units else ([1.0] * 4, [0.0] * 4)
    rule_sets = decision_tree_rules(X, target, max_depth=3, min_samples_leaf=20, feature_types=["float"] * 4,
                                    feature_scale=scale, feature_offset=offset)  # fmt: skip
    masks = {m.tobytes() for m in _node_masks(X, target, max_depth=3, min_samples_leaf=20)}
    assert {rs.mask(X).numpy().tobytes() for rs in rule_sets} == masks  # the tree's nodes, row for row
    n_bounds = 0
    for rule in {r for rs in rule_sets for r in rs.rules}:
        col = X[:, rule.feature]
        for bound in (rule.low, rule.high):
            if not math.isfinite(bound):
                continue
            n_bounds += 1
            below, above = col[col < bound].max(), col[col >= bound].min()  # the split's neighbours in X
            text = format_bound(bound, rule.scale, rule.offset)
            assert text in rule.format()
            assert (float(text) - rule.offset) / rule.scale == bound  # the printed bound is the stored one
            s, o = Fraction(rule.scale), Fraction(rule.offset)  # positive scales: the order is kept
            fewest = _fewest_digits(Fraction(below) * s + o, Fraction(above) * s + o)  # in printed units
            assert _digits(text) == fewest, (text, below, above)
    assert n_bounds >= 4


def test_bad_arguments_raise_clear_errors():
    X, target = _toy(n=200)
    with pytest.raises(ValueError, match="criterion"):
        decision_tree_rules(X, target, max_depth=2, min_samples_leaf=5, criterion="mse")
    with pytest.raises(ValueError, match="min_samples_leaf"):
        decision_tree_rules(X, target, max_depth=2, min_samples_leaf=0)
    with pytest.raises(ValueError, match="min_samples_leaf"):
        decision_tree_rules(X, target, max_depth=2, min_samples_leaf=1.5)
    with pytest.raises(ValueError, match="max_depth"):
        decision_tree_rules(X, target, max_depth=0, min_samples_leaf=5)
    with pytest.raises(ValueError, match="class_weight"):
        decision_tree_rules(X, target, max_depth=2, min_samples_leaf=5, class_weight="uniform")
    X_nan = X.copy()
    X_nan[3, 1] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        decision_tree_rules(X_nan, target, max_depth=2, min_samples_leaf=5)
    with pytest.raises(ValueError, match="target"):
        decision_tree_rules(X, target[:-1], max_depth=2, min_samples_leaf=5)
    # the feature arguments are keywords of their own: a misspelt one is refused as Python refuses any other
    with pytest.raises(TypeError, match=r"^decision_tree_rules\(\) got an unexpected keyword argument 'feature'$"):
        decision_tree_rules(X, target, max_depth=2, min_samples_leaf=5, feature=[0])
    with pytest.raises(TypeError, match=r"^decision_tree_search\(\) got an unexpected keyword argument 'names'$"):
        decision_tree_search(X, target, max_depth=2, names=["a", "b"])


def _independent_pick(rule_sets: list[RuleSet], bound: float) -> RuleSet | None:
    ok = [r for r in rule_sets if r.confidence >= bound]
    pool = ok if ok else rule_sets
    best = None
    for r in pool:
        if best is None or r.fitness > best.fitness:
            best = r
    return best


@pytest.mark.parametrize("bound", [0.8, 0.99])
def test_decision_tree_search_applies_the_confidence_bound(bound):
    X, target = _toy(seed=6)
    leaves, crits, weights = [20, 200], ["gini", "entropy"], [None, "balanced"]
    result = decision_tree_search(
        X,
        target,
        max_depth=2,
        min_samples_leaf=leaves,
        criteria=crits,
        class_weights=weights,
        confidence_lower_bound=bound,
    )
    settings = list(itertools.product(crits, leaves, weights))
    assert len(result.records) == len(settings)
    picks = []
    for (crit, msl, cw), (_, row) in zip(settings, result.records.iterrows()):
        assert (row["criterion"], row["min_samples_leaf"], row["class_weight"]) == (crit, msl, cw)
        expected = _independent_pick(
            decision_tree_rules(X, target, max_depth=2, min_samples_leaf=msl, criterion=crit, class_weight=cw), bound
        )
        assert row["rule_set"] == expected
        assert row["meets_bound"] == (expected.confidence >= bound)
        picks.append(((crit, msl, cw), expected))
    best = _independent_pick([p for _, p in picks], bound)
    assert result.best == best
    first = next(s for s, p in picks if p == best)
    assert result.setting == dict(zip(["criterion", "min_samples_leaf", "class_weight"], first))


@pytest.mark.skipif(not (DATA / "diabetes_paper_task.npz").exists(), reason="shared data not available")
def test_paper_diabetes_decision_tree_rule():
    d = np.load(DATA / "diabetes_paper_task.npz")
    X, target = d["X"], d["target"]
    best = decision_tree_rules(
        X,
        target,
        max_depth=1,
        min_samples_leaf=1000,
        feature_names=[str(n) for n in d["feature_names"]],
        feature_scale=d["raw_max"] - d["raw_min"],
        feature_offset=d["raw_min"],
    )[0]
    # the paper's table: HbA1c_level > 6.349, support 14501, confidence 0.515, fitness 0.033
    assert [r.name for r in best.rules] == ["HbA1c_level"]
    assert best.support == 14501
    assert round(best.confidence, 3) == 0.515
    assert 0.03 <= best.fitness <= 0.034
    rule = best.rules[0]
    col = X[:, rule.feature]
    cut = (6.349 - rule.offset) / rule.scale  # the paper's split, in the stored units
    assert col[col < cut].max() < rule.low <= col[col >= cut].min()  # between the same neighbours: the same rows
    printed = float(re.search(r"HbA1c_level >= ([-\d.e+]+)", str(best)).group(1))
    assert 6.2 < printed <= 6.5 and len(str(printed).replace(".", "")) == 2  # neighbours 6.2 and 6.5: 2 digits
