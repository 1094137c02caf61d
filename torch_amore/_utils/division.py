"""Division by a Python number that rounds the same on every device.

CUDA divides a tensor by a Python scalar through the scalar's reciprocal (``x * (1 / k)``), which can differ from
``x / k`` in the last bit: ``3 / 5`` is ``0.6`` but ``3 * (1 / 5)`` is ``0.6000000000000001``. Grid edges built
from such fractions then differ between the CPU and the GPU by one unit in the last place, enough to move a value
that sits exactly on an edge into the next bin. :func:`divide` divides by a zero-dimensional tensor on the
tensor's own device instead, which every device computes element by element, correctly rounded (the CPU divides by
the number itself, correctly rounded too, without the extra operation).
"""

from __future__ import annotations

import torch

__all__ = ["divide"]


def divide(t: torch.Tensor, k: float) -> torch.Tensor:
    """``t / k``, rounded the same on the CPU and on CUDA (no multiplication by ``1 / k``).

    Example:
        >>> divide(torch.arange(6, dtype=torch.float64), 5).tolist()
        [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    """
    if t.device.type == "cpu":
        return t / k
    return t / torch.full((), k, dtype=t.dtype, device=t.device)
