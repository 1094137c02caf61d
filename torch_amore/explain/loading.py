"""Reading and writing the JSON fields of a :class:`~torch_amore.explain.explanation.RegionalExplanation`."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
import torch

from torch_amore.concepts.basis import ConceptBasis
from torch_amore.rules import serialization as S
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.verification import VERIFICATION_VERSION, Verification

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


def _load_fields(data: Any, modules: Any = None, classes: Any = None) -> dict[str, Any]:
    """The fields of :meth:`RegionalExplanation.from_dict` but ``subgroup`` and ``explainer`` (its ``format`` checked
    already), each checked: the cheap ones first, the concept basis (which builds modules) last."""
    if "rule_sets" not in data:
        raise S.FieldError("rule_sets", "this required key is missing.")
    threshold, sample = data.get("threshold"), data.get("sample")
    fields = {
        "rule_sets": S.load_items(data["rule_sets"], _load_rule_set, "rule_sets"),
        "threshold": None if threshold is None else S.expect_float(threshold, "threshold", finite=False),
        "features": S.load_items(data.get("features", []), lambda f: S.expect_int(f, "", low=0), "features"),
        "feature_names": S.load_items(data.get("feature_names", []), _load_name, "feature_names"),
        "params": _load_params(data.get("params", {})),
        "sample": None
        if sample is None
        else torch.tensor(S.load_items(sample, _load_value, "sample"), dtype=torch.float64),
        "message": S.expect_str(data.get("message", ""), "message"),
        "selection": _load_selection(data.get("selection")),
        "verification": _verification(data.get("verification")),
    }
    fields["concepts"] = _load_basis(data.get("concepts"), modules, classes)
    _check_concepts_fit(fields["concepts"], fields["params"], fields["feature_names"])
    return fields


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


class SavedSelection(dict):
    """A feature selection read back from JSON: its dict as :meth:`FeatureSelection.to_dict` wrote it (the importance
    matrix is not saved), which saves again as it is (``to_dict``)."""

    def to_dict(self) -> dict[str, Any]:
        """The selection's dict, as read (what :meth:`RegionalExplanation.to_dict` saves)."""
        return dict(self)


def _load_selection(value: Any) -> SavedSelection | None:
    """The feature selection's dict (kept as read), or ``None``."""
    return None if value is None else SavedSelection(S.expect_mapping(value, "selection"))


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


def _verification(data: Any) -> Verification | None:
    """The verification :meth:`Verification.to_dict` wrote, every field checked (``None`` when there is none)."""
    if data is None:
        return None
    data = S.expect_mapping(data, "verification")
    if data.get("version") != VERIFICATION_VERSION:
        got = data.get("version")
        raise S.FieldError(
            "verification.version", f"expected {VERIFICATION_VERSION} (a dict written by verify), but got {got!r:.80}."
        )
    required = ("version", "rows", "method", "n_controls", "level", "seed", "n_samples")
    S.expect_keys(data, required, ("target_name",), "verification")
    S.expect_str(data["method"], "verification.method")
    S.expect_int(data["n_controls"], "verification.n_controls", low=0)
    S.expect_float(data["level"], "verification.level", low=0.0, high=1.0)
    S.expect_int(data["seed"], "verification.seed", low=0)
    S.expect_int(data["n_samples"], "verification.n_samples", low=0)
    S.expect_str(data.get("target_name", ""), "verification.target_name")
    S.load_items(data["rows"], _check_verified_row, "verification.rows")
    return Verification.from_dict(dict(data))


_SHARES = {"sufficiency": False, "necessity": False, "control_sufficiency": True, "control_necessity": True}


def _check_verified_row(row: Any) -> None:
    """One row of a saved verification (:meth:`RuleVerification.to_dict`), checked field by field."""
    row = S.expect_mapping(row)
    S.expect_keys(row, ("position", "rule_set", "units", *_SHARES), ("not_moved", "verdict"))
    S.expect_int(row["position"], "position", low=1)
    S.expect_str(row["rule_set"], "rule_set")
    S.load_items(row["units"], lambda u: S.expect_int(u, "", low=0), "units")
    for name, control in _SHARES.items():
        share = S.expect_mapping(row[name], name)
        keys = ("shares", "n", "value", "low", "high") if control else ("hits", "n", "low", "high")
        S.expect_keys(share, keys, (), name)
        n = S.expect_int(share["n"], f"{name}.n", low=0)
        if not control:
            S.expect_int(share["hits"], f"{name}.hits", low=0, high=n + 1)
        for key in ("value", "low", "high") if control else ("low", "high"):
            _share_value(share[key], f"{name}.{key}")
        if control:
            S.load_items(share["shares"], lambda v: _share_value(v, ""), f"{name}.shares")
    moved = row.get("not_moved")
    if moved is not None:
        if not isinstance(moved, list) or len(moved) != 2:
            raise S.FieldError("not_moved", f"expected [sufficiency, necessity] counts, but got {moved!r:.80}.")
        S.load_items(moved, lambda v: S.expect_int(v, "", low=0), "not_moved")


def _share_value(value: Any, path: str) -> None:
    """A share or an interval bound: ``None`` (NaN) or a number in [0, 1]."""
    if value is not None:
        S.expect_float(value, path, low=0.0, high=1.0)


