"""Per-column facts of X from one fused pass: minimum and maximum of the non-missing values, whether they are all
integers, whether any is infinite.

The data checks, the inferred feature types and the uniform grids need them: :func:`column_stats` computes them for
every column in a few large chunks without a host synchronisation (reduced over the shards of a DDP run), and
:meth:`ColumnStats.fetch` brings them to the host in one transfer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on

#: Elements per temporary chunk (rows x features) in the passes over X that keep several temporaries per element.
CHUNK_ELEMENTS = 1 << 22

#: Elements per chunk of the facts pass: its scratch stays in cache.
_FACTS_CHUNK = 1 << 20

#: A pass over X in cache-sized chunks takes at most this many chunks: each chunk costs a dozen or more tensor
#: operations, and on big data fewer, larger chunks keep the operation count (and per-call overhead) bounded.
MAX_PASS_CHUNKS = 12

#: Column reductions run over at least this many columns at once: torch reduces a narrow (N, F) matrix over its rows
#: about ten times slower than the same values viewed as (N / k, k F).
_WIDE = 64

#: Integers up to this magnitude are exactly representable in float64; beyond, every float64 is whole.
EXACT_INT = 2**53

#: Values within this relative distance of an integer count as that integer in original units.
_SNAP = 1e-6


def work_dtype(device: torch.device) -> torch.dtype:
    """The floating dtype of thresholds and statistics on ``device`` (float64; float32 on MPS, which lacks it).

    Example:
        >>> import torch
        >>> work_dtype(torch.device("cpu"))
        torch.float64
    """
    return torch.float32 if device.type == "mps" else torch.float64


def chunk_len(n_rows: int, n_cols: int, elements: int | None = None) -> int:
    """Rows per chunk of about ``elements`` values of an (``n_rows``, ``n_cols``) matrix (at least one row).

    Example:
        >>> chunk_len(10**6, 1024)
        4096
    """
    return max(1, (CHUNK_ELEMENTS if elements is None else elements) // max(1, n_cols))


def pass_rows(n_rows: int, n_cols: int, elements: int, max_chunks: int | None = None) -> int:
    """Rows per chunk of a pass over an (``n_rows``, ``n_cols``) matrix: about ``elements`` values, at most
    ``max_chunks`` chunks, the rows shared evenly among the chunks (no small last chunk: the scratch of a chunk is
    no larger than the rows need).

    Example:
        >>> pass_rows(10_000, 16, 1 << 20), pass_rows(1_000_000, 128, 1 << 20), pass_rows(70_000, 15, 1 << 20)
        (10000, 83334, 35000)
    """
    n_chunks = MAX_PASS_CHUNKS if max_chunks is None else max_chunks
    rows = max(chunk_len(n_rows, n_cols, elements), -(-n_rows // n_chunks))
    return -(-n_rows // -(-n_rows // rows)) if n_rows else rows


def original_units(x: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """``x * scale + offset`` in float64, with values within 1e-6 (relative) of an integer snapped to it, so that
    feature types can be inferred in the user's units.

    Example:
        >>> import torch
        >>> x = torch.tensor([[-1.0], [0.999999999]], dtype=torch.float64)
        >>> original_units(x, torch.tensor([0.5], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64))
        tensor([[0.],
                [1.]], dtype=torch.float64)
    """
    raw = x.double() * scale
    raw += offset
    whole = raw.round()
    near = (raw - whole).abs() <= _SNAP * raw.abs().clamp_min(1.0)
    return torch.where(near, whole, raw)


@dataclass
class ColumnStats:
    """Facts about every column of X, on X's device.

    Attributes:
        lo: (F,) minimum of the non-missing values in the work dtype (NaN where a column is all missing).
        hi: (F,) maximum, likewise.
        is_int: (F,) bool: the column has a non-missing value and all are integers of magnitude at most ``2**53``.
        has_inf: (F,) bool: the column holds ``+inf`` or ``-inf``.
        units: the same facts for the values in original units (:func:`original_units`), when asked for.
    """

    lo: torch.Tensor
    hi: torch.Tensor
    is_int: torch.Tensor
    has_inf: torch.Tensor
    units: ColumnStats | None = None
    _host: HostColumnStats | None = field(default=None, repr=False)

    def binary(self) -> torch.Tensor:
        """(F,) bool: the non-missing values are exactly {0, 1} (both occur)."""
        return self.is_int & (self.lo == 0) & (self.hi == 1)

    def fetch(self) -> HostColumnStats:
        """The facts as Python lists, in one transfer to the host (one synchronisation; cached)."""
        if self._host is not None:
            return self._host
        parts = [self] if self.units is None else [self, self.units]
        rows = []
        for s in parts:
            diff = s.hi - s.lo  # in the work dtype, as the grids compute it
            rows += [s.lo, s.hi, s.is_int, s.has_inf, torch.isinf(diff), diff.abs().nan_to_num(0.0)]
        values = torch.stack([r.to(self.lo.dtype) for r in rows]).tolist()
        hosts = [
            HostColumnStats(*values[6 * i : 6 * i + 2], *_bools(values[6 * i + 2 : 6 * i + 5]), values[6 * i + 5])
            for i in range(len(parts))
        ]
        if len(hosts) == 2:
            hosts[0].units = hosts[1]
        self._host = hosts[0]
        return self._host


def _bools(rows: list[list[float]]) -> list[list[bool]]:
    return [[v != 0 for v in row] for row in rows]


@dataclass
class HostColumnStats:
    """:class:`ColumnStats` on the host: one list entry per column.

    Attributes:
        lo, hi, is_int, has_inf, units: as in :class:`ColumnStats`.
        overflow: ``hi - lo`` overflows to infinity in the work dtype.
        spread: ``|hi - lo|`` in the work dtype (0 where a column is all missing).
    """

    lo: list[float]
    hi: list[float]
    is_int: list[bool]
    has_inf: list[bool]
    overflow: list[bool]
    spread: list[float]
    units: HostColumnStats | None = None

    @property
    def binary(self) -> list[bool]:
        """Whether each column's non-missing values are exactly {0, 1}."""
        return [i and lo == 0 and hi == 1 for i, lo, hi in zip(self.is_int, self.lo, self.hi)]

    def kinds(self) -> list[str]:
        """``cat`` for columns of exactly {0, 1}, ``int`` for other integer-valued ones, else ``float``."""
        return ["cat" if b else ("int" if i else "float") for b, i in zip(self.binary, self.is_int)]


