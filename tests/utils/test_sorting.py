"""sort_values: the values of torch.sort, whichever library sorts them."""

from __future__ import annotations

import pytest
import torch

from torch_amore._utils.sorting import argsort_values, sort_values


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64,
                                   torch.int16, torch.uint8, torch.bool])  # fmt: skip
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_sort_values_equals_torch_sort(dtype: torch.dtype, dim: int) -> None:
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(257, 9, generator=g) * 4).round()  # many ties
    if dtype.is_floating_point:
        x[torch.rand(x.shape, generator=g) < 0.1] = float("nan")
        x[0, :] = -0.0  # signed zeros compare equal: only their order may differ, not the values
    x = x.abs().to(dtype) if dtype in (torch.uint8, torch.bool) else x.to(dtype)
    got, want = sort_values(x, dim), torch.sort(x, dim=dim).values
    assert got.shape == want.shape and got.dtype == want.dtype
    if dtype.is_floating_point:
        assert torch.equal(got.isnan(), want.isnan())
    assert torch.equal(torch.nan_to_num(got.double(), nan=7e7), torch.nan_to_num(want.double(), nan=7e7))


def test_sort_values_leaves_its_input_alone_and_handles_views() -> None:
    x = torch.tensor([[3.0, 1.0, 2.0], [0.0, -1.0, 5.0]])
    before = x.clone()
    assert sort_values(x.t(), dim=0).tolist() == [[1.0, -1.0], [2.0, 0.0], [3.0, 5.0]]
    assert sort_values(x[:, 1:], dim=1).tolist() == [[1.0, 2.0], [-1.0, 5.0]]
    assert torch.equal(x, before)
    assert sort_values(torch.empty(0, 3), dim=0).shape == (0, 3)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.int32])
@pytest.mark.parametrize("dim", [0, 1])
def test_argsort_values_sorts(dtype: torch.dtype, dim: int) -> None:
    """The order gathers the sorted values (ties in any order, so only the values are compared) and is a
    permutation."""
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(300, 7, generator=g) * 3).round()
    if dtype.is_floating_point:
        x[torch.rand(x.shape, generator=g) < 0.1] = float("nan")
    x = x.to(dtype)
    order = argsort_values(x, dim)
    assert order.dtype == torch.int64 and order.shape == x.shape
    every = torch.arange(x.shape[dim]).expand_as(order.movedim(dim, -1)).movedim(-1, dim)
    assert torch.equal(order.sort(dim=dim).values, every)
    got, want = x.gather(dim, order), torch.sort(x, dim=dim).values
    assert torch.equal(torch.nan_to_num(got.double(), nan=7e7), torch.nan_to_num(want.double(), nan=7e7))


@pytest.mark.parametrize("shape", [(1000,), (4, 257), (3, 1)])
def test_float32_argsort_orders_like_a_literal_sort(shape: tuple[int, ...]) -> None:
    """The packed-key float32 path: every value (signed zeros, subnormals, infinities, NaN of either sign, huge and
    tiny magnitudes, many ties) lands where a float64 sort puts it, NaN last, and ties keep their positions."""
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(shape, generator=g) * 3).round() * torch.tensor(10.0) ** torch.randint(-40, 38, shape, generator=g)
    specials = torch.tensor([-0.0, 0.0, 1e-45, -1e-45, float("inf"), -float("inf"), float("nan"), -float("nan")])
    flat = x.view(-1)
    flat[: min(8, flat.numel())] = specials[: min(8, flat.numel())]
    x = x.float()
    order = argsort_values(x, -1)
    assert order.dtype == torch.int64
    got = x.gather(-1, order).double()
    key = torch.where(x.isnan(), torch.tensor(float("inf")), x.double())  # a literal order: NaN after +inf
    rank = torch.stack([x.isnan().double(), key], -1)
    want = sorted(range(x.shape[-1]), key=lambda i: tuple(rank.view(-1, x.shape[-1], 2)[0, i].tolist()))
    first = x.view(-1, x.shape[-1])[0].double()[want]
    assert torch.equal(got.view(-1, x.shape[-1])[0].nan_to_num(7e300), first.nan_to_num(7e300))
    assert torch.equal(got.isnan(), torch.sort(x, -1).values.isnan())
    ties = order.view(-1, x.shape[-1])[0]
    same = got.view(-1, x.shape[-1])[0]
    tied = [i for i in range(len(ties) - 1) if same[i] == same[i + 1]]  # equal values (and -0.0 == 0.0)
    assert tied or x.shape[-1] < 100  # the long rows hold ties (rounded values): the check below is not vacuous
    assert all(ties[i] < ties[i + 1] for i in tied)  # in their original order


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.int64])
@pytest.mark.parametrize("dim", [0, 1])
def test_rows_of_small_integers_are_sorted_too(dtype, dim):
    """Rows of integers of int16's range (a binary column, a count) take a radix sort, the others (fractions, NaN,
    values past int16) numpy's argsort, in one call: every row comes out sorted, NaN last."""
    g = torch.Generator().manual_seed(3)
    n = 700
    rows = [
        torch.randint(0, 2, (n,), generator=g).double(),  # binary
        torch.randint(-40, 900, (n,), generator=g).double(),  # counts, some negative
        torch.randn(n, generator=g, dtype=torch.float64),  # fractions
        torch.randint(0, 3, (n,), generator=g).double() * 40_000,  # past int16
    ]
    if dtype.is_floating_point:
        nan = torch.randint(0, 5, (n,), generator=g).double()
        nan[::9] = float("nan")
        rows.append(nan)
    values = torch.stack(rows).to(dtype)
    values = values if dim == 1 else values.t().contiguous()
    order = argsort_values(values, dim=dim)
    assert order.dtype == torch.int64
    got = values.gather(dim, order)
    want = torch.sort(values, dim=dim).values
    assert torch.equal(torch.nan_to_num(got, nan=1e9), torch.nan_to_num(want, nan=1e9))
    assert torch.equal(torch.sort(order, dim=dim).values, torch.arange(n).expand_as(order) if dim == 1 else
                       torch.arange(n)[:, None].expand_as(order))  # fmt: skip
