"""RegionalRuleClassifier: AMORE's rule search as a scikit-learn estimator, and :func:`fitness_scorer` for searches
(``docs/sklearn.md``).
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.metrics import accuracy_score
from sklearn.pipeline import Pipeline
from sklearn.utils.multiclass import check_classification_targets, type_of_target
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data

from torch_amore.data import arguments as A
from torch_amore.rules import metrics as M
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import extract_rules
from torch_amore.search.options import SearchOptions

#: The columns of :attr:`RegionalRuleClassifier.rules_`, one row per rule set (as imodels' ``get_rules()``).
RULE_COLUMNS = ("rule", "support", "confidence", "fitness", "lift", "recall")


class RegionalRuleClassifier(ClassifierMixin, BaseEstimator):
    """AMORE's regional IF-THEN rules as a scikit-learn classifier: the best rule sets for one outcome of ``y``.

    Parameters are the fields of :class:`~torch_amore.SearchOptions` (same defaults and meanings, checked in
    :meth:`fit` as scikit-learn asks), plus:

    Args:
        target_class: the label of ``y`` whose subgroup the rules describe, against all other labels (any number of
            classes); ``None`` (default): ``y`` must be binary and the rules describe ``classes_[1]``.
        n_rule_sets: how many of the best rule sets form the decision set (an integer >= 1, default 1; all of
            them when the search finds fewer).

    Attributes:
        classes_: the two outcomes: ``y``'s two labels, or ``[0, 1]`` (1: ``y == target_class``) with
            ``target_class``.
        rule_sets_: the rule sets of :func:`torch_amore.extract_rules` on the training data, best first; the first
            ``n_rule_sets`` form the decision set.
        rules_: a DataFrame with one row per rule set of ``rule_sets_``: ``rule``, ``support``, ``confidence``,
            ``fitness``, ``lift``, ``recall`` on the training data.
        outside_rate_: the subgroup's share of the training samples that no rule set of the decision set selects
            (of all training samples when they select every one).
        n_features_in_, feature_names_in_: as for every scikit-learn estimator (the rules print the names).

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> X = rng.uniform(size=(1000, 3))
        >>> y = ((X[:, 0] > 0.7) & (X[:, 2] < 0.5)).astype(int)
        >>> clf = RegionalRuleClassifier(max_length=2, min_support=50).fit(X, y)
        >>> print(clf.rule_sets_[0])
        IF feature_0 >= 0.7 AND feature_2 < 0.5 THEN y == 1  (support=152, confidence=1.000, fitness=1.000)
        >>> row = clf.rules_.iloc[0]
        >>> row["rule"], int(row["support"]), float(row["recall"])
        ('feature_0 >= 0.7 AND feature_2 < 0.5', 152, 1.0)
        >>> clf.score(X, y)
        1.0
    """

    def __init__(
        self,
        *,
        max_length: int = 2,
        min_support: int | float | None = None,
        n_grids: int = 10,
        bin_strategy: str = "uniform",
        top_k: int = 3,
        strategy: str = "beam",
        min_confidence: float | None = None,
        beam_width: int = 5,
        feature_types: Any = None,
        feature_scale: Any = None,
        feature_offset: Any = None,
        progress: bool = False,
        exact_budget: int = 2 * 10**9,
        optimum_budget: int = 5 * 10**7,
        min_gain: float = 0.001,
        holdout: float | None = None,
        permutations: int = 0,
        stability: int = 0,
        seed: int = 0,
        level: float = 0.95,
        target_class: Any = None,
        n_rule_sets: int = 1,
    ) -> None:
        self.max_length = max_length
        self.min_support = min_support
        self.n_grids = n_grids
        self.bin_strategy = bin_strategy
        self.top_k = top_k
        self.strategy = strategy
        self.min_confidence = min_confidence
        self.beam_width = beam_width
        self.feature_types = feature_types
        self.feature_scale = feature_scale
        self.feature_offset = feature_offset
        self.progress = progress
        self.exact_budget = exact_budget
        self.optimum_budget = optimum_budget
        self.min_gain = min_gain
        self.holdout = holdout
        self.permutations = permutations
        self.stability = stability
        self.seed = seed
        self.level = level
        self.target_class = target_class
        self.n_rule_sets = n_rule_sets

    def search_options(self) -> SearchOptions:
        """The estimator's search parameters as a validated :class:`~torch_amore.SearchOptions`.

        Example:
            >>> RegionalRuleClassifier(max_length=3).search_options().max_length
            3
        """
        return SearchOptions.resolve({name: getattr(self, name) for name in SearchOptions.names()})

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False  # one outcome against the rest: target_class picks it
        tags.classifier_tags.poor_score = True  # a few rules describe a subgroup; they are no strong classifier
        tags.input_tags.allow_nan = True  # NaN is a missing value, which satisfies no rule
        return tags

    def expected_failed_checks(self) -> dict[str, str]:
        """The ``check_estimator`` checks this estimator is expected to fail, each with its reason.

        Example:
            >>> sorted(RegionalRuleClassifier().expected_failed_checks())
            []
        """
        return {}

    def fit(self, X: Any, y: Any, holdout_rows: Any = None) -> RegionalRuleClassifier:
        """Find the rule sets of the subgroup ``y == classes_[1]`` (or ``y == target_class``) on ``X``.

        Args:
            X: (n_samples, n_features) numbers (an array or a DataFrame); NaN satisfies no rule.
            y: (n_samples,) labels: two classes, or any number with ``target_class`` set.
            holdout_rows: samples held out of the search, a boolean (n_samples,) mask (or their positions), as
                :func:`torch_amore.extract_rules` takes them: each rule set gets its numbers there, ``held_out``
                (docs/trust.md); not with ``holdout``. A mask is split with the samples by ``GridSearchCV`` and
                ``cross_validate``, which pass fit parameters of one entry per sample on to each fold.

        Returns:
            The fitted estimator.
        """
        options = self.search_options()  # the parameters' checks first, before any work on the data
        n_rule_sets = A.check_int(self.n_rule_sets, "n_rule_sets", 1)
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan")
        self.classes_, target, label = self._outcomes(y)
        names = [str(n) for n in self.feature_names_in_] if hasattr(self, "feature_names_in_") else None
        self.rule_sets_ = extract_rules(
            X,
            torch.from_numpy(target),
            options=options,
            feature_names=names,
            target_name=f"y == {label}",
            holdout_rows=holdout_rows,
        )
        masks = [rs.mask(X).cpu().numpy() for rs in self.rule_sets_]
        self.rules_ = _rule_table(self.rule_sets_, masks, target)
        decision = masks[:n_rule_sets]
        covered = np.logical_or.reduce(decision) if decision else np.zeros(len(target), dtype=bool)
        outside = target[~covered] if not covered.all() else target
        self.outside_rate_ = float(outside.mean())
        _warn_disagreement(self.rule_sets_[:n_rule_sets], self.outside_rate_)
        return self

    def _outcomes(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any]:
        """``classes_``, the boolean subgroup of ``y`` and the subgroup's label (checked: two outcomes)."""
        check_classification_targets(y)
        labels = np.unique(y)
        if self.target_class is None:
            kind = type_of_target(y, input_name="y")
            if kind != "binary":
                raise ValueError(
                    f"Only binary classification is supported. The type of the target is {kind} "
                    f"({len(labels)} classes); set `target_class` to the label whose subgroup the rules describe."
                )
            classes, label = labels, labels[-1]
        else:
            if not np.any(labels == self.target_class):
                raise ValueError(
                    f"Expected `target_class` to be a label of y {labels.tolist()}, but got {self.target_class!r}."
                )
            classes, label = np.array([0, 1]), self.target_class
        target = np.asarray(y == label, dtype=bool)
        if target.all() or not target.any():
            raise ValueError(
                f"Expected y with two outcomes, but it holds one class ({labels.tolist()}"
                f"{'' if self.target_class is None else f', target_class={self.target_class!r}'}): the rules need "
                "samples inside and outside the subgroup."
            )
        return classes, target, label

    def subgroup(self, y: Any) -> np.ndarray:
        """The boolean subgroup of labels ``y`` that the rules describe: ``y == classes_[1]``, or
        ``y == target_class``.

        Example:
            >>> import numpy as np
            >>> X = np.arange(8.0).reshape(-1, 1)
            >>> clf = RegionalRuleClassifier(target_class="b", min_support=2).fit(X, list("aabbbbcc"))
            >>> clf.subgroup(["a", "b", "c"]).tolist(), clf.classes_.tolist()
            ([False, True, False], [0, 1])
        """
        check_is_fitted(self)
        y = column_or_1d(y, warn=True)
        label = self.classes_[1] if self.target_class is None else self.target_class
        return np.asarray(y == label, dtype=bool)

    def _first_firing(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """For each row of ``X``: the index of the first rule set of the decision set that selects it (-1: none),
        and the probability of ``classes_[1]`` there."""
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, ensure_all_finite="allow-nan")
        first = np.full(X.shape[0], -1)
        proba = np.full(X.shape[0], self.outside_rate_)
        for k, rs in enumerate(self.rule_sets_[: self.n_rule_sets]):
            new = rs.mask(X).cpu().numpy() & (first < 0)
            first[new] = k
            proba[new] = rs.confidence
        return first, proba

    def predict(self, X: Any) -> np.ndarray:
        """``classes_[1]`` where any rule set of the decision set selects a row of ``X``, else ``classes_[0]``."""
        first, _ = self._first_firing(X)
        return self.classes_[(first >= 0).astype(int)]

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n_samples, 2) probabilities of ``classes_``: ``classes_[1]`` gets the training confidence of the first
        rule set of the decision set that selects the row, else :attr:`outside_rate_` (``fit`` warns where this can
        disagree with :meth:`predict`)."""
        _, proba = self._first_firing(X)
        return np.column_stack([1.0 - proba, proba])

    def decision_function(self, X: Any) -> np.ndarray:
        """(n_samples,) scores: the probability of ``classes_[1]`` (:meth:`predict_proba`) minus one half."""
        _, proba = self._first_firing(X)
        return proba - 0.5

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The accuracy of :meth:`predict` on the outcomes of ``y`` (``y == target_class`` with ``target_class``)."""
        outcomes = self.classes_[self.subgroup(y).astype(int)]
        return float(accuracy_score(outcomes, self.predict(X), sample_weight=sample_weight))


