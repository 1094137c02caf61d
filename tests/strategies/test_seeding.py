"""Pair seeding: the planted pair is found, and counting the fine grids in feature chunks changes nothing."""

from __future__ import annotations

import torch

from torch_amore.grids.binning import bin_features
from torch_amore.grids.fine_grid import fine_binning
from torch_amore.strategies import seeding
from torch_amore.strategies.seeding import pair_seeds


def _planted() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.rand(4000, 12, generator=g, dtype=torch.float64)
    X[torch.rand(X.shape, generator=g) < 0.02] = float("nan")
    target = (X[:, 4] < 0.4) & (X[:, 9] > 0.55)
    return X, target


def test_seeds_hold_the_planted_pair_whatever_the_chunk(monkeypatch) -> None:
    X, target = _planted()
    fine = fine_binning(X, bin_features(X, list(range(12)), ["float"] * 12), 256)
    whole = pair_seeds(fine, target, 100, 3)
    assert {j for j, _, _ in whole[0]} == {4, 9}  # the best seed is the planted pair
    monkeypatch.setattr(seeding, "_CHUNK", 5000)  # about one feature of 4,000 rows per chunk
    assert pair_seeds(fine, target, 100, 3) == whole


def test_categorical_columns_change_no_seed() -> None:
    # the numeric columns' seeds, with one-hot categorical columns put between them: the same pairs, renumbered
    X, target = _planted()
    g = torch.Generator().manual_seed(2)
    hot = torch.nn.functional.one_hot(torch.randint(0, 6, (X.shape[0],), generator=g), 6).double()
    hot[:, 0] = torch.where(target, 1.0, hot[:, 0])  # a category that tracks the subgroup: still never a seed
    mixed = torch.cat([hot[:, :3], X[:, :7], hot[:, 3:], X[:, 7:]], 1)
    kinds = ["cat"] * 3 + ["float"] * 7 + ["cat"] * 3 + ["float"] * 5
    where = [3 + j for j in range(7)] + [13 + j for j in range(5)]  # column of each numeric feature in ``mixed``
    alone = pair_seeds(fine_binning(X, bin_features(X, list(range(12)), ["float"] * 12), 256), target, 100, 4)
    mixed_fine = fine_binning(mixed, bin_features(mixed, list(range(18)), kinds), 256)
    seeds = pair_seeds(mixed_fine, target, 100, 4)
    assert len(alone) == 4
    assert seeds == [tuple((where[j], lo, hi) for j, lo, hi in pair) for pair in alone]


def test_shared_counts_of_all_rows_give_the_counted_seeds(monkeypatch) -> None:
    # the rectangles of all rows made once for every numeric pair (AllRows, the permutations' searches) against
    # counting them for the kept pairs: the same seeds, with categorical columns between the numeric ones and with
    # fewer kept features than numeric ones (the kept pairs' places among all pairs)
    from torch_amore.strategies.all_rows import AllRows

    X, target = _planted()
    g = torch.Generator().manual_seed(3)
    hot = torch.nn.functional.one_hot(torch.randint(0, 4, (X.shape[0],), generator=g), 4).double()
    mixed = torch.cat([hot[:, :2], X[:, :5], hot[:, 2:], X[:, 5:]], 1)
    kinds = ["cat"] * 2 + ["float"] * 5 + ["cat"] * 2 + ["float"] * 7
    fine = fine_binning(mixed, bin_features(mixed, list(range(16)), kinds), 256)
    for n_kept in (64, 7):
        monkeypatch.setattr(seeding, "SEED_FEATURES", n_kept)
        shared = AllRows(fine)
        for k in range(3):
            t = target[torch.randperm(len(target), generator=g)] if k else target
            given = {"all_rows": shared, "target_counts": shared.target_counts(t)}
            assert pair_seeds(fine, t, 100, 6, **given) == pair_seeds(fine, t, 100, 6)
        assert shared._supports  # made once, read by each


def test_rectangle_counts_equal_a_literal_sum_of_cells() -> None:
    """Every rectangle (a range of cells of each feature) holds the sum of its cells, in float32 and float64 alike,
    for counts up to 2**23 (float32's products stay exact below 2**24)."""
    g = seeding.SEED_GRIDS
    h = torch.randint(0, 1 << 16, (3, g, g), generator=torch.Generator().manual_seed(0))
    s, e = torch.triu_indices(g + 1, g + 1, 1).tolist()
    expected = torch.tensor(
        [[[int(h[p, s[i] : e[i], s[j] : e[j]].sum()) for j in range(len(s))] for i in range(len(s))] for p in range(3)]
    )
    assert int(expected.max()) < 1 << 24
    for exact32 in (False, True):
        got = seeding.rectangle_counts(h, exact32=exact32)
        assert got.dtype == h.dtype
        assert torch.equal(got, expected)
