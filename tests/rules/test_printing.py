"""Printed rules mean what was computed: re-parsed from their text they select the rows their masks select, in the
user's units, for every strategy; cuts are short; different bounds never print alike; no finite input overflows."""

from __future__ import annotations

import math
import operator
import re
from fractions import Fraction

import hypothesis.strategies as st
import numpy as np
import pandas as pd
import pytest
import torch
from hypothesis import given, settings

import torch_amore as ta
import torch_amore.rules.cuts as cuts
from torch_amore import Rule
from torch_amore.rules.cuts import admitted_integers, format_bound, short_cut

_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq}
_HEAD = re.compile(r"IF (.*) THEN (.*)  \(support=(\d+), confidence=([\d.]+), fitness=(-?[\d.]+)\)")


def parse_condition(text: str, columns: dict[str, np.ndarray]) -> np.ndarray:
    """Rows of ``columns`` (raw units) that satisfy one printed condition: ``x >= 1.5``, ``1 <= x < 2``, ..."""
    tokens = text.split(" ")
    if len(tokens) == 3:
        name, op, number = tokens
        return _OPS[op](columns[name], float(number))
    low, op_low, name, op_high, high = tokens
    assert low != high, text  # two different bounds never print alike
    col = columns[name]
    return _OPS[op_low](float(low), col) & _OPS[op_high](col, float(high))


def parse_rule_set(text: str, columns: dict[str, np.ndarray]) -> tuple[np.ndarray, int]:
    """The rows a printed rule set selects, and the support it prints."""
    head = _HEAD.fullmatch(text)
    assert head is not None, text
    n = len(next(iter(columns.values())))
    mask = np.ones(n, dtype=bool)
    for cond in head.group(1).split(" AND "):
        mask &= parse_condition(cond, columns)
    return mask, int(head.group(3))


