"""The target-expression language: masks equal a literal numpy recomputation; everything outside the grammar is
refused before anything is evaluated."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from torch_amore.cli.expression import ExpressionError, parse_expression


@pytest.fixture(scope="module")
def df() -> pd.DataFrame:
    rng = np.random.default_rng(1)
    n = 300
    b = rng.normal(size=n).round(2)
    b[rng.random(n) < 0.1] = np.nan
    s = rng.choice(["red", "green", "blue"], size=n).astype(object)
    s[rng.random(n) < 0.1] = None
    return pd.DataFrame(
        {
            "a": rng.integers(0, 10, size=n),
            "b": b,
            "s": s,
            "f": rng.random(n) < 0.5,
            "blood glucose": rng.integers(60, 250, size=n),
            "class": rng.integers(0, 3, size=n),
        }
    )


def _np(df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The columns as plain numpy arrays (strings with None for missing)."""
    return {c: df[c].to_numpy() for c in df.columns}


def _eq_text(values: np.ndarray, literal: str) -> np.ndarray:
    return np.array([isinstance(v, str) and v == literal for v in values])


VALID = [
    ("a > 3", lambda c: c["a"] > 3),
    ("a >= 3.5", lambda c: c["a"] >= 3.5),
    ("2 < a <= 7", lambda c: (c["a"] > 2) & (c["a"] <= 7)),
    ("b < 0", lambda c: c["b"] < 0),  # NaN: False
    ("b != 0.5", lambda c: ~(c["b"] == 0.5)),  # NaN: True (!= is the negation of ==)
    ("not b >= 0", lambda c: ~(c["b"] >= 0)),
    ("s == 'red'", lambda c: _eq_text(c["s"], "red")),
    ("s != 'red'", lambda c: ~_eq_text(c["s"], "red")),
    ("s in ['red', 'blue']", lambda c: _eq_text(c["s"], "red") | _eq_text(c["s"], "blue")),
    ("s not in ['red']", lambda c: ~_eq_text(c["s"], "red")),
    ("s < 'h'", lambda c: np.array([isinstance(v, str) and v < "h" for v in c["s"]])),
    ("a in [1, -2, 3.0]", lambda c: np.isin(c["a"], [1, 3])),
    ("b not in [0.5, -1]", lambda c: ~np.isin(c["b"], [0.5, -1])),
    ("f", lambda c: c["f"]),
    ("not f and a == 2", lambda c: ~c["f"] & (c["a"] == 2)),
    ("f == True or a < 1", lambda c: c["f"] | (c["a"] < 1)),
    ("(a > 1) & ~f | (s == 'green')", lambda c: ((c["a"] > 1) & ~c["f"]) | _eq_text(c["s"], "green")),
    ("`blood glucose` >= 140 and `class` == 2", lambda c: (c["blood glucose"] >= 140) & (c["class"] == 2)),
    ("a + b > 3", lambda c: c["a"] + c["b"] > 3),
    ("a * 2 - b / 4 <= -a", lambda c: c["a"] * 2.0 - c["b"] / 4 <= -c["a"]),
    ("a / (a - 3) > 1", lambda c: np.divide(c["a"], c["a"] - 3.0) > 1),  # a == 3: inf > 1
    ("-b > 0.5", lambda c: -c["b"] > 0.5),
    ("a == 3 == `class` + 1", lambda c: (c["a"] == 3) & (c["class"] + 1 == 3)),
    ("s == 'a`b' or a == 0", lambda c: c["a"] == 0),  # a backquote inside a string stays in the string
]


@pytest.mark.parametrize(("text", "expected"), VALID, ids=[t for t, _ in VALID])
def test_valid_expression_equals_numpy(df, text, expected):
    with np.errstate(all="ignore"):
        want = np.asarray(expected(_np(df)), dtype=bool)
    got = parse_expression(text, df.columns).evaluate(df)
    assert got.dtype == bool and got.shape == (len(df),)
    np.testing.assert_array_equal(got, want)
    assert 0 < want.sum() < len(df) or text.startswith("s == 'a`b'")  # the cases are not trivial


def test_columns_in_order_of_use(df):
    expr = parse_expression("`blood glucose` > 1 and a < 3 or `blood glucose` < 0", df.columns)
    assert expr.columns == ("blood glucose", "a")


def test_large_integers_compare_exactly():
    big = 2**53
    df = pd.DataFrame({"id": np.array([big, big + 1, big + 2], dtype=np.int64)})
    got = parse_expression(f"id == {big + 1}", df.columns).evaluate(df)
    assert got.tolist() == [False, True, False]  # through float64 all three would be equal
    assert parse_expression(f"id in [{big + 2}]", df.columns).evaluate(df).tolist() == [False, False, True]
    assert parse_expression(f"id < {2**70}", df.columns).evaluate(df).all()