def _rule_table(rule_sets: list[RuleSet], masks: list[np.ndarray], target: np.ndarray) -> pd.DataFrame:
    """One row per rule set: its text and its metrics, recounted from its mask on the training data."""
    n_target = int(target.sum())
    rate = M.base_rate(n_target, len(target))
    rows = []
    for rs, mask in zip(rule_sets, masks):
        support, hits = int(mask.sum()), int((mask & target).sum())
        conf = M.confidence_of_counts(hits, support)
        text = " AND ".join(r.format() for r in rs.rules) if rs.rules else "TRUE"
        fit = M.fitness_of_counts(hits, support, n_target)
        rows.append((text, support, conf, fit, M.lift(conf, rate), M.recall(hits, n_target)))
    return pd.DataFrame(rows, columns=list(RULE_COLUMNS))


def _warn_disagreement(decision: list[RuleSet], outside_rate: float) -> None:
    """Warn when ``predict`` (a rule set fires) and ``predict_proba``'s larger probability can disagree."""
    weak = [k for k, rs in enumerate(decision) if rs.confidence <= 0.5]
    if weak or outside_rate > 0.5:
        warnings.warn(
            f"predict and predict_proba disagree on the training data: rule sets {weak} of the decision set have "
            f"confidence <= 0.5 and the subgroup's rate outside them is {outside_rate:.3f}; predict follows the rule "
            "sets, predict_proba and decision_function their confidence.",
            UserWarning,
            stacklevel=3,
        )


