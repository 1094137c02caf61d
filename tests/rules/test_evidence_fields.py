"""The evidence fields of a serialized rule set are checked as the core ones are: a p-value and a stability are shares
in [0, 1], an optimum a finite fitness, the held-out interval an ordered pair in [0, 1] at a level in (0, 1); a bad one
is a FieldError naming it, before anything prints it. A rule set with all of them, as the search returns it, reads
back equal."""

from __future__ import annotations

import json

import pytest
import torch

import torch_amore as ta
from torch_amore.rules import HeldOut, RuleSet, load_rule_sets
from torch_amore.rules.serialization import FieldError

BASE = {"rules": [{"feature": 0, "name": "x", "low": 0.5}], "support": 5, "confidence": 1.0, "fitness": 0.5}
HELD = HeldOut(12, 0.5, 0.1, 2.0, (0.21, 0.79), 0.03, 0.01, 0.25, 0.9)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("p_value", "0.05", "expected a number"),
        ("p_value", 5.0, "[0.0, 1.0]"),
        ("p_value", -0.1, "[0.0, 1.0]"),
        ("stability", "high", "expected a number"),
        ("stability", 3.0, "[0.0, 1.0]"),
        ("optimum", "x", "expected a number"),
        ("optimum", 1.5, "1.0"),
    ],
)
def test_a_bad_evidence_field_is_a_field_error_naming_it(field, value, words):
    with pytest.raises(FieldError) as info:
        str(RuleSet.from_dict({**BASE, field: value}))
    assert info.value.path == field and f"`{field}`" in str(info.value) and words in str(info.value)
    with pytest.raises(FieldError) as info:  # inside a list, and through JSON text, the path names the entry too
        load_rule_sets(json.loads(json.dumps([BASE, {**BASE, field: value}])))
    assert info.value.path == f"rule_sets[1].{field}"


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("confidence_interval", [0.9, 0.1], "low <= high"),
        ("confidence_interval", [0.1, 0.5, 0.9], "two numbers"),
        ("confidence_interval", [0.1], "two numbers"),
        ("level", 0, "(0, 1)"),
        ("level", 0.0, "(0, 1)"),
        ("level", 1.0, "(0, 1)"),
    ],
)
def test_a_bad_held_out_field_is_a_field_error_naming_it(field, value, words):
    with pytest.raises(FieldError) as info:
        HeldOut.from_dict({**HELD.to_dict(), field: value})
    assert info.value.path == field and words in str(info.value), str(info.value)
    with pytest.raises(FieldError) as info:  # in a rule set: held_out.<field>
        RuleSet.from_dict({**BASE, "held_out": {**HELD.to_dict(), field: value}})
    assert info.value.path == f"held_out.{field}"


@pytest.mark.filterwarnings("ignore:None of the:UserWarning")
def test_evidence_written_by_the_library_still_loads():
    # a regression guard (it passes before the checks too): what the library writes, and the bounds, still load
    g = torch.Generator().manual_seed(0)
    X = torch.rand(300, 3, generator=g, dtype=torch.float64)
    target = (X[:, 0] > 0.6) & (torch.rand(300, generator=g, dtype=torch.float64) < 0.8)
    found = ta.extract_rules(X, target, max_length=1, min_support=20, holdout=0.3, permutations=9, stability=3)
    assert found and all(rs.held_out is not None and rs.p_value is not None for rs in found)
    assert all(rs.stability is not None for rs in found)
    back = load_rule_sets(json.loads(json.dumps([rs.to_dict() for rs in found])), n_features=3)
    fields = ("rules", "support", "confidence", "fitness", "optimum", "held_out", "p_value", "stability")
    assert [[getattr(rs, f) for f in fields] for rs in back] == [[getattr(rs, f) for f in fields] for rs in found]
    assert [str(rs) for rs in back] == [str(rs) for rs in found]
    ends = RuleSet.from_dict({**BASE, "p_value": 1, "stability": 0.0, "optimum": -3.0, "held_out": None})
    assert (ends.p_value, ends.stability, ends.optimum, ends.held_out) == (1.0, 0.0, -3.0, None)
    none = RuleSet.from_dict({**BASE, "p_value": None, "stability": None, "optimum": None})
    assert (none.p_value, none.stability, none.optimum) == (None, None, None)
    held = {**HELD.to_dict(), "confidence_interval": [0.4, 0.4]}
    held.pop("level")  # written before the level was: 0.95
    assert HeldOut.from_dict(held).level == 0.95
