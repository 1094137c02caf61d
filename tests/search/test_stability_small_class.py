"""Stability when a class has a single row: every half-sample keeps at least one row of each class (the documented
draw, replayed literally here), so the search runs as without ``stability``; and a ``holdout`` fraction that leaves a
class out of one part is refused before the search, naming ``holdout``."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torch_amore import extract_rules
from torch_amore.search.evidence_split import half_sample
from torch_amore.search.extractor import Extractor

# a search on noise: its rule sets do not stand out, which the one warning says (tested elsewhere)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def one_row_class(flip: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """500 rows of noise; the target is row 10 alone, or (``flip``) every row but row 10."""
    X = torch.from_numpy(np.random.default_rng(0).random((500, 3)))
    t = torch.zeros(500, dtype=torch.bool)
    t[10] = True
    return X, ~t if flip else t


def literal_half(target: torch.Tensor, seed: int, b: int) -> np.ndarray:
    """The documented half-sample ``b``: from ``default_rng([seed, 2, b])``, the first ``max(1, round(n / 2))`` of a
    permutation of the target rows, then of the other rows, sorted."""
    rng = np.random.default_rng([seed, 2, b])
    flags = target.numpy()
    taken = []
    for rows in (np.flatnonzero(flags), np.flatnonzero(~flags)):
        taken.append(rng.permutation(rows)[: max(1, round(len(rows) / 2))])
    return np.sort(np.concatenate(taken))


def literal_stability(X: torch.Tensor, t: torch.Tensor, found: list, B: int, seed: int, options: dict) -> list[float]:
    """The share of B half-samples in whose first len(found) rule sets one has a Jaccard index >= 0.8 with each of
    ``found`` on all rows (as tests/search/test_significance.py recomputes it)."""
    hits = [0] * len(found)
    for b in range(B):
        rows = torch.from_numpy(literal_half(t, seed, b))
        half = dict(options, min_support=math.ceil(options["min_support"] * len(rows) / len(t)))
        other = [rs.mask(X) for rs in extract_rules(X[rows], t[rows], **half)[: len(found)]]
        for i, rs in enumerate(found):
            m = rs.mask(X)
            hits[i] += any(int((m & o).sum()) / max(1, int((m | o).sum())) >= 0.8 for o in other)
    return [h / B for h in hits]


@pytest.mark.parametrize("flip", [False, True], ids=["one-target-row", "one-row-outside"])
def test_stability_with_a_class_of_one_row_is_the_literal_loop(flip):
    X, t = one_row_class(flip)
    options = {"min_support": 1, "max_length": 2, "n_grids": 8}
    plain = extract_rules(X, t, **options)
    found = extract_rules(X, t, stability=3, seed=0, **options)
    assert found and found == plain  # the same search; stability only adds a number to each rule set
    assert [rs.stability for rs in found] == literal_stability(X, t, found, 3, 0, options)


@pytest.mark.parametrize("flip", [False, True], ids=["one-target-row", "one-row-outside"])
def test_every_half_sample_holds_the_single_row_of_its_class(flip):
    _, t = one_row_class(flip)
    for b in range(5):
        rows = half_sample(t, 0, b)
        assert rows.tolist() == literal_half(t, 0, b).tolist()
        assert 10 in rows.tolist() and bool(t[rows].any()) and not bool(t[rows].all())
        assert len(rows) == 1 + round(499 / 2)


@pytest.fixture
def no_search(monkeypatch):
    """Any search reached fails the test: the error must come before it."""

    def fail(*args, **kwargs):
        raise AssertionError("the search ran")

    monkeypatch.setattr(Extractor, "extract", fail)


@pytest.mark.parametrize(("holdout", "part"), [(0.3, "held-out rows"), (0.5, "held-out rows"), (0.7, "rows left")])
@pytest.mark.usefixtures("no_search")
def test_a_holdout_fraction_that_leaves_a_class_out_of_a_part_names_holdout(holdout, part):
    X, t = one_row_class(False)
    with pytest.raises(ValueError, match=f"target rows both among .* the {part}") as info:
        extract_rules(X, t, min_support=1, holdout=holdout)
    assert f"`holdout={holdout:g}`" in str(info.value)
