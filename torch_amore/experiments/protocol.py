"""The paper's experimental protocol: hyperparameter grid search with a confidence lower bound, and sequential covering.

Selection rule (paper, "Hyperparameters"): the highest fitness among the rule sets whose confidence reaches the lower
bound iota (``confidence_lower_bound``), else the highest fitness; applied within every setting and across settings.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.data.local_x import to_local_x
from torch_amore.experiments.decision_list import DecisionList
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import prepare
from torch_amore.search.extractor import capped_max_length, search_scope
from torch_amore.search.options import SearchOptions

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from typing_extensions import Unpack

#: Default min_support grid: fractions of the number of samples.
DEFAULT_MIN_SUPPORTS = (0.01, 0.02, 0.05, 0.1)


# --------------------------------------------------------------------------------------------------------- selection
def select_best(rule_sets: Iterable[RuleSet | None], bound: float) -> RuleSet | None:
    """Highest fitness among rule sets with confidence >= ``bound``, else highest fitness; ties: the first."""
    pool = [r for r in rule_sets if r is not None]
    passing = [r for r in pool if r.confidence >= bound]
    pool = passing or pool
    if not pool:
        return None
    return max(pool, key=lambda r: r.fitness)  # max keeps the first of equal maxima


def check_bound(value: Any, name: str = "confidence_lower_bound") -> float:
    """``value`` as a float in [0, 1]; ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `{name}` to be a number in [0, 1], but got {value!r}.")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"Expected `{name}` to lie in [0, 1], but got {value}.")
    return float(value)


_SCALARS = (str, int, float, np.integer, np.floating)


def as_grid(value: Any, name: str, scalar: type | tuple[type, ...] = _SCALARS) -> list:
    """One value or a sequence of values -> a non-empty list."""
    if value is None or isinstance(value, scalar) or isinstance(value, Mapping):
        return [value]
    try:
        values = list(value)
    except TypeError as err:
        raise TypeError(f"Expected `{name}` to be a value or a sequence of values, but got {value!r}.") from err
    if not values:
        raise ValueError(f"Expected `{name}` to hold at least one value, but it is empty.")
    return values


@dataclass(frozen=True)
class SearchResult:
    """Outcome of a grid search: the chosen rule set, its setting and one record per setting.

    Attributes:
        best: the chosen rule set (``None`` when no setting produced any).
        setting: the hyperparameters that produced ``best``.
        records: a pandas DataFrame, one row per setting in grid order: the setting's columns, ``n_rule_sets``, and
            the rule set chosen within the setting (``rule``, ``support``, ``confidence``, ``fitness``,
            ``meets_bound`` and the :class:`RuleSet` itself in ``rule_set``; empty where a setting found none).
        confidence_lower_bound: iota used for the selection.
    """

    best: RuleSet | None
    setting: dict[str, Any]
    records: pd.DataFrame
    confidence_lower_bound: float

    def best_by(self, column: str) -> pd.DataFrame:
        """For each value of ``column`` (e.g. ``"min_support"``), the record chosen by the selection rule over the
        other hyperparameters; the rows of ``records`` in the order the values first appear."""
        if column not in self.records.columns:
            raise ValueError(f"Expected `column` to be one of {list(self.records.columns)}, but got {column!r}.")
        picks = []
        for _, group in self.records.groupby(column, sort=False, dropna=False):
            chosen = select_best(group["rule_set"].tolist(), self.confidence_lower_bound)  # None: all are None
            picks.append(next(i for i, r in zip(group.index, group["rule_set"]) if r is chosen))
        return self.records.loc[picks]

    def __str__(self) -> str:
        if self.best is None:
            return f"no rule set found in {len(self.records)} settings"
        setting = ", ".join(f"{k}={v!r}" for k, v in self.setting.items())
        return f"{self.best}\n  chosen among {len(self.records)} settings: {setting}"


