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
from torch_amore.data.held_rows import aligned_holdout_rows
from torch_amore.rules import metrics as M
from torch_amore.rules.rules import RuleSet
from torch_amore.search.evidence_split import holdout_mask
from torch_amore.search.extract import extract_rules
from torch_amore.search.options import SearchOptions

#: The columns of :attr:`RegionalRuleClassifier.rules_`, one row per rule set (as imodels' ``get_rules()``).
RULE_COLUMNS = ("rule", "support", "confidence", "fitness", "lift", "recall")


class RegionalRuleClassifier(ClassifierMixin, BaseEstimator):
    """AMORE's regional IF-THEN rules as a scikit-learn classifier: the best rule sets for one outcome of ``y``.

    Parameters are the fields of :class:`~torch_amore.SearchOptions` (same defaults and meanings, checked in
    :meth:`fit` as scikit-learn asks), plus:

    Args:
        target_class: the label of ``y`` whose subgroup the rules describe, against all other labels: one label (an
            int, float, str or numpy scalar; a bool only when ``y``'s labels are bools), checked in :meth:`fit`.
            With a binary ``y`` the estimator predicts ``y``'s own labels (``target_class`` where a rule set fires),
            so every scikit-learn scorer applies. With more than two labels there is no single other label: the
            outcomes are ``0``/``1`` (1: ``y == target_class``), which only :meth:`score` and
            :func:`fitness_scorer` compare with ``y`` correctly; for scikit-learn's scorers and metrics fit and
            score on ``y == target_class`` with ``target_class=None`` instead
            (``cross_val_score(RegionalRuleClassifier(), X, y == 2, scoring="f1")``). ``None`` (default): ``y``
            must be binary and the rules describe ``classes_[1]``.
        n_rule_sets: how many of the best rule sets form the decision set (an integer >= 1, default 1; all of
            them when the search finds fewer).

    Attributes:
        classes_: the two outcomes, sorted: ``y``'s two labels; ``[0, 1]`` (1: ``y == target_class``) when
            ``target_class`` is set and ``y`` has more than two labels.
        rule_sets_: the rule sets of :func:`torch_amore.extract_rules` on the training data, best first; the first
            ``n_rule_sets`` form the decision set. Their support, confidence and fitness are those of the rows the
            search saw: every training sample, or with ``holdout`` / ``holdout_rows`` the ones not held out (the
            held-out numbers are each rule set's ``held_out``).
        rules_: a DataFrame with one row per rule set of ``rule_sets_``: ``rule``, ``support``, ``confidence``,
            ``fitness``, ``lift``, ``recall`` on the rows the search saw (so equal to the printed rule sets').
        outside_rate_: the subgroup's share of the rows the search saw that no rule set of the decision set selects
            (of all those rows when they select every one).
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

        ``target_class`` on a binary ``y`` keeps ``y``'s labels, so scikit-learn's metrics agree with :meth:`score`:

        >>> from sklearn.metrics import accuracy_score
        >>> low = RegionalRuleClassifier(target_class=0, max_length=2, min_support=50).fit(X, y)
        >>> low.classes_.tolist(), accuracy_score(y, low.predict(X)) == low.score(X, y)
        ([0, 1], True)
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
            holdout_rows: samples held out of the search, a boolean mask with one entry per sample (a boolean
                pandas Series goes by its index when ``X`` is a DataFrame), as :func:`torch_amore.extract_rules`
                takes it: each rule set gets its numbers there, ``held_out`` (docs/trust.md); not with
                ``holdout``. ``GridSearchCV`` and ``cross_validate`` split such a mask with the samples, fold by
                fold. Row positions are refused (a ``ValueError``): scikit-learn splits only fit parameters with one
                entry per sample, so in each fold positions would point at other rows.

        Returns:
            The fitted estimator.
        """
        options = self.search_options()  # the parameters' checks first, before any work on the data
        n_rule_sets = A.check_int(self.n_rule_sets, "n_rule_sets", 1)
        _check_label_type(self.target_class)
        raw = X
        X, y = validate_data(self, X, y, ensure_all_finite="allow-nan")
        held = _holdout_mask(holdout_rows, raw, X.shape[0])
        self.classes_, target, self._label, self._one_vs_rest = self._outcomes(y)
        self._subgroup_index = 1 if self._one_vs_rest else int(np.flatnonzero(self.classes_ == self._label)[0])
        names = [str(n) for n in self.feature_names_in_] if hasattr(self, "feature_names_in_") else None
        self.rule_sets_ = extract_rules(
            X,
            torch.from_numpy(target),
            options=options,
            feature_names=names,
            target_name=f"y == {self._label}",
            holdout_rows=held,
        )
        if held is None and options.holdout is not None:  # the split extract_rules draws, drawn again
            held = holdout_mask(torch.from_numpy(target), options.holdout, options.seed).numpy()
        seen = np.ones(len(target), dtype=bool) if held is None else ~held  # the rows the search saw
        masks = [rs.mask(X).cpu().numpy()[seen] for rs in self.rule_sets_]
        self.rules_ = _rule_table(self.rule_sets_, masks, target[seen])
        decision = masks[:n_rule_sets]
        covered = np.logical_or.reduce(decision) if decision else np.zeros(int(seen.sum()), dtype=bool)
        outside = target[seen][~covered] if not covered.all() else target[seen]
        self.outside_rate_ = float(outside.mean())
        _warn_disagreement(self.rule_sets_[:n_rule_sets], self.outside_rate_)
        return self

    def _outcomes(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, Any, bool]:
        """``classes_``, the boolean subgroup of ``y``, the subgroup's label of ``y`` and whether the outcomes are
        ``0``/``1`` rather than ``y``'s labels (``target_class`` on more than two labels). Checked: two outcomes."""
        check_classification_targets(y)
        labels = np.unique(y)
        if self.target_class is None:
            kind = type_of_target(y, input_name="y")
            if kind != "binary":
                raise ValueError(
                    f"Only binary classification is supported. The type of the target is {kind} "
                    f"({len(labels)} classes); set `target_class` to the label whose subgroup the rules describe."
                )
            label = labels[-1]
        else:
            label = _matched_label(self.target_class, labels)
        target = np.asarray(y == label, dtype=bool)
        if target.all() or not target.any():
            raise ValueError(
                f"Expected y with two outcomes, but it holds one class ({labels.tolist()}"
                f"{'' if self.target_class is None else f', target_class={self.target_class!r}'}): the rules need "
                "samples inside and outside the subgroup."
            )
        if len(labels) > 2:  # no other label to predict: the outcomes of y == target_class
            return np.array([0, 1]), target, label, True
        return labels, target, label, False

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
        return np.asarray(y == self._label, dtype=bool)

    def _first_firing(self, X: Any) -> tuple[np.ndarray, np.ndarray]:
        """For each row of ``X``: the index of the first rule set of the decision set that selects it (-1: none),
        and the probability of the subgroup there (the outcome ``classes_[_subgroup_index]``)."""
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
        """The subgroup's outcome (``classes_[1]``, or ``target_class`` when ``classes_`` are ``y``'s labels) where
        any rule set of the decision set selects a row of ``X``, else the other outcome."""
        first, _ = self._first_firing(X)
        k = self._subgroup_index
        return self.classes_[np.where(first >= 0, k, 1 - k)]

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n_samples, 2) probabilities of ``classes_`` (in their order): the subgroup's outcome gets the confidence
        of the first rule set of the decision set that selects the row (the confidence it prints, that of
        :attr:`rules_`), else :attr:`outside_rate_` (``fit`` warns where this can disagree with :meth:`predict`)."""
        _, proba = self._first_firing(X)
        columns = [1.0 - proba, proba] if self._subgroup_index == 1 else [proba, 1.0 - proba]
        return np.column_stack(columns)

    def decision_function(self, X: Any) -> np.ndarray:
        """(n_samples,) scores, as scikit-learn's binary classifiers: the probability of ``classes_[1]``
        (:meth:`predict_proba`) minus one half, positive where ``classes_[1]`` is the likelier outcome."""
        _, proba = self._first_firing(X)
        return proba - 0.5 if self._subgroup_index == 1 else 0.5 - proba

    def score(self, X: Any, y: Any, sample_weight: Any = None) -> float:
        """The accuracy of :meth:`predict` on ``y``; on the ``0``/``1`` outcomes of ``y == target_class`` when
        ``classes_`` are those (``target_class`` on more than two labels)."""
        truth = self.subgroup(y).astype(int) if self._one_vs_rest else y
        return float(accuracy_score(truth, self.predict(X), sample_weight=sample_weight))


def _check_label_type(target_class: Any) -> None:
    """A ``TypeError`` naming ``target_class`` unless it is ``None`` or one label: a Python or numpy scalar."""
    if target_class is None or isinstance(target_class, (int, float, str, np.number, np.bool_, np.str_)):
        return
    raise TypeError(
        "Expected `target_class` to be one label of y (an int, float, str or numpy scalar), but got "
        f"{type(target_class).__name__} {target_class!r}; the rules describe one label against all others."
    )


def _matched_label(target_class: Any, labels: np.ndarray) -> Any:
    """The label of ``y``'s sorted ``labels`` that ``target_class`` names; a bool names a label only among bools."""
    flag = isinstance(target_class, (bool, np.bool_))
    if flag != (labels.dtype == bool):
        raise TypeError(
            f"Expected `target_class` to be one label of y {labels.tolist()}, but got {target_class!r}: "
            f"{'a bool names a label only when y holds bools' if flag else 'y holds bools: use True or False'}."
        )
    found = np.flatnonzero(labels == target_class)
    if not found.size:
        raise ValueError(f"Expected `target_class` to be a label of y {labels.tolist()}, but got {target_class!r}.")
    return labels[found[0]]


