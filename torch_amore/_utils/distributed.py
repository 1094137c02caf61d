"""Reductions across processes, so that a rule search over sharded data equals the search over the whole data.

When ``torch.distributed`` is initialised with more than one process (as under Lightning's DDP), every rank holds a
shard of the rows and calls :func:`torch_amore.extract_rules` (or the explainer) collectively with the same
arguments. The search never gathers the data: it reduces the statistics it needs at every step.

============================  ======================================================================  ============
statistic                     reduction                                                               exactness
============================  ======================================================================  ============
rows, target rows, per-grid   ``all_reduce`` sum of int64 counts (:func:`all_reduce_sum`)             exact
counts of every tree node
per-column min / max          ``all_reduce`` min / max (:func:`all_reduce_min`, :func:`all_reduce_max`) exact
(uniform grids, k-means)
k-means sums per centre       int64 fixed-point limbs summed (:func:`to_fixed_point`)                 exact (*)
quantile edges                distributed binary search for each order statistic on order-preserving  exact
                              int64 keys of the values (:func:`sharded_quantile_edges`)
categories                    union of every rank's unique values (:func:`all_gather_unique`,         exact
                              :func:`all_gather_unique_columns`)
int-valuedness, 0/1 columns   logical and / or across ranks (:func:`all_ranks`, :func:`any_rank`)      exact
============================  ======================================================================  ============

(*) Floating-point sums depend on the order of the additions, so k-means centres summed per rank and then across
ranks could differ from a one-process sum by an ulp and move a grid edge. :func:`torch_amore.grids.edges.kmeans_edges`
therefore sums integers: each value is rounded to a multiple of ``2**(e - 52)``, where ``2**e`` bounds the column's
magnitude (the float64 resolution at the column's largest value), split into two int64 limbs of 26 bits, and the
limbs are summed. Integer sums do not depend on the order, so every partition of the rows (one process, several
ranks, CUDA atomics) gives bit-identical centres.

Every helper is a no-op when ``torch.distributed`` is not initialised, when the world has one process, or inside
:func:`local_only` (use it to search the full data on each rank of a running process group independently).

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

from torch_amore._utils.division import divide
from torch_amore._utils.sorting import sort_values
from torch_amore._utils.transfer import tensor_on

_STATE = threading.local()

#: Sort key of a missing value: above the key of every float (+inf included).
_KEY_MISSING = torch.iinfo(torch.int64).max
#: Bits in the low fixed-point limb.
_LIMB_BITS = 26
#: Elements per temporary chunk (rows x features) in the passes over X, as in :mod:`torch_amore.grids.binning`.
_CHUNK_ELEMENTS = 1 << 22


def _dist() -> Any:
    import torch.distributed as dist

    return dist


@contextlib.contextmanager
def local_only() -> Iterator[None]:
    """Treat each rank's data as the whole data set in this block (no reductions), e.g. to explain a full
    validation set on every rank of a running DDP job.

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
    """Whether the rows are sharded over several processes: ``torch.distributed`` is initialised with a world size
    above 1 and :func:`local_only` is not active.

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
    values = values[~torch.isnan(values)]
    if not is_sharded():
        return torch.unique(values)
    dist = _dist()
    local = torch.unique(values)
    dev = _comm_device(local)
    sizes = [torch.zeros((), dtype=torch.int64, device=dev) for _ in range(dist.get_world_size())]
    dist.all_gather(sizes, tensor_on(local.numel(), dtype=torch.int64, device=dev))
    width = max(int(s) for s in sizes)
    padded = torch.full((width,), float("nan"), dtype=local.dtype, device=dev)
    padded[: local.numel()] = local.to(dev)
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    union = torch.cat(parts)
    return torch.unique(union[~torch.isnan(union)]).to(values.device)


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

    Returns a (k, width) table (``width = min(cap, N)``; NaN-padded) and the (k,) number of distinct values per
    column, exact even beyond ``cap`` (the table then holds the ``cap`` smallest). One sort of the columns and a
    search for the start of each run of equal values; no host synchronisation.

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

    On several ranks the table is ``cap`` wide and each rank contributes its ``cap`` smallest values: where a rank
    holds more, the returned count is only a lower bound (above ``cap``). The result is the same on every rank.

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


# --- exact k-means sums ----------------------------------------------------------------------------------------


def fixed_point_exponents(lo: torch.Tensor, hi: torch.Tensor) -> torch.Tensor:
    """(F,) int64 exponents ``e`` with ``|x| < 2**e`` for every value between each column's ``lo`` and ``hi``.

    Example:
        >>> import torch
        >>> fixed_point_exponents(torch.tensor([-3.0, 0.0]), torch.tensor([1.0, 0.5])).tolist()
        [2, 0]
    """
    peak = torch.maximum(lo.abs(), hi.abs()).nan_to_num(0.0).to("cpu", torch.float64)
    exps = torch.frexp(peak).exponent.to(torch.int64).clamp(min=-960)  # tiny columns: keep 2**(52 - e) finite
    return exps.to(lo.device)


def to_fixed_point(values: torch.Tensor, exponents: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """(2, N, F) int64 limbs ``(high, low)`` with ``values ~= (high * 2**26 + low) * 2**(e - 52)`` per column.

    Each value is rounded to the nearest multiple of ``2**(e - 52)`` (the float64 resolution at the column's largest
    magnitude); ``|high| <= 2**26`` and ``0 <= low < 2**26``, so sums of up to ``2**36`` rows cannot overflow. NaN
    must be replaced before the call. ``dim``: the dimension of ``values`` the exponents run along (the columns by
    default; ``dim=0`` for a transposed (F, N) table, whose limbs are then (2, F, N)).
    """
    dim = dim % values.ndim
    shift = (52 - exponents).to(values.device, values.dtype).reshape((-1,) + (1,) * (values.ndim - 1 - dim))
    scaled = torch.ldexp(values, shift).round_().to(torch.int64)
    out = torch.empty((2,) + scaled.shape, dtype=torch.int64, device=scaled.device)
    torch.bitwise_right_shift(scaled, _LIMB_BITS, out=out[0])
    torch.bitwise_and(scaled, (1 << _LIMB_BITS) - 1, out=out[1])  # = scaled - (high << bits): two's complement
    return out


def from_fixed_point(limbs: torch.Tensor, exponents: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Floating value of summed limbs ``(2, F, ...)`` (the inverse of :func:`to_fixed_point` up to one rounding).

    Example:
        >>> import torch
        >>> x = torch.tensor([[0.1, -2.5], [0.7, 1.25]], dtype=torch.float64)
        >>> e = fixed_point_exponents(x.amin(0), x.amax(0))
        >>> from_fixed_point(to_fixed_point(x, e).sum(1), e).tolist()
        [0.8, -1.25]
    """
    scale = fixed_point_scale(exponents.to(limbs.device), dtype)
    return fixed_point_value(limbs, scale.reshape(scale.shape + (1,) * (limbs.ndim - 1 - scale.ndim)))


