"""A fractional ``min_support`` that is a whole count of samples up to float rounding means that count: the count of
the search equals the count written as an int, and so do the rule sets."""

from __future__ import annotations

import numpy as np
import pytest

import torch_amore as ta
from torch_amore import SearchOptions
from torch_amore.data.arguments import resolve_min_support

# a rule on the only feature selects the subgroup exactly: said once per call, not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:Feature .* may leak the target:UserWarning")


@pytest.mark.parametrize(
    ("k", "n"),
    [(7, 100), (14, 100), (7, 25), (14, 25), (29, 35)],  # k / n * n is just above k in float64
)
def test_the_fraction_k_of_n_gives_k_samples(k, n):
    assert k / n * n > k  # the float product that a plain ceiling rounds up to k + 1
    assert resolve_min_support(k / n, n) == k
    assert SearchOptions(min_support=k / n).given_support_count(n) == k


def test_every_fraction_k_of_n_gives_k_and_a_larger_fraction_one_more():
    # every k / n for n up to 200; a fraction a millionth (relative) above k / n is no rounding error: k + 1
    wrong, above = [], []
    for n in range(2, 201):
        for k in range(1, n):
            if resolve_min_support(k / n, n) != k:
                wrong.append((k, n))
            if resolve_min_support(k / n * (1 + 1e-6), n) != k + 1:
                above.append((k, n))
    assert wrong == [] and above == []


def test_a_float32_fraction_is_the_decimal_it_was_written_as():
    value = np.float32(0.1)
    assert float(value) * 1000 > 100  # 0.10000000149011612 in float64
    assert resolve_min_support(value, 1000) == 100
    assert SearchOptions(min_support=value).min_support == 0.1


@pytest.mark.parametrize(
    ("fraction", "n", "count"),
    [(0.07, 100, 7), (0.14, 100, 14), (np.float32(0.1), 1000, 100)],
)
def test_the_rule_sets_of_a_fraction_are_those_of_its_count(fraction, n, count):
    x = np.arange(float(n))[:, None] / n
    t = x[:, 0] >= 1 - count / n  # the last `count` rows: a rule set of exactly min_support rows is the best
    assert int(t.sum()) == count
    by_fraction = ta.extract_rules(x, t, min_support=fraction, max_length=1)
    by_count = ta.extract_rules(x, t, min_support=count, max_length=1)

    def summary(found: list) -> list:
        return [(rs.rules, rs.support, rs.confidence, rs.fitness, rs.optimum) for rs in found]

    assert by_fraction and summary(by_fraction) == summary(by_count)
    best = by_fraction[0]
    assert best.support == int(best.mask(x).sum()) == count and bool((best.mask(x).numpy() == t).all())
