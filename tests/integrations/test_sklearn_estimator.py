"""RegionalRuleClassifier: scikit-learn's own estimator checks, its rules against extract_rules', its predictions
recomputed row by row from the rules' bounds, a cross-validated grid search on the diabetes data, pickling."""

from __future__ import annotations

import dataclasses
import inspect
import math
import pickle
import warnings

import joblib
import numpy as np
import pandas as pd
import pytest
import torch
from conftest import shared_file
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, StratifiedKFold
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import check_estimator

from torch_amore import RegionalRuleClassifier, SearchOptions, extract_rules, fitness_scorer

EXTRA = ("target_class", "n_rule_sets")
COLUMNS = ["rule", "support", "confidence", "fitness", "lift", "recall"]


@pytest.fixture(scope="module")
def diabetes() -> tuple[pd.DataFrame, pd.Series]:
    """The diabetes table's numeric columns (gender and smoking history are text) and its label."""
    frame = pd.read_csv(shared_file("diabetes_prediction_dataset.csv"))
    return frame.drop(columns="diabetes").select_dtypes("number"), frame["diabetes"]


@pytest.fixture
def noisy_boxes() -> tuple[np.ndarray, np.ndarray]:
    """3,000 x 4 uniform features with 2% NaN; the subgroup is two overlapping boxes with 5% label noise."""
    rng = np.random.default_rng(3)
    X = rng.uniform(size=(3000, 4))
    y = ((X[:, 0] > 0.6) & (X[:, 1] < 0.5)) | ((X[:, 2] > 0.7) & (X[:, 0] > 0.3))
    y ^= rng.uniform(size=3000) < 0.05
    X[rng.uniform(size=X.shape) < 0.02] = np.nan
    return X, y


def _selects(rule, x: float) -> bool:
    """Whether the value ``x`` satisfies ``rule``, literally: ``low <= x < high`` or ``x == value``; NaN never."""
    if math.isnan(x):
        return False
    if rule.value is not None:
        return x == rule.value
    return rule.low <= x < rule.high


def _row_masks(rule_sets, X: np.ndarray) -> np.ndarray:
    """(n_rule_sets, n_samples) booleans, one row at a time through every rule of every rule set."""
    rows = [[all(_selects(r, float(x[r.feature])) for r in rs.rules) for x in X] for rs in rule_sets]
    return np.array(rows, dtype=bool).reshape(len(rule_sets), len(X))


def test_every_search_option_is_a_parameter_with_its_default():
    params = inspect.signature(RegionalRuleClassifier).parameters
    fields = dataclasses.fields(SearchOptions)
    assert list(params) == [f.name for f in fields] + list(EXTRA)
    assert set(RegionalRuleClassifier().get_params()) == set(params)
    for f in fields:
        assert params[f.name].default == f.default, f.name
    assert (params["target_class"].default, params["n_rule_sets"].default) == (None, 1)
    changed = {"max_length": 3, "strategy": "paper", "min_gain": 0.0, "n_grids": 7}
    assert RegionalRuleClassifier(**changed).search_options() == SearchOptions(**changed)
    assert RegionalRuleClassifier().search_options() == SearchOptions()


def test_parameters_are_checked_in_fit_not_in_init(noisy_boxes):
    X, y = noisy_boxes
    for bad, err, name in [
        ({"max_length": 0}, ValueError, "max_length"),
        ({"strategy": "greedy"}, ValueError, "strategy"),
        ({"n_rule_sets": 0}, ValueError, "n_rule_sets"),
        ({"n_rule_sets": 1.5}, TypeError, "n_rule_sets"),
    ]:
        clf = RegionalRuleClassifier(**bad)  # accepted as it is, as scikit-learn asks
        assert clone(clf).get_params()[name] == bad[name]
        with pytest.raises(err, match=name):
            clf.fit(X, y)


def test_check_estimator():
    expected = RegionalRuleClassifier().expected_failed_checks()
    assert isinstance(expected, dict) and len(expected) <= 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # predict/predict_proba disagreement on random labels
        check_estimator(RegionalRuleClassifier(), expected_failed_checks=expected)


def test_rules_equal_extract_rules_and_metrics_from_masks(diabetes):
    X, y = diabetes
    options = {"max_length": 2, "min_support": 1000, "n_grids": 8, "bin_strategy": "quantile"}
    clf = RegionalRuleClassifier(**options).fit(X, y)
    expected = extract_rules(X, torch.from_numpy(y.to_numpy() == 1), **options)
    assert len(expected) >= 2
    assert clf.rule_sets_ == expected
    assert list(clf.feature_names_in_) == list(X.columns) and clf.n_features_in_ == X.shape[1]
    assert clf.classes_.tolist() == [0, 1]

    table = clf.rules_
    assert isinstance(table, pd.DataFrame) and list(table.columns) == COLUMNS and len(table) == len(expected)
    values, target = X.to_numpy(), y.to_numpy() == 1
    n_target = target.sum()
    for i, rs in enumerate(expected):
        mask = np.ones(len(values), dtype=bool)
        for rule in rs.rules:  # NaN fails every comparison
            column = values[:, rule.feature]
            mask &= (column == rule.value) if rule.value is not None else (column >= rule.low) & (column < rule.high)
        hits, support = (mask & target).sum(), mask.sum()
        row = table.iloc[i]
        assert row["rule"] == " AND ".join(str(rule) for rule in rs.rules)
        assert all(rule.name in X.columns for rule in rs.rules)
        assert row["support"] == support == rs.support
        assert row["confidence"] == pytest.approx(hits / support)
        assert row["fitness"] == pytest.approx((hits - (support - hits)) / n_target)
        assert row["lift"] == pytest.approx((hits / support) / (n_target / len(target)))
        assert row["recall"] == pytest.approx(hits / n_target)


