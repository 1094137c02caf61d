"""Serialized rules: versioned output, exact round trips, and one ValueError naming the field for every bad input."""

from __future__ import annotations

import copy
import json
import math
import sys

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings

import torch_amore as ta
from torch_amore import Rule, RuleSet
from torch_amore.rules.rules import load_rule_sets
from torch_amore.rules.serialization import FORMAT_VERSION, FieldError, at_path, parse_json


def good() -> dict:
    rs = RuleSet(
        rules=(Rule(3, "z_44", low=0.1 + 0.2, high=0.9), Rule(1, "c", value=2.0, kind="cat", scale=2.0),
               Rule(0, "age", low=41.0, kind="int")),
        support=10, confidence=0.9, fitness=1 / 3, ratios=(1.5, 1.2, 1.1), target_name="digit 7",
    )  # fmt: skip
    return rs.to_dict()


def test_to_dict_carries_format_and_library_version():
    data = good()
    assert data["format_version"] == FORMAT_VERSION
    assert data["torch_amore_version"] == ta.__version__
    json.dumps(data, allow_nan=False)  # plain JSON


def test_old_files_without_version_still_load():
    old = {  # as written before versions existed (and a hand-written minimal rule)
        "rules": [{"feature": 0, "name": "x", "kind": "float", "low": 0.5, "high": None, "value": None, "scale": 1.0,
                   "offset": 0.0}, {"feature": 2, "name": "y", "high": 3.0}],
        "support": 4, "confidence": 0.75, "fitness": 0.5, "ratios": [2.0, 1.5], "target_name": "t",
    }  # fmt: skip
    rs = RuleSet.from_dict(old)
    assert rs.rules == (Rule(0, "x", low=0.5), Rule(2, "y", high=3.0))
    assert (rs.support, rs.confidence, rs.fitness, rs.ratios, rs.target_name) == (4, 0.75, 0.5, (2.0, 1.5), "t")


@st.composite
def rule_sets(draw) -> RuleSet:
    rules = []
    for _ in range(draw(st.integers(0, 4))):
        feature = draw(st.integers(0, 10**6))
        name = draw(st.text(max_size=12))
        scale = draw(st.sampled_from([1.0, 5.5, -2.0, 1e-3, 1e300]))
        offset = draw(st.sampled_from([0.0, 3.5, -1e300]))
        kind = draw(st.sampled_from(["float", "int", "cat"]))
        finite = st.floats(allow_nan=False, allow_infinity=False)
        if kind == "cat":
            rules.append(Rule(feature, name, value=draw(finite), kind="cat", scale=scale, offset=offset))
            continue
        if kind == "int":
            finite = st.integers(-(2**60), 2**60).map(float)
        low, high = sorted([draw(finite), draw(finite)])
        if low == high:
            high = math.inf
        if draw(st.booleans()):
            low = -math.inf
        rules.append(Rule(feature, name, low=low, high=high, kind=kind, scale=scale, offset=offset))
    return RuleSet(
        tuple(rules), support=draw(st.integers(0, 10**9)), confidence=draw(st.floats(0.0, 1.0)),
        fitness=draw(st.floats(-1e6, 1.0)), ratios=tuple(draw(st.lists(st.floats(0.0, 1e9), max_size=4))),
        target_name=draw(st.text(max_size=8)),
    )  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(rule_sets())
def test_valid_rule_sets_round_trip_exactly(rs):
    back = RuleSet.from_json(rs.to_json())
    assert back == rs and back.ratios == rs.ratios and back.target_name == rs.target_name
    assert back.to_dict() == rs.to_dict()
    for a, b in zip(back.rules, rs.rules):
        assert (a.low, a.high, a.value, a.scale, a.offset) == (b.low, b.high, b.value, b.scale, b.offset)
        assert str(a) == str(b)


def test_round_trip_of_extracted_rules():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(400, 3, generator=g, dtype=torch.float64)
    target = X[:, 0] + X[:, 2] > 1.1
    found = ta.extract_rules(X, target, max_length=2, min_support=20)
    back = load_rule_sets(json.loads(json.dumps([rs.to_dict() for rs in found])), n_features=3)
    assert back == found
    assert all(torch.equal(a.mask(X), b.mask(X)) for a, b in zip(back, found))


def dotted(path: list) -> str:
    out = ""
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else (f".{key}" if out else key)
    return out


def edit(path: list, value) -> dict:
    """``good()`` with the field at ``path`` set to ``value`` (``...``: deleted)."""
    data = copy.deepcopy(good())
    holder = data
    for key in path[:-1]:
        holder = holder[key]
    if value is ...:
        del holder[path[-1]]
    else:
        holder[path[-1]] = value
    return data


