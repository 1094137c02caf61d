"""Reductions across processes, so that a rule search over sharded data equals the search over the whole data.

When ``torch.distributed`` is initialised with more than one process (as under Lightning's DDP), every rank holds a
shard of the rows and calls the search collectively with the same arguments. The data is never gathered: counts are
int64 sums, min / max are reduced, k-means sums use fixed-point limbs, quantile edges a distributed binary search
(:mod:`torch_amore.grids.exact_edges`), categories the union of every rank's values; all exact. Every helper is a
no-op when not sharded or inside :func:`local_only`.

Example:
    >>> import torch
    >>> all_reduce_sum(torch.tensor([1, 2]))  # a single process: the input itself
    tensor([1, 2])
    >>> with local_only():
    ...     is_sharded()
    False
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from torch_amore._utils.sorting import sort_values
from torch_amore._utils.transfer import tensor_on

_STATE = threading.local()


def _dist() -> Any:
    import torch.distributed as dist

    return dist


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """Treat each rank's data as the whole data set in this block, e.g. to explain a full validation set per rank.

    Example:
        >>> with local_only():
        ...     world_size()
        1
    """
    previous = getattr(_STATE, "disabled", False)
    _STATE.disabled = True
    try:
        yield
    finally:
        _STATE.disabled = previous


def is_sharded() -> bool:
    """Whether the rows are sharded: a world size above 1, outside :func:`local_only`.

    Example:
        >>> is_sharded()
        False
    """
    if getattr(_STATE, "disabled", False):
        return False
    dist = _dist()
    return bool(dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1)


def world_size() -> int:
    """Number of processes sharing the rows (1 when not sharded)."""
    return _dist().get_world_size() if is_sharded() else 1


def rank() -> int:
    """This process's rank among those sharing the rows (0 when not sharded)."""
    return _dist().get_rank() if is_sharded() else 0


def _comm_device(t: torch.Tensor) -> torch.device:
    """The device the process group's backend communicates on for ``t`` (gloo: CPU, NCCL: the current GPU)."""
    backend = str(_dist().get_backend())
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    if backend == "gloo" or t.device.type not in ("cpu", "cuda"):
        return torch.device("cpu")
    return t.device


def _all_reduce(t: torch.Tensor, op_name: str) -> torch.Tensor:
    if not is_sharded():
        return t
    dist = _dist()
    dtype = t.dtype
    buf = t.detach().to(_comm_device(t), torch.int64 if dtype == torch.bool else dtype, copy=True).contiguous()
    dist.all_reduce(buf, op=getattr(dist.ReduceOp, op_name))
    return buf.to(t.device, dtype)


def all_reduce_sum(t: torch.Tensor) -> torch.Tensor:
    """Element-wise sum over ranks (a new tensor on ``t``'s device; ``t`` itself when not sharded).

    Example:
        >>> import torch
        >>> all_reduce_sum(torch.tensor(3))
        tensor(3)
    """
    return _all_reduce(t, "SUM")


def all_reduce_min(t: torch.Tensor) -> torch.Tensor:
    """Element-wise minimum over ranks (``t`` itself when not sharded)."""
    return _all_reduce(t, "MIN")


def all_reduce_max(t: torch.Tensor) -> torch.Tensor:
    """Element-wise maximum over ranks (``t`` itself when not sharded)."""
    return _all_reduce(t, "MAX")


