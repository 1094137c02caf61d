"""Checks of the arguments (not the data) at the public boundary: grid counts, supports, integers and choices,
feature names and indices, units, feature types (the data's own conversions and checks are in
:mod:`torch_amore.data.validation`).
"""

from __future__ import annotations

import difflib
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypedDict

import numpy as np
import torch

from torch_amore._utils.typing import BIN_STRATEGIES, FEATURE_TYPES
from torch_amore.data.column_stats import column_stats

#: Largest number of grids per feature: bin codes are int16 and the code after the last grid marks a missing value.
MAX_GRIDS = 32767

#: A product ``fraction * n`` this close above a whole number (relative, at least absolute) is that number: float
#: rounding, not a wish for one more sample (:func:`fraction_count`).
COUNT_TOLERANCE = 1e-9


def check_n_grids(value: Any) -> int:
    """``n_grids`` as an int in [2, :data:`MAX_GRIDS`]."""
    n_grids = check_int(value, "n_grids", 2)
    if n_grids > MAX_GRIDS:
        raise ValueError(
            f"Expected `n_grids` to be an integer in [2, {MAX_GRIDS}] (bin codes are int16), but got {n_grids}."
        )
    return n_grids


def check_observed(lo: Sequence[float], columns: Sequence[int], n_features: int, name: str = "X") -> None:
    """At least one searched column holds a non-missing value; ``lo``: their minima (NaN where all missing)."""
    if not all(math.isnan(v) for v in lo):
        return
    if len(columns) == n_features:
        raise ValueError(f"Expected `{name}` to hold some non-missing values, but every value is NaN (missing).")
    raise ValueError(
        f"Expected the searched `features` {list(columns)[:10]} to hold some non-missing values, but all their values "
        f"in `{name}` are NaN (missing)."
    )


def check_range(
    lo: Sequence[float], hi: Sequence[float], overflow: Sequence[bool], columns: Sequence[int], name: str = "X"
) -> None:
    """Each searched column's max - min is finite in float64 (the grids are arithmetic on it); ``overflow``: whether
    ``hi - lo`` overflows in the binning dtype."""
    over = [k for k, v in enumerate(overflow) if v]
    if over:
        k = over[0]
        raise ValueError(
            f"Expected the range (max - min) of each column of `{name}` to be finite in float64, but column "
            f"{columns[k]} spans [{lo[k]:g}, {hi[k]:g}]; divide it by a constant s and pass "
            "`feature_scale` (s for that column) to print bounds in the original units."
        )


def check_units(
    spread: Sequence[float], columns: Sequence[int], scale: Sequence[float], offset: Sequence[float]
) -> None:
    """Original units (``raw = x * scale + offset``) in which a searched column's values stay distinguishable: an
    offset more than 2**50 times the column's spread ``|max - min|`` in those units swamps it in float64."""
    for k, c in enumerate(columns):
        width = spread[k] * abs(scale[c]) or abs(scale[c])
        if abs(offset[c]) > 2.0**50 * width:
            raise ValueError(
                f"Expected `feature_offset` of feature {c} ({offset[c]:g}) to be small enough for its values "
                f"(spread {width:g} in original units) to stay apart in float64, but it is more than 2**50 times "
                "the spread: bounds in those units could not be told apart; pass a smaller offset."
            )


