"""Counts per integer value without a host sync on any device.

``torch.bincount`` on CUDA reads its input's minimum and maximum on the host (two syncs per call), although the
search knows the number of bins: off the CPU, :func:`bincount` adds into zeros of the known size with ``index_add_``.
Integer counts are exact either way.
"""

from __future__ import annotations

import torch

__all__ = ["bincount", "index_counts"]


def bincount(index: torch.Tensor, size: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """``torch.bincount(index, weights, minlength=size)`` for values of ``index`` in ``[0, size)``, without a sync.

    Example:
        >>> bincount(torch.tensor([0, 2, 2, 3]), 5)
        tensor([1, 0, 2, 1, 0])
    """
    if index.device.type == "cpu":
        return torch.bincount(index, weights=weights, minlength=size)
    return index_counts(index, size, weights)


def index_counts(index: torch.Tensor, size: int, weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`bincount` by ``index_add_`` into zeros, never reading the data on the host.

    Example:
        >>> index_counts(torch.tensor([1, 1, 0]), 3, torch.tensor([0.5, 1.0, 2.0]))
        tensor([2.0000, 1.5000, 0.0000])
    """
    if weights is None:
        weights = torch.ones((), dtype=torch.long, device=index.device).expand(index.numel())
    if index.dtype not in (torch.int32, torch.int64):  # ``index_add_`` takes no narrower index (int16 on the CPU)
        index = index.int()
    out = torch.zeros(size, dtype=weights.dtype, device=index.device)
    return out.index_add_(0, index, weights)
