"""Per-grid counts of the samples inside boxes (conjunctions of grid intervals), read from the codes chunk by chunk.

Where the searches' row lists would not fit (codes on disk: 8 bytes per row and list), they count their nodes from
the nodes' conditions: :func:`box_counts` reads ``row_chunk`` rows of codes at a time, tests each row against every
box, and adds up each chunk's per-grid counts. The counts are exact integers, the same as one pass over stored rows,
in the memory of one chunk whatever the number of rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.grids.ratios import group_grid_counts, node_grid_counts

__all__ = ["ROW_CHUNK", "box_counts", "box_masks"]

#: Rows of codes read at a time by :func:`box_counts`: a chunk's temporaries stay within a few tens of MiB.
ROW_CHUNK = 1 << 16

Box = Sequence[tuple[int, int, int]]


def _box_table(boxes: Sequence[Box], dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, L) features and (B, 2 L) bounds (low, high per position, in the codes' dtype: a comparison of mixed integer
    dtypes is several times slower) of the boxes, shorter boxes padded with a condition every code satisfies."""
    length = max([len(b) for b in boxes] + [1])
    pad = [(0, 0, torch.iinfo(dtype).max)] * length
    rows = [list(b) + pad[len(b) :] for b in boxes]
    feats = tensor_on([[f for f, _, _ in r] for r in rows], device=device)
    bounds = tensor_on([[v for _, lo, hi in r for v in (lo, hi)] for r in rows], dtype=dtype, device=device)
    return feats, bounds


def _inside(part: torch.Tensor, table: tuple[torch.Tensor, torch.Tensor], column_major: bool) -> torch.Tensor:
    """(B, rows) whether each row of the codes ``part`` lies in each box of ``table`` (all boxes at once per
    condition position)."""
    feats, bounds = table
    inside = None
    for m in range(feats.shape[1]):
        c = part.index_select(0, feats[:, m]) if column_major else part.index_select(1, feats[:, m]).T  # (B, rows)
        ok = (c >= bounds[:, 2 * m : 2 * m + 1]) & (c <= bounds[:, 2 * m + 1 : 2 * m + 2])
        inside = ok if inside is None else inside.logical_and_(ok)
    return inside


def box_masks(codes: torch.Tensor, boxes: Sequence[Box], *, column_major: bool = False) -> torch.Tensor:
    """(B, N) whether each row lies in each box: codes ``g_low <= code <= g_high`` of every condition's column.

    Args:
        codes: (N, F) grid codes, or (F, N) with ``column_major``.
        boxes: each a sequence of ``(feature, g_low, g_high)`` conditions; an empty box holds every row.
        column_major: ``codes`` is (F, N).

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 0]], dtype=torch.uint8)
        >>> box_masks(codes, [[(0, 1, 1)], [(0, 1, 1), (1, 0, 0)], []]).tolist()
        [[False, True, True], [False, False, True], [True, True, True]]
    """
    return _inside(codes, _box_table(boxes, codes.dtype, codes.device), column_major)


def box_counts(
    codes: torch.Tensor,
    target: torch.Tensor,
    boxes: Sequence[Box],
    n_bins_max: int,
    row_chunk: int = ROW_CHUNK,
    *,
    column_major: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-grid counts of the samples inside each box, outside or inside the target, ``row_chunk`` rows at a time;
    summed over the ranks of a sharded run (every rank calls this collectively).

    Args:
        codes: (N, F) grid codes, or (F, N) with ``column_major``; the code ``n_bins_max`` marks a missing value and
            is not counted.
        target: (N,) bool, the subgroup.
        boxes: each a sequence of ``(feature, g_low, g_high)`` conditions (codes ``g_low <= code <= g_high`` of
            column ``feature``); an empty box holds every row.
        n_bins_max: number of grids of the widest feature.
        row_chunk: rows read at a time.
        column_major: ``codes`` is (F, N).

    Returns:
        (B, 2, F, n_bins_max) int64 counts, per box of its samples outside then inside the target, and (B, 2) the
        boxes' sample counts outside and inside the target.

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 0], [0, 0]], dtype=torch.uint8)
        >>> target = torch.tensor([True, True, False, False])
        >>> counts, sizes = box_counts(codes, target, [(), [(1, 1, 1)]], 2, row_chunk=3)
        >>> counts[1].tolist(), sizes.tolist()
        ([[[0, 0], [0, 0]], [[1, 1], [0, 2]]], [[2, 2], [0, 2]])
    """
    n_boxes = len(boxes)
    n, n_feat = (codes.shape[1], codes.shape[0]) if column_major else codes.shape
    table = _box_table(boxes, codes.dtype, codes.device)
    count = group_grid_counts if column_major else node_grid_counts
    counts = torch.zeros(2 * n_boxes, n_feat, n_bins_max, dtype=torch.long, device=codes.device)
    sizes = torch.zeros(2 * n_boxes, dtype=torch.long, device=codes.device)
    for r0 in range(0, n, row_chunk):
        part = codes[:, r0 : r0 + row_chunk] if column_major else codes[r0 : r0 + row_chunk]
        box, row = torch.nonzero(_inside(part, table, column_major), as_tuple=True)
        groups = box * 2 + target[r0 : r0 + row_chunk][row]
        counts += count(part, row, groups, 2 * n_boxes, n_bins_max, reduce=False)
        sizes += counting.bincount(groups, 2 * n_boxes)
    counts = D.all_reduce_sum(counts).view(n_boxes, 2, n_feat, n_bins_max)
    return counts, D.all_reduce_sum(sizes).view(n_boxes, 2)