def _basis_dict(basis: Any) -> dict[str, Any] | None:
    """``basis.to_dict()`` made JSON-safe, ``None`` for a basis that cannot be saved."""
    try:
        return _json_safe(basis.to_dict())
    except (TypeError, ValueError, NotImplementedError, AttributeError):
        return None


def _load_basis(data: Any, modules: Any = None, classes: Any = None) -> Any:
    """The saved concept basis (``None`` when there is none): a malformed field is a FieldError under ``concepts``;
    ``modules`` and ``classes`` as in :meth:`~torch_amore.concepts.ConceptBasis.from_dict` (their own mistakes are
    TypeErrors)."""
    if data is None:
        return None
    data = S.expect_mapping(data, "concepts")
    try:
        with S.at_path("concepts"):
            return ConceptBasis.from_dict(data, modules=modules, classes=classes)
    except S.FieldError:
        raise
    except (ValueError, KeyError) as err:
        raise S.FieldError("concepts", f"expected a saved concept basis: {err}") from None


def _count(value: Any, path: str) -> None:
    S.expect_int(value, path, low=0)


def _fraction(value: Any, path: str) -> None:
    S.expect_float(value, path, low=0.0, high=1.0)


def _flag(value: Any, path: str) -> None:
    if not isinstance(value, bool):
        raise S.FieldError(path, f"expected true or false, but got {value!r:.80}.")


def _layer(value: Any, path: str) -> None:
    if not isinstance(value, str):
        raise S.FieldError(path, f"expected a layer's name or null, but got {value!r:.80}.")


def _shape(value: Any, path: str) -> None:
    S.load_items(value, lambda s: S.expect_int(s, "", low=0), path)


def _target(value: Any, path: str) -> None:
    """A class index, a ``[low, high]`` range (``null``: open) or the subgroup's description."""
    if isinstance(value, list):
        if len(value) != 2:
            raise S.FieldError(path, f"expected [low, high] or a class index, but got {value!r:.80}.")
        S.load_items(value, lambda v: v if v is None else S.expect_float(v, ""), path)
    elif isinstance(value, bool) or not isinstance(value, int | str):
        raise S.FieldError(path, f"expected a class index, [low, high] or text, but got {value!r:.80}.")


# the params an explanation's code reads (its table, header, base rate, evaluate, verify), each with its check; the
# others (every search option, the CLI's facts) are kept as read: they are shown, never used
_PARAMS = {
    **dict.fromkeys(
        ("n_samples", "subgroup_size", "held_out_rows", "held_out_subgroup", "permutations", "stability"), _count
    ),
    **dict.fromkeys(("target_name", "source", "outputs"), S.expect_str),
    **dict.fromkeys(("layer_input", "local", "stream"), _flag),
    **dict.fromkeys(("holdout", "level"), _fraction),
    "layer": _layer,
    "input_shape": _shape,
    "target": _target,
}
# counts that cannot exceed another: (smaller, larger)
_AT_MOST = (
    ("subgroup_size", "n_samples"),
    ("held_out_rows", "n_samples"),
    ("held_out_subgroup", "held_out_rows"),
    ("held_out_subgroup", "subgroup_size"),
)


def _load_params(value: Any) -> dict[str, Any]:
    """An explanation's ``params``, the entries its code reads checked (types, ranges, counts that fit together)."""
    params = dict(S.expect_mapping(value, "params"))
    for key, check in _PARAMS.items():
        if params.get(key) is not None:
            check(params[key], f"params.{key}")
    for small, large in _AT_MOST:
        if params.get(small) is not None and params.get(large) is not None and params[small] > params[large]:
            raise S.FieldError(
                f"params.{small}", f"expected at most `{large}` ({params[large]}), but got {params[small]}."
            )
    if params.get("concepts") is not None:
        _check_concept_facts(params["concepts"])
    return params


def _check_concept_facts(facts: Any) -> None:
    """``params["concepts"]``: the basis's kind, K, D and reconstruction error (what the header shows)."""
    facts = S.expect_mapping(facts, "params.concepts")
    S.expect_str(facts.get("kind"), "params.concepts.kind")
    S.expect_int(facts.get("n_concepts"), "params.concepts.n_concepts", low=1)
    if facts.get("n_units") is not None:
        S.expect_int(facts["n_units"], "params.concepts.n_units", low=1)
    error = facts.get("reconstruction_error")
    for key, number in error.items() if isinstance(error, dict) else [("", error)]:
        if number is not None:
            S.expect_float(number, S.join("params.concepts.reconstruction_error", str(key)), finite=False)


def _check_concepts_fit(basis: Any, params: dict[str, Any], feature_names: list[str]) -> None:
    """The loaded basis against what the explanation says of it: K (``params["concepts"]`` and one feature name per
    concept) and D."""
    if basis is None or not basis.fitted:
        return
    facts = params.get("concepts") if isinstance(params.get("concepts"), dict) else {}
    k, d = basis.n_concepts, basis.n_units
    for what, saved, have in (("n_concepts", facts.get("n_concepts"), k), ("n_units", facts.get("n_units"), d)):
        if saved is not None and have is not None and saved != have:
            raise S.FieldError(
                "concepts", f"the basis has {what}={have}, but the explanation's params.concepts say {saved}."
            )
    if feature_names and len(feature_names) != k:
        raise S.FieldError(
            "concepts", f"the basis has {k} concepts, but the explanation names {len(feature_names)} features."
        )
