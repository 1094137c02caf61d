"""The paper's baseline: rules read off a scikit-learn decision tree trained to recognise the subgroup.

Every node but the root is a region (the splits on its path), turned into a :class:`~torch_amore.RuleSet` by
:func:`decision_tree_rules`; :func:`decision_tree_search` is the paper's grid search over its settings. scikit-learn
sends a sample left when ``float32(x) <= threshold``; each split becomes ``x < b`` / ``x >= b`` at the float64
boundary ``b`` where that rounding crosses the threshold, stored as the bound that prints shortest and splits the rows
alike, so ``RuleSet.mask(X)`` equals the tree's decision-path membership on the data it was fitted on.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.experiments.protocol import SearchResult, as_grid, check_bound, result_from_rows, select_best
from torch_amore.rules.metrics import confidence_of_counts, fitness_of_counts
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.search.readable import between

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

#: Split criteria of :class:`sklearn.tree.DecisionTreeClassifier`.
CRITERIA = ("gini", "entropy", "log_loss")


def _split_boundary(threshold: float) -> float:
    """The float64 ``b`` with ``float32(x) <= threshold  <=>  x < b`` for every float64 ``x``.

    Example:
        >>> b = _split_boundary(0.5)
        >>> 0.5 < b, float(np.float32(b)) > 0.5
        (True, True)
    """
    t = np.float32(threshold)
    if float(t) > threshold:
        t = np.nextafter(t, np.float32(-np.inf))
    up = np.nextafter(t, np.float32(np.inf))
    if not np.isfinite(up):
        return math.inf
    mid = (float(t) + float(up)) / 2.0  # exact: float64 has room for the midpoint of two float32 neighbours
    # a value exactly at the midpoint rounds (ties to even) to t or to up
    return math.nextafter(mid, math.inf) if float(np.float32(mid)) == float(t) else mid


def _check_min_samples_leaf(value: Any, n: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `min_samples_leaf` to be an int count or a float in (0, 1), got {value!r}.")
    if isinstance(value, (float, np.floating)) and not float(value).is_integer():
        if not 0.0 < value < 1.0:
            raise ValueError(f"Expected a fractional `min_samples_leaf` to lie in (0, 1), but got {value}.")
        return max(1, int(math.ceil(float(value) * n)))
    if not 1 <= value <= n:
        raise ValueError(f"Expected `min_samples_leaf` to lie in [1, {n}] (the number of samples), but got {value}.")
    return int(value)


def _check_class_weight(value: Any) -> Any:
    if value is None or value == "balanced" or isinstance(value, dict):
        return value
    raise ValueError(f"Expected `class_weight` to be None, 'balanced' or a dict, but got {value!r}.")


def _check_max_depth(value: Any) -> int | None:
    return None if value is None else A.check_int(value, "max_depth", 1)


class _TreeData:
    """Validated inputs shared by all trees of a grid search."""

    def __init__(self, X: ArrayLike, target: MaskLike, described: Mapping[str, Any]) -> None:
        """``described``: every key of :class:`~torch_amore.data.arguments.FeatureArgs`."""
        target = V.align_rows(target, X, "target")
        X_t, frame_names = V.to_tensor_2d(X)
        n, n_features = X_t.shape
        if n == 0 or n_features == 0:
            raise ValueError(f"Expected `X` with at least one row and one column, but got shape {tuple(X_t.shape)}.")
        self.names = A.resolve_names(described["feature_names"], frame_names, n_features)
        self.columns = A.resolve_features(described["features"], n_features)
        self.scale = A.resolve_affine(described["feature_scale"], "feature_scale", n_features, 1.0)
        self.offset = A.resolve_affine(described["feature_offset"], "feature_offset", n_features, 0.0)
        if any(s == 0 for s in self.scale):
            raise ValueError("Expected non-zero entries in `feature_scale`.")
        self.target = V.to_target(target, n, torch.device("cpu")).numpy()
        V.check_finite(X_t, any_inf=D.any_rank(bool(torch.isinf(X_t).any())))
        self.X = X_t.detach().to("cpu", torch.float64).numpy()
        if np.isnan(self.X[:, self.columns]).any():
            raise ValueError(
                "Expected `X` without missing values (NaN) for the decision-tree baseline: a tree routes NaN to one "
                "side of a split, which an interval rule cannot express. Impute or drop the missing values first."
            )
        self.kinds = A.resolve_feature_types(described["feature_types"], torch.from_numpy(self.X))
        self.n_target = int(self.target.sum())
        self._distinct: dict[int, np.ndarray] = {}

    def cut(self, col: int, boundary: float) -> float:
        """The bound that prints shortest (in the column's printed units) among those that split the rows of column
        ``col`` as ``x < boundary`` does."""
        if col not in self._distinct:
            self._distinct[col] = np.unique(self.X[:, col])
        values = self._distinct[col]
        i = int(np.searchsorted(values, boundary, side="left"))
        below = float(values[i - 1]) if i > 0 else -math.inf
        above = float(values[i]) if i < len(values) else math.inf
        return between(below, above, boundary, (self.scale[col], self.offset[col]))

    def rule(self, col: int, low: float, high: float) -> Rule:
        name, scale, offset, kind = self.names[col], self.scale[col], self.offset[col], self.kinds[col]
        values = self.X[:, col]
        if kind == "cat":
            inside = np.unique(values[(values >= low) & (values < high)])
            if inside.size == 1:
                return Rule(col, name, value=float(inside[0]), kind="cat", scale=scale, offset=offset)
            kind = "float"
        if kind == "int":
            raw = values * scale + offset
            if not np.array_equal(raw, np.round(raw)):
                kind = "float"
        return Rule(col, name, low=low, high=high, kind=kind, scale=scale, offset=offset)


def _tree_rule_sets(
    data: _TreeData, setting: Mapping[str, Any], *, max_depth: int | None, random_state: int | None, target_name: str
) -> list[RuleSet]:
    """The rule sets of a tree grown with ``setting`` (``criterion``, ``min_samples_leaf``, ``class_weight``), best
    first."""
    from sklearn.tree import DecisionTreeClassifier

    X = data.X[:, data.columns]
    clf = DecisionTreeClassifier(max_depth=max_depth, random_state=random_state, **setting).fit(X, data.target)
    tree = clf.tree_
    path = clf.decision_path(X).tocsc()  # (N, n_nodes) membership
    support = np.asarray(path.sum(axis=0)).ravel().astype(np.int64)
    hits = np.asarray(path.T @ data.target.astype(np.int64)).ravel().astype(np.int64)

    out: list[tuple[int, RuleSet]] = []
    stack: list[tuple[int, dict[int, tuple[float, float]]]] = [(0, {})]
    while stack:
        node, bounds = stack.pop()
        if node != 0:
            rules = tuple(data.rule(data.columns[j], lo, hi) for j, (lo, hi) in sorted(bounds.items()))
            s, h = int(support[node]), int(hits[node])
            conf, fit = confidence_of_counts(h, s), fitness_of_counts(h, s, data.n_target)
            out.append((node, RuleSet(rules, support=s, confidence=conf, fitness=fit, target_name=target_name)))
        left, right = int(tree.children_left[node]), int(tree.children_right[node])
        if left == -1:
            continue
        j = int(tree.feature[node])
        b = data.cut(data.columns[j], _split_boundary(float(tree.threshold[node])))
        lo, hi = bounds.get(j, (-math.inf, math.inf))
        stack.append((right, {**bounds, j: (max(lo, b), hi)}))
        stack.append((left, {**bounds, j: (lo, min(hi, b))}))
    out.sort(key=lambda p: (-p[1].fitness, -p[1].confidence, -p[1].support, p[0]))
    return [rs for _, rs in out]


def decision_tree_rules(
    X: ArrayLike,
    target: MaskLike,
    *,
    max_depth: int | None,
    min_samples_leaf: int | float,
    criterion: str = "gini",
    class_weight: Any = None,
    target_name: str = "target",
    random_state: int | None = 0,
    **described: Unpack[A.FeatureArgs],
) -> list[RuleSet]:
    """Rule sets of every node of a decision tree trained to separate the subgroup from the other samples.

    Args:
        X: (N, F) features: tensor, numpy array or DataFrame, without missing values.
        target: (N,) boolean subgroup (the tree's positive class).
        max_depth: the tree's depth (the paper sets it to ``max_length``); ``None`` grows it fully.
        min_samples_leaf: the fewest samples in a leaf (int, or a float fraction of N); plays ``min_support``'s role.
        criterion: ``"gini"``, ``"entropy"`` or ``"log_loss"``.
        class_weight: ``None``, ``"balanced"`` or a dict, as in scikit-learn.
        features: indices of the features the tree may split on (default all).
        feature_names, feature_types, feature_scale, feature_offset: as in :func:`torch_amore.extract_rules`.
        target_name: name of the subgroup in printed rules.
        random_state: the tree's seed (scikit-learn permutes features when ties occur).

    Returns:
        One rule set per non-root node, measured on ``(X, target)``, best fitness first.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(1000, 3, generator=g)
        >>> target = X[:, 1] > 0.6
        >>> best = decision_tree_rules(X, target, max_depth=1, min_samples_leaf=10)[0]
        >>> print(best)
        IF feature_1 >= 0.6 THEN target  (support=384, confidence=1.000, fitness=1.000)
    """
    described = A.feature_args(described, "decision_tree_rules")
    max_depth = _check_max_depth(max_depth)
    A.check_choice(criterion, "criterion", CRITERIA)
    class_weight = _check_class_weight(class_weight)
    data = _TreeData(X, target, described)
    msl = _check_min_samples_leaf(min_samples_leaf, data.X.shape[0])
    setting = {"criterion": criterion, "min_samples_leaf": msl, "class_weight": class_weight}
    return _tree_rule_sets(data, setting, max_depth=max_depth, random_state=random_state, target_name=target_name)


def decision_tree_search(
    X: ArrayLike,
    target: MaskLike,
    *,
    max_depth: int | None,
    min_samples_leaf: int | float | Sequence[int | float] = (0.01, 0.02, 0.05, 0.1),
    criteria: str | Sequence[str] = ("gini", "entropy"),
    class_weights: Any = (None, "balanced"),
    confidence_lower_bound: float = 0.8,
    target_name: str = "target",
    random_state: int | None = 0,
    progress: bool = False,
    **described: Unpack[A.FeatureArgs],
) -> SearchResult:
    """The paper's grid search for the decision-tree baseline.

    The selection rule of :func:`~torch_amore.experiments.protocol.search_hyperparameters` picks the node of every
    ``(criterion, min_samples_leaf, class_weight)`` and then the setting (ties: the first in grid order).

    Args:
        max_depth: the trees' depth (fixed, like ``max_length`` for AMORE).
        min_samples_leaf: one value or a sequence (ints, or float fractions of N).
        criteria: one criterion or a sequence of them.
        class_weights: ``None``, ``"balanced"``, a dict, or a sequence of these.
        confidence_lower_bound: iota, the confidence a rule set needs to be preferred.
        progress: show a progress bar over the settings.
        Other arguments: as in :func:`decision_tree_rules`.

    Returns:
        A :class:`~torch_amore.experiments.protocol.SearchResult`; ``records`` has the columns ``criterion``,
        ``min_samples_leaf``, ``class_weight`` and the chosen rule set's metrics per setting.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(1000, 3, generator=g)
        >>> result = decision_tree_search(X, X[:, 1] > 0.6, max_depth=1, min_samples_leaf=[10, 50])
        >>> result.setting
        {'criterion': 'gini', 'min_samples_leaf': 10, 'class_weight': None}
        >>> len(result.records)
        8
    """
    described = A.feature_args(described, "decision_tree_search")
    max_depth = _check_max_depth(max_depth)
    bound = check_bound(confidence_lower_bound)
    crits = [A.check_choice(c, "criteria", CRITERIA) for c in as_grid(criteria, "criteria", str)]
    weights = [_check_class_weight(w) for w in as_grid(class_weights, "class_weights", str)]
    data = _TreeData(X, target, described)
    leaves = [_check_min_samples_leaf(m, data.X.shape[0]) for m in as_grid(min_samples_leaf, "min_samples_leaf")]

    settings = list(itertools.product(crits, leaves, weights))
    bar = progress_bar(progress, total=len(settings), desc="decision-tree settings")
    rows = []
    for crit, msl, cw in settings:
        setting = {"criterion": crit, "min_samples_leaf": msl, "class_weight": cw}
        rule_sets = _tree_rule_sets(
            data, setting, max_depth=max_depth, random_state=random_state, target_name=target_name
        )
        rows.append((setting, len(rule_sets), select_best(rule_sets, bound)))
        bar.update(1)
    bar.close()
    return result_from_rows(rows, bound)
