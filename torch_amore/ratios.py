"""Per-grid counts and probability ratios for all features in one pass: the hot path of the rule search.

At a node of the rule tree, the samples satisfying the parent rules (``rows``) are counted per grid of every feature
with one ``bincount`` over the precomputed bin codes (per-feature offsets make each feature's grids a separate range
of bins). The target samples among them are counted the same way. Ratios follow eq. (ratio_approx) of the paper:

    r = (target in grid / target at node) / (samples in grid / samples at node)
"""

from __future__ import annotations

import torch

from torch_amore import distributed as D
from torch_amore.threads import parallel_pass

#: int64 index elements per bincount call; bounds the temporary memory of one pass.
_INDEX_BUDGET = 1 << 23


def grid_counts(codes: torch.Tensor, rows: torch.Tensor | None, n_bins_max: int) -> torch.Tensor:
    """Count the samples ``rows`` (all when ``None``) in every grid of every feature.

    Under a sharded DDP run (:mod:`torch_amore.distributed`) the counts are summed over all ranks, so every rank must
    call this collectively.

    Args:
        codes: (N, F) bin codes; the code ``n_bins_max`` marks a missing value and is not counted.
        rows: int64 indices of the samples to count, or ``None`` for all.
        n_bins_max: number of grids of the widest feature.

    Returns:
        (F, n_bins_max) int64 counts on the codes' device.

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 2]], dtype=torch.uint8)
        >>> grid_counts(codes, None, 2).tolist()
        [[1, 2], [0, 2]]
    """
    sub = codes if rows is None else codes.index_select(0, rows)
    n, n_features = sub.shape
    width = n_bins_max + 1
    out = torch.zeros(n_features * width, dtype=torch.long, device=codes.device)
    if n == 0 or n_features == 0:
        return D.all_reduce_sum(out.view(n_features, width)[:, :n_bins_max])
    step = max(1, _INDEX_BUDGET // n)
    # int32 indices halve the memory traffic of the pass (bincount accepts them)
    index_dtype = torch.int32 if step * width < 2**31 else torch.long
    offsets = torch.arange(min(step, n_features), device=codes.device, dtype=index_dtype) * width
    with parallel_pass(n * n_features):
        for f0 in range(0, n_features, step):
            f1 = min(n_features, f0 + step)
            idx = sub[:, f0:f1].to(index_dtype) + offsets[: f1 - f0]
            out[f0 * width : f1 * width] += torch.bincount(idx.view(-1), minlength=(f1 - f0) * width)
    return D.all_reduce_sum(out.view(n_features, width)[:, :n_bins_max])


def node_grid_counts(
    codes: torch.Tensor, rows: torch.Tensor, nodes: torch.Tensor, n_nodes: int, n_bins_max: int
) -> torch.Tensor:
    """:func:`grid_counts` of several nodes (e.g. a level of the rule tree) in one pass over row-major codes.

    Args:
        codes: (N, F) bin codes; the code ``n_bins_max`` marks a missing value and is not counted.
        rows: int64 indices of the samples to count (a sample may appear in several nodes).
        nodes: the node of each entry of ``rows``, in ``[0, n_nodes)``.
        n_nodes: number of nodes.
        n_bins_max: number of grids of the widest feature.

    Returns:
        (n_nodes, F, n_bins_max) int64 counts, summed over the ranks of a sharded DDP run.

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 2]], dtype=torch.uint8)
        >>> node_grid_counts(codes, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 1]), 2, 2).tolist()
        [[[1, 1], [0, 2]], [[0, 1], [0, 0]]]
    """
    n, n_features = rows.numel(), codes.shape[1]
    width = n_bins_max + 1
    out = torch.zeros(n_nodes, n_features, width, dtype=torch.long, device=codes.device)
    if n and n_features:
        step = max(1, _INDEX_BUDGET // n)
        with parallel_pass(n * n_features):
            for f0 in range(0, n_features, step):
                f1 = min(n_features, f0 + step)
                block = (f1 - f0) * width
                index_dtype = torch.int32 if n_nodes * block < 2**31 else torch.long
                offsets = torch.arange(f1 - f0, device=codes.device, dtype=index_dtype) * width
                idx = codes[:, f0:f1].index_select(0, rows).to(index_dtype) + offsets
                idx += nodes.to(index_dtype)[:, None] * block
                counts = torch.bincount(idx.view(-1), minlength=n_nodes * block)
                out[:, f0:f1] = counts.view(n_nodes, f1 - f0, width)
    return D.all_reduce_sum(out[:, :, :n_bins_max].contiguous())


def group_grid_counts(
    codes_t: torch.Tensor, rows: torch.Tensor, groups: torch.Tensor, n_groups: int, n_bins_max: int
) -> torch.Tensor:
    """:func:`grid_counts` of several sample groups (e.g. the nodes of a beam) in one pass, on column-major codes.

    Args:
        codes_t: (F, N) bin codes, one row per feature; the code ``n_bins_max`` marks a missing value and is not
            counted.
        rows: int64 indices of the samples to count (a sample may appear in several groups).
        groups: the group of each entry of ``rows``, in ``[0, n_groups)``.
        n_groups: number of groups.
        n_bins_max: number of grids of the widest feature.

    Returns:
        (n_groups, F, n_bins_max) int64 counts, summed over the ranks of a sharded DDP run.

    Example:
        >>> import torch
        >>> codes_t = torch.tensor([[0, 1, 1], [1, 1, 2]], dtype=torch.int16)
        >>> group_grid_counts(codes_t, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 1]), 2, 2).tolist()
        [[[1, 1], [0, 2]], [[0, 1], [0, 0]]]
    """
    n_features, n = codes_t.shape[0], rows.numel()
    width = n_bins_max + 1
    block = n_groups * width  # one feature's bins over all groups
    out = torch.zeros(n_features * block, dtype=torch.long, device=codes_t.device)
    if n and n_features:
        step = max(1, _INDEX_BUDGET // n)
        index_dtype = torch.int32 if step * block < 2**31 else torch.long
        base = groups.to(index_dtype)[None, :] * width
        offsets = torch.arange(min(step, n_features), device=codes_t.device, dtype=index_dtype)[:, None] * block
        with parallel_pass(n * n_features):
            for f0 in range(0, n_features, step):
                f1 = min(n_features, f0 + step)
                idx = codes_t[f0:f1].index_select(1, rows).to(index_dtype) + base + offsets[: f1 - f0]
                out[f0 * block : f1 * block] += torch.bincount(idx.view(-1), minlength=(f1 - f0) * block)
    out = out.view(n_features, n_groups, width).permute(1, 0, 2)[:, :, :n_bins_max]
    return D.all_reduce_sum(out.contiguous())


def probability_ratios(
    target_counts: torch.Tensor, counts: torch.Tensor, n_target: int | torch.Tensor, n_samples: int | torch.Tensor
) -> torch.Tensor:
    """Eq. (ratio_approx) per grid (or per merged interval: sums of counts, Proposition 1); -1 where a grid is empty.

    Example:
        >>> import torch
        >>> probability_ratios(torch.tensor([3, 0]), torch.tensor([4, 6]), n_target=3, n_samples=10).tolist()
        [2.5, 0.0]
    """
    a = target_counts.to(torch.float64 if counts.device.type != "mps" else torch.float32)
    b = counts.to(a.dtype)
    ratio = (a * n_samples) / (b * n_target).clamp(min=1)
    return torch.where(counts > 0, ratio, torch.full_like(ratio, -1.0))
