"""Per-grid counts (torch_amore.grids.ratios) equal a literal count of the codes, row by row: all samples and the
target's in one pass over whole-row chunks, and the groups' counts read in place for every sample."""

from __future__ import annotations

import pytest
import torch

from torch_amore.grids import ratios
from torch_amore.grids.ratios import grid_and_target_counts, group_grid_counts


def _literal(codes: torch.Tensor, rows: list[int], n_bins_max: int) -> list[list[int]]:
    """(F, n_bins_max) counts of the codes of ``rows``, feature by feature and row by row (codes >= n_bins_max:
    missing, counted nowhere)."""
    out = [[0] * n_bins_max for _ in range(codes.shape[1])]
    for r in rows:
        for f, c in enumerate(codes[r].tolist()):
            if c < n_bins_max:
                out[f][c] += 1
    return out


@pytest.mark.parametrize("row_chunk", [None, 7, 64])
@pytest.mark.parametrize("share", [0.0, 0.3, 1.0])
def test_grid_and_target_counts_equal_the_literal_count(row_chunk, share, monkeypatch):
    if row_chunk is not None:  # several chunks of whole rows, the last one shorter
        monkeypatch.setattr(ratios, "_ROW_CHUNK", row_chunk)
    g = torch.Generator().manual_seed(int(10 * share) + (row_chunk or 0))
    codes = torch.randint(0, 6, (101, 5), generator=g, dtype=torch.uint8)  # code 5: missing (n_bins_max 5)
    target = torch.rand(101, generator=g) < share
    every, hits = grid_and_target_counts(codes, target, 5)
    assert every.tolist() == _literal(codes, list(range(101)), 5)
    assert hits.tolist() == _literal(codes, torch.nonzero(target).view(-1).tolist(), 5)


def test_grid_and_target_counts_of_no_row_are_zero():
    every, hits = grid_and_target_counts(torch.zeros(0, 3, dtype=torch.uint8), torch.zeros(0, dtype=torch.bool), 4)
    assert every.tolist() == hits.tolist() == [[0] * 4] * 3


def test_group_counts_of_every_row_read_in_place_equal_those_of_the_gathered_rows():
    g = torch.Generator().manual_seed(3)
    codes_t = torch.randint(0, 9, (6, 300), generator=g, dtype=torch.int16)
    groups = torch.randint(0, 3, (300,), generator=g)
    in_place = group_grid_counts(codes_t, None, groups, 3, 8)
    for k in range(3):
        rows = torch.nonzero(groups == k).view(-1).tolist()
        assert in_place[k].tolist() == _literal(codes_t.t(), rows, 8)
    assert torch.equal(in_place, group_grid_counts(codes_t, torch.arange(300), groups, 3, 8))