HOSTILE = [
    ("a.__class__.__init__.__globals__", "attribute access"),
    ("a.__class__.__init__.__globals__['os'].system('touch x')", "function calls"),  # the outermost node
    ("__import__('os').system('touch x')", "function calls"),
    ("open('x', 'w')", "function calls"),
    ("__builtins__", "dunder names"),
    ("(lambda: 1)() == 1", "function calls"),
    ("lambda: 1", "lambda"),
    ("[x for x in a] == 1", "comprehensions"),
    ("{x: 1 for x in a}", "comprehensions"),
    ("f'{a}' == '1'", "f-strings"),
    ("a[0] == 1", "subscripts"),
    ("@a > 1", "'@'"),
    ("a == 1 and @os.system('touch x') == 0", "'@'"),
    ("a @ a", "'@'"),
    ("(x := 1)", "assignments"),
    ("a if f else b", "conditional"),
    ("a ** 99999 ** 99999 > 1", "'**'"),
    ("a is None", "'is'"),
    ("a == None", "None"),
    ("a == b'x'", "bytes"),
    ("a == 1j", "complex"),
    ("{'a': 1}", "dicts"),
    ("[1, 2]", "lists"),
    ("a in (b for b in [1])", "'in' with anything but a list"),
    ("a in b", "'in'"),
    ("a in [b]", "inside 'in"),
    ("a // 2 > 1", "'//'"),
    ("a % 2 == 1", "'%'"),
]


@pytest.mark.parametrize(("text", "construct"), HOSTILE, ids=[t for t, _ in HOSTILE])
def test_hostile_expression_is_refused_naming_the_construct(df, text, construct):
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, df.columns)
    message = str(info.value)
    assert construct in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("colour == 'red'", "unknown column 'colour'"),
        ("ss == 'red'", "did you mean 's'?"),
        ("blood glucose > 100", "cannot parse"),
        ("a >", "cannot parse"),
        ("`a > 1", "unterminated backquote"),
        ("`a`b > 1", "cannot parse"),
        ("s == 'red", "unterminated string"),
        ("", "empty"),
        ("not " * 5000 + "f", "nested too deeply"),
        ("(" * 300 + "a" + ")" * 300 + " > 1", "cannot parse"),
        ("a == " + "9" * 5000, "cannot parse"),
        ("a in [1] == f", "chain"),
    ],
)
def test_parse_errors(df, text, message):
    with pytest.raises(ExpressionError, match=None) as info:
        parse_expression(text, df.columns)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a + 1", "gives numbers, not True/False"),
        ("s", "gives text"),
        ("1 == 1", "always True"),
        ("s == 1", "quote the value, e.g. s == '1'"),
        ("a == '3'", "cannot compare a (numbers) with the text '3'; write the value without quotes"),
        ("f != 'True'", "cannot compare f (True/False) with the text 'True'"),
        ("s < a", "cannot compare text s with a (numbers)"),
        ("s in ['red', 2]", "quote the value"),
        ("s + 1 > 0", "'+' needs numbers"),
        ("a > 1 and b", "must be conditions"),
        ("~a", "must be conditions"),
        ("a & f", "must be conditions"),
    ],
)
def test_evaluation_errors(df, text, message):
    expr = parse_expression(text, df.columns)
    with pytest.raises(ExpressionError) as info:
        expr.evaluate(df)
    assert message in str(info.value)


def test_dates_are_refused_with_advice():
    df = pd.DataFrame({"day": pd.to_datetime(["2020-01-01", "2021-06-01"]), "y": [0, 1]})
    with pytest.raises(ExpressionError, match="dates") as info:
        parse_expression("day > 3", df.columns).evaluate(df)
    assert "the year" in str(info.value)


def test_nullable_and_category_columns():
    df = pd.DataFrame(
        {
            "n": pd.array([1, None, 3], dtype="Int64"),
            "c": pd.Categorical(["x", "y", None]),
            "t": pd.array(["u", None, "v"], dtype="string"),
            "g": pd.array([True, None, False], dtype="boolean"),
        }
    )
    assert parse_expression("n >= 1", df.columns).evaluate(df).tolist() == [True, False, True]
    assert parse_expression("c == 'y'", df.columns).evaluate(df).tolist() == [False, True, False]
    assert parse_expression("t != 'u'", df.columns).evaluate(df).tolist() == [False, True, True]
    assert parse_expression("g == 1", df.columns).evaluate(df).tolist() == [True, False, False]


def test_evaluation_leaves_the_table_unchanged(df):
    before = df.copy(deep=True)
    for text, _ in VALID:
        parse_expression(text, df.columns).evaluate(df)
    pd.testing.assert_frame_equal(df, before)