def fitness_scorer(estimator: Any, X: Any, y: Any) -> float:
    """The fitness of the samples that a fitted :class:`RegionalRuleClassifier` (or a ``Pipeline`` ending in one)
    predicts in the subgroup, on ``(X, y)``: (subgroup - other samples predicted) / subgroup samples, as
    :func:`torch_amore.fitness`. A scorer for ``GridSearchCV(..., scoring=fitness_scorer)``.

    Example:
        >>> import numpy as np
        >>> X = np.arange(10.0).reshape(-1, 1)
        >>> y = np.array([0, 0, 0, 0, 0, 0, 1, 1, 1, 0])
        >>> clf = RegionalRuleClassifier(min_support=3).fit(X, y)
        >>> print(clf.rule_sets_[0])
        IF 6 <= feature_0 <= 8 THEN y == 1  (support=3, confidence=1.000, fitness=1.000)
        >>> fitness_scorer(clf, X[5:], y[5:])
        1.0
    """
    final = estimator[-1] if isinstance(estimator, Pipeline) else estimator
    if not isinstance(final, RegionalRuleClassifier):
        raise TypeError(
            "Expected `estimator` to be a fitted RegionalRuleClassifier or a Pipeline ending in one, but got "
            f"{type(final).__name__}."
        )
    target = final.subgroup(y)
    predicted = np.asarray(estimator.predict(X)) == final.classes_[1]
    return float(M.fitness(torch.from_numpy(predicted), torch.from_numpy(target)))
