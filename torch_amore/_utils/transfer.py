"""Tensors made from host values (Python lists and numbers) on a device, without waiting for the device.

``torch.tensor(values, device="cuda")`` copies from pageable memory, which blocks the host until the device has run
every queued kernel. :func:`tensor_on` stages the values in pinned memory and copies them asynchronously, in stream
order (PyTorch keeps the pinned block alive until the copy is done). Other devices get ``torch.tensor`` itself.
"""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["tensor_on"]


def tensor_on(data: Any, *, device: torch.device | str, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``torch.tensor(data, dtype=dtype, device=device)``, copied to CUDA without a host sync.

    Example:
        >>> tensor_on([[1, 2], [3, 4]], device="cpu", dtype=torch.int32)
        tensor([[1, 2],
                [3, 4]], dtype=torch.int32)
    """
    device = torch.device(device)
    if device.type != "cuda":
        return torch.tensor(data, dtype=dtype, device=device)
    return torch.tensor(data, dtype=dtype).pin_memory().to(device, non_blocking=True)
