"""The 2-D counts of every pair of features (the exact search's histograms), against counting each pair directly."""

from __future__ import annotations

import pytest
import torch

from torch_amore.grids import pair_counts
from torch_amore.grids.binning import bin_features
from torch_amore.grids.pair_counts import PairCounts, compress


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
    for p0, p1 in ((1, n_pairs), (n_feat - 2, n_feat + 3), (n_pairs - 1, n_pairs)):  # chunks from mid-anchor on
        part = counts.prefix(order, p0, p1)
        for got, whole in zip(part, (j, k, tot, tgt)):
            assert torch.equal(got, whole[p0:p1]), (p0, p1)
    codes = grid.codes_t.long()
    for p in range(n_pairs):
        a, b = codes[j[p]], codes[k[p]]
        seen = (a < grid.n_max) & (b < grid.n_max)
        for cum, rows in ((tot[p], seen), (tgt[p], seen & target)):
            cells = torch.zeros(grid.n_max, grid.n_max, dtype=torch.long)
            cells.index_put_((a[rows], b[rows]), torch.ones(int(rows.sum()), dtype=torch.long), accumulate=True)
            assert torch.equal(cum[1:, 1:].long(), cells.cumsum(0).cumsum(1)), (p, int(j[p]), int(k[p]))


@pytest.mark.parametrize("chunk", [None, 300])
@pytest.mark.parametrize("exact32", [True, False])
def test_pair_histograms_equal_a_literal_count(chunk: int | None, exact32: bool, monkeypatch) -> None:
    """Coarse cells from a non-decreasing lookup table (as the seeds use them): cells of several codes, an empty
    cell, a categorical feature and missing codes left out, all rows and a subset, against counting each pair of
    samples' cells directly."""
    if chunk is not None:
        monkeypatch.setattr(pair_counts, "_CHUNK", chunk)  # a few rows per chunk, the last one short
    g = torch.Generator().manual_seed(5)
    n_feat, n_codes, width, n = 5, 9, 3, 700
    codes_t = torch.randint(0, n_codes + 1, (n_feat, n), generator=g, dtype=torch.int16)  # code 9: missing
    cuts = torch.sort(torch.randint(0, n_codes + 1, (n_feat, width - 1), generator=g), 1).values
    lut = (torch.arange(n_codes)[None, :, None] >= cuts[:, None, :]).sum(2)  # (F, 9) non-decreasing cells
    lut[1] = torch.tensor([0, 0, 0, 2, 2, 2, 2, 2, 2])  # cell 1 empty
    lut[3] = width  # categorical: left out
    lut = torch.cat([lut, torch.full((n_feat, 1), width)], 1)  # the missing code
    cols = torch.nonzero(torch.rand(n, generator=g) < 0.4, as_tuple=True)[0]
    for pick in (None, cols):
        got = pair_counts.pair_histograms(codes_t, lut, width, pick, exact32=exact32)
        rows = torch.arange(n) if pick is None else pick
        cell = lut.gather(1, codes_t.long())[:, rows]  # (F, rows)
        expect = torch.zeros(n_feat, width, n_feat, width, dtype=torch.long)
        for r in range(rows.numel()):
            c = cell[:, r]
            for f in range(n_feat):
                for h in range(n_feat):
                    if c[f] < width and c[h] < width:
                        expect[f, c[f], h, c[h]] += 1
        assert int(expect.sum()) > 0 and bool((expect[3] == 0).all())
        assert torch.equal(got, expect)


def test_pair_histograms_of_uint8_codes_with_256_codes() -> None:
    """Cell starts up to 256 do not fit the codes' uint8: the comparison is made wider, not wrapped around."""
    g = torch.Generator().manual_seed(8)
    codes_t = torch.randint(0, 256, (2, 500), generator=g, dtype=torch.uint8)
    lut = torch.arange(256)[None].expand(2, -1) // 128  # cells 0 and 1: the end of cell 1 is code 256
    got = pair_counts.pair_histograms(codes_t, lut, 2)
    cell = lut.gather(1, codes_t.long())
    expect = torch.zeros(2, 2, dtype=torch.long)
    expect.index_put_((cell[0], cell[1]), torch.ones(500, dtype=torch.long), accumulate=True)
    assert int(expect[:, 1].sum()) > 0 and torch.equal(got[0, :, 1, :], expect)
