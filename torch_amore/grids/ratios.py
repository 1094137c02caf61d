"""Per-grid counts and probability ratios for all features in one pass: the hot path of the rule search.

At a node of the rule tree, the samples satisfying the parent rules (``rows``) are counted per grid of every feature
with one ``bincount`` over the precomputed bin codes (per-feature offsets make each feature's grids a separate range
of bins). The target samples among them are counted the same way. Ratios follow eq. (ratio_approx) of the paper:

    r = (target in grid / target at node) / (samples in grid / samples at node)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore._utils.threads import parallel_pass

#: Bytes of temporaries (gathered codes and their bin indices) per chunk of one counting pass: about the size of the
#: binned data as float32 (``4 * codes.numel()``) within these bounds. This bounds the extra memory of a pass in
#: proportion to the data (small data: at most the floor) while keeping the chunks (and tensor operations) few.
_PASS_BYTES = 1 << 27
_PASS_BYTES_MIN = 1 << 25


def _chunk(n: int, bytes_per_element: int, n_values: int) -> int:
    """Features per chunk of a pass over ``n`` samples of codes with ``n_values`` entries."""
    budget = min(_PASS_BYTES, max(_PASS_BYTES_MIN, 4 * n_values))
    return max(1, budget // (bytes_per_element * max(n, 1)))


#: Entries of a chunk beyond which the number of chunks of a pass hardly matters: a pass over many rows takes chunks of
#: this many entries or more if their bin indices then fit int16.
_SHORT_CHUNK = 1 << 23


def _index_dtype(n_bins: int, device: torch.device) -> torch.dtype:
    """The narrowest bin index where ``n_bins`` bins fit (less memory traffic; bincount accepts them): int16 on the
    CPU, int32, else int64.

    Example:
        >>> [_index_dtype(n, torch.device("cpu")) for n in (1 << 15, 1 + (1 << 15), 1 << 31)]
        [torch.int16, torch.int32, torch.int64]
    """
    if n_bins <= 1 << 15 and device.type == "cpu":  # ``index_add_`` (other devices) takes int32 and int64 only
        return torch.int16
    return torch.int32 if n_bins < 2**31 else torch.long


def grid_counts(codes: torch.Tensor, rows: torch.Tensor | None, n_bins_max: int) -> torch.Tensor:
    """Count the samples ``rows`` (all when ``None``) in every grid of every feature.

    The counts are summed over the ranks of a sharded run (every rank calls this collectively).

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
    if n == 0 or n_features == 0:  # nothing to count here (other ranks may have rows)
        out = torch.zeros(n_features, width, dtype=torch.long, device=codes.device)
    else:
        step = min(n_features, _chunk(n, 4, codes.numel()))
        dtype = _index_dtype(step * width, codes.device)
        offsets = torch.arange(step, device=codes.device, dtype=dtype) * width
        buffer = torch.empty(n * step, dtype=dtype, device=codes.device)  # reused: fresh memory is slow to touch
        parts = []
        with parallel_pass(n * n_features):
            for f0 in range(0, n_features, step):
                f1 = min(n_features, f0 + step)
                flat = buffer[: n * (f1 - f0)]
                flat.view(n, f1 - f0).copy_(sub[:, f0:f1]).add_(offsets if f1 - f0 == step else offsets[: f1 - f0])
                parts.append(counting.bincount(flat, (f1 - f0) * width))
        out = parts[0] if len(parts) == 1 else torch.cat(parts)
    return D.all_reduce_sum(out.view(n_features, width)[:, :n_bins_max])


#: Codes per chunk of rows of :func:`grid_and_target_counts` (16 MiB of int16 bin indices).
_ROW_CHUNK = 1 << 23