def latitude_data(n: int = 3000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Coordinates 37.7749 + 1e-3 * N(0, 1) (rules need more than 3 decimals) and a small integer column."""
    rng = np.random.default_rng(seed)
    lat = 37.7749 + 1e-3 * rng.standard_normal(n)
    lon = -122.4194 + 1e-3 * rng.standard_normal(n)
    count = rng.integers(0, 20, n).astype(np.float64)
    raw = np.stack([lat, lon, count], axis=1)
    target = ((lat >= 37.7752) & (lon < -122.4188) & (count >= 4)) | (rng.random(n) < 0.05)
    return raw, target


def check_printed_rules_select_their_masks(rule_sets, X, raw, names) -> None:
    columns = {name: raw[:, i] for i, name in enumerate(names)}
    assert len(rule_sets) >= 5
    for rs in rule_sets:
        text = str(rs)
        selected, support = parse_rule_set(text, columns)
        mask = rs.mask(X).cpu().numpy()
        assert np.array_equal(selected, mask), text
        assert support == rs.support == int(mask.sum()), text


@pytest.mark.parametrize("strategy", ["paper", "beam"])
@pytest.mark.parametrize("units", ["raw", "min-max", "flipped"])
def test_printed_rules_reparse_to_their_masks(strategy, units):
    raw, target = latitude_data()
    names = ["lat", "lon", "count"]
    kw = {}
    X = raw
    if units != "raw":
        lo, hi = raw.min(0), raw.max(0)
        scale, offset = (hi - lo, lo) if units == "min-max" else (lo - hi, hi)  # "flipped": a negative scale
        X = (raw - offset) / scale  # the user's scaling; the printed rules undo it
        kw = {"feature_scale": scale.tolist(), "feature_offset": offset.tolist(), "feature_types": ["float"] * 3}
    rule_sets = ta.extract_rules(
        torch.from_numpy(X), torch.from_numpy(target), max_length=2, min_support=60, n_grids=12, strategy=strategy,
        feature_names=names, min_gain=0, **kw,  # min_gain=0: every rule set found, at least five to print
    )  # fmt: skip
    check_printed_rules_select_their_masks(rule_sets, torch.from_numpy(X), raw, names)
    bounds = [t for rs in rule_sets for c in str(rs).split(" THEN ")[0][3:].split(" AND ") for t in c.split(" ")[::2]]
    decimals = [len(t.split(".")[1]) for t in bounds if "." in t and "e" not in t]
    assert max(decimals) > 3  # the data needs more than 3 decimals: a fixed precision would print bounds alike


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_local_rules_keep_the_sample_after_snapping(strategy):
    raw, target = latitude_data(n=1500, seed=1)
    X = torch.from_numpy(raw)
    sample = torch.tensor([37.77525, -122.4195, 5.0], dtype=torch.float64)  # not a row of X
    rule_sets = ta.extract_rules(X, torch.from_numpy(target), max_length=2, min_support=40, local_x=sample,
                                 strategy=strategy)  # fmt: skip
    assert rule_sets
    for rs in rule_sets:
        assert bool(rs.mask(sample[None])[0]), str(rs)


def test_huge_values_scales_and_offsets_do_not_overflow():
    g = torch.Generator().manual_seed(0)
    U = torch.rand(800, 2, generator=g, dtype=torch.float64)
    target = (U[:, 0] > 0.6) & (U[:, 1] < 0.7)
    cases = {
        "values >= 9.2e18": (U * 1e19, U * 1e19, {}),
        "integer values >= 9.2e18": (
            torch.round(U * 1000) * 1e16, torch.round(U * 1000) * 1e16, {"feature_types": ["int", "float"]}
        ),
        "feature_scale=1e308": (U, U * 1e308, {"feature_scale": [1e308, 1e308]}),
    }  # fmt: skip
    for X, raw, kw in cases.values():
        for strategy in ("paper", "beam"):
            rule_sets = ta.extract_rules(X, target, min_support=40, strategy=strategy, **kw)
            check_printed_rules_select_their_masks(rule_sets, X, raw.numpy(), ["feature_0", "feature_1"])
    # an offset that swamps the data: in those units the bounds could not be told apart, so the search refuses it
    # (a Rule built by hand still prints each bound exactly: test_different_bounds_never_print_alike_...)
    for strategy in ("paper", "beam"):
        with pytest.raises(ValueError, match=r"`feature_offset` of feature 0 \(1e\+300\)"):
            ta.extract_rules(U, target, min_support=40, strategy=strategy, feature_offset=[1e300, 0.0])


@pytest.mark.parametrize("units", [(1.0, 0.0), (1.0, 3.5), (0.5, -1.0), (-1.0, 2.0)])
def test_the_largest_float64_prints_as_a_text_that_maps_back(units):
    """At +-max float64 the rounding neighbourhood ends half a step past it (reals beyond round to infinity); it was
    taken as twice the value, where the middle decimal reads back as inf: a wrong text, or (with an offset) a search
    lengthening it without end."""
    for c in (math.nextafter(math.inf, 0.0), -math.nextafter(math.inf, 0.0)):
        text = format_bound(c, *units)
        assert (float(text) - units[1]) / units[0] == c
        assert len(text) <= 24  # the shortest: 17 significant digits at most, and an exponent


def test_int64_beyond_2_53_compared_exactly():
    base = 2**62
    values = [base + k for k in range(-700, 700, 3)]
    X = torch.tensor(values, dtype=torch.int64)[:, None]
    rule = Rule(0, "n", low=float(base), high=float(base + 2048))  # both bounds are float64 values
    exact = [Fraction(base) <= v < Fraction(base + 2048) for v in values]
    assert rule.mask(X).tolist() == exact
    assert rule.mask(X.numpy()).tolist() == exact
    assert rule.mask(pd.DataFrame({"n": values})).tolist() == exact
    assert [rule.contains(v) for v in values] == exact
    cat = Rule(0, "n", value=float(base), kind="cat")
    assert cat.mask(X).tolist() == [v == base for v in values]
    with pytest.raises(ValueError, match="int64"):
        Rule(0, "n", low=1.0).mask(np.array([[2**64 - 1]], dtype=np.uint64))


def test_rule_beyond_the_columns_of_x_is_a_clear_error():
    for X in (torch.zeros(3, 2), np.zeros((3, 2)), pd.DataFrame(np.zeros((3, 2)))):
        with pytest.raises(ValueError, match="feature 5.*2 columns"):
            Rule(5, "x", low=0.5).mask(X)


@settings(max_examples=150, deadline=None)
@given(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(-1e6, 1e6, allow_nan=False),
    st.sampled_from([(1.0, 0.0), (1e-3, 37.77), (5.5, 3.5), (-2.0, 1.0), (1e308, 0.0), (1.0, 1e300), (3.0, 1e-9)]),
)
def test_different_bounds_never_print_alike_and_text_maps_back(c1, c2, units):
    scale, offset = units
    t1, t2 = format_bound(c1, scale, offset), format_bound(c2, scale, offset)
    assert (t1 == t2) == (c1 == c2)
    p = float(t1)
    if (p - offset) / scale != c1:  # only when no float64 in printed units maps back to c1 (checked nearby)
        q = c1 * scale + offset
        up, down = q, q
        for _ in range(40):
            up, down = math.nextafter(up, math.inf), math.nextafter(down, -math.inf)
            assert (up - offset) / scale != c1 and (down - offset) / scale != c1
        assert (q - offset) / scale != c1


_TIES = [2.0**51 + q / 4 for q in range(1, 40, 2)] + [(2 * j + 1) * 125 * 2.0**-4 for j in range(40)]
_EXTREMES = [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 2.0**53, 2.0**54, 1e16, 1e23, 9.99e22]
_EXTREMES += [9.999999999999999e22, 3 * 2.0**-1022, 123456789012345678.0]


@pytest.mark.parametrize("c", _TIES + _EXTREMES + [-c for c in _EXTREMES] + [0.0, -0.0, 0.1, 1 / 3, 1e-5, 1e-4])
def test_shortest_decimal_from_repr_equals_the_exact_search_at_ties_and_extremes(c):
    # the fast path (one step of the search, found from Python's repr) against the search over every step
    assert cuts._shortest_of(c) == cuts._shortest_in(*cuts._neighbourhood(c, c))


@pytest.mark.parametrize("kind", [np.float64, np.float32, float])
def test_bounds_given_as_numpy_scalars_print_as_python_floats(kind):
    for c in (0.1, -2.5e-7, 1234.5678, 3e30):
        value = kind(c)
        assert format_bound(value) == format_bound(float(value))
        assert float(format_bound(value)) == float(value)
    assert short_cut(kind(0.4998), kind(0.5018)) == 0.5


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False))
def test_shortest_decimal_from_repr_equals_the_exact_search(c):
    assert cuts._shortest_of(c) == cuts._shortest_in(*cuts._neighbourhood(c, c))


@settings(max_examples=200, deadline=None)
@given(st.floats(-1e6, 1e6, allow_nan=False), st.floats(1e-9, 1e3))
def test_short_cut_lies_in_the_gap_and_no_shorter_number_does(a, gap):
    b = a + gap
    if not a < b:
        return
    c = short_cut(a, b)
    assert a < c <= b
    text = format_bound(c)
    assert float(text) == c
    digits = len(text.lstrip("-").split("e")[0].replace(".", "").strip("0")) or 1
    # a literal search: no decimal of fewer significant digits lies in (a, b]
    top = math.floor(math.log10(max(abs(a), abs(b)))) if max(abs(a), abs(b)) > 0 else 0
    for n in range(1, digits):
        for exp in range(top - n + 1 - 3, top - n + 2):
            step = Fraction(10) ** exp
            m = math.floor(Fraction(b) / step)
            assert not (a < float(m * step) <= b and len(str(abs(m)).strip("0") or "0") <= n)  # as parsed


@settings(max_examples=200, deadline=None)
@given(st.floats(0.0, 1.0), st.floats(1e-6, 0.2), st.floats(1e-3, 1e4), st.floats(-1e3, 1e3))
def test_short_cut_in_printed_units_stays_in_the_gap(a, gap, scale, offset):
    b = a + gap
    c = short_cut(a, b, scale, offset)
    assert a < c <= b  # the same samples on either side, whatever the units
    assert (float(format_bound(c, scale, offset)) - offset) / scale == c


@pytest.mark.parametrize(
    ("a", "b", "scale", "offset", "printed"),
    [(0.4545, 0.46, 5.5, 3.5, "6"), (0.121, 0.13, 100.0, 0.0, "13"), (0.3, 0.7, 10.0, -2.0, "3"),
     (0.4998, 0.5018, 1.0, 0.0, "0.5"), (3.0, 4.0, 1.0, 0.0, "4"), (1234.0, 1236.0, 1.0, 0.0, "1235")],
)  # fmt: skip
def test_short_cut_reads_short_in_printed_units(a, b, scale, offset, printed):
    c = short_cut(a, b, scale, offset)
    assert a < c <= b
    assert format_bound(c, scale, offset) == printed  # hand-computed: the shortest, nearest the middle of the gap


def test_integer_rules_print_the_integers_they_admit():
    # in printed units n is admitted iff (n - offset) / scale lies in [low, high)
    for low, high, scale, offset in [(0.25, 0.75, 10.0, 1.0), (-0.3, 0.35, -4.0, 2.0), (40.2, math.inf, 1.0, 0.0)]:
        first, last = admitted_integers(low, high, scale, offset)
        brute = [n for n in range(-100, 200) if low <= (n - offset) / scale < high]
        assert first == brute[0] and (last == brute[-1] or (last == math.inf and brute[-1] == 199))
    rule = Rule(0, "rooms", low=0.25, high=0.75, kind="int", scale=10.0, offset=1.0)
    assert str(rule) == "4 <= rooms <= 8"
    assert str(Rule(0, "x", low=-0.3, high=0.35, kind="int", scale=-4.0, offset=2.0)) == "1 <= x <= 3"


_ROW = re.compile(r"^\s*(\d+)  (.*?)\s+(\d+)\s+([\d.]+)\s+(-?[\d.]+)$")


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_cli_table_reparses_to_its_support_and_confidence(strategy, tmp_path, capsys):
    from torch_amore.cli.commands import main

    raw, target = latitude_data(n=2000, seed=2)
    frame = pd.DataFrame(raw, columns=["lat", "lon", "count"]).assign(label=target.astype(int))
    path = tmp_path / "points.csv"
    frame.to_csv(path, index=False)  # floats written with every digit (repr)
    code = main(["rules", str(path), "--target-column", "label", "--min-support", "50", "--strategy", strategy,
                 "--limit", "100"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0
    columns = {c: pd.read_csv(path)[c].to_numpy() for c in ("lat", "lon", "count")}
    rows = [m for m in map(_ROW.match, out.splitlines()) if m]
    assert len(rows) >= 5, out
    for m in rows:
        selected = np.ones(len(frame), dtype=bool)
        for cond in m.group(2).split(" AND "):
            selected &= parse_condition(cond, columns)
        support, confidence = int(m.group(3)), float(m.group(4))
        assert int(selected.sum()) == support, m.group(0)
        assert round(float(target[selected].mean()), 3) == pytest.approx(confidence, abs=1e-9), m.group(0)
