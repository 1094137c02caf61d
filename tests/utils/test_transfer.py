"""Tensors from host values (torch_amore._utils.transfer) equal ``torch.tensor`` of the same values."""

from __future__ import annotations

import math

import pytest
import torch

from torch_amore._utils.transfer import tensor_on


@pytest.mark.parametrize(
    ("data", "dtype"),
    [([[1, 2], [3, 4]], None), ([0.5, math.inf, -2.0], torch.float64), (7, torch.int64), ([True, False], torch.bool),
     ([], torch.float32)],
)  # fmt: skip
def test_tensor_on_equals_torch_tensor(data: object, dtype: torch.dtype | None) -> None:
    got = tensor_on(data, device="cpu", dtype=dtype)
    expected = torch.tensor(data, dtype=dtype)
    assert got.dtype == expected.dtype and got.shape == expected.shape and got.device.type == "cpu"
    assert torch.equal(got, expected)


def test_tensor_on_cuda_is_asynchronous() -> None:
    """On CUDA the copy comes from pinned memory, so it does not wait for the device (sync debug mode stays quiet)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device (the CPU route is torch.tensor itself)")
    import warnings

    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            got = tensor_on([[1.5, 2.5]], device="cuda")
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert not [w for w in caught if "synchronizing CUDA operation" in str(w.message)]
    assert got.cpu().tolist() == [[1.5, 2.5]]
