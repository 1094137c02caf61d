"""RegionalRuleClassifier's outcomes against scikit-learn's own metrics: ``target_class`` on a binary ``y`` predicts
``y``'s labels (scorers, ``predict_proba`` columns and ``decision_function`` signs recomputed from the rules' masks),
``target_class`` is one label, ``holdout_rows`` of ``fit`` is a mask, and with held-out rows every number is that of
the rows the search saw."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from sklearn.base import clone
from sklearn.datasets import load_iris
from sklearn.metrics import accuracy_score, f1_score, make_scorer, roc_auc_score
from sklearn.model_selection import StratifiedKFold, cross_validate

from torch_amore import RegionalRuleClassifier
from torch_amore.integrations import sklearn_estimator
from torch_amore.search.evidence_split import holdout_mask


@pytest.fixture(scope="module")
def iris() -> tuple[np.ndarray, np.ndarray]:
    """Iris' 150 x 4 measurements and its species 0, 1, 2."""
    return load_iris(return_X_y=True)


@pytest.fixture(scope="module")
def noisy_box() -> tuple[np.ndarray, np.ndarray]:
    """2,000 x 3 uniform features; the subgroup is a box with 10% label noise (confidences below one)."""
    rng = np.random.default_rng(7)
    X = rng.uniform(size=(2000, 3))
    y = (X[:, 0] > 0.5) & (X[:, 1] < 0.6)
    y ^= rng.uniform(size=2000) < 0.1
    return X, y


def _mask(rule_set, X: np.ndarray) -> np.ndarray:
    """The rows of ``X`` that every rule of ``rule_set`` selects, literally: ``low <= x < high`` or ``x == value``."""
    mask = np.ones(len(X), dtype=bool)
    for rule in rule_set.rules:
        column = X[:, rule.feature]
        mask &= (column == rule.value) if rule.value is not None else (column >= rule.low) & (column < rule.high)
    return mask


@pytest.mark.parametrize(
    ("labels", "target_class"),
    [((0, 1), 0), ((False, True), False), (("other", "virginica"), "other"), (("other", "virginica"), "virginica")],
)
def test_target_class_on_a_binary_y_predicts_its_labels_and_scorers_agree(iris, labels, target_class):
    X, species = iris
    y = np.where(species == 2, labels[1], labels[0])
    other = labels[1] if target_class == labels[0] else labels[0]
    clf = RegionalRuleClassifier(target_class=target_class, min_support=10).fit(X, y)
    assert clf.classes_.tolist() == sorted(labels)
    assert str(clf.rule_sets_[0]).split(" THEN ")[1].startswith(f"y == {target_class} ")

    inside, mask = y == target_class, _mask(clf.rule_sets_[0], X)
    p_target = np.where(mask, (mask & inside).sum() / mask.sum(), inside[~mask].mean())
    k = clf.classes_.tolist().index(target_class)
    p_second = p_target if k == 1 else 1.0 - p_target  # the probability of classes_[1]
    predicted = np.where(mask, target_class, other)
    assert clf.predict(X).tolist() == predicted.tolist()
    np.testing.assert_allclose(clf.predict_proba(X)[:, k], p_target, rtol=1e-12)
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1 - k], 1.0 - p_target, rtol=1e-12)
    np.testing.assert_allclose(clf.decision_function(X), p_second - 0.5, rtol=1e-12)
    assert clf.score(X, y) == pytest.approx(accuracy_score(y, predicted)) and clf.score(X, y) > 0.9

    scoring = {"accuracy": "accuracy", "f1": make_scorer(f1_score, pos_label=target_class), "roc_auc": "roc_auc"}
    cv = StratifiedKFold(3, shuffle=True, random_state=0)
    scores = cross_validate(clf, X, y, cv=cv, scoring=scoring, error_score="raise")
    for i, (train, test) in enumerate(cv.split(X, y)):  # each fold by hand from the fold's rule set
        fold = clone(clf).fit(X[train], y[train])
        m_train, m_test = _mask(fold.rule_sets_[0], X[train]), _mask(fold.rule_sets_[0], X[test])
        in_train = y[train] == target_class
        p = np.where(m_test, (m_train & in_train).sum() / m_train.sum(), in_train[~m_train].mean())
        pred = np.where(m_test, target_class, other)
        assert scores["test_accuracy"][i] == pytest.approx(accuracy_score(y[test], pred))
        assert scores["test_f1"][i] == pytest.approx(f1_score(y[test], pred, pos_label=target_class))
        second = y[test] == clf.classes_[1]
        assert scores["test_roc_auc"][i] == pytest.approx(roc_auc_score(second, p if k == 1 else 1.0 - p))
    assert scores["test_accuracy"].mean() > 0.9


def _never_searched(*args, **kwargs):
    raise AssertionError("the search ran before target_class was checked")


