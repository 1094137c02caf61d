"""A callable source of batches for the tests of streamed extraction and batch-wise pruning."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch


def batches_of(
    X: torch.Tensor, target: torch.Tensor, sizes: int | list[int]
) -> Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]:
    """A zero-argument callable: batches of the given sizes (an int: all alike), cycling through the list."""
    sizes = [sizes] if isinstance(sizes, int) else list(sizes)

    def source() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        i, k = 0, 0
        while i < len(X):
            step = sizes[k % len(sizes)]
            yield X[i : i + step], target[i : i + step]
            i, k = i + step, k + 1

    return source