def _records_frame(rows: list[tuple[dict[str, Any], int, RuleSet | None]], bound: float) -> pd.DataFrame:
    import pandas as pd

    records = []
    for setting, n_found, best in rows:
        rec = dict(setting)
        rec["n_rule_sets"] = n_found
        rec["rule"] = None if best is None else " AND ".join(r.format() for r in best.rules)
        rec["support"] = None if best is None else best.support
        rec["confidence"] = float("nan") if best is None else best.confidence
        rec["fitness"] = float("nan") if best is None else best.fitness
        rec["meets_bound"] = None if best is None else bool(best.confidence >= bound)
        rec["rule_set"] = best
        records.append(rec)
    frame = pd.DataFrame.from_records(records)
    for col in rows[0][0] if rows else ():
        values = [rec[col] for rec in records]
        if any(v is None or isinstance(v, Mapping) for v in values):  # keep None / dict settings as they are
            frame[col] = pd.Series(values, dtype=object)
    return frame


def result_from_rows(rows: list[tuple[dict[str, Any], int, RuleSet | None]], bound: float) -> SearchResult:
    """Records table and overall choice from ``(setting, number of rule sets, chosen rule set)`` per setting."""
    frame = _records_frame(rows, bound)
    best = select_best([r for _, _, r in rows], bound)
    setting = next(dict(s) for s, _, r in rows if r is best) if best is not None else {}
    return SearchResult(best=best, setting=setting, records=frame, confidence_lower_bound=bound)


