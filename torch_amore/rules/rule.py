"""One condition on one feature, :class:`Rule`: an interval or a category, its mask, its text and its JSON form."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from torch_amore._utils.typing import FEATURE_TYPES, ArrayLike
from torch_amore.rules import serialization as S
from torch_amore.rules.cuts import admitted_integers, format_bound


def _n_columns(X: Any) -> int:
    shape = getattr(X, "shape", None)
    if shape is None or len(shape) != 2:
        if not isinstance(X, torch.Tensor | np.ndarray) and not hasattr(X, "iloc"):
            raise TypeError(f"Expected `X` to be a torch.Tensor, numpy array or DataFrame, got {type(X).__name__}.")
        raise ValueError(f"Expected `X` to have shape (N, F), but got shape {tuple(shape)}.")
    return int(shape[1])


def frame_position(X: Any, feature: int, name: str | None) -> int:
    """The position of a rule's column in a DataFrame ``X``: the column named ``name`` wherever it stands, or
    ``feature`` when the name is the default ``feature_<i>`` of unnamed data; any other name missing is a
    ``ValueError`` (the rule reads that column, not whichever stands at its position)."""
    names = [str(c) for c in X.columns]
    if name is None or (feature < len(names) and names[feature] == name):
        return feature
    if name in names:
        return names.index(name)
    if name == f"feature_{feature}" or feature >= len(names):  # beyond the columns: said by position
        return feature
    raise ValueError(
        f"Expected `X` to have a column named {name!r}, which the rule reads, but its columns are "
        f"{names[:10]}{' ...' if len(names) > 10 else ''}; rename the column, or pass `X.to_numpy()` to read column "
        f"{feature} by position."
    )


def _column(X: ArrayLike, feature: int, name: str | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One column of X (a DataFrame's by ``name``, see :func:`frame_position`) and its missing-value mask
    (``None``: none missing), for exact comparisons: floating columns as float64 (so that float32 and float64 data
    compare alike), integer and bool columns as int64 (no rounding through float64)."""
    if isinstance(X, torch.Tensor) and X.device.type == "meta":
        raise ValueError(
            "Expected `X` on a device that holds data, but it is on 'meta' (shapes only); create it on 'cpu' or 'cuda'."
        )
    if hasattr(X, "iloc") and hasattr(X, "columns"):
        feature = frame_position(X, feature, name)
    n_cols = _n_columns(X)
    if not 0 <= feature < n_cols:
        raise ValueError(f"The rule uses feature {feature}, but `X` has only {n_cols} columns.")
    if hasattr(X, "iloc"):
        col = X.iloc[:, feature]
        if col.dtype.kind in "iub" or str(col.dtype) in ("Int8", "Int16", "Int32", "Int64", "boolean"):
            missing = col.isna().to_numpy()
            col = col.fillna(0).to_numpy()
            col, _ = _column(col[:, None], 0)
            return col, torch.from_numpy(np.array(missing, dtype=bool)) if missing.any() else None
        X, feature = col.to_numpy(dtype=np.float64, na_value=np.nan)[:, None], 0
    if isinstance(X, np.ndarray):
        col = X[:, feature]
        if col.dtype.kind == "u" and col.size and int(col.max()) > np.iinfo(np.int64).max:
            raise ValueError(
                f"Expected `X` column {feature} to fit in int64 for an exact comparison, but its largest value is "
                f"{int(col.max())}."
            )
        if col.dtype.kind in "iub":
            return torch.from_numpy(col.astype(np.int64)), None
        col = torch.from_numpy(np.array(col, dtype=np.float64))  # a copy: X may be read-only
        return col, torch.isnan(col)
    col = X[:, feature]
    if col.dtype == torch.bool or not (col.is_floating_point() or col.is_complex()):
        return col.to(torch.int64), None
    col = col.to(torch.float32 if col.device.type == "mps" else torch.float64)
    return col, torch.isnan(col)


def _at_least(col: torch.Tensor, bound: float) -> torch.Tensor:
    """``col >= bound`` exactly, for a float64 or int64 column."""
    if col.is_floating_point():
        return col >= bound
    limit = math.ceil(bound)  # on integers, x >= bound <=> x >= ceil(bound)
    info = torch.iinfo(col.dtype)
    if limit > info.max:
        return torch.zeros_like(col, dtype=torch.bool)
    return col >= limit if limit > info.min else torch.ones_like(col, dtype=torch.bool)


def _identity(scale: float, offset: float) -> bool:
    return scale == 1.0 and offset == 0.0