def _holdout_mask(holdout_rows: Any, X: Any, n_samples: int) -> np.ndarray | None:
    """``fit``'s ``holdout_rows`` as a boolean (n_samples,) mask (a boolean Series by the index of a DataFrame
    ``X``); row positions and other shapes are refused, naming ``holdout_rows``."""
    if holdout_rows is None:
        return None
    rows = aligned_holdout_rows(holdout_rows, X)
    if isinstance(rows, torch.Tensor):
        rows = rows.detach().cpu().numpy()
    rows = np.asarray(rows.to_numpy() if hasattr(rows, "to_numpy") else rows)
    if rows.dtype == bool and rows.shape == (n_samples,):
        return rows
    if np.issubdtype(rows.dtype, np.integer):
        raise ValueError(
            f"Expected `holdout_rows` in fit to be a boolean mask with one entry per row of X ({n_samples}), but "
            f"got {rows.size} row positions: scikit-learn's cross-validation splits only fit parameters with one "
            "entry per sample, so in each fold positions would point at other rows. Pass the mask, e.g. "
            "`np.isin(np.arange(len(X)), positions)`."
        )
    raise ValueError(
        f"Expected `holdout_rows` in fit to be a boolean mask with one entry per row of X, shape ({n_samples},), "
        f"but got dtype {rows.dtype} and shape {rows.shape}."
    )


def _rule_table(rule_sets: list[RuleSet], masks: list[np.ndarray], target: np.ndarray) -> pd.DataFrame:
    """One row per rule set: its text and its metrics, recounted from its mask on the rows the search saw."""
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
    predicted = np.asarray(estimator.predict(X)) == final.classes_[final._subgroup_index]
    return float(M.fitness(torch.from_numpy(predicted), torch.from_numpy(target)))