def column_reduce(x: torch.Tensor, op: Callable[..., torch.Tensor]) -> torch.Tensor:
    """``op(x, 0)`` for a (N, F) ``x`` and a reduction ``op`` such as :func:`torch.amin`, computed over a wide view.

    Example:
        >>> import torch
        >>> x = torch.arange(30.0).reshape(10, 3)
        >>> column_reduce(x, torch.amax)
        tensor([27., 28., 29.])
    """
    n, n_cols = x.shape
    k = max(1, _WIDE // max(1, n_cols))
    m = n - n % k
    if k == 1 or m == 0 or not x.is_contiguous():
        return op(x, 0)
    part = op(x[:m].view(m // k, k * n_cols), 0).view(k, n_cols)
    return op(torch.cat([part, x[m:]]) if m < n else part, 0)


def chunk_facts(chunk: torch.Tensor, buf: torch.Tensor, integers: bool) -> list[torch.Tensor]:
    """(min, max, largest fractional part) per column of ``chunk``, NaN ignored; ``buf`` is contiguous scratch space
    of ``chunk``'s shape and dtype."""
    keep = {"posinf": math.inf, "neginf": -math.inf}  # nan_to_num would clip +-inf otherwise
    lo = column_reduce(torch.nan_to_num(chunk, nan=math.inf, **keep, out=buf), torch.amin)
    hi = column_reduce(torch.nan_to_num(chunk, nan=-math.inf, **keep, out=buf), torch.amax)
    if not integers:
        return [lo, hi]
    frac = torch.nan_to_num(chunk, nan=0.0, **keep, out=buf).frac_().abs_()  # NaN for +-inf: not an integer
    return [lo, hi, column_reduce(frac, torch.amax)]  # amax propagates NaN


def accumulate_facts(acc: list[torch.Tensor] | None, new: list[torch.Tensor]) -> list[torch.Tensor]:
    if acc is None:
        return new
    out = [torch.minimum(acc[0], new[0]), torch.maximum(acc[1], new[1])]
    return out + [torch.maximum(acc[2], new[2])] if len(new) > 2 else out  # NaN (infinite values) propagates


def finish_facts(
    accs: list[list[torch.Tensor] | None], n_cols: int, dt: torch.dtype, device: torch.device, integers: bool
) -> ColumnStats:
    """Reduce the per-rank facts over the shards and mark all-missing columns: those of X, then (a second
    accumulator) those in original units (``ColumnStats.units``), reduced together."""
    inf = torch.full((n_cols,), math.inf, dtype=dt, device=device)
    none = [inf, -inf] + ([torch.zeros_like(inf)] if integers else [])  # no rows on this rank
    accs = [none if acc is None else acc for acc in accs]
    facts = [torch.cat(parts) if len(parts) > 1 else parts[0] for parts in zip(*accs)]  # of X, then in units
    lo, hi = D.all_reduce_min_max(facts[0].to(dt), facts[1].to(dt))  # of all shards in one collective
    has_inf = (lo == -math.inf) | (hi == math.inf)
    empty = lo > hi
    lo, hi = lo.masked_fill(empty, math.nan), hi.masked_fill(empty, math.nan)
    if integers:
        is_int = D.all_ranks(facts[2] == 0) & (lo >= -EXACT_INT) & (hi <= EXACT_INT)  # False where all missing (NaN)
    else:
        is_int = torch.zeros_like(empty)
    if len(accs) == 1:
        return ColumnStats(lo=lo, hi=hi, is_int=is_int, has_inf=has_inf)
    x, units = slice(None, n_cols), slice(n_cols, None)
    raw = ColumnStats(lo=lo[units], hi=hi[units], is_int=is_int[units], has_inf=has_inf[units])
    return ColumnStats(lo=lo[x], hi=hi[x], is_int=is_int[x], has_inf=has_inf[x], units=raw)


def column_stats(
    X: torch.Tensor,
    *,
    units: tuple[Sequence[float], Sequence[float]] | None = None,
    integers: bool = True,
) -> ColumnStats:
    """Per-column minimum, maximum, integrality and infinities of ``X`` (N, F) in one chunked pass.

    Args:
        X: floating (N, F) values; NaN marks a missing value.
        units: per-column ``(scale, offset)``: also the facts of ``X * scale + offset`` (``ColumnStats.units``).
        integers: also whether each column holds only integers (``False``: ``is_int`` is all ``False``).

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.0, 1.5], [1.0, float("nan")], [0.0, -2.0]])
        >>> s = column_stats(X).fetch()
        >>> s.lo, s.hi, s.is_int, s.kinds()
        ([0.0, -2.0], [1.0, 1.5], [True, False], ['cat', 'float'])
    """
    n, n_cols = X.shape
    dt = work_dtype(X.device)
    # in original units: several float64 temporaries per value, so chunks of CHUNK_ELEMENTS
    step = pass_rows(n, n_cols, _FACTS_CHUNK) if units is None else chunk_len(n, n_cols)
    if units is not None:
        scale, offset = (tensor_on(list(v), dtype=torch.float64, device=X.device) for v in units)
    acc = raw_acc = buf = raw_buf = None
    for r0 in range(0, n, step):
        chunk = X[r0 : r0 + step]
        buf = torch.empty(chunk.shape, dtype=chunk.dtype, device=X.device) if buf is None else buf[: len(chunk)]
        acc = accumulate_facts(acc, chunk_facts(chunk, buf, integers))
        if units is not None:
            raw = original_units(chunk, scale, offset)
            raw_buf = torch.empty_like(raw) if raw_buf is None else raw_buf[: len(raw)]
            raw_acc = accumulate_facts(raw_acc, chunk_facts(raw, raw_buf, integers))
    return finish_facts([acc] if units is None else [acc, raw_acc], n_cols, dt, X.device, integers)