def grid_and_target_counts(
    codes: torch.Tensor, target: torch.Tensor, n_bins_max: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`grid_counts` of all samples and of the ``target`` samples (an (N,) bool mask), from one pass over the
    codes in chunks of whole rows (contiguous reads of row-major codes): a sample's bin is its code plus its feature's
    first bin, plus the width of a feature's grids for a target sample.

    The counts are summed over the ranks of a sharded run (every rank calls this collectively).

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 2]], dtype=torch.uint8)
        >>> [c.tolist() for c in grid_and_target_counts(codes, torch.tensor([True, False, True]), 2)]
        [[[1, 2], [0, 2]], [[1, 1], [0, 1]]]
    """
    n, n_features = codes.shape
    width = n_bins_max + 1
    block = 2 * width  # a feature's bins: its grids outside the target, then inside it
    dtype = _index_dtype(n_features * block, codes.device)
    counts = None
    if n > 0 and n_features > 0:
        step = max(1, _ROW_CHUNK // n_features)
        offsets = torch.arange(n_features, device=codes.device, dtype=dtype) * block
        base = target.to(dtype).mul_(width).unsqueeze(1)
        buffer = torch.empty(min(step, n), n_features, dtype=dtype, device=codes.device)  # reused
        with parallel_pass(n * n_features):
            for rows, in_target in zip(codes.split(step), base.split(step)):  # views made by one operation each
                idx = buffer[: rows.shape[0]] if rows.shape[0] < buffer.shape[0] else buffer
                idx.copy_(rows).add_(in_target).add_(offsets)
                part = counting.bincount(idx.view(-1), n_features * block)
                counts = part if counts is None else counts.add_(part)
    if counts is None:  # nothing to count here (other ranks may have rows)
        counts = torch.zeros(n_features * block, dtype=torch.long, device=codes.device)
    both = D.all_reduce_sum(counts).view(n_features, 2, width)[:, :, :n_bins_max]
    return both.sum(1), both[:, 1]


@dataclass
class _GroupPass:
    """The reused buffers of one counting pass over several sample groups, ``step`` features at a time: a sample's bin
    is its code plus its group's first bin (``base``) plus its feature's first bin among the chunk's (``offsets``)."""

    n: int  # entries of ``rows``
    step: int  # features per chunk
    block: int  # one feature's bins over all groups
    features_last: bool  # codes gathered as (N, features) (from row-major codes) or as (features, N)
    base: torch.Tensor
    offsets: torch.Tensor
    buffer: torch.Tensor  # reused: fresh memory is slow to touch
    gathered: torch.Tensor

    def codes(self, k: int) -> torch.Tensor:
        """Where to gather the codes of a chunk of ``k`` features."""
        return self.gathered[: self.n * k].view((self.n, k) if self.features_last else (k, self.n))

    def bins(self, got: torch.Tensor) -> torch.Tensor:
        """The flat bin index of every gathered code of ``got`` (a view of the reused buffer)."""
        k = got.shape[1] if self.features_last else got.shape[0]
        flat = self.buffer[: self.n * k]
        idx = flat.view(got.shape).copy_(got).add_(self.base)
        idx += self.offsets if k == self.step else self.offsets[:k]
        return flat


def _group_pass(
    codes: torch.Tensor, n: int, n_features: int, groups: torch.Tensor, n_groups: int, width: int, features_last: bool
) -> _GroupPass:
    """The buffers of a pass counting ``n`` entries of ``n_groups`` groups over ``n_features`` features of ``width``
    bins each (missing values included)."""
    block = n_groups * width
    step = min(n_features, _chunk(n, 4 + codes.element_size(), codes.numel()))
    short = (1 << 15) // block  # features per chunk whose bins fit int16
    if short < step and short * n >= _SHORT_CHUNK:  # chunks still large: more of them, with half the bytes
        step = short
    dtype = _index_dtype(step * block, codes.device)
    base = groups.to(dtype) * width
    offsets = torch.arange(step, device=codes.device, dtype=dtype) * block
    buffer = torch.empty(n * step, dtype=dtype, device=codes.device)
    gathered = torch.empty(n * step, dtype=codes.dtype, device=codes.device)
    if features_last:
        base = base.unsqueeze(1)
    else:
        offsets = offsets.unsqueeze(1)
    return _GroupPass(n, step, block, features_last, base, offsets, buffer, gathered)


def _no_counts(n_groups: int, n_features: int, n_bins_max: int, device: torch.device, reduce: bool) -> torch.Tensor:
    """The zero counts of an empty pass (with ``reduce``, still summed over the ranks: every rank takes part)."""
    out = torch.zeros(n_groups, n_features, n_bins_max, dtype=torch.long, device=device)
    return D.all_reduce_sum(out) if reduce else out


