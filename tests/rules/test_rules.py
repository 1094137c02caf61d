"""Rule and RuleSet: masks, printing, serialization."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest
import torch

from torch_amore import Rule, RuleSet


def test_interval_convention_and_nan():
    X = torch.tensor([[0.0], [1.0], [1.5], [2.0], [float("nan")]])
    rule = Rule(0, "x", low=1.0, high=2.0)
    assert rule.mask(X).tolist() == [False, True, True, False, False]
    assert str(rule) == "1 <= x < 2"
    assert str(Rule(0, "x", low=1.0)) == "x >= 1"
    assert str(Rule(0, "x", high=2.0)) == "x < 2"


def test_categorical_rule():
    X = np.array([[0.0], [1.0], [np.nan]])
    rule = Rule(0, "gender_Female", value=1.0, kind="cat")
    assert rule.mask(X).tolist() == [False, True, False]
    assert str(rule) == "gender_Female == 1"


def test_original_units():
    rule = Rule(4, "HbA1c_level", low=(6.6 - 3.5) / 5.5, scale=5.5, offset=3.5)
    assert str(rule) == "HbA1c_level >= 6.6"
    # a bound that is no short number in raw units prints every digit it takes to name it (never 6.643)
    text = str(Rule(4, "HbA1c_level", low=4 / 7, scale=5.5, offset=3.5)).split(" >= ")[1]
    exact = Fraction(4 / 7) * Fraction(5.5) + Fraction(3.5)  # no float64 in raw units maps back to 4/7 exactly
    assert len(text) > 6 and abs(Fraction(text) - exact) < Fraction(5.5) * Fraction(math.ulp(4 / 7)) / 2
    assert str(Rule(0, "bmi", low=0.2, high=0.5, scale=100.0, offset=10.0)) == "30 <= bmi < 60"


def test_integer_rule_prints_admitted_integers():
    assert str(Rule(0, "age", low=40.2, kind="int")) == "age >= 41"
    assert str(Rule(0, "age", high=40.0, kind="int")) == "age <= 39"
    assert str(Rule(0, "age", low=3.0, high=4.0, kind="int")) == "age == 3"
    X = torch.arange(0, 100, dtype=torch.float64)[:, None]
    r = Rule(0, "age", low=40.2, kind="int")
    assert int(r.mask(X).sum()) == 59  # 41..99


def test_rule_validation():
    with pytest.raises(ValueError, match="low"):
        Rule(0, "x", low=2.0, high=1.0)
    with pytest.raises(ValueError, match="kind"):
        Rule(0, "x", kind="bool")


def test_ruleset_mask_metrics_and_text():
    X = pd.DataFrame({"a": [0.1, 0.6, 0.7, 0.9, 0.95], "b": [1, 0, 1, 1, 0]})
    target = np.array([False, False, True, True, True])
    rs = RuleSet.from_rules([Rule(0, "a", low=0.5), Rule(1, "b", value=1.0, kind="cat")], X, target)
    assert rs.mask(X).tolist() == [False, False, True, True, False]
    # support 2, both in target: confidence 1, fitness (2 - 0) / 3
    assert (rs.support, rs.confidence) == (2, 1.0)
    assert rs.fitness == pytest.approx(2 / 3)
    assert str(rs) == "IF a >= 0.5 AND b == 1 THEN target  (support=2, confidence=1.000, fitness=0.667)"
    m = rs.evaluate(X.iloc[:3], target[:3])
    assert (m.support, m.confidence, m.fitness) == (1, 1.0, 1.0)


def test_json_round_trip_is_exact():
    rs = RuleSet(
        rules=(Rule(3, "z_44", low=0.1 + 0.2, high=math.inf), Rule(1, "c", value=2.0, kind="cat", scale=2.0)),
        support=10,
        confidence=0.9,
        fitness=1 / 3,
        ratios=(1.5, 1.2),
        target_name="digit 7",
    )
    back = RuleSet.from_dict(json.loads(json.dumps(rs.to_dict())))
    assert back == rs and back.ratios == rs.ratios and back.target_name == rs.target_name
    assert back.rules[0].low == 0.1 + 0.2
    assert hash(back.rules[0]) == hash(rs.rules[0])


def test_with_units():
    rs = RuleSet((Rule(1, "x", low=0.5),), 1, 1.0, 1.0)
    assert str(rs.with_units(scale=[1.0, 10.0], offset=[0.0, 5.0]).rules[0]) == "x >= 10"


def test_dataframe_columns_of_every_dtype_compare_exactly():
    df = pd.DataFrame(
        {
            "n": pd.array([1, None, 2**60 + 1], dtype="Int64"),  # nullable: NA satisfies no rule
            "flag": [True, False, True],
            "x": [0.5, np.nan, 2.0],
        }
    )
    assert Rule(0, "n", low=2.0).mask(df).tolist() == [False, False, True]
    assert Rule(0, "n", low=float(2**60)).mask(df).tolist() == [False, False, 2**60 + 1 >= 2**60]
    assert Rule(1, "flag", value=1.0, kind="cat").mask(df).tolist() == [True, False, True]
    assert Rule(2, "x", low=1.0).mask(df).tolist() == [False, False, True]
    assert str(Rule(0, "x", low=-0.5, high=0.25, scale=-4.0, offset=1.0)) == "0 < x <= 3"  # raw = 1 - 4x


def test_a_dataframe_column_is_read_by_the_rules_name_wherever_it_stands():
    rng = np.random.default_rng(0)
    df = pd.DataFrame(rng.random((200, 3)), columns=["a", "b", "c"])
    target = (df["a"] > 0.6).to_numpy()
    rs = RuleSet.from_rules([Rule(0, "a", low=0.6)], df, target)
    by_hand = df["a"].to_numpy() >= 0.6
    for X in (df, df[["c", "b", "a"]]):  # the column named a, not the first column
        assert rs.mask(X).tolist() == by_hand.tolist()
        m = rs.evaluate(X, target)
        assert (m.support, m.confidence) == (by_hand.sum(), target[by_hand].mean())
    with pytest.raises(ValueError, match=r"a column named 'a'.*\['x', 'b', 'c'\].*X.to_numpy\(\)"):
        rs.mask(df.rename(columns={"a": "x"}))
    # unnamed data's default names read by position, as before
    unnamed = RuleSet.from_rules([Rule(2, "feature_2", low=0.6)], df.to_numpy(), target)
    assert unnamed.mask(df).tolist() == (df["c"].to_numpy() >= 0.6).tolist()


@pytest.mark.parametrize(
    "target, error, words",
    [
        (np.array([0.9, 0.1] * 2), TypeError, "boolean (or 0/1)"),
        (np.array([1.0, np.nan] * 2), ValueError, "holds NaN"),
        (["yes", "no"] * 2, TypeError, "boolean (or 0/1)"),
    ],
)
def test_evaluate_takes_the_targets_extract_rules_takes(target, error, words):
    X = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    rs = RuleSet.from_rules([Rule(0, "x", low=1.5)], X, torch.tensor([False, False, True, True]))
    with pytest.raises(error) as info:
        rs.evaluate(X, target)
    assert words in str(info.value)
    m = rs.evaluate(X, np.array([0, 1, 1, 1]))  # 0/1 numbers, as extract_rules takes them
    assert (m.support, m.confidence) == (2, 1.0)
    with pytest.raises(TypeError, match="`X`"):
        rs.evaluate([[0.0], [1.0], [2.0], [3.0]], [0, 1, 1, 1])
