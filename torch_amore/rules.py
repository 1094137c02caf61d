"""Rules and rule sets: the objects users hold.

Interval convention
-------------------
A numeric :class:`Rule` selects ``low <= x < high`` (lower bound inclusive, upper bound exclusive); ``low = -inf`` or
``high = +inf`` leaves that side open, and such a rule prints one-sided (``age >= 40``). A categorical rule selects
``x == value``. NaN (a missing value) satisfies no rule.

Bounds are stored in the units of the data the rules were extracted from. When those features were scaled, give each
rule an affine ``scale``/``offset`` (``raw = x * scale + offset``) and it prints in the original units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from torch_amore._typing import FEATURE_TYPES, ArrayLike, MaskLike
from torch_amore.metrics import RuleMetrics, rule_metrics


def _fmt(value: float, precision: int = 3) -> str:
    """Compact number: ``precision`` decimals, trailing zeros dropped, small numbers in significant digits."""
    if value != 0 and abs(value) < 10 ** (-precision + 1):
        return f"{value:.{precision}g}"
    text = f"{value:.{precision}f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _column(X: ArrayLike, feature: int) -> torch.Tensor:
    """One column of X as a float64 tensor (float64 so that float32 and float64 data compare alike)."""
    if hasattr(X, "iloc"):
        X = X.to_numpy(dtype=np.float64, na_value=np.nan)
    if isinstance(X, np.ndarray):
        return torch.from_numpy(np.asarray(X[:, feature], dtype=np.float64))
    if not isinstance(X, torch.Tensor):
        raise TypeError(f"Expected `X` to be a torch.Tensor, numpy array or DataFrame, got {type(X).__name__}.")
    if X.ndim != 2:
        raise ValueError(f"Expected `X` to have shape (N, F), but got shape {tuple(X.shape)}.")
    if feature >= X.shape[1]:
        raise ValueError(f"The rule uses feature {feature}, but `X` has only {X.shape[1]} columns.")
    col = X[:, feature]
    return col.to(torch.float32 if col.device.type == "mps" else torch.float64)


@dataclass(frozen=True)
class Rule:
    """One condition on one feature.

    Args:
        feature: column index of the feature in ``X``.
        name: feature name used when printing.
        low: inclusive lower bound (``-inf``: unbounded).
        high: exclusive upper bound (``+inf``: unbounded).
        value: category value for a categorical rule (``x == value``); ``None`` for an interval.
        kind: ``"float"``, ``"int"`` (printed bounds are the integers the interval admits) or ``"cat"``.
        scale, offset: print bounds in original units, ``raw = x * scale + offset``.

    Example:
        >>> import torch
        >>> rule = Rule(feature=0, name="HbA1c_level", low=0.5714, scale=5.5, offset=3.5)
        >>> print(rule)
        HbA1c_level >= 6.643
        >>> rule.mask(torch.tensor([[0.2], [0.9], [float("nan")]])).tolist()
        [False, True, False]
    """

    feature: int
    name: str
    low: float = -math.inf
    high: float = math.inf
    value: float | None = None
    kind: str = "float"
    scale: float = 1.0
    offset: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in FEATURE_TYPES:
            raise ValueError(f"Expected `kind` in {list(FEATURE_TYPES)}, but got {self.kind!r}.")
        if self.value is None and not self.low < self.high:
            raise ValueError(f"Expected `low` < `high` for an interval rule, but got low={self.low}, high={self.high}.")
        if self.scale == 0 or not math.isfinite(self.scale):
            raise ValueError(f"Expected a finite non-zero `scale`, but got {self.scale}.")

    @property
    def is_categorical(self) -> bool:
        return self.value is not None

    def mask(self, X: ArrayLike) -> torch.Tensor:
        """Boolean (N,) tensor: which rows of ``X`` satisfy the rule (on X's device)."""
        col = _column(X, self.feature)
        if self.value is not None:
            return col == self.value
        out = ~torch.isnan(col)
        if self.low > -math.inf:
            out &= col >= self.low
        if self.high < math.inf:
            out &= col < self.high
        return out

    def _raw(self, v: float) -> float:
        return v * self.scale + self.offset

    def __str__(self) -> str:
        return self.format()

    def format(self, precision: int = 3) -> str:
        """The rule as text in original units, e.g. ``1.149 <= NumAliphaticRings < 10.405``."""
        name = self.name
        if self.value is not None:
            return f"{name} == {_fmt(self._raw(self.value), precision)}"
        lo = self._raw(self.low) if self.low > -math.inf else None
        hi = self._raw(self.high) if self.high < math.inf else None
        if self.scale < 0:  # a negative scale flips the interval in raw units
            lo, hi = hi, lo
        if self.kind == "int":
            lo_i = math.ceil(lo - 1e-9) if lo is not None else None
            hi_i = math.ceil(hi - 1e-9) - 1 if hi is not None else None
            if lo_i is not None and hi_i is not None:
                return f"{name} == {lo_i}" if lo_i == hi_i else f"{lo_i} <= {name} <= {hi_i}"
            return f"{name} >= {lo_i}" if hi_i is None else f"{name} <= {hi_i}"
        if lo is not None and hi is not None:
            return f"{_fmt(lo, precision)} <= {name} < {_fmt(hi, precision)}"
        return f"{name} >= {_fmt(lo, precision)}" if hi is None else f"{name} < {_fmt(hi, precision)}"

    def contains(self, x: float) -> bool:
        """Whether a single value satisfies the rule."""
        if x != x:  # NaN
            return False
        if self.value is not None:
            return float(x) == self.value
        return self.low <= float(x) < self.high

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (infinite bounds become ``None``); :meth:`from_dict` inverts it exactly."""
        return {
            "feature": int(self.feature),
            "name": self.name,
            "kind": self.kind,
            "low": None if self.low == -math.inf else float(self.low),
            "high": None if self.high == math.inf else float(self.high),
            "value": None if self.value is None else float(self.value),
            "scale": float(self.scale),
            "offset": float(self.offset),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rule:
        return cls(
            feature=int(data["feature"]),
            name=str(data["name"]),
            low=-math.inf if data.get("low") is None else float(data["low"]),
            high=math.inf if data.get("high") is None else float(data["high"]),
            value=None if data.get("value") is None else float(data["value"]),
            kind=str(data.get("kind", "float")),
            scale=float(data.get("scale", 1.0)),
            offset=float(data.get("offset", 0.0)),
        )


@dataclass(frozen=True)
class RuleSet:
    """A conjunction of rules with its support, confidence and fitness on the data it was extracted from.

    Args:
        rules: the conditions, in the order the search added them.
        support: number of samples satisfying all rules.
        confidence: share of those samples in the target subgroup.
        fitness: (target - non-target samples satisfying the rules) / target samples.
        ratios: probability ratio of each rule at the step it was added (eq. ratio_approx).
        target_name: name of the subgroup in the printed form.
        optimum: the highest fitness any rule set of the search's grid reaches at the same ``max_length`` and
            ``min_support`` (:mod:`torch_amore.exact`), when it was computed; ``None`` otherwise. Cuts off the grid
            (the beam strategy's fine grids and polish) may exceed it.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
        >>> target = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, target)
        >>> print(rs)
        IF x >= 0.65 THEN target  (support=2, confidence=1.000, fitness=1.000)
    """

    rules: tuple[Rule, ...]
    support: int
    confidence: float
    fitness: float
    ratios: tuple[float, ...] = field(default=(), compare=False)
    target_name: str = field(default="target", compare=False)
    optimum: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "ratios", tuple(float(r) for r in self.ratios))

    @classmethod
    def from_rules(
        cls, rules: Sequence[Rule], X: ArrayLike, target: MaskLike, *, target_name: str = "target"
    ) -> RuleSet:
        """Build a rule set and measure it on ``(X, target)``."""
        rules = tuple(rules)
        metrics = cls(rules, 0, 0.0, 0.0).evaluate(X, target)
        return cls(rules, metrics.support, metrics.confidence, metrics.fitness, target_name=target_name)

    def __len__(self) -> int:
        return len(self.rules)

    @property
    def features(self) -> tuple[int, ...]:
        return tuple(r.feature for r in self.rules)

    def mask(self, X: ArrayLike) -> torch.Tensor:
        """Boolean (N,) tensor of the rows satisfying every rule."""
        if not self.rules:
            n = X.shape[0]
            device = X.device if isinstance(X, torch.Tensor) else "cpu"
            return torch.ones(n, dtype=torch.bool, device=device)
        out = self.rules[0].mask(X)
        for rule in self.rules[1:]:
            out &= rule.mask(X)
        return out

    def evaluate(self, X: ArrayLike, target: MaskLike) -> RuleMetrics:
        """Support, confidence and fitness of this rule set on any data (e.g. a test split)."""
        mask = self.mask(X)
        if hasattr(target, "to_numpy"):
            target = target.to_numpy()
        target = torch.as_tensor(np.asarray(target) if not isinstance(target, torch.Tensor) else target)
        if target.dtype != torch.bool:
            target = target != 0
        return rule_metrics(mask, target.to(mask.device).reshape(-1))

    def with_units(self, scale: Sequence[float] | None = None, offset: Sequence[float] | None = None) -> RuleSet:
        """A copy whose rules print in original units; ``scale``/``offset`` are indexed by feature."""
        rules = tuple(
            replace(
                r,
                scale=float(scale[r.feature]) if scale is not None else r.scale,
                offset=float(offset[r.feature]) if offset is not None else r.offset,
            )
            for r in self.rules
        )
        return replace(self, rules=rules)

    def format(self, precision: int = 3) -> str:
        cond = " AND ".join(r.format(precision) for r in self.rules) if self.rules else "TRUE"
        return (
            f"IF {cond} THEN {self.target_name}  (support={self.support}, confidence={self.confidence:.3f}, "
            f"fitness={self.fitness:.3f})"
        )

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` gives back an equal rule set."""
        return {
            "rules": [r.to_dict() for r in self.rules],
            "support": int(self.support),
            "confidence": float(self.confidence),
            "fitness": float(self.fitness),
            "ratios": [float(r) for r in self.ratios],
            "target_name": self.target_name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RuleSet:
        return cls(
            rules=tuple(Rule.from_dict(r) for r in data["rules"]),
            support=int(data["support"]),
            confidence=float(data["confidence"]),
            fitness=float(data["fitness"]),
            ratios=tuple(float(r) for r in data.get("ratios", ())),
            target_name=str(data.get("target_name", "target")),
        )
