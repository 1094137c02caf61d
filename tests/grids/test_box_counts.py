"""box_counts: per-grid counts of the samples inside boxes, chunk by chunk, against a literal count."""

from __future__ import annotations

import pytest
import torch

from torch_amore.grids.box_counts import box_counts, box_masks


def _literal(codes: torch.Tensor, target: torch.Tensor, box, n_bins_max: int) -> tuple[list, list]:
    """Counts of one box by looping over rows, features and grids (codes row-major)."""
    n, n_feat = codes.shape
    counts = [[[[0] * n_bins_max for _ in range(n_feat)] for _ in range(2)]]
    sizes = [0, 0]
    for i in range(n):
        row = codes[i].tolist()
        if not all(lo <= row[f] <= hi for f, lo, hi in box):
            continue
        t = int(target[i])
        sizes[t] += 1
        for f in range(n_feat):
            if row[f] < n_bins_max:  # the code n_bins_max: missing, not counted
                counts[0][t][f][row[f]] += 1
    return counts[0], sizes


@pytest.mark.parametrize("row_chunk", [1, 7, 1000])
@pytest.mark.parametrize("column_major", [False, True])
def test_counts_equal_a_literal_count(row_chunk, column_major):
    g = torch.Generator().manual_seed(3)
    n, n_feat, n_bins = 150, 4, 5
    codes = torch.randint(0, n_bins + 1, (n, n_feat), generator=g, dtype=torch.int16)  # code 5: missing
    target = torch.rand(n, generator=g) < 0.4
    boxes = [(), [(0, 1, 3)], [(2, 0, 0), (3, 2, 4)], [(1, 4, 4), (0, 0, 2), (3, 0, 1)], [(2, 3, 1)]]  # last: empty
    given = codes.T.contiguous() if column_major else codes
    counts, sizes = box_counts(given, target, boxes, n_bins, row_chunk, column_major=column_major)
    assert counts.shape == (len(boxes), 2, n_feat, n_bins) and sizes.shape == (len(boxes), 2)
    for b, box in enumerate(boxes):
        expected, expected_sizes = _literal(codes, target, box, n_bins)
        assert counts[b].tolist() == expected
        assert sizes[b].tolist() == expected_sizes
    assert sizes[-1].tolist() == [0, 0] and sizes[0].sum() == n  # the empty interval, and every row
    masks = box_masks(given, boxes, column_major=column_major)
    for b, box in enumerate(boxes):  # row by row, condition by condition
        expected = [all(lo <= int(codes[i, f]) <= hi for f, lo, hi in box) for i in range(n)]
        assert masks[b].tolist() == expected


def test_uint8_codes_and_no_rows():
    codes = torch.zeros(0, 3, dtype=torch.uint8)
    counts, sizes = box_counts(codes, torch.zeros(0, dtype=torch.bool), [(), [(1, 0, 2)]], 4, 5)
    assert counts.abs().sum() == 0 and sizes.tolist() == [[0, 0], [0, 0]]