BAD = [
    # (path, bad value, words expected in the message)
    (["rules", 0, "feature"], -1, ">= 0"),
    (["rules", 0, "feature"], 1.9, "integer"),
    (["rules", 0, "feature"], 1.0, "integer"),
    (["rules", 0, "feature"], "3", "integer"),
    (["rules", 0, "feature"], True, "integer"),
    (["rules", 0, "feature"], ..., "missing"),
    (["rules", 0, "name"], ..., "missing"),
    (["rules", 0, "name"], 7, "string"),
    (["rules", 0, "low"], float("nan"), "finite"),
    (["rules", 0, "low"], float("inf"), "finite"),
    (["rules", 0, "high"], float("-inf"), "finite"),
    (["rules", 0, "low"], "0.3", "number"),
    (["rules", 0, "low"], 0.95, "low < high", "rules[0].high"),
    (["rules", 0, "high"], 0.3, "low < high"),
    (["rules", 0, "kind"], "bool", "one of"),
    (["rules", 0, "scale"], 0.0, "non-zero"),
    (["rules", 0, "scale"], float("nan"), "finite"),
    (["rules", 0, "offset"], float("inf"), "finite"),
    (["rules", 0, "colour"], "red", "unknown key"),
    (["rules", 1, "value"], float("nan"), "finite"),
    (["rules", 1, "value"], None, "category value"),
    (["rules", 1, "value"], [1], "number"),
    (["rules", 1, "kind"], "float", "'cat'"),
    (["rules", 2, "low"], 0.7, "integer bound"),
    (["rules", 2, "high"], 50.5, "integer bound"),
    (["rules", 0], [1, 2], "JSON object"),
    (["rules"], {"feature": 0}, "list"),
    (["rules"], ..., "missing"),
    (["support"], -5, ">= 0"),
    (["support"], 2.5, "integer"),
    (["support"], ..., "missing"),
    (["confidence"], 2.0, "[0.0, 1.0]"),
    (["confidence"], -0.1, "[0.0, 1.0]"),
    (["confidence"], float("nan"), "finite"),
    (["confidence"], ..., "missing"),
    (["fitness"], float("inf"), "finite"),
    (["fitness"], 1.5, "1.0"),
    (["fitness"], None, "number"),
    (["ratios"], [1.0, -2.0], "[0.0, inf]", "ratios[1]"),
    (["ratios"], [1.0, float("nan")], "finite", "ratios[1]"),
    (["ratios"], 3.0, "list"),
    (["target_name"], 3, "string"),
    (["format_version"], FORMAT_VERSION + 1, "upgrade"),
    (["format_version"], "1", "integer"),
    (["torch_amore_version"], 1, "string"),
    (["bogus"], 1, "unknown key"),
]


BAD = [case if len(case) == 4 else (*case, dotted(case[0])) for case in BAD]


@pytest.mark.parametrize(("path", "value", "words", "expected"), BAD, ids=[f"{e}={v!r}" for _, v, _, e in BAD])
def test_malformed_field_is_one_value_error_naming_its_path(path, value, words, expected):
    bad = edit(path, value)
    with pytest.raises(ValueError) as info:
        RuleSet.from_dict(bad)
    assert isinstance(info.value, FieldError)
    assert info.value.path == expected, str(info.value)
    assert f"`{expected}`" in str(info.value) and words in str(info.value), str(info.value)
    # inside a list of rule sets, the path names the entry too
    with pytest.raises(ValueError) as info:
        load_rule_sets([good(), good(), bad])
    prefixed = "rule_sets[2]" + ("." if not expected.startswith("[") else "") + expected
    assert info.value.path == prefixed and f"`{prefixed}`" in str(info.value)
    # and through JSON text
    with pytest.raises(ValueError, match="Invalid"):
        RuleSet.from_json(json.dumps(bad))


def test_not_a_dict_and_not_json():
    with pytest.raises(ValueError, match="JSON object"):
        RuleSet.from_dict([1, 2])
    with pytest.raises(ValueError):
        RuleSet.from_json("{not json")
    with pytest.raises(ValueError, match=r"`rule_sets`: expected a list"):
        load_rule_sets({"rules": []})