def all_reduce_min_max(lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise minimum of ``lo`` and maximum of ``hi`` over ranks in one collective (``min = -max(-x)``)."""
    if not is_sharded():
        return lo, hi
    both = all_reduce_max(torch.cat([-lo.reshape(-1), hi.reshape(-1)]))
    return -both[: lo.numel()].reshape(lo.shape), both[lo.numel() :].reshape(hi.shape)


def global_count(n: int) -> int:
    """Sum of a per-rank count, e.g. the number of rows of all shards.

    Example:
        >>> global_count(5)
        5
    """
    return int(all_reduce_sum(torch.tensor(int(n), dtype=torch.int64))) if is_sharded() else int(n)


def all_ranks(flag: bool | torch.Tensor) -> bool | torch.Tensor:
    """Logical and over ranks of a bool or a bool tensor (element-wise)."""
    return _flag_over_ranks(flag, "MIN")


def any_rank(flag: bool | torch.Tensor) -> bool | torch.Tensor:
    """Logical or over ranks of a bool or a bool tensor (element-wise)."""
    return _flag_over_ranks(flag, "MAX")


def _flag_over_ranks(flag: bool | torch.Tensor, op_name: str) -> bool | torch.Tensor:
    """A bool or bool tensor reduced over ranks as 0/1 integers by ``op_name`` (MIN: and, MAX: or)."""
    if not is_sharded():
        return flag
    if isinstance(flag, torch.Tensor):
        return _all_reduce(flag.to(torch.int64), op_name).to(flag.device, torch.bool)
    return bool(_all_reduce(torch.tensor(int(bool(flag))), op_name))


def all_gather_unique(values: torch.Tensor) -> torch.Tensor:
    """Sorted union of every rank's values (1-D floating tensor, NaN ignored); ``torch.unique`` when not sharded.

    Example:
        >>> import torch
        >>> all_gather_unique(torch.tensor([2.0, 1.0, 2.0, float("nan")])).tolist()
        [1.0, 2.0]
    """
    local = torch.unique(values[~torch.isnan(values)])
    return torch.unique(all_gather_rows(local)[0]) if is_sharded() else local


def all_gather_rows(t: torch.Tensor) -> tuple[torch.Tensor, int]:
    """The rows (dim 0) of ``t`` of every rank, concatenated in rank order (the global rows of a sharded run), and
    the index of this rank's first row among them; ``(t, 0)`` when not sharded.

    Example:
        >>> import torch
        >>> all_gather_rows(torch.tensor([True, False]))
        (tensor([ True, False]), 0)
    """
    if not is_sharded():
        return t, 0
    dist = _dist()
    dev = _comm_device(t)
    sizes = [torch.zeros((), dtype=torch.int64, device=dev) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, tensor_on(t.shape[0], dtype=torch.int64, device=dev))
    counts = [int(s) for s in sizes]
    wire = torch.uint8 if t.dtype == torch.bool else t.dtype  # gloo gathers no bools
    padded = torch.zeros((max(counts), *t.shape[1:]), dtype=wire, device=dev)
    padded[: t.shape[0]] = t.to(dev, wire)
    parts = [torch.empty_like(padded) for _ in counts]
    dist.all_gather(parts, padded)
    rows = torch.cat([part[:c] for part, c in zip(parts, counts)]).to(t.device, t.dtype)
    return rows, sum(counts[: dist.get_rank()])


def unique_columns(values: torch.Tensor, cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Sorted distinct non-missing values of every column of ``values`` (N, k) on this process, batched.

    Returns a (k, min(cap, N)) NaN-padded table (the ``cap`` smallest) and the exact (k,) count of distinct values
    per column; no host synchronisation.

    Example:
        >>> import torch
        >>> table, count = unique_columns(torch.tensor([[2.0, 5.0], [1.0, float("nan")], [2.0, 5.0]]), 4)
        >>> table.tolist(), count.tolist()
        ([[1.0, 2.0, nan], [5.0, nan, nan]], [2, 1])
    """
    n, k = values.shape
    width = min(cap, n)
    if n == 0:
        return values.new_full((k, 0), float("nan")), torch.zeros(k, dtype=torch.long, device=values.device)
    srt = sort_values(values, dim=0)  # NaN last
    first = torch.ones_like(srt, dtype=torch.bool)
    first[1:] = srt[1:] != srt[:-1]
    first &= ~torch.isnan(srt)
    runs = first.cumsum(0, dtype=torch.int32 if n < 2**31 else torch.int64)  # distinct values up to each row
    count = runs[-1].long()
    want = torch.arange(1, width + 1, dtype=runs.dtype, device=values.device).expand(k, width)
    start = torch.searchsorted(runs.t().contiguous(), want.contiguous())  # (k, width): first row of each run
    table = srt.gather(0, start.clamp_(max=n - 1).t()).t()
    return table.masked_fill(want > count[:, None], float("nan")), count


def all_gather_unique_columns(values: torch.Tensor, cap: int) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`unique_columns` over the rows of every rank: the union of each column's distinct values.

    Each rank contributes its ``cap`` smallest values: where a rank holds more, the count is a lower bound above
    ``cap``. The result is the same on every rank.

    Example:
        >>> import torch
        >>> table, count = all_gather_unique_columns(torch.tensor([[3.0], [1.0], [3.0]]), 8)
        >>> table.tolist(), count.tolist()
        ([[1.0, 3.0, nan]], [2])
    """
    if not is_sharded():
        return unique_columns(values, cap)
    local, count = unique_columns(values, cap)
    dev = _comm_device(local)
    padded = torch.full((values.shape[1], cap), float("nan"), dtype=local.dtype, device=dev)
    padded[:, : local.shape[1]] = local.to(dev)
    parts = [torch.empty_like(padded) for _ in range(_dist().get_world_size())]
    _dist().all_gather(parts, padded)
    union, union_count = unique_columns(torch.cat(parts, dim=1).t().to(values.device), cap)  # cap wide
    return union, torch.maximum(union_count, all_reduce_max(count))


def broadcast_object(obj: Any, src: int = 0) -> Any:
    """Rank ``src``'s ``obj`` on every rank (picklable objects; ``obj`` itself when not sharded)."""
    if not is_sharded():
        return obj
    box = [obj]
    _dist().broadcast_object_list(box, src=src)
    return box[0]
