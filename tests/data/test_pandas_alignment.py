"""A pandas ``target`` or ``labels`` Series is matched to a DataFrame ``X`` by its index, never silently by position
(issue 28): the same labels in another order are aligned; other labels are refused with a ValueError."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import torch_amore as ta
from torch_amore.rules.metrics import rule_metrics

OPTS = dict(min_support=20, n_grids=6)
NAMES = ["a", "b", "c"]


@pytest.fixture(scope="module")
def frame() -> tuple[pd.DataFrame, pd.Series]:
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.random((400, 3)), columns=["a", "b", "c"], index=rng.permutation(np.arange(5000, 5400)))
    target = pd.Series((X["a"] > 0.6) & (X["c"] < 0.7), index=X.index)
    return X, target


def _orders(target: pd.Series) -> dict[str, pd.Series]:
    rng = np.random.default_rng(1)
    return {"reversed": target.iloc[::-1], "shuffled": target.iloc[rng.permutation(len(target))]}


def _check(rule_sets, X: pd.DataFrame, target: np.ndarray) -> None:
    assert rule_sets
    for rs in rule_sets:
        m = rule_metrics(rs.mask(X), torch.tensor(target))
        assert (m.support, m.confidence, m.fitness) == pytest.approx((rs.support, rs.confidence, rs.fitness))


@pytest.mark.parametrize("order", ["reversed", "shuffled"])
def test_a_reordered_target_series_is_aligned_by_index(frame, order):
    X, target = frame
    moved = _orders(target)[order]
    assert not np.array_equal(moved.to_numpy(), target.to_numpy())  # by position it would be another subgroup
    by_position = ta.extract_rules(
        X.to_numpy(), target.to_numpy(), feature_names=NAMES, **OPTS
    )  # the rows paired by hand
    got = ta.extract_rules(X, moved, **OPTS)
    assert got == by_position
    _check(got, X, target.to_numpy())
    assert ta.RuleSet.from_rules(got[0].rules, X, moved) == got[0]
    assert got[0].evaluate(X, moved) == rule_metrics(got[0].mask(X), torch.tensor(target.to_numpy()))
    tree = ta.decision_tree_rules(X, moved, max_depth=2, min_samples_leaf=20)
    assert tree == ta.decision_tree_rules(
        X.to_numpy(), target.to_numpy(), max_depth=2, min_samples_leaf=20, feature_names=NAMES
    )
    grid = ta.search_hyperparameters(X, moved, bin_strategies=["uniform"], n_grids=[6], min_supports=[20])
    assert grid.best == ta.search_hyperparameters(X, target, bin_strategies=["uniform"], n_grids=[6],
                                                  min_supports=[20]).best  # fmt: skip


@pytest.mark.parametrize(
    "make",
    [
        lambda t: t.reset_index(drop=True),  # 0..N-1 against X's labels
        lambda t: t.set_axis(np.r_[t.index[:-1], [-1]]),  # one label X does not have
        lambda t: t.set_axis(np.r_[t.index[1:], t.index[:1]].repeat(1)).iloc[:-1],  # a row short
        lambda t: t.set_axis(np.r_[t.index[:-1], t.index[:1]]),  # a label twice
    ],
    ids=["default-index", "foreign-label", "shorter", "duplicate-label"],
)
def test_a_target_series_with_other_labels_is_refused(frame, make):
    X, target = frame
    bad = make(target)
    for call in (
        lambda: ta.extract_rules(X, bad, **OPTS),
        lambda: ta.decision_tree_rules(X, bad, max_depth=1, min_samples_leaf=20),
        lambda: ta.RegionalRuleExplainer(nn.Identity()).explain(X, bad, progress=False, **OPTS),
    ):
        with pytest.raises(ValueError, match=r"`target` \(a pandas Series\) to be indexed like") as info:
            call()
        assert "to_numpy()" in str(info.value)


def test_positions_are_used_when_asked_or_when_x_has_no_index(frame):
    X, target = frame
    plain = target.reset_index(drop=True)
    expected = ta.extract_rules(X.to_numpy(), target.to_numpy(), feature_names=NAMES, **OPTS)
    assert ta.extract_rules(X, plain.to_numpy(), **OPTS) == expected  # numpy: by position, as documented
    assert ta.extract_rules(X.to_numpy(), plain, feature_names=NAMES, **OPTS) == expected  # no index in X


def test_the_explainer_aligns_target_labels_and_features_by_index(frame):
    X, target = frame
    moved = target.iloc[::-1]
    explainer = ta.RegionalRuleExplainer(nn.Identity())
    expected = ta.extract_rules(X.to_numpy(), target.to_numpy(), feature_names=NAMES, **OPTS)
    got = explainer.explain(X, moved, progress=False, **OPTS)
    assert got.rule_sets == expected  # RuleSet equality ignores the subgroup's name
    assert torch.equal(got.subgroup, torch.tensor(target.to_numpy()))
    # features given as a DataFrame: the mask follows its index
    inputs = torch.tensor(X.to_numpy())
    on_features = explainer.explain(inputs, moved, features=X, feature_names=NAMES, progress=False, **OPTS)
    assert torch.equal(on_features.subgroup, torch.tensor(target.to_numpy()))
    assert on_features.rule_sets == got.rule_sets
    # labels for threshold="roc": aligned too
    torch.manual_seed(0)
    scorer = nn.Sequential(nn.Linear(3, 1), nn.Sigmoid())
    labels = pd.Series(target.to_numpy().astype(int), index=X.index)
    roc = ta.RegionalRuleExplainer(scorer).explain(X, 1, labels=labels, threshold="roc", progress=False, **OPTS)
    moved_labels = ta.RegionalRuleExplainer(scorer).explain(
        X, 1, labels=labels.iloc[::-1], threshold="roc", progress=False, **OPTS
    )
    assert moved_labels.threshold == roc.threshold
    with pytest.raises(ValueError, match="`labels`"):
        ta.RegionalRuleExplainer(scorer).explain(
            X, 1, labels=labels.reset_index(drop=True), threshold="roc", progress=False, **OPTS
        )