@pytest.mark.parametrize("n_rule_sets", [1, 3])
def test_predictions_recomputed_from_the_rules(noisy_boxes, n_rule_sets):
    X, y = noisy_boxes
    labels = np.where(y, "inside", "outside")  # classes_ sorted: ["inside", "outside"], so the subgroup is "outside"
    clf = RegionalRuleClassifier(min_support=100, n_rule_sets=n_rule_sets).fit(X, labels)
    assert clf.classes_.tolist() == ["inside", "outside"]
    target = labels == "outside"
    assert len(clf.rule_sets_) >= n_rule_sets
    decision = clf.rule_sets_[:n_rule_sets]

    train = _row_masks(decision, X)
    covered = train.any(axis=0)
    confidences = [(m & target).sum() / m.sum() for m in train]
    outside_rate = target[~covered].mean()
    assert clf.outside_rate_ == pytest.approx(outside_rate)

    X_test = np.random.default_rng(4).uniform(size=(500, 4))
    X_test[::17, 1] = np.nan
    masks = _row_masks(decision, X_test)
    expected = np.full(len(X_test), outside_rate)
    for i in range(len(X_test)):
        fired = [k for k in range(n_rule_sets) if masks[k, i]]
        if fired:
            expected[i] = confidences[fired[0]]
    assert masks.any(axis=0).any() and not masks.any(axis=0).all()
    if n_rule_sets > 1:  # rows selected by several rule sets take the first one's confidence
        assert (masks.sum(axis=0) >= 2).any() and len(set(confidences)) > 1
    assert clf.predict(X_test).tolist() == np.where(masks.any(axis=0), "outside", "inside").tolist()
    np.testing.assert_allclose(clf.predict_proba(X_test), np.column_stack([1 - expected, expected]), rtol=1e-12)
    np.testing.assert_allclose(clf.decision_function(X_test), expected - 0.5, rtol=1e-12)
    y_test = np.where(np.random.default_rng(5).uniform(size=500) < 0.5, "inside", "outside")
    predicted = masks.any(axis=0)
    assert clf.score(X_test, y_test) == pytest.approx(np.mean(predicted == (y_test == "outside")))
    hits = (predicted & (y_test == "outside")).sum()
    expected_fitness = (hits - (predicted.sum() - hits)) / (y_test == "outside").sum()
    assert fitness_scorer(clf, X_test, y_test) == pytest.approx(expected_fitness)


def test_grid_search_in_a_pipeline_on_diabetes(diabetes):
    X, y = diabetes
    pipe = make_pipeline(StandardScaler(), RegionalRuleClassifier()).set_output(transform="pandas")
    grid = {"regionalruleclassifier__min_support": [1000, 5000]}
    search = GridSearchCV(pipe, grid, cv=3, scoring=fitness_scorer).fit(X, y)

    best = search.best_params_["regionalruleclassifier__min_support"]
    scores = []  # the best candidate's cross-validated fitness, fold by fold, by hand
    for train, test in StratifiedKFold(3).split(X, y):
        fold = clone(pipe).set_params(regionalruleclassifier__min_support=best).fit(X.iloc[train], y.iloc[train])
        predicted, target = fold.predict(X.iloc[test]) == 1, y.iloc[test].to_numpy() == 1
        hits = (predicted & target).sum()
        scores.append((hits - (predicted.sum() - hits)) / target.sum())
    assert search.best_score_ == pytest.approx(np.mean(scores))
    assert search.best_score_ == max(search.cv_results_["mean_test_score"])

    scaled = StandardScaler().set_output(transform="pandas").fit_transform(X)
    rules = search.best_estimator_[-1].rules_
    assert list(rules.columns) == COLUMNS and len(rules) == len(search.best_estimator_[-1].rule_sets_)
    assert search.best_estimator_[-1].rule_sets_ == extract_rules(scaled, y.to_numpy() == 1, min_support=best)
    assert "HbA1c_level" in rules.loc[0, "rule"] or "blood_glucose_level" in rules.loc[0, "rule"]