@pytest.mark.parametrize(
    ("bad", "labels", "error"),
    [
        ([1], (0, 1, 2), TypeError),  # fitted and printed `THEN y == [1]`
        (np.array([1]), (0, 1, 2), TypeError),
        ((1, 2), (0, 1, 2), TypeError),  # numpy's broadcast error
        ({2}, (0, 1, 2), TypeError),
        (True, (0, 1, 2), TypeError),  # matched the label 1
        (1, (False, True), TypeError),  # matched the label True
    ],
)
def test_target_class_is_one_label_checked_in_fit_before_the_search(iris, monkeypatch, bad, labels, error):
    X, species = iris
    y = np.asarray(labels)[species % len(labels)]
    clf = RegionalRuleClassifier(target_class=bad, min_support=10)  # stored as it is, as scikit-learn asks
    monkeypatch.setattr(sklearn_estimator, "extract_rules", _never_searched)
    with pytest.raises(error, match="target_class"):
        clf.fit(X, y)


def test_target_class_takes_any_scalar_naming_a_label(iris):
    X, species = iris
    for label in (2, np.int64(2), 2.0, np.float32(2.0)):
        clf = RegionalRuleClassifier(target_class=label, min_support=10).fit(X, species)
        assert str(clf.rule_sets_[0]).split(" THEN ")[1].startswith("y == 2 ")  # the label of y, as y spells it
        assert clf.subgroup(species).tolist() == (species == 2).tolist()
    flags = species == 2
    clf = RegionalRuleClassifier(target_class=np.False_, min_support=10).fit(X, flags)
    assert clf.classes_.tolist() == [False, True]
    assert clf.predict(X).tolist() == (~_mask(clf.rule_sets_[0], X)).tolist()


def test_fit_refuses_holdout_row_positions(iris):
    X, species = iris
    y = species == 2
    with pytest.raises(ValueError, match=r"`holdout_rows` in fit to be a boolean mask .* \(150\).* 50 row positions"):
        RegionalRuleClassifier(min_support=20).fit(X, y, holdout_rows=np.arange(50))
    params = {"holdout_rows": np.arange(50)}  # not split by the folds: it would point at other rows in each
    with pytest.raises(ValueError, match="holdout_rows"):
        cross_validate(RegionalRuleClassifier(min_support=20), X, y, cv=3, params=params, error_score="raise")
    with pytest.raises(ValueError, match=r"holdout_rows.*\(150,\).*\(149,\)"):
        RegionalRuleClassifier(min_support=20).fit(X, y, holdout_rows=np.ones(149, dtype=bool))


def test_holdout_rows_series_goes_by_the_index_of_a_frame(iris):
    X, species = iris
    frame, y = pd.DataFrame(X, columns=list("abcd")), species == 1
    held = pd.Series(np.arange(150) % 3 == 0, index=frame.index)
    shuffled = held.sample(frac=1.0, random_state=0)  # the same labels in another order
    a = RegionalRuleClassifier(min_support=20).fit(frame, y, holdout_rows=held)
    b = RegionalRuleClassifier(min_support=20).fit(frame, y, holdout_rows=shuffled)
    assert b.rule_sets_ == a.rule_sets_
    pd.testing.assert_frame_equal(b.rules_, a.rules_)
    mask, rows = _mask(b.rule_sets_[0], X), held.to_numpy()
    assert b.rule_sets_[0].held_out.support == int((mask & rows).sum()) > 0
    assert b.rule_sets_[0].held_out.confidence == pytest.approx((mask & rows & y).sum() / (mask & rows).sum())


@pytest.mark.parametrize("how", ["holdout", "holdout_rows"])
def test_every_number_is_that_of_the_rows_the_search_saw(noisy_box, how):
    X, y = noisy_box
    if how == "holdout":
        clf = RegionalRuleClassifier(min_support=100, n_rule_sets=2, holdout=0.3).fit(X, y)
        held = holdout_mask(torch.from_numpy(y), 0.3, seed=0).numpy()  # the split docs/trust.md describes
    else:
        held = np.random.default_rng(8).uniform(size=len(y)) < 0.3
        clf = RegionalRuleClassifier(min_support=100, n_rule_sets=2).fit(X, y, holdout_rows=held)
    seen = ~held
    masks = [_mask(rs, X) for rs in clf.rule_sets_]
    assert len(masks) >= 2
    for i, (rs, mask) in enumerate(zip(clf.rule_sets_, masks)):
        assert rs.held_out.support == int((mask & held).sum())  # the split is the search's
        support, hits = int((mask & seen).sum()), int((mask & seen & y).sum())
        row = clf.rules_.iloc[i]
        assert row["support"] == support == rs.support
        assert row["confidence"] == pytest.approx(hits / support) == rs.confidence
        assert row["fitness"] == pytest.approx((hits - (support - hits)) / (seen & y).sum()) == rs.fitness
        assert row["recall"] == pytest.approx(hits / (seen & y).sum())
    first, second = masks[0], masks[1] & ~masks[0]
    outside = ~(masks[0] | masks[1])
    assert clf.outside_rate_ == pytest.approx(y[seen & outside].mean())
    confidences = [(m & seen & y).sum() / (m & seen).sum() for m in masks[:2]]
    expected = np.select([first, second], confidences, default=y[seen & outside].mean())
    np.testing.assert_allclose(clf.predict_proba(X)[:, 1], expected, rtol=1e-12)