def fixed_point_scale(exponents: torch.Tensor, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """``2**(e - 52)`` per exponent, the value of one unit of :func:`to_fixed_point`'s limbs (exact)."""
    return torch.ldexp(torch.ones((), dtype=dtype, device=exponents.device), (exponents - 52).to(dtype))


def fixed_point_value(limbs: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Floating value of summed limbs ``(2, ...)`` in units ``scale`` (:func:`fixed_point_scale`, broadcast against
    ``limbs[0]``): :func:`from_fixed_point` with the scale computed once, e.g. outside a loop."""
    high, low = limbs.to(scale.dtype).unbind(0)
    return (high * float(1 << _LIMB_BITS) + low) * scale


# --- exact quantiles --------------------------------------------------------------------------------------------


def _int_dtype(dtype: torch.dtype) -> torch.dtype:
    return torch.int64 if dtype == torch.float64 else torch.int32


def _to_keys(x: torch.Tensor) -> torch.Tensor:
    """Order-preserving integer keys of floats (``-0.0`` must be canonicalised to ``0.0`` first)."""
    bits = x.view(_int_dtype(x.dtype)).to(torch.int64)
    if x.dtype != torch.float64:
        return torch.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    return torch.where(bits < 0, bits ^ 0x7FFFFFFFFFFFFFFF, bits)


def _from_keys(keys: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    mask = 0x7FFFFFFFFFFFFFFF if dtype == torch.float64 else 0x7FFFFFFF
    bits = torch.where(keys < 0, keys ^ mask, keys)
    return bits.to(_int_dtype(dtype)).view(dtype)


def order_statistics(sorted_keys: torch.Tensor, ranks: torch.Tensor, n_valid: torch.Tensor) -> torch.Tensor:
    """Keys of the global order statistics ``ranks`` (0-based) of every row of ``sorted_keys``.

    Args:
        sorted_keys: (F, n) this rank's keys per column, sorted, missing values last as ``_KEY_MISSING``.
        ranks: (F, Q) wanted ranks among the column's non-missing values of all ranks.
        n_valid: (F,) non-missing values per column over all ranks.

    A binary search on the 64-bit key space: the answer is the smallest key ``m`` such that at least ``rank + 1``
    values (summed over ranks) are ``<= m``. Each of the at most 64 steps reduces an (F, Q) count table; the data
    never leave their rank. Columns without values give an undefined key.
    """
    n_feat = sorted_keys.shape[0]
    has = sorted_keys.shape[1] > 0
    lo = sorted_keys[:, 0] if has else torch.full((n_feat,), _KEY_MISSING, device=sorted_keys.device)
    valid_local = (sorted_keys != _KEY_MISSING).sum(1)
    last = sorted_keys.gather(1, (valid_local - 1).clamp(min=0)[:, None])[:, 0] if has else lo
    hi = torch.where(valid_local > 0, last, torch.full_like(last, torch.iinfo(torch.int64).min))
    lo, hi = all_reduce_min(lo), all_reduce_max(hi)
    lo = lo[:, None].expand_as(ranks).clone()
    hi = hi[:, None].expand_as(ranks).clone()
    need = ranks + 1
    active = (lo < hi) & (n_valid[:, None] > 0)
    while bool(active.any()):  # the same decision on every rank: it depends on reduced values only
        mid = (lo & hi) + ((lo ^ hi) >> 1)  # floor((lo + hi) / 2) without overflow
        count = all_reduce_sum(torch.searchsorted(sorted_keys, mid, right=True))
        enough = count >= need
        hi = torch.where(active & enough, mid, hi)
        lo = torch.where(active & ~enough, mid + 1, lo)
        active = lo < hi
    return lo


def sharded_quantile_edges(X: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-frequency edges of the rows of all ranks, bit-identical to
    :func:`torch_amore.grids.edges.quantile_edges` on the concatenated rows.

    The order statistics that the one-process version reads from a sorted column are found by
    :func:`order_statistics` and interpolated with the same formula in the same dtype.
    """
    dt = torch.float32 if X.device.type == "mps" else torch.float64
    n_feat = X.shape[1]
    n_max = int(all_reduce_max(tensor_on(X.shape[0], dtype=torch.int64, device=X.device)))
    q = divide(torch.arange(n_grids + 1, dtype=dt, device=X.device), n_grids)
    out = torch.empty(n_feat, n_grids + 1, dtype=dt, device=X.device)
    step = max(1, _CHUNK_ELEMENTS // max(1, n_max))  # the same chunks on every rank
    for f0 in range(0, n_feat, step):
        cols = X[:, f0 : f0 + step].to(dt) + 0.0  # -0.0 -> 0.0, so keys order like the values
        nan = torch.isnan(cols)
        keys = _to_keys(cols).masked_fill(nan, _KEY_MISSING)
        keys = sort_values(keys.t(), dim=1).contiguous()  # (f, n)
        valid = all_reduce_sum((~nan).sum(0))  # (f,)
        pos = q[:, None] * (valid - 1).clamp(min=0).to(dt)[None, :]  # (G+1, f)
        below = pos.floor().long()
        above = (below + 1).clamp(max=(valid - 1).clamp(min=0)[None, :].expand_as(below))
        frac = pos - below.to(dt)
        wanted = torch.cat([below, above]).t().contiguous()  # (f, 2(G+1))
        vals = _from_keys(order_statistics(keys, wanted, valid), dt).t()  # (2(G+1), f)
        v0, v1 = vals[: n_grids + 1], vals[n_grids + 1 :]
        edges = (v0 + (v1 - v0) * frac).t()
        out[f0 : f0 + step] = torch.where(valid[:, None] > 0, edges, torch.full_like(edges, float("nan")))
    return out
