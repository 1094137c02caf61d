"""The rule search's options in one frozen, validated object shared by every entry point.

:func:`torch_amore.extract_rules`, :class:`torch_amore.RegionalRuleExplainer`, the Lightning callback,
:func:`torch_amore.search_hyperparameters` and the command line all take the same :class:`SearchOptions` (or the same
plain keyword arguments), so an option accepted by one is accepted by all, and a typo is a ``TypeError`` naming the
closest option.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

import numpy as np

from torch_amore._utils.typing import FEATURE_TYPES
from torch_amore.data import arguments as A
from torch_amore.rules.held_out import check_level

#: Search strategies understood by :func:`torch_amore.extract_rules`.
STRATEGIES = ("beam", "paper", "exact")

#: ``min_support=None`` means ``ceil(min(AUTO_SHARE_OF_SAMPLES * N, AUTO_SHARE_OF_SUBGROUP * T))`` for N samples and a
#: subgroup of T, so that a rare subgroup can still be described (the paper chose s_min by subgroup size).
AUTO_SHARE_OF_SAMPLES = 0.05
AUTO_SHARE_OF_SUBGROUP = 0.5


def auto_min_support(n_samples: int, subgroup_size: int) -> int:
    """The count meant by ``min_support=None``: 5 % of the samples, at most half the subgroup (at least 1), each
    share counted as a given fraction is (:func:`torch_amore.data.arguments.fraction_count`).

    Example:
        >>> auto_min_support(10_000, 3_000), auto_min_support(10_000, 100), auto_min_support(60, 100)
        (500, 50, 3)
    """
    share = min(AUTO_SHARE_OF_SAMPLES * n_samples, AUTO_SHARE_OF_SUBGROUP * subgroup_size)
    return max(1, math.ceil(share - A.COUNT_TOLERANCE * max(1.0, share)))  # fraction_count of the smaller share


def _float_tuple(values: Any, name: str) -> tuple[float, ...] | None:
    if values is None:
        return None
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"Expected `{name}` to be a sequence of numbers (one per feature) or None, but got {values!r}.")
    raw = values.tolist() if hasattr(values, "tolist") else list(values)
    try:
        out = tuple(float(v) for v in raw)
    except (TypeError, ValueError) as err:
        raise TypeError(f"Expected `{name}` to hold numbers, but got {raw!r}.") from err
    if not all(math.isfinite(v) for v in out):
        raise ValueError(f"Expected `{name}` to hold finite numbers, but got {list(out)}.")
    return out


def _types_tuple(values: Any) -> tuple[str, ...] | None:
    if values is None:
        return None
    if isinstance(values, str) or not hasattr(values, "__iter__") or getattr(values, "ndim", 1) != 1:
        raise TypeError(f"Expected `feature_types` to be a sequence such as ['float', 'int', 'cat'], got {values!r}.")
    types = tuple(str(t) for t in values)
    bad = sorted({t for t in types if t not in FEATURE_TYPES})
    if bad:
        raise ValueError(f"Expected `feature_types` entries in {list(FEATURE_TYPES)}, but got {bad}.")
    return types


def _check_fraction(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `{name}` to be a number in [0, 1] or None, but got {value!r}.")
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"Expected `{name}` to be a number in [0, 1] or None, but got {value}.")
    return float(value)


def _check_gain(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `min_gain` to be a number >= 0 (fitness units), but got {value!r}.")
    if not (math.isfinite(float(value)) and float(value) >= 0.0):
        raise ValueError(f"Expected `min_gain` to be a finite number >= 0 (fitness units), but got {value}.")
    return float(value)


@dataclass(frozen=True)
class SearchOptions:
    """Options of the rule search, validated when created.

    Args:
        max_length: l_max, the most conditions in a rule set (>= 1).
        min_support: s_min, an int count (>= 1), a float fraction of the samples in (0, 1), or ``None`` (default):
            5 % of the samples but at most half the subgroup (:func:`auto_min_support`).
        n_grids: n_g, initial value grids per numeric feature (>= 2).
        bin_strategy: ``"uniform"``, ``"quantile"`` or ``"kmeans"``.
        top_k: K, candidate rules kept at each node of the paper's rule tree.
        strategy: ``"paper"`` runs the paper's ratio-driven rule tree exactly (Algorithms 2-5). ``"beam"`` (default)
            runs it too and adds a beam search over fitness-optimal intervals on fine grids with refinement
            (:mod:`torch_amore.strategies.beam`), so its best fitness is never below the paper strategy's.
            ``"exact"`` returns the ``top_k`` rule sets of highest fitness on the grid (``n_grids``,
            ``bin_strategy``), provably (:mod:`torch_amore.strategies.exact`; ``max_length`` <= 3, no local rules).
        min_confidence: keep only rule sets at least this confident (in [0, 1]); the beam also aims for them.
        beam_width: rule sets kept per length by the beam strategy.
        feature_types: per feature ``"float"``, ``"int"`` or ``"cat"``; default inferred (only 0/1 values: cat;
            integer values: int; else float), in original units when ``feature_scale`` or ``feature_offset`` is
            given (a standardized 0/1 column stays a 0/1 category).
        feature_scale, feature_offset: print bounds in original units, ``raw = x * scale + offset`` per feature.
        progress: show progress bars.
        exact_budget: work allowed to the exact search (grid-cell updates, about 10 ns each on one CPU thread): at
            ``max_length <= 2`` it refuses up front when its estimate exceeds it; at ``max_length = 3`` the branch and
            bound stops there and says so (:mod:`torch_amore.strategies.exact`).
        optimum_budget: work allowed to compute :attr:`torch_amore.RuleSet.optimum` for the ``"beam"`` and
            ``"paper"`` strategies: at ``max_length <= 2`` the exact search runs on the same grid when its
            estimate (:func:`torch_amore.strategies.exact_cost.estimate_cost`) is at most this (default 5e7: a tenth
            to a fifth of a second on one CPU thread), and the beam also takes its best rule set as a candidate; 0
            never. At ``max_length = 1`` the optimum is one pass over the per-grid counts, computed whatever this
            budget (but 0).
        min_gain: the fitness a condition must add to earn its place, like scikit-learn's ``min_impurity_decrease``
            (default 0.001): a condition whose removal lowers the fitness (on the data searched) by less is removed,
            the least useful first, unless the confidence would fall below ``min_confidence``. 0 keeps the rule sets
            as the strategies find them.
        holdout: a fraction in (0, 1) of the rows held out of the search, stratified by the target and drawn with
            ``seed`` (:mod:`torch_amore.search.evidence_split`); every returned rule set gets its numbers there,
            :attr:`torch_amore.RuleSet.held_out`. ``None`` (default): no rows held out (or those of ``holdout_rows=``).
        permutations: P, searches on seeded permutations of the target (default 0: none); every returned rule set
            gets the search-aware :attr:`torch_amore.RuleSet.p_value` (:mod:`torch_amore.search.significance`).
        stability: B, seeded half-samples searched again (default 0: none); every returned rule set gets
            :attr:`torch_amore.RuleSet.stability`.
        seed: the seed of the held-out split, the permutations and the half-samples (default 0).
        level: the confidence level of the held-out intervals, in (0, 1) (default 0.95); ``1 - level`` is the
            threshold of the verdict and of the warning on noise.

    Example:
        >>> options = SearchOptions(max_length=3, min_support=100)
        >>> options.replace(strategy="paper").strategy
        'paper'
        >>> SearchOptions.resolve(options, min_suport=50)
        Traceback (most recent call last):
        ...
        TypeError: Unexpected keyword argument 'min_suport' (did you mean 'min_support'?).
    """

    max_length: int = 2
    min_support: int | float | None = None
    n_grids: int = 10
    bin_strategy: str = "uniform"
    top_k: int = 3
    strategy: str = "beam"
    min_confidence: float | None = None
    beam_width: int = 5
    feature_types: tuple[str, ...] | None = None
    feature_scale: tuple[float, ...] | None = None
    feature_offset: tuple[float, ...] | None = None
    progress: bool = False
    exact_budget: int = 2 * 10**9
    optimum_budget: int = 5 * 10**7
    min_gain: float = 0.001
    holdout: float | None = None
    permutations: int = 0
    stability: int = 0
    seed: int = 0
    level: float = 0.95

    def __post_init__(self) -> None:
        set_ = object.__setattr__  # frozen: normalised values are set once, here
        set_(self, "max_length", A.check_int(self.max_length, "max_length", 1))
        if self.min_support is not None:
            set_(self, "min_support", A.check_min_support(self.min_support))
        set_(self, "n_grids", A.check_n_grids(self.n_grids))
        set_(self, "bin_strategy", A.check_bin_strategy(self.bin_strategy))
        set_(self, "top_k", A.check_int(self.top_k, "top_k", 1))
        set_(self, "strategy", A.check_choice(self.strategy, "strategy", STRATEGIES))
        set_(self, "min_confidence", _check_fraction(self.min_confidence, "min_confidence"))
        set_(self, "beam_width", A.check_int(self.beam_width, "beam_width", 1))
        set_(self, "feature_types", _types_tuple(self.feature_types))
        set_(self, "feature_scale", _float_tuple(self.feature_scale, "feature_scale"))
        set_(self, "feature_offset", _float_tuple(self.feature_offset, "feature_offset"))
        if self.feature_scale is not None and any(s == 0 for s in self.feature_scale):
            raise ValueError(f"Expected non-zero entries in `feature_scale`, but got {list(self.feature_scale)}.")
        set_(self, "progress", A.check_flag(self.progress, "progress"))
        set_(self, "exact_budget", A.check_int(self.exact_budget, "exact_budget", 1))
        set_(self, "optimum_budget", A.check_int(self.optimum_budget, "optimum_budget", 0))
        set_(self, "min_gain", _check_gain(self.min_gain))
        set_(self, "holdout", None if self.holdout is None else check_level(self.holdout, "holdout", "0.3"))
        set_(self, "permutations", A.check_int(self.permutations, "permutations", 0))
        set_(self, "stability", A.check_int(self.stability, "stability", 0))
        set_(self, "seed", A.check_int(self.seed, "seed", 0))
        set_(self, "level", check_level(self.level, "level"))

    @property
    def wants_evidence(self) -> bool:
        """Whether the search is asked for held-out numbers, a permutation p-value or stability."""
        return self.holdout is not None or self.permutations > 0 or self.stability > 0

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The option names, in declaration order."""
        return tuple(f.name for f in fields(cls))

    @classmethod
    def resolve(cls, options: SearchOptions | Mapping[str, Any] | None = None, /, **overrides: Any) -> SearchOptions:
        """``options`` (an instance, a mapping or None for the defaults) with ``overrides`` applied; unknown names are
        a ``TypeError`` suggesting the closest option."""
        if options is None:
            base: dict[str, Any] = {}
        elif isinstance(options, SearchOptions):
            base = {f: getattr(options, f) for f in cls.names()}
        elif isinstance(options, Mapping):
            base = dict(options)
        else:
            raise TypeError(f"Expected `options` to be a SearchOptions, a dict of options or None, got {options!r}.")
        base.update(overrides)
        check_option_names(base)
        return cls(**base)

    def replace(self, **changes: Any) -> SearchOptions:
        """A copy with ``changes`` applied (validated like the constructor's arguments)."""
        check_option_names(changes)
        return replace(self, **changes)

    def support_count(self, n_samples: int, subgroup_size: int) -> int:
        """The count of samples meant by :attr:`min_support` on ``n_samples`` rows with a subgroup of that size."""
        given = self.given_support_count(n_samples)
        return auto_min_support(n_samples, subgroup_size) if given is None else given

    def given_support_count(self, n_samples: int) -> int | None:
        """The count meant by a given :attr:`min_support` on ``n_samples`` rows (a ``ValueError`` above them), ``None``
        for the default, which depends on the subgroup.

        Example:
            >>> SearchOptions(min_support=0.1).given_support_count(1000), SearchOptions().given_support_count(1000)
            (100, None)
        """
        return None if self.min_support is None else A.resolve_min_support(self.min_support, n_samples)

    def to_dict(self) -> dict[str, Any]:
        """The options as a JSON-safe dict (tuples as lists), read back by :meth:`from_dict`."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchOptions:
        """The options of a dict written by :meth:`to_dict`, validated; a missing field takes its default, an unknown
        name is a ``TypeError``.

        Example:
            >>> SearchOptions.from_dict({"max_length": 3}).min_gain
            0.001
            >>> SearchOptions.from_dict(SearchOptions(min_gain=0).to_dict()) == SearchOptions(min_gain=0)
            True
        """
        if not isinstance(data, Mapping):
            raise TypeError(f"Expected a dict of SearchOptions fields, but got {type(data).__name__}.")
        return cls.resolve(dict(data))


def check_option_names(names: Mapping[str, Any] | Sequence[str], what: str = "keyword argument") -> None:
    """Raise ``TypeError`` for names that are not :class:`SearchOptions` fields, with the closest option."""
    known = SearchOptions.names()
    for name in names:
        if name not in known:
            hint = A.did_you_mean(name, known) or f"; expected one of {list(known)}"
            raise TypeError(f"Unexpected {what} {name!r}{hint}.")
