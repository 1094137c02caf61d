"""The exact strategy's cost estimate and its refusal message: what is searched, and a readable time."""

from __future__ import annotations

import warnings

import pytest
import torch

import torch_amore as ta
from torch_amore.strategies.exact_cost import check_budget


def _refusal(*args: int) -> str:
    with pytest.raises(ValueError) as err:
        check_budget(*args)
    return str(err.value)


def test_refusal_names_pairs_only_where_pairs_are_searched():
    one = _refusal(2000, 30, 10, 1, 1000)
    assert "(2,000 samples x 30 features, 10 grids each;" in one
    assert "pairs" not in one
    two = _refusal(2000, 30, 10, 2, 1000)
    assert "(2,000 samples x 435 pairs of 30 features, 10 grids each;" in two  # 30 * 29 / 2 = 435


def test_refusal_gives_a_readable_time():
    tiny = _refusal(2000, 30, 10, 1, 1000)  # 2000 * 30 + 30 * 55 = 61,650 updates: well under a second
    assert "under a second on one CPU thread" in tiny and "about 0 s" not in tiny
    # 4950 pairs * 10**6 rows + 4950 * 528 intervals * 33 = 5,036,248,800 updates at 10**8 a second: about 50 s
    big = _refusal(10**6, 100, 32, 2, 10**9)
    assert "about 5.04e+09 grid-cell updates" in big and "about 50 s on one CPU thread" in big


def test_length_three_is_also_refused_up_front_over_the_budget():
    X = torch.rand(200, 6, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # refused before any search: no "stopped at" warning
        with pytest.raises(ValueError, match=r"15 pairs of 6 features.*over `exact_budget`=1\.00e\+03"):
            ta.extract_rules(X, X[:, 0] > 0.5, strategy="exact", max_length=3, exact_budget=1000)