@dataclass(frozen=True)
class Rule:
    """One condition on one feature.

    Args:
        feature: column index of the feature in ``X`` (an integer >= 0).
        name: feature name used when printing.
        low: inclusive lower bound (``-inf``: unbounded).
        high: exclusive upper bound (``+inf``: unbounded).
        value: category value for a categorical rule (``x == value``, with ``kind="cat"``); ``None`` for an interval.
        kind: ``"float"``, ``"int"`` (the rule prints the integers it admits; in stored units a fractional bound is
            rounded up, ``x >= 40.2`` -> ``x >= 41``) or ``"cat"``.
        scale, offset: print bounds in original units, ``raw = x * scale + offset`` (finite, ``scale != 0``).

    A bad argument raises a ``ValueError`` naming it.

    Example:
        >>> import torch
        >>> rule = Rule(feature=0, name="HbA1c_level", low=(6.6 - 3.5) / 5.5, scale=5.5, offset=3.5)
        >>> print(rule)
        HbA1c_level >= 6.6
        >>> rule.mask(torch.tensor([[0.2], [0.9], [float("nan")]])).tolist()
        [False, True, False]
        >>> print(Rule(1, "x", low=0.1 + 0.2, high=0.5))  # every digit it takes to name the stored bound
        0.30000000000000004 <= x < 0.5
        >>> print(Rule(0, "count", low=3, high=5, kind="int"))
        3 <= count <= 4
        >>> Rule(0, "x", low=0.25, high=0.5).contains(0.5)  # the upper bound is exclusive
        False
        >>> print(Rule(1, "smoker", value=1.0, kind="cat"))
        smoker == 1
        >>> Rule.from_dict(rule.to_dict()) == rule
        True
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
        put = lambda name, v: object.__setattr__(self, name, v)  # noqa: E731 - the dataclass is frozen
        put("feature", S.expect_int(self.feature, "feature", low=0))
        S.expect_str(self.name, "name")
        S.expect_choice(self.kind, "kind", FEATURE_TYPES)
        put("scale", S.expect_float(self.scale, "scale"))
        put("offset", S.expect_float(self.offset, "offset"))
        if self.scale == 0:
            raise S.FieldError("scale", "expected a finite non-zero number, but got 0.")
        low = S.expect_float(self.low, "low", high=math.inf, finite=False)
        high = S.expect_float(self.high, "high", finite=False)
        if low == math.inf:
            raise S.FieldError("low", "expected a finite number or -inf (open below), but got inf.")
        if high == -math.inf:
            raise S.FieldError("high", "expected a finite number or inf (open above), but got -inf.")
        if self.value is not None:
            put("value", S.expect_float(self.value, "value"))
            if self.kind != "cat":
                raise S.FieldError("kind", f"expected 'cat' for a rule with a category `value`, but got {self.kind!r}.")
            if (low, high) != (-math.inf, math.inf):
                raise S.FieldError("low", f"expected no bounds on a categorical rule, but got low={low}, high={high}.")
        elif self.kind == "cat":
            raise S.FieldError("value", "expected the category value of a rule with kind 'cat', but got None.")
        if self.kind == "int" and _identity(self.scale, self.offset):  # x >= 40.2 <=> x >= 41 on integers
            low = float(math.ceil(low)) if math.isfinite(low) else low
            high = float(math.ceil(high)) if math.isfinite(high) else high
        if self.value is None and not low < high:
            raise S.FieldError("high", f"expected low < high for an interval rule, but got low={low}, high={high}.")
        put("low", low)
        put("high", high)

    @property
    def is_categorical(self) -> bool:
        """Whether the rule selects one category (``value`` is not ``None``)."""
        return self.value is not None

    def mask(self, X: ArrayLike) -> torch.Tensor:
        """Boolean (N,) tensor: which rows of ``X`` satisfy the rule (on X's device). Integer columns are compared
        exactly; a ``feature`` beyond X's columns is a ``ValueError``; a DataFrame's column is the one named
        :attr:`name` wherever it stands (a ``ValueError`` when none is, unless the name is the default
        ``feature_<i>`` of unnamed data: then column ``feature``)."""
        col, missing = _column(X, self.feature, self.name)
        if self.value is not None:
            if col.is_floating_point():
                out = col == self.value
            else:  # an integer column equals an integral value exactly, or nothing
                info = torch.iinfo(col.dtype)
                whole = self.value.is_integer() and info.min <= self.value <= info.max
                out = col == int(self.value) if whole else torch.zeros_like(col, dtype=torch.bool)
        else:
            out = torch.ones_like(col, dtype=torch.bool)
            if self.low > -math.inf:
                out &= _at_least(col, self.low)
            if self.high < math.inf:
                out &= ~_at_least(col, self.high)
        return out & ~missing.to(out.device) if missing is not None else out

    def __str__(self) -> str:
        return self.format()

    def format(self, precision: int | None = None) -> str:
        """The rule as text in original units, e.g. ``1.15 <= NumAliphaticRings < 10.4``, each bound the shortest
        decimal that maps back to it exactly (``precision`` changes nothing). An ``"int"`` rule prints the integers
        it admits; a negative ``scale`` flips the interval in raw units (``4 < x <= 7``).
        """
        del precision  # no number of decimals keeps every bound distinct: see the docstring
        name = self.name
        if self.value is not None:
            return f"{name} == {format_bound(self.value, self.scale, self.offset)}"
        if self.kind == "int":
            text = self._format_int()
            if text is not None:
                return text
        lo = format_bound(self.low, self.scale, self.offset) if self.low > -math.inf else None
        hi = format_bound(self.high, self.scale, self.offset) if self.high < math.inf else None
        if self.scale < 0:  # raw = x * scale + offset decreases: x >= low <=> raw <= low's text
            if lo is not None and hi is not None:
                return f"{hi} < {name} <= {lo}"
            return f"{name} <= {lo}" if hi is None else f"{name} > {hi}" if lo is None else ""
        if lo is not None and hi is not None:
            return f"{lo} <= {name} < {hi}"
        if lo is None and hi is None:
            return f"{name} is not missing"
        return f"{name} >= {lo}" if hi is None else f"{name} < {hi}"

    def _format_int(self) -> str | None:
        """The admitted integers as text, or ``None`` when the interval admits none or reaches beyond 2**53 (it
        prints as floats then)."""
        first, last = admitted_integers(self.low, self.high, self.scale, self.offset)
        name = self.name
        if first == math.inf or last == -math.inf or first > last:
            return None
        if any(math.isfinite(v) and abs(v) >= 2**53 for v in (first, last)):
            return None  # beyond 2**53 float64 values are integers anyway, and an integer text could round
        if math.isfinite(first) and math.isfinite(last):
            return f"{name} == {int(first)}" if first == last else f"{int(first)} <= {name} <= {int(last)}"
        if math.isfinite(first):
            return f"{name} >= {int(first)}"
        return f"{name} <= {int(last)}" if math.isfinite(last) else None

    def contains(self, x: float) -> bool:
        """Whether a single value satisfies the rule (an integer is compared exactly)."""
        if isinstance(x, numbers.Integral) and not isinstance(x, bool):  # exact: x >= low <=> x >= ceil(low)
            x = int(x)
            if self.value is not None:
                return self.value.is_integer() and x == int(self.value)
            return (self.low == -math.inf or x >= math.ceil(self.low)) and (
                self.high == math.inf or x < math.ceil(self.high)
            )
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
    def from_dict(cls, data: Mapping[str, Any], *, n_features: int | None = None) -> Rule:
        """The rule written by :meth:`to_dict`, every field checked (``feature`` an integer >= 0 and < ``n_features``
        when given; bounds finite or ``None``, ``low < high``): a ``ValueError`` names the bad one.

        Example:
            >>> Rule.from_dict({"feature": 0, "name": "x", "low": 0.5})
            Rule(feature=0, name='x', low=0.5, high=inf, value=None, kind='float', scale=1.0, offset=0.0)
            >>> Rule.from_dict({"feature": -1, "name": "x", "low": 0.5})
            Traceback (most recent call last):
            ...
            torch_amore.data.fields.FieldError: Invalid `feature`: expected an integer >= 0, but got -1.
        """
        data = S.expect_mapping(data)
        S.expect_keys(data, ("feature", "name"), ("kind", "low", "high", "value", "scale", "offset"))
        feature = S.expect_int(data["feature"], "feature", low=0, high=n_features)
        kind = S.expect_choice(data.get("kind", "float"), "kind", FEATURE_TYPES)
        low = -math.inf if data.get("low") is None else S.expect_float(data["low"], "low")
        high = math.inf if data.get("high") is None else S.expect_float(data["high"], "high")
        scale = S.expect_float(data.get("scale", 1.0), "scale")
        offset = S.expect_float(data.get("offset", 0.0), "offset")
        if kind == "int" and _identity(scale, offset):
            for key, bound in (("low", low), ("high", high)):
                if math.isfinite(bound) and not bound.is_integer():
                    raise S.FieldError(key, f"expected an integer bound for a rule of kind 'int', but got {bound}.")
        value = None if data.get("value") is None else S.expect_float(data["value"], "value")
        return cls(feature, S.expect_str(data["name"], "name"), low, high, value, kind, scale, offset)