def test_feature_index_in_range_when_x_is_known():
    data = edit(["rules", 0, "feature"], 3)
    assert RuleSet.from_dict(data, n_features=4).rules[0].feature == 3
    with pytest.raises(ValueError, match=r"`rules\[0\]\.feature`: expected an integer < 3"):
        RuleSet.from_dict(data, n_features=3)
    rs = RuleSet.from_dict(data)
    with pytest.raises(ValueError, match="feature 3.*only 2 columns"):
        rs.mask(torch.zeros(5, 2))


def test_at_path_prefixes_nested_errors():
    with pytest.raises(FieldError) as info:
        with at_path("explanation"):
            RuleSet.from_dict(edit(["rules", 1, "value"], float("nan")))
    assert info.value.path == "explanation.rules[1].value"


def test_constructor_checks_the_same_fields():
    with pytest.raises(ValueError, match="`feature`"):
        Rule(-1, "x", low=0.5)
    with pytest.raises(ValueError, match="`feature`"):
        Rule(1.9, "x", low=0.5)
    with pytest.raises(ValueError, match="`value`"):
        Rule(0, "x", value=float("nan"), kind="cat")
    with pytest.raises(ValueError, match="`high`"):
        Rule(0, "x", low=0.5, high=0.5)
    with pytest.raises(ValueError, match="`kind`"):
        Rule(0, "x", value=1.0)
    assert Rule(0, "age", low=40.2, kind="int").low == 41.0  # on integers x >= 40.2 is x >= 41


def test_decision_list_names_the_rule_set_entry():
    data = {"rule_sets": [good(), edit(["rules", 0, "feature"], -1)], "n_samples": 100, "n_target": 20}
    with pytest.raises(ValueError) as info:
        ta.DecisionList.from_dict(data)
    assert info.value.path == "rule_sets[1].rules[0].feature"
    data["rule_sets"] = [good()]
    assert ta.DecisionList.from_dict(data).rule_sets[0] == RuleSet.from_dict(good())
    for key, value, path in (
        ("n_samples", -1, "n_samples"),
        ("n_target", 101, "n_target"),
        ("n_samples", ..., "n_samples"),
    ):
        bad = dict(data)
        if value is ...:
            del bad[key]
        else:
            bad[key] = value
        with pytest.raises(ValueError) as info:
            ta.DecisionList.from_dict(bad)
        assert info.value.path == path


# --------------------------------------------------------------------------------------------------- explanations


def explanation_dict() -> dict:
    rs = RuleSet.from_dict(good())
    expl = ta.RegionalExplanation(
        rule_sets=[rs, rs], subgroup=None, threshold=0.5, features=[0, 1, 3], feature_names=["age", "c", "x", "z_44"],
        params={"n_samples": 40}, sample=torch.tensor([1.0, float("nan"), 2.0, 3.0], dtype=torch.float64),
        message="",
    )  # fmt: skip
    return json.loads(json.dumps(expl.to_dict()))


def test_explanation_dict_round_trips():
    data = explanation_dict()
    back = ta.RegionalExplanation.from_dict(data)
    assert back.rule_sets == [RuleSet.from_dict(good())] * 2
    assert (back.threshold, back.features, back.feature_names, back.params) == (0.5, [0, 1, 3],
                                                                               ["age", "c", "x", "z_44"],
                                                                               {"n_samples": 40})  # fmt: skip
    assert back.sample[0] == 1.0 and math.isnan(back.sample[1])


BAD_EXPLANATION = [
    (["rule_sets"], ..., "rule_sets", "missing"),
    (["format"], ..., "format", "RegionalExplanation.to_dict"),
    (["format"], "other", "format", "'other'"),
    (["format_version"], 99, "format_version", "99"),
    (["format_version"], True, "format_version", "True"),
    (["rule_sets"], {"a": 1}, "rule_sets", "expected a list"),
    (["rule_sets", 1], [1], "rule_sets[1]", "JSON object"),
    (["rule_sets", 1, "support"], -3, "rule_sets[1].support", "integer >= 0"),
    (["rule_sets", 0, "rules", 1, "feature"], "b", "rule_sets[0].rules[1].feature", "integer"),
    (["threshold"], "high", "threshold", "number"),
    (["features"], 3, "features", "list"),
    (["features", 2], -1, "features[2]", ">= 0"),
    (["feature_names", 1], None, "feature_names[1]", "feature name"),
    (["params"], [1, 2], "params", "JSON object"),
    (["sample", 0], "one", "sample[0]", "number"),
    (["message"], 7, "message", "string"),
    (["selection"], "all", "selection", "JSON object"),
]


@pytest.mark.parametrize(("keys", "value", "path", "words"), BAD_EXPLANATION,
                         ids=[f"{p}={v!r}" for _, v, p, _ in BAD_EXPLANATION])  # fmt: skip
