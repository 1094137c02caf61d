"""Reading and writing the JSON fields of a :class:`~torch_amore.explain.explanation.RegionalExplanation`."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from torch_amore.concepts.basis import ConceptBasis
from torch_amore.rules import serialization as S
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.verification import Verification

#: The columns :meth:`RegionalExplanation.stats` derives from a rule set's counts (its DataFrame's, too).
DERIVED_COLUMNS = (
    "lift",
    "recall",
    "base_rate",
    "positive_fitness",
    "confidence_low",
    "confidence_high",
    "at_base_rate",
)
#: Keys :meth:`RegionalExplanation.to_dict` adds to each rule set's dict (derived, dropped when read back).
_DERIVED = ("position", *DERIVED_COLUMNS)


def _load_rule_set(data: Any) -> RuleSet:
    """One entry of a serialized ``rule_sets`` list, its derived columns dropped."""
    data = S.expect_mapping(data)
    return RuleSet.from_dict({k: v for k, v in data.items() if k not in _DERIVED})


def _load_name(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise S.FieldError("", f"expected a feature name (a string), but got {type(value).__name__} {value!r:.80}.")
    return str(value)


def _load_value(value: Any) -> float:
    """A sample's feature value: a number, NaN (missing) and infinities included."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise S.FieldError("", f"expected a number, but got {type(value).__name__} {value!r:.80}.")
    return float(value)


def _load_selection(value: Any) -> dict[str, Any] | None:
    """The feature selection's dict (kept as read), or ``None``."""
    return None if value is None else dict(S.expect_mapping(value, "selection"))


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


def _verification(data: Any) -> Any:
    return None if data is None else Verification.from_dict(data)


def _basis_dict(basis: Any) -> dict[str, Any] | None:
    """``basis.to_dict()`` made JSON-safe, ``None`` for a basis that cannot be saved."""
    try:
        return _json_safe(basis.to_dict())
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return None


def _load_basis(data: Any, modules: Any = None) -> Any:
    if data is None:
        return None
    data = S.expect_mapping(data, "concepts")
    try:
        return ConceptBasis.from_dict(data, modules=modules)
    except S.FieldError:
        raise
    except (TypeError, ValueError, KeyError, ImportError) as err:
        raise S.FieldError("concepts", f"expected a saved concept basis: {err}") from err