def check_min_support(min_support: Any) -> int | float:
    """``min_support`` as given, checked: an int count >= 1 or a float fraction in (0, 1).

    A float is always a fraction: ``1.0`` or ``50.0`` are refused (write ``1`` or ``50`` for a count). A numpy float
    narrower than float64 (``np.float32(0.1)``) is taken as the shortest decimal that rounds to it in its own
    precision (``0.1``, not ``0.10000000149011612``), the number that was written.

    Example:
        >>> check_min_support(np.float32(0.1)), check_min_support(7)
        (0.1, 7)
    """
    if isinstance(min_support, bool) or not isinstance(min_support, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `min_support` to be an int count or a float in (0, 1), but got {min_support!r}.")
    if isinstance(min_support, (float, np.floating)):
        if not 0.0 < float(min_support) < 1.0:
            whole = float(min_support).is_integer()
            hint = f" (for a count of samples pass the int {int(min_support)})" if whole else ""
            raise ValueError(f"Expected a float `min_support` to be a fraction in (0, 1), but got {min_support}{hint}.")
        if isinstance(min_support, np.floating) and min_support.dtype.itemsize < 8:  # float16, float32
            return float(np.format_float_scientific(min_support, unique=True))
        return float(min_support)
    if min_support < 1:
        raise ValueError(f"Expected an int `min_support` to be a count >= 1, but got {min_support}.")
    return int(min_support)


def fraction_count(fraction: float, n: int) -> int:
    """The count of samples meant by a ``fraction`` of ``n`` samples: ``ceil(fraction * n)``, where a product within
    :data:`COUNT_TOLERANCE` (relative, at least that much absolute) above a whole number counts as that number, so
    that a fraction that is a whole count of samples up to float rounding gives that count (``0.07 * 100`` is
    ``7.000000000000001`` in float64, ``(5 / 6) * 6`` is ``5.000000000000001``).

    Float64 rounding puts the product a few units in its 16th significant digit off; the tolerance, far above that,
    only moves a count for a fraction within a relative 1e-9 of ``k / n`` (e.g. 0.0700000000001 on 100 rows: 7).
    A numpy float32 fraction is read as its shortest decimal first (:func:`check_min_support`).

    Example:
        >>> fraction_count(0.07, 100), fraction_count(0.14, 100), fraction_count(5 / 6, 6), fraction_count(0.071, 100)
        (7, 14, 5, 8)
    """
    product = float(fraction) * n
    return math.ceil(product - COUNT_TOLERANCE * max(1.0, product))


def resolve_min_support(min_support: Any, n: int) -> int:
    """The count of samples meant by ``min_support`` (see :func:`check_min_support`) on ``n`` samples: a count as
    it is, a fraction as :func:`fraction_count` of ``n``.

    Example:
        >>> resolve_min_support(0.07, 100), resolve_min_support(np.float32(0.1), 1000), resolve_min_support(7, 100)
        (7, 100, 7)
    """
    value = check_min_support(min_support)
    if isinstance(value, float):
        value = fraction_count(value, n)
    if value > n:
        raise ValueError(f"Expected `min_support` to lie in [1, {n}] (the number of samples), but got {min_support}.")
    return value


def check_flag(value: Any, name: str) -> bool:
    """``value`` as a bool: ``True``/``False`` (numpy's too); anything else is a ``TypeError`` naming ``name`` (a
    string such as ``"no"`` would otherwise read as true).

    Example:
        >>> check_flag(False, "html")
        False
        >>> check_flag("no", "html")
        Traceback (most recent call last):
        ...
        TypeError: Expected `html` to be True or False, but got 'no'.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"Expected `{name}` to be True or False, but got {value!r}.")
    return bool(value)


def check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Expected `{name}` to be an integer >= {low}, but got {value!r}.")
    if value < low:
        raise ValueError(f"Expected `{name}` to be an integer >= {low}, but got {value}.")
    return int(value)


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"Expected `{name}` to be one of {list(choices)}, but got {value!r}.")
    return value


def check_bin_strategy(value: Any) -> str:
    return check_choice(value, "bin_strategy", BIN_STRATEGIES)


class FeatureArgs(TypedDict, total=False):
    """How the columns of ``X`` are described, each optional (``None`` by default) and as in
    :func:`torch_amore.extract_rules`: the keyword arguments that the experiments' entry points pass on as a group."""

    features: Sequence[int] | None
    feature_names: Sequence[str] | None
    feature_types: Sequence[str] | None
    feature_scale: Sequence[float] | None
    feature_offset: Sequence[float] | None


class ColumnArgs(TypedDict, total=False):
    """The searched columns and the names in printed rules, as in :func:`torch_amore.extract_rules`: keyword arguments
    taken as a group (``target_name`` ``"target"`` by default, the others ``None``)."""

    features: Sequence[int] | None
    feature_names: Sequence[str] | None
    target_name: str


def did_you_mean(name: Any, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the name in ``known`` closest to ``name`` (difflib's ratio of at least 0.6), else
    ``''``.

    Example:
        >>> did_you_mean("feature_name", ["feature_names", "layer", "layer_input"])
        " (did you mean 'feature_names'?)"
        >>> did_you_mean("xyz", ["layer"])
        ''
    """
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unexpected_keywords(given: Mapping[str, Any], known: Iterable[str], caller: str) -> None:
    """A ``TypeError`` for the first key of ``given`` not in ``known``, worded as Python words an unexpected keyword
    argument, with :func:`did_you_mean`'s hint.

    Example:
        >>> unexpected_keywords({"feature_name": ["a"]}, ["feature_names", "layer_input"], "f")
        Traceback (most recent call last):
        ...
        TypeError: f() got an unexpected keyword argument 'feature_name' (did you mean 'feature_names'?)
    """
    known = list(known)
    for key in given:
        if key not in known:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}{did_you_mean(key, known)}")


def keyword_args(given: Mapping[str, Any], group: type, caller: str) -> dict[str, Any]:
    """The keyword arguments ``given`` to ``caller`` for the ``TypedDict`` ``group``, every key present (``None``
    where not given); any other key is a ``TypeError``.

    Example:
        >>> keyword_args({"features": [0, 2]}, FeatureArgs, "f")["features"]
        [0, 2]
        >>> keyword_args({}, FeatureArgs, "f")["feature_offset"] is None
        True
        >>> keyword_args({"feature": [0]}, FeatureArgs, "f")
        Traceback (most recent call last):
        ...
        TypeError: f() got an unexpected keyword argument 'feature'
    """
    for key in given:
        if key not in group.__annotations__:
            raise TypeError(f"{caller}() got an unexpected keyword argument {key!r}")
    return {key: given.get(key) for key in group.__annotations__}


def feature_args(given: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """:func:`keyword_args` for :class:`FeatureArgs`.

    Example:
        >>> feature_args({"feature_names": ["a"]}, "f")["feature_names"]
        ['a']
    """
    return keyword_args(given, FeatureArgs, caller)


def column_args(given: Mapping[str, Any], caller: str) -> dict[str, Any]:
    """:func:`keyword_args` for :class:`ColumnArgs`, ``target_name`` ``"target"`` where not given.

    Example:
        >>> column_args({"features": [1]}, "prepare")
        {'features': [1], 'feature_names': None, 'target_name': 'target'}
    """
    args = keyword_args(given, ColumnArgs, caller)
    return {**args, "target_name": given.get("target_name", "target")}


def name_list(feature_names: Any) -> list[str] | None:
    """``feature_names`` as a list of strings (``None`` stays ``None``); a ``TypeError`` naming it for a single string
    or for what is not a one-dimensional sequence.

    Example:
        >>> name_list(("age", 3))
        ['age', '3']
    """
    if feature_names is None:
        return None
    if isinstance(feature_names, str):
        raise TypeError(
            f"Expected `feature_names` to be a sequence of strings, but got a single string {feature_names!r}."
        )
    if not isinstance(feature_names, Iterable) or getattr(feature_names, "ndim", 1) != 1:
        raise TypeError(f"Expected `feature_names` to be a sequence of strings, but got {feature_names!r}.")
    names = [str(n) for n in feature_names]
    check_distinct(names, "`feature_names`")
    return names


def check_distinct(names: list[str], arg: str) -> None:
    """A ``ValueError`` naming ``arg`` when ``names`` repeat a name (rules on different columns would print alike).

    Example:
        >>> check_distinct(["a", "b", "a"], "`feature_names`")
        Traceback (most recent call last):
        ...
        ValueError: Expected `feature_names` to be distinct (rules on different columns would print the same), ...
    """
    dup = sorted(name for name, count in Counter(names).items() if count > 1)
    if dup:
        raise ValueError(
            f"Expected {arg} to be distinct (rules on different columns would print the same), but got "
            f"duplicates {dup[:10]}."
        )


def resolve_names(feature_names: Sequence[str] | None, frame_names: list[str] | None, n_features: int) -> list[str]:
    """Feature names: ``feature_names``, else a DataFrame's columns, else ``feature_{i}``; all distinct."""
    if feature_names is None:
        names = frame_names if frame_names is not None else [f"feature_{i}" for i in range(n_features)]
        arg = "feature_names" if frame_names is None else "the columns of `X`"
    else:
        names = name_list(feature_names)
        if len(names) != n_features:
            raise ValueError(
                f"Expected `feature_names` to have {n_features} entries (columns of X), but got {len(names)}."
            )
        arg = "`feature_names`"
    check_distinct(names, arg)
    return names


def whole_indices(features: Any) -> list[int]:
    """``features`` (a sequence of feature indices) as ints, before the number of features is known: no booleans (a
    mask), no fractions; a ``TypeError``/``ValueError`` naming ``features`` otherwise.

    Example:
        >>> whole_indices([2, 0.0])
        [2, 0]
    """
    if isinstance(features, (torch.Tensor, np.ndarray)):
        features = features.tolist()  # Python numbers: a boolean tensor's entries are bools, a float's floats
    if isinstance(features, str) or not hasattr(features, "__iter__"):
        raise TypeError(f"Expected `features` to be a sequence of feature indices, but got {features!r}.")
    features = list(features)
    if any(isinstance(f, (bool, np.bool_)) for f in features):
        raise TypeError(
            "Expected `features` to hold feature indices, but got booleans (a mask?): pass the indices of its True "
            "entries, e.g. `numpy.flatnonzero(mask)`."
        )
    names = [f for f in features if isinstance(f, (str, bytes))]
    if names:
        raise TypeError(
            f"Expected `features` to hold feature indices, but got names {names[:5]}: pass their positions, e.g. "
            "`[list(X.columns).index(name) for name in names]`."
        )
    try:
        idx = [int(f) for f in features]
    except (TypeError, ValueError, OverflowError) as err:  # None, NaN, +-inf, ...
        raise TypeError(f"Expected `features` to be a sequence of feature indices, but got {features!r}.") from err
    fractions = [f for f, i in zip(features, idx) if f != i]
    if fractions:
        raise ValueError(f"Expected `features` to hold whole feature indices, but got {fractions[:5]}.")
    return idx


def resolve_features(features: Any, n_features: int) -> list[int]:
    """Feature indices to search (``None``: all); accepts a ``FeatureSelection``-like object with ``.features``."""
    if features is None:
        return list(range(n_features))
    if hasattr(features, "features") and not isinstance(features, (torch.Tensor, np.ndarray)):
        features = features.features
    idx = whole_indices(features)
    bad = [f for f in idx if f < 0 or f >= n_features]
    if bad:
        raise ValueError(f"Expected `features` indices in [0, {n_features - 1}], but got {bad[:5]}.")
    if not idx:
        raise ValueError("Expected `features` to name at least one feature, but it is empty.")
    return sorted(set(idx))


def resolve_affine(values: Any, name: str, n_features: int, default: float) -> list[float]:
    if values is None:
        return [default] * n_features
    vals = [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    if len(vals) != n_features:
        raise ValueError(f"Expected `{name}` to have {n_features} entries (columns of X), but got {len(vals)}.")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"Expected `{name}` to hold finite numbers, but got {vals}.")
    return vals


def infer_feature_types(X: torch.Tensor) -> list[str]:
    """``cat`` for columns with exactly the values {0, 1}, ``int`` for other integer-valued columns, else ``float``.

    Example:
        >>> import torch
        >>> infer_feature_types(torch.tensor([[0.0, 2.0, 0.5], [1.0, 3.0, 1.0]]))
        ['cat', 'int', 'float']
    """
    return column_stats(X).fetch().kinds()


def resolve_feature_types(feature_types: Sequence[str] | None, X: torch.Tensor) -> list[str]:
    n_features = X.shape[1]
    if feature_types is None:
        return infer_feature_types(X)
    if isinstance(feature_types, str):
        raise TypeError("Expected `feature_types` to be a sequence such as ['float', 'int', 'cat'], got a string.")
    types = [str(t) for t in feature_types]
    if len(types) != n_features:
        raise ValueError(f"Expected `feature_types` to have {n_features} entries (columns of X), but got {len(types)}.")
    bad = sorted({t for t in types if t not in FEATURE_TYPES})
    if bad:
        raise ValueError(f"Expected `feature_types` entries in {list(FEATURE_TYPES)}, but got {bad}.")
    return types