# -------------------------------------------------------------------------------------------------- grid search
def search_hyperparameters(
    X: ArrayLike,
    target: MaskLike,
    *,
    bin_strategies: str | Sequence[str] = ("uniform", "kmeans"),
    n_grids: int | Iterable[int] = range(2, 11),
    min_supports: int | float | Iterable[int | float] = DEFAULT_MIN_SUPPORTS,
    confidence_lower_bound: float = 0.8,
    options: SearchOptions | None = None,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: ArrayLike | None = None,
    target_name: str = "target",
    **search_options: Any,
) -> SearchResult:
    """The paper's grid search over ``bin_strategy`` x ``n_grids`` x ``min_support`` for a fixed ``max_length``.

    The selection rule (module docstring) picks the rule set within each setting and then the setting (ties: the
    first in grid order). The grids are computed once per ``(bin_strategy, n_grids)`` for all ``min_supports``.

    Args:
        X, target: the data and the boolean subgroup, as in :func:`torch_amore.extract_rules`.
        bin_strategies: one strategy or a sequence of ``"uniform"``, ``"quantile"``, ``"kmeans"``.
        n_grids: one value or an iterable (default 2..10).
        min_supports: one value or an iterable of int counts / float fractions of N.
        confidence_lower_bound: iota (the paper uses 0.8).
        options: a :class:`torch_amore.SearchOptions` for everything but the three grids above (its
            ``bin_strategy``, ``n_grids`` and ``min_support`` are replaced by each setting's); keyword arguments
            override its fields. Without it the ``strategy`` is ``"paper"`` (the paper's protocol), not the beam.
        local_x: one sample (F,): search local rules (rules containing it) in every setting.
        **search_options: fields of :class:`torch_amore.SearchOptions`, e.g. ``max_length`` (l_max, fixed during
            the search), ``top_k``, ``strategy``, ``feature_types``; ``progress`` shows a bar over the settings.
        Other arguments: as in :func:`torch_amore.extract_rules`.

    Returns:
        A :class:`SearchResult`; ``records`` has the columns ``bin_strategy``, ``n_grids``, ``min_support`` (count).

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randint(0, 10, (2000, 3), generator=g).float()
        >>> target = X[:, 0] >= 7
        >>> result = search_hyperparameters(X, target, bin_strategies="uniform", n_grids=[5, 10],
        ...                                 min_supports=[50, 100], max_length=1)
        >>> print(result.best)
        IF feature_0 >= 7 THEN target  (support=593, confidence=1.000, fitness=1.000)
        >>> result.setting
        {'bin_strategy': 'uniform', 'n_grids': 10, 'min_support': 50}
        >>> print(result.records[["n_grids", "min_support", "support", "fitness"]].round(3).to_string(index=False))
         n_grids  min_support  support  fitness
               5           50      385    0.649
               5          100      385    0.649
              10           50      593    1.000
              10          100      593    1.000
    """
    bound = check_bound(confidence_lower_bound)
    for field, grid in (("min_support", "min_supports"), ("bin_strategy", "bin_strategies")):
        if field in search_options:  # each setting replaces it: taken, it would be ignored
            raise TypeError(
                f"search_hyperparameters() got `{field}`, which each setting of the grid replaces; give its values "
                f"as `{grid}=` (one value or a sequence)."
            )
    held = search_options.pop("holdout_rows", None) is not None  # extract_rules' keyword, not an option
    options = SearchOptions.resolve(SearchOptions(strategy="paper") if options is None else options, **search_options)
    options = options.replace(min_support=None)  # each setting's replaces it (not checked against these rows)
    if options.wants_evidence or held:  # its choice of the setting is a search the p-values would not cover
        raise ValueError(
            "search_hyperparameters does not compute `holdout`, `holdout_rows`, `permutations` or `stability`: its "
            "choice among the settings is part of the search, and their p-values would not cover it. Pick the "
            "setting here, then run extract_rules with that setting and the evidence on fresh rows (docs/trust.md)."
        )
    progress = options.progress
    options = options.replace(progress=False)
    strategies = [A.check_bin_strategy(s) for s in as_grid(bin_strategies, "bin_strategies", str)]
    grids = [A.check_int(g, "n_grids", 2) for g in as_grid(n_grids, "n_grids")]
    target = V.align_rows(target, X, "target")
    X_t, frame_names = V.to_tensor_2d(X)
    n, n_features = X_t.shape
    options = capped_max_length(options, len(A.resolve_features(features, n_features)))  # said once, not per setting
    names = A.resolve_names(feature_names, frame_names, n_features)
    supports = [A.resolve_min_support(m, n) for m in as_grid(min_supports, "min_supports")]
    local = to_local_x(local_x, n_features, frame_names)
    if local is not None and bool(torch.isinf(local).any()):
        raise ValueError("Expected `local_x` to hold finite values (NaN marks a missing value).")

    bar = progress_bar(progress, total=len(strategies) * len(grids) * len(supports), desc="hyperparameter settings")
    rows = []
    with search_scope(X_t.device):  # one thread for small operations, no autograd bookkeeping
        for strategy, n_g in itertools.product(strategies, grids):
            setting_options = options.replace(bin_strategy=strategy, n_grids=n_g)
            extractor = prepare(
                X_t, target, setting_options, features=features, feature_names=names, target_name=target_name
            )
            local_codes = extractor.binned.encode_sample(local) if local is not None else None
            for s_min in supports:
                rule_sets = extractor.extract(setting_options, min_support=s_min, local_codes=local_codes)
                setting = {"bin_strategy": strategy, "n_grids": n_g, "min_support": s_min}
                rows.append((setting, len(rule_sets), select_best(rule_sets, bound)))
                bar.update(1)
    bar.close()
    return result_from_rows(rows, bound)