def test_explanation_field_missing_or_malformed_is_a_field_error_naming_it(keys, value, path, words, tmp_path):
    data = explanation_dict()
    parent = data
    for key in keys[:-1]:
        parent = parent[key]
    if value is ...:
        del parent[keys[-1]]
    else:
        parent[keys[-1]] = value
    with pytest.raises(FieldError) as info:
        ta.RegionalExplanation.from_dict(data)
    assert info.value.path == path and f"`{path}`" in str(info.value) and words in str(info.value), str(info.value)
    file = tmp_path / "e.json"
    file.write_text(json.dumps(data))
    with pytest.raises(FieldError) as info:
        ta.RegionalExplanation.from_json(file)
    assert info.value.path == path


@pytest.mark.parametrize("data", [None, [], "torch_amore.RegionalExplanation", 3])
def test_explanation_from_something_not_a_dict(data):
    with pytest.raises(FieldError, match="JSON object"):
        ta.RegionalExplanation.from_dict(data)


DEEP = 100_000


@pytest.mark.parametrize(
    "text",
    ["[" * DEEP + "]" * DEEP, '{"a":' * DEEP + "1" + "}" * DEEP, '{"rule_sets": ' + "[" * DEEP + "]" * DEEP + "}"],
    ids=["lists", "objects", "inside-a-field"],
)
def test_deeply_nested_json_is_a_field_error(text, tmp_path):
    assert sys.getrecursionlimit() < DEEP  # deeper than Python's JSON reader can recurse
    with pytest.raises(FieldError, match="nested too deeply"):
        RuleSet.from_json(text)
    file = tmp_path / "deep.json"
    file.write_text(text)
    with pytest.raises(FieldError, match="nested too deeply"):
        ta.RegionalExplanation.from_json(file)


def test_explanation_file_that_is_not_json_text(tmp_path):
    file = tmp_path / "e.json"
    file.write_text('{"format": "torch_amore.RegionalExplanation", ')
    with pytest.raises(FieldError, match="does not parse"):
        ta.RegionalExplanation.from_json(file)
    file.write_bytes(b"\xff\xfe\x00\x81garbage")
    with pytest.raises(FieldError, match="UTF-8"):
        ta.RegionalExplanation.from_json(file)


@pytest.mark.parametrize("digits", [101, 5000])
def test_an_integer_of_too_many_digits_is_a_field_error(digits, tmp_path):
    """Python refuses to convert more than 4,300 digits with a ValueError naming no field; the reader refuses more than
    100 (nothing written holds more than 20) with a FieldError."""
    text = json.dumps(good()).replace('"support": 10', '"support": ' + "9" * digits)
    assert "9" * digits in text
    words = f"at most 100 digits, but the JSON holds one of {digits} digits"
    with pytest.raises(FieldError, match=words):
        RuleSet.from_json(text)
    file = tmp_path / "e.json"
    file.write_text(json.dumps(explanation_dict()).replace('"n_samples": 40', '"n_samples": -' + "1" * digits))
    with pytest.raises(FieldError, match=words):
        ta.RegionalExplanation.from_json(file)


def test_integers_of_up_to_100_digits_are_read():
    assert parse_json("[" + "9" * 100 + ", -" + "1" * 100 + "]") == [10**100 - 1, -int("1" * 100)]
    text = json.dumps(good()).replace('"support": 10', '"support": ' + "1" + "0" * 99)
    assert RuleSet.from_json(text).support == 10**99


def test_a_number_too_large_to_show_is_a_field_error_naming_it():
    """An int of 5,000 digits built in Python (not parsed): the message must not convert it to text."""
    data = explanation_dict()
    data["threshold"] = 10**5000
    with pytest.raises(FieldError) as info:
        ta.RegionalExplanation.from_dict(data)
    assert info.value.path == "threshold" and "an integer of about 5000 digits" in str(info.value)


@pytest.mark.parametrize("field", ["name", "feature", "low"])
def test_a_deeply_nested_rule_field_is_a_field_error_naming_it(field):
    """A dict nested deeper than the recursion limit (built in Python, not parsed) in a rule's field: the message
    that names the field must not recurse while showing the value."""
    deep: dict = {"x": 1}
    for _ in range(DEEP):
        deep = {"a": deep}
    data = good()
    data["rules"][0][field] = deep
    with pytest.raises(FieldError) as info:
        RuleSet.from_dict(data)
    assert info.value.path == f"rules[0].{field}"
    assert "nested too deeply to show" in str(info.value)
