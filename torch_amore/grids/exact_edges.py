"""Grid edges that do not depend on the device or on how the rows are split: division by a Python number that
rounds alike on every device, exact fixed-point sums of k-means centres, and exact quantiles over the shards of a
DDP run.

CUDA divides a tensor by a Python scalar through its reciprocal (``x * (1 / k)``), which can differ from ``x / k`` in
the last bit (``3 * (1 / 5)`` is ``0.6000000000000001``) and move a value on an edge into the next bin;
:func:`divide` divides by a zero-dimensional tensor instead, correctly rounded on every device.

Floating-point sums depend on the order of the additions, so k-means centres are summed as integers: each value is
rounded to a multiple of ``2**(e - 52)`` (the float64 resolution at the column's largest magnitude ``2**e``) and split
into two 26-bit int64 limbs (:func:`to_fixed_point`); integer sums give bit-identical centres for every partition of
the rows. Quantile edges of sharded rows come from a distributed binary search (:func:`sharded_quantile_edges`).
"""

from __future__ import annotations

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.sorting import sort_values
from torch_amore._utils.transfer import tensor_on
from torch_amore.data.column_stats import CHUNK_ELEMENTS

#: Sort key of a missing value: above the key of every float (+inf included).
_KEY_MISSING = torch.iinfo(torch.int64).max
#: Bits in the low fixed-point limb.
LIMB_BITS = 26


def divide(t: torch.Tensor, k: float) -> torch.Tensor:
    """``t / k``, rounded the same on the CPU and on CUDA (no multiplication by ``1 / k``).

    Example:
        >>> divide(torch.arange(6, dtype=torch.float64), 5).tolist()
        [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]
    """
    if t.device.type == "cpu":
        return t / k
    return t / torch.full((), k, dtype=t.dtype, device=t.device)


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


def to_fixed_point(
    values: torch.Tensor, exponents: torch.Tensor, dim: int = -1, out: torch.Tensor | None = None
) -> torch.Tensor:
    """(2, N, F) int64 limbs ``(high, low)`` with ``values ~= (high * 2**26 + low) * 2**(e - 52)`` per column.

    Each value is rounded to the nearest multiple of ``2**(e - 52)``; ``|high| <= 2**26`` and ``0 <= low < 2**26``,
    so sums of up to ``2**36`` rows cannot overflow. NaN must be replaced first. ``dim``: the dimension the exponents
    run along (``dim=0`` for an (F, N) table); ``out``: where to write the limbs (fresh when ``None``).
    """
    dim = dim % values.ndim
    shift = (52 - exponents).to(values.device, values.dtype).reshape((-1,) + (1,) * (values.ndim - 1 - dim))
    if out is None:
        out = torch.empty((2,) + values.shape, dtype=torch.int64, device=values.device)
    high, low = out.unbind(0)
    # float64 values are scaled in the high limb's memory (its bytes, viewed as float64): no temporary
    scaled = torch.ldexp(values, shift, out=high.view(values.dtype) if values.dtype == torch.float64 else None)
    low.copy_(scaled.round_())  # the integers, converted in place: no int64 temporary (fresh pages at a new size)
    torch.bitwise_right_shift(low, LIMB_BITS, out=high)
    low.bitwise_and_((1 << LIMB_BITS) - 1)  # = scaled - (high << bits): two's complement
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
    return (high * float(1 << LIMB_BITS) + low) * scale


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

    A binary search on the 64-bit key space for the smallest key ``m`` with at least ``rank + 1`` values ``<= m``
    over all ranks: at most 64 reductions of an (F, Q) table. Columns without values give an undefined key.
    """
    n_feat = sorted_keys.shape[0]
    has = sorted_keys.shape[1] > 0
    lo = sorted_keys[:, 0] if has else torch.full((n_feat,), _KEY_MISSING, device=sorted_keys.device)
    valid_local = (sorted_keys != _KEY_MISSING).sum(1)
    last = sorted_keys.gather(1, (valid_local - 1).clamp(min=0)[:, None])[:, 0] if has else lo
    hi = torch.where(valid_local > 0, last, torch.full_like(last, torch.iinfo(torch.int64).min))
    lo, hi = D.all_reduce_min(lo), D.all_reduce_max(hi)
    lo = lo[:, None].expand_as(ranks).clone()
    hi = hi[:, None].expand_as(ranks).clone()
    need = ranks + 1
    active = (lo < hi) & (n_valid[:, None] > 0)
    while bool(active.any()):  # the same decision on every rank: it depends on reduced values only
        mid = (lo & hi) + ((lo ^ hi) >> 1)  # floor((lo + hi) / 2) without overflow
        count = D.all_reduce_sum(torch.searchsorted(sorted_keys, mid, right=True))
        enough = count >= need
        hi = torch.where(active & enough, mid, hi)
        lo = torch.where(active & ~enough, mid + 1, lo)
        active = lo < hi
    return lo


def sharded_quantile_edges(X: torch.Tensor, n_grids: int) -> torch.Tensor:
    """(F, n_grids + 1) equal-frequency edges of the rows of all ranks, bit-identical to
    :func:`torch_amore.grids.edges.quantile_edges` on the concatenated rows.

    The order statistics come from :func:`order_statistics`, interpolated with the same formula in the same dtype.
    """
    dt = torch.float32 if X.device.type == "mps" else torch.float64
    n_feat = X.shape[1]
    n_max = int(D.all_reduce_max(tensor_on(X.shape[0], dtype=torch.int64, device=X.device)))
    q = divide(torch.arange(n_grids + 1, dtype=dt, device=X.device), n_grids)
    out = torch.empty(n_feat, n_grids + 1, dtype=dt, device=X.device)
    step = max(1, CHUNK_ELEMENTS // max(1, n_max))  # the same chunks on every rank
    for f0 in range(0, n_feat, step):
        cols = X[:, f0 : f0 + step].to(dt) + 0.0  # -0.0 -> 0.0, so keys order like the values
        nan = torch.isnan(cols)
        keys = _to_keys(cols).masked_fill(nan, _KEY_MISSING)
        keys = sort_values(keys.t(), dim=1).contiguous()  # (f, n)
        valid = D.all_reduce_sum((~nan).sum(0))  # (f,)
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
