"""The 2-D counts of every pair of features (the exact search's histograms), against counting each pair directly."""

from __future__ import annotations

import pytest
import torch

from torch_amore import pair_counts
from torch_amore.binning import bin_features
from torch_amore.pair_counts import PairCounts, compress


@pytest.mark.parametrize("chunk", [None, 1800])
@pytest.mark.parametrize(("n_feat", "n_grids"), [(3, 4), (45, 6), (12, 20)])
def test_pair_counts_equal_counting_each_pair(n_feat: int, n_grids: int, chunk: int | None, monkeypatch) -> None:
    """Product path (few grids; 45 x 7 columns span several blocks of the symmetric gram) and bincount path (20
    grids: all pairs in one bincount, or with a small ``chunk`` anchor by anchor, in pieces), with missing values,
    against a literal count of each pair's cells."""
    if chunk is not None:
        monkeypatch.setattr(pair_counts, "_CHUNK", chunk)
    g = torch.Generator().manual_seed(n_feat)
    X = torch.randint(0, n_grids, (900, n_feat), generator=g).double()
    X[torch.rand(X.shape, generator=g) < 0.05] = float("nan")
    target = torch.rand(900, generator=g) < 0.3
    binned = bin_features(X, list(range(n_feat)), ["int"] * n_feat, n_grids=n_grids, bin_strategy="uniform")
    grid = compress(binned, target)
    counts = PairCounts(grid, target)
    assert counts.by_matmul == (grid.n_max <= 8)
    order = torch.randperm(n_feat, generator=g)  # pairs (j, k) with j > k too: both triangles of the gram
    n_pairs = n_feat * (n_feat - 1) // 2
    j, k, tot, tgt = counts.prefix(order, 0, n_pairs)
    assert bool((j > k).any()) and bool((j < k).any())
    codes = grid.codes_t.long()
    for p in range(n_pairs):
        a, b = codes[j[p]], codes[k[p]]
        seen = (a < grid.n_max) & (b < grid.n_max)
        for cum, rows in ((tot[p], seen), (tgt[p], seen & target)):
            cells = torch.zeros(grid.n_max, grid.n_max, dtype=torch.long)
            cells.index_put_((a[rows], b[rows]), torch.ones(int(rows.sum()), dtype=torch.long), accumulate=True)
            assert torch.equal(cum[1:, 1:].long(), cells.cumsum(0).cumsum(1)), (p, int(j[p]), int(k[p]))
