"""Bad evidence arguments of extract_rules (issue 40) get a clear error naming them, before the search; what a
combination cannot do yet is refused with a message that says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from torch_amore import SearchOptions, extract_rules
from torch_amore.search.extractor import Extractor


def data(n: int = 300) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 3, generator=g)
    return X, X[:, 0] > 0.6


@pytest.fixture(autouse=True)
def no_search(monkeypatch):
    """Any search reached fails the test: every error here must come before it."""

    def fail(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(Extractor, "extract", fail)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"holdout": 0.0}, ValueError, "`holdout` to be a number in (0, 1)"),
        ({"holdout": 1.0}, ValueError, "`holdout` to be a number in (0, 1)"),
        ({"holdout": -0.2}, ValueError, "`holdout`"),
        ({"holdout": "0.3"}, TypeError, "`holdout`"),
        ({"holdout": True}, TypeError, "`holdout`"),
        ({"holdout": torch.tensor(0.3)}, TypeError, "`holdout` to be a number"),  # as every numeric option
        ({"permutations": -1}, ValueError, "`permutations` to be an integer >= 0"),
        ({"permutations": 9.0}, TypeError, "`permutations` to be an integer >= 0"),
        ({"permutations": True}, TypeError, "`permutations`"),
        ({"stability": -3}, ValueError, "`stability` to be an integer >= 0"),
        ({"stability": 2.5}, TypeError, "`stability`"),
        ({"seed": -1}, ValueError, "`seed` to be an integer >= 0"),
        ({"seed": 1.5}, TypeError, "`seed`"),
        ({"level": 0.0}, ValueError, "`level` to be a number in (0, 1)"),
        ({"level": 1.0}, ValueError, "`level`"),
        ({"level": 95}, ValueError, "`level`"),
        ({"level": None}, TypeError, "`level`"),
        ({"level": torch.tensor(0.9)}, TypeError, "`level` to be a number"),
        ({"max_length": torch.tensor(2)}, TypeError, "`max_length` to be an integer"),
    ],
)
def test_bad_options_name_the_argument(kwargs, error, words):
    X, t = data()
    with pytest.raises(error, match=None) as info:
        extract_rules(X, t, **kwargs)
    assert words in str(info.value)
    with pytest.raises(error):
        SearchOptions(**kwargs)


@pytest.mark.parametrize(
    ("rows", "error", "words"),
    [
        (np.zeros(299, dtype=bool), ValueError, "of length 300"),
        (np.zeros(300, dtype=bool), ValueError, "at least one row"),
        (np.ones(300, dtype=bool), ValueError, "leave rows to search"),
        (np.array([0, 5, 5]), ValueError, "distinct"),
        (np.array([0, 300]), ValueError, "indices in [0, 300)"),
        (np.array([-1, 2]), ValueError, "indices in [0, 300)"),
        (np.array([0.5, 2.0]), TypeError, "booleans or integer row indices"),
        (np.zeros((300, 1), dtype=bool), ValueError, "one-dimensional"),
        (np.arange(300), ValueError, "leave rows to search"),
        ("0:30", TypeError, "got str '0:30'"),
        ((np.arange(300) % 3 == 0).astype(np.int64), ValueError, "pass it as booleans"),
        (b"rows", TypeError, "got bytes"),
    ],
)
def test_bad_holdout_rows(rows, error, words):
    X, t = data()
    with pytest.raises(error) as info:
        extract_rules(X, t, holdout_rows=rows)
    assert words in str(info.value) and "holdout_rows" in str(info.value)


def test_a_held_out_part_without_target_rows_is_refused():
    X, t = data()
    with pytest.raises(ValueError, match="held-out rows hold none"):
        extract_rules(X, t, holdout_rows=torch.nonzero(~t).flatten()[:20])
    with pytest.raises(ValueError, match="target rows both among .* rows left to search hold none"):
        extract_rules(X, t, holdout_rows=t | (torch.arange(300) < 5))
    with pytest.raises(ValueError, match="rows outside the target both among .* held-out rows hold none"):
        extract_rules(X, t, holdout_rows=t & (torch.arange(300) > 10))
    with pytest.raises(ValueError, match="rows outside the target both among .* rows left to search hold none"):
        extract_rules(X, t, holdout_rows=~t | (t & (torch.arange(300) < 100)))


def test_holdout_and_holdout_rows_together_are_refused():
    X, t = data()
    with pytest.raises(ValueError, match="either `holdout`.*or `holdout_rows`"):
        extract_rules(X, t, holdout=0.3, holdout_rows=[1, 2])


@pytest.mark.parametrize("kwargs", [{"permutations": 5}, {"holdout": 0.3}, {"stability": 2}])
def test_streamed_sources_are_refused_with_a_clear_message(kwargs):
    X, t = data()

    def source():
        return iter([(X[:150], t[:150]), (X[150:], t[150:])])

    with pytest.raises(
        ValueError,
        match="not supported with a source of batches .streamed data, or codes on disk.: they split, permute",
    ):
        extract_rules(source, **kwargs)