def test_pickle_round_trip(noisy_boxes, tmp_path):
    X, y = noisy_boxes
    clf = RegionalRuleClassifier(min_support=100, n_rule_sets=2).fit(pd.DataFrame(X, columns=list("abcd")), y)
    frame = pd.DataFrame(X, columns=list("abcd"))
    joblib.dump(clf, tmp_path / "model.joblib")
    for back in (pickle.loads(pickle.dumps(clf)), joblib.load(tmp_path / "model.joblib")):
        assert back.rule_sets_ == clf.rule_sets_
        pd.testing.assert_frame_equal(back.rules_, clf.rules_)
        assert back.get_params() == clf.get_params()
        np.testing.assert_array_equal(back.predict_proba(frame), clf.predict_proba(frame))
        np.testing.assert_array_equal(back.feature_names_in_, clf.feature_names_in_)


def test_target_class_on_a_multiclass_y(noisy_boxes):
    X, y = noisy_boxes
    classes = np.where(y, "box", np.where(X[:, 3] > 0.5, "high", "low"))
    clf = RegionalRuleClassifier(target_class="box", min_support=100).fit(X, classes)
    assert clf.classes_.tolist() == [0, 1]
    assert clf.rule_sets_ == extract_rules(X, torch.from_numpy(classes == "box"), min_support=100)
    assert str(clf.rule_sets_[0]).split(" THEN ")[1].startswith("y == box")
    mask = _row_masks(clf.rule_sets_[:1], X)[0]
    assert clf.predict(X).tolist() == mask.astype(int).tolist()
    assert clf.score(X, classes) == pytest.approx(np.mean(mask == (classes == "box")))
    assert clf.subgroup(classes).tolist() == (classes == "box").tolist()
    with pytest.raises(ValueError, match="target_class.*'pentagon'"):
        RegionalRuleClassifier(target_class="pentagon").fit(X, classes)


def test_bad_y_gets_a_clear_error(noisy_boxes):
    X, y = noisy_boxes
    three = np.where(y, 2, (X[:, 3] > 0.5).astype(int))
    with pytest.raises(ValueError, match=r"Only binary classification is supported.*multiclass.*target_class"):
        RegionalRuleClassifier().fit(X, three)
    with pytest.raises(ValueError, match="one class"):
        RegionalRuleClassifier().fit(X, np.ones(len(X)))
    with pytest.raises(ValueError, match="one class.*target_class=2"):
        RegionalRuleClassifier(target_class=2).fit(X, np.full(len(X), 2))
    with pytest.raises(ValueError, match="Unknown label type"):
        RegionalRuleClassifier().fit(X, np.linspace(0.0, 1.0, len(X)))
    with pytest.raises(TypeError, match="RegionalRuleClassifier"):
        fitness_scorer(StandardScaler().fit(X), X, y)


def test_fit_warns_where_predict_and_predict_proba_disagree(noisy_boxes):
    X, y = noisy_boxes
    majority = ~y | (X[:, 3] > 0.2)  # most samples: the rate outside a rule set stays above one half
    with pytest.warns(UserWarning, match="predict and predict_proba disagree"):
        clf = RegionalRuleClassifier(min_support=100).fit(X, majority)
    outside = ~_row_masks(clf.rule_sets_[:1], X)[0]
    assert outside.any() and majority[outside].mean() > 0.5
    assert not clf.predict(X[outside]).any() and (clf.predict_proba(X[outside])[:, 1] > 0.5).all()


def test_held_out_samples_of_fit_are_those_of_extract_rules_and_follow_the_folds(noisy_boxes, monkeypatch):
    X, y = noisy_boxes
    held = np.arange(len(y)) % 5 == 2  # e.g. a later period kept apart
    clf = RegionalRuleClassifier(min_support=100).fit(X, y, holdout_rows=held)
    expected = extract_rules(X, torch.from_numpy(y), min_support=100, holdout_rows=held, target_name="y == True")
    assert expected and clf.rule_sets_ == expected
    assert [rs.held_out for rs in clf.rule_sets_] == [rs.held_out for rs in expected]
    best = clf.rule_sets_[0]  # its held-out numbers, recounted from its mask on the held-out samples
    mask = _row_masks([best], X)[0]
    assert best.held_out.support == int((mask & held).sum()) > 0
    assert best.held_out.confidence == pytest.approx((mask & held & y).sum() / (mask & held).sum())

    seen = []  # GridSearchCV passes each fold its part of the mask
    original = RegionalRuleClassifier.fit

    def fit(self, X_fold, y_fold, holdout_rows=None):
        seen.append((len(y_fold), None if holdout_rows is None else int(np.sum(holdout_rows))))
        return original(self, X_fold, y_fold, holdout_rows=holdout_rows)

    monkeypatch.setattr(RegionalRuleClassifier, "fit", fit)
    GridSearchCV(RegionalRuleClassifier(min_support=100), {"max_length": [1]}, cv=3).fit(X, y, holdout_rows=held)
    folds = [(len(train), int(held[train].sum())) for train, _ in StratifiedKFold(3).split(X, y)]
    assert seen[:3] == folds and seen[-1] == (len(y), int(held.sum()))  # then the refit on all samples
