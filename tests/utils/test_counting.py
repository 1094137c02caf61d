"""The sync-free counts (torch_amore._utils.counting) against torch.bincount, and their device route on the CPU."""

from __future__ import annotations

import pytest
import torch

from torch_amore._utils.counting import bincount, index_counts


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
@pytest.mark.parametrize("size_extra", [0, 5])
def test_index_counts_equal_bincount(dtype: torch.dtype, size_extra: int) -> None:
    g = torch.Generator().manual_seed(3)
    index = torch.randint(0, 40, (5_000,), generator=g).to(dtype)
    size = 40 + size_extra
    expected = torch.bincount(index, minlength=size)
    for counts in (index_counts(index, size), bincount(index, size)):
        assert counts.dtype == torch.int64 and counts.shape == (size,)
        assert torch.equal(counts, expected)
    assert int(expected.sum()) == 5_000


def test_index_counts_weighted_and_empty() -> None:
    index = torch.tensor([2, 0, 2, 2])
    weights = torch.tensor([1.0, 0.0, 1.0, 0.5])
    counts = index_counts(index, 4, weights)
    assert counts.dtype == torch.float32
    assert counts.tolist() == [0.0, 0.0, 2.5, 0.0]  # sums of exactly representable halves
    assert index_counts(torch.zeros(0, dtype=torch.long), 3).tolist() == [0, 0, 0]
    assert bincount(torch.zeros(0, dtype=torch.long), 3).tolist() == [0, 0, 0]


def test_no_sync_op_on_the_device_route() -> None:
    """The device route is one zeros and one index_add_: no op that reads the data on the host."""
    from torch.profiler import ProfilerActivity, profile

    index = torch.randint(0, 10, (1_000,))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        index_counts(index, 10)
    names = {e.name for e in prof.events()}
    assert "aten::index_add_" in names
    assert not names & {"aten::bincount", "aten::_local_scalar_dense", "aten::max", "aten::min", "aten::aminmax"}


@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
def test_search_on_the_device_route_gives_the_same_rules(strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every count of the search taken by the device route (as on CUDA) gives the same rule lists as bincount."""
    from torch_amore import extract_rules
    from torch_amore._utils import counting

    g = torch.Generator().manual_seed(7)
    X = torch.randn(3_000, 6, generator=g)
    X[:, 4] = torch.randint(0, 4, (3_000,), generator=g).float()
    target = ((X[:, 0] > 0.2) & (X[:, 3] < 0.9)) ^ (torch.rand(3_000, generator=g) < 0.1)
    kw = {"max_length": 2, "strategy": strategy, "min_support": 100}
    expected = extract_rules(X, target, **kw)
    calls = []

    def device_route(*args: object) -> torch.Tensor:
        calls.append(1)
        return counting.index_counts(*args)

    monkeypatch.setattr(counting, "bincount", device_route)
    got = extract_rules(X, target, **kw)
    assert len(calls) > 0  # the search counted through the device route
    assert len(expected) > 0
    assert got == expected  # rule for rule: the same bounds, supports and fitnesses (from the same integer counts)