def node_grid_counts(
    codes: torch.Tensor, rows: torch.Tensor, nodes: torch.Tensor, n_nodes: int, n_bins_max: int, *, reduce: bool = True
) -> torch.Tensor:
    """:func:`grid_counts` of several nodes (e.g. a level of the rule tree) in one pass over row-major codes.

    Args:
        codes: (N, F) bin codes; the code ``n_bins_max`` marks a missing value and is not counted.
        rows: int64 indices of the samples to count (a sample may appear in several nodes).
        nodes: the node of each entry of ``rows``, in ``[0, n_nodes)``.
        n_nodes: number of nodes.
        n_bins_max: number of grids of the widest feature.
        reduce: sum the counts over the ranks of a sharded DDP run (``False``: this process's counts, e.g. of one
            chunk of rows among several).

    Returns:
        (n_nodes, F, n_bins_max) int64 counts.

    Example:
        >>> import torch
        >>> codes = torch.tensor([[0, 1], [1, 1], [1, 2]], dtype=torch.uint8)
        >>> node_grid_counts(codes, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 1]), 2, 2).tolist()
        [[[1, 1], [0, 2]], [[0, 1], [0, 0]]]
    """
    n, n_features = rows.numel(), codes.shape[1]
    if n == 0 or n_features == 0:
        return _no_counts(n_nodes, n_features, n_bins_max, codes.device, reduce)
    width = n_bins_max + 1
    p = _group_pass(codes, n, n_features, nodes, n_nodes, width, features_last=True)
    parts = []
    with parallel_pass(n * n_features):
        for f0 in range(0, n_features, p.step):
            f1 = min(n_features, f0 + p.step)
            got = torch.index_select(codes[:, f0:f1], 0, rows, out=p.codes(f1 - f0))
            parts.append(counting.bincount(p.bins(got), (f1 - f0) * p.block))
    out = parts[0] if len(parts) == 1 else torch.cat(parts)
    out = out.view(n_features, n_nodes, width).permute(1, 0, 2)[:, :, :n_bins_max].contiguous()
    return D.all_reduce_sum(out) if reduce else out


def group_grid_counts(
    codes_t: torch.Tensor,
    rows: torch.Tensor | None,
    groups: torch.Tensor,
    n_groups: int,
    n_bins_max: int,
    *,
    reduce: bool = True,
) -> torch.Tensor:
    """:func:`node_grid_counts` on column-major codes ``codes_t`` (F, N), ``groups`` in the place of ``nodes`` (e.g. a
    beam's): the same counts, the codes gathered twice as fast. ``rows=None``: every sample once, in order (``groups``
    then has one entry per sample), read in place: nothing gathered.

    Example:
        >>> import torch
        >>> codes_t = torch.tensor([[0, 1, 1], [1, 1, 2]], dtype=torch.int16)
        >>> group_grid_counts(codes_t, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 1]), 2, 2).tolist()
        [[[1, 1], [0, 2]], [[0, 1], [0, 0]]]
        >>> group_grid_counts(codes_t, None, torch.tensor([0, 0, 1]), 2, 2).tolist()
        [[[1, 1], [0, 2]], [[0, 1], [0, 0]]]
    """
    n_features, n = codes_t.shape[0], codes_t.shape[1] if rows is None else rows.numel()
    if n == 0 or n_features == 0:
        return _no_counts(n_groups, n_features, n_bins_max, codes_t.device, reduce)
    width = n_bins_max + 1
    p = _group_pass(codes_t, n, n_features, groups, n_groups, width, features_last=False)
    # filled chunk by chunk in its final (group, feature, grid) layout: no concatenation and no permuted copy
    out = torch.empty(n_groups, n_features, n_bins_max, dtype=torch.long, device=codes_t.device)
    with parallel_pass(n * n_features):
        for f0 in range(0, n_features, p.step):
            f1 = min(n_features, f0 + p.step)
            got = codes_t[f0:f1]
            if rows is not None:  # gather: 2x faster than index_select
                got = torch.gather(got, 1, rows.expand(f1 - f0, -1), out=p.codes(f1 - f0))
            counts = counting.bincount(p.bins(got), (f1 - f0) * p.block).view(f1 - f0, n_groups, width)
            out[:, f0:f1] = counts[:, :, :n_bins_max].transpose(0, 1)
    return D.all_reduce_sum(out) if reduce else out


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