# ------------------------------------------------------------------------------------------- sequential covering
def sequential_covering(
    X: ArrayLike,
    target: MaskLike,
    *,
    max_length: int = 2,
    min_support: int | float | Iterable[int | float] = 0.05,
    n_grids: int | Iterable[int] = 10,
    bin_strategy: str | Sequence[str] = "uniform",
    top_k: int = 3,
    min_confidence: float = 0.8,
    max_rules: int | None = None,
    target_name: str = "target",
    progress: bool = False,
    **described: Unpack[A.FeatureArgs],
) -> DecisionList:
    """A decision list covering the subgroup: take the best rule set, remove the samples it covers, repeat.

    Each step runs :func:`search_hyperparameters` on the samples not yet covered (a fixed setting when
    ``min_support``, ``n_grids`` and ``bin_strategy`` are single values, a grid search when any is a sequence) with
    ``confidence_lower_bound=min_confidence``. It stops when the chosen rule set's confidence is below
    ``min_confidence``, when fewer target samples remain than the smallest ``min_support``, when only target samples
    (or none) remain, or after ``max_rules`` entries.

    Args:
        min_support: int counts or float fractions of the full N (resolved once), one or a sequence.
        min_confidence: the confidence every entry must reach.
        max_rules: the most entries (default: no limit).
        described: ``features``, ``feature_names``, ``feature_types``, ``feature_scale`` and ``feature_offset``.
        Other arguments: as in :func:`search_hyperparameters`.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.randint(0, 10, (2000, 2), generator=g).float()
        >>> target = (X[:, 0] >= 8) | (X[:, 1] <= 1)
        >>> dl = sequential_covering(X, target, max_length=1, min_support=50, n_grids=10)
        >>> print(dl)
        IF feature_0 >= 8 THEN target  (support=401, confidence=1.000, fitness=0.566)
        ELSE IF feature_1 <= 1 THEN target  (support=307, confidence=1.000, fitness=1.000)
        ELSE not target
        covers 708 of 708 target samples (coverage=1.000); support=708, confidence=1.000, fitness=1.000
    """
    described = A.feature_args(described, "sequential_covering")
    min_confidence = check_bound(min_confidence, "min_confidence")
    max_rules = None if max_rules is None else A.check_int(max_rules, "max_rules", 1)
    max_length = A.check_int(max_length, "max_length", 1)
    top_k = A.check_int(top_k, "top_k", 1)
    strategies = [A.check_bin_strategy(s) for s in as_grid(bin_strategy, "bin_strategy", str)]
    grids = [A.check_int(g, "n_grids", 2) for g in as_grid(n_grids, "n_grids")]
    target = V.align_rows(target, X, "target")
    X_t, frame_names = V.to_tensor_2d(X)
    n, n_features = X_t.shape
    n_searched = len(A.resolve_features(described["features"], n_features))
    max_length = capped_max_length(SearchOptions(max_length=max_length), n_searched).max_length  # said once
    names = A.resolve_names(described["feature_names"], frame_names, n_features)
    supports = [A.resolve_min_support(m, n) for m in as_grid(min_support, "min_support")]
    target_t = V.to_target(target, n, X_t.device)
    V.check_finite(X_t, any_inf=D.any_rank(bool(torch.isinf(X_t).any())))
    # the types are fixed on the full data, not re-inferred on subsets
    kinds = A.resolve_feature_types(described["feature_types"], X_t)
    n_target = int(target_t.sum())

    remaining = torch.ones(n, dtype=torch.bool, device=X_t.device)
    entries: list[RuleSet] = []
    bar = progress_bar(progress, desc="decision-list entries", unit="rule set")
    while max_rules is None or len(entries) < max_rules:
        n_rem = int(remaining.sum())
        t_rem = int((target_t & remaining).sum())
        if t_rem == 0 or t_rem == n_rem or t_rem < min(supports):
            break
        usable = [s for s in supports if s <= n_rem]
        rows = torch.nonzero(remaining, as_tuple=True)[0]
        result = search_hyperparameters(
            X_t[rows],
            target_t[rows],
            bin_strategies=strategies,
            n_grids=grids,
            min_supports=usable,
            max_length=max_length,
            top_k=top_k,
            confidence_lower_bound=min_confidence,
            target_name=target_name,
            **{**described, "feature_names": names, "feature_types": kinds},
        )
        best = result.best
        if best is None or best.confidence < min_confidence or best.support == 0:
            break
        entries.append(best)
        remaining &= ~best.mask(X_t).to(remaining.device)
        bar.update(1)
    bar.close()
    return DecisionList(tuple(entries), n_samples=n, n_target=n_target, target_name=target_name)
