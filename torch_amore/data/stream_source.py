"""Re-iterable sources of ``(X_batch, target_batch)`` for streamed extraction, read pass by pass and checked.

A source is a :class:`torch.utils.data.DataLoader` (not shuffling), a :class:`torch.utils.data.Dataset` of
``(x, target)`` samples (batched by a DataLoader of :data:`DATASET_BATCH` rows), a callable returning a fresh iterator
of batches, or any other re-iterable object. Every pass must yield the same rows in the same order: :class:`BatchSource`
checks each batch and compares each later pass with the first by its row count and :class:`RowFingerprint`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, RandomSampler

from torch_amore._utils import distributed as D
from torch_amore._utils.transfer import tensor_on
from torch_amore.data import validation as V
from torch_amore.data.heap import trim_heap

__all__ = ["DATASET_BATCH", "FINGERPRINT_COLUMNS", "BatchSource", "RowFingerprint", "is_source"]

#: Rows per batch when a Dataset of samples is read through a DataLoader.
DATASET_BATCH = 4096

#: What a user may pass instead, quoted by the errors.
HELP = (
    "pass a DataLoader without shuffling, a Dataset, or a callable that returns a fresh iterator of "
    "(X_batch, target_batch) pairs, the same rows in the same order each time"
)

_MASK64 = (1 << 64) - 1

#: Columns a :class:`RowFingerprint` reads (evenly spaced): enough to see rows in another order, at little cost.
FINGERPRINT_COLUMNS = 16

#: Rows a :class:`RowFingerprint` hashes at once: its temporaries (a few copies of the read columns) stay near 1 MiB
#: whatever the batch size.
_FINGERPRINT_ROWS = 1 << 14


def _signed(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def is_source(obj: Any) -> bool:
    """Whether ``obj`` is a source of batches rather than an in-memory array (tensor, numpy array, DataFrame, list).

    A list or tuple of ``(X_batch, target_batch)`` pairs of arrays is a source (a re-iterable one); a list of rows is
    not.

    Example:
        >>> import torch
        >>> is_source(torch.zeros(2, 2)), is_source(lambda: iter([])), is_source([(torch.zeros(2, 2), torch.ones(2))])
        (False, True, True)
    """
    if isinstance(obj, Dataset):
        return True
    if isinstance(obj, (list, tuple)) and obj and all(_is_pair_of_arrays(b) for b in obj):
        return True
    if isinstance(obj, (torch.Tensor, np.ndarray, list, tuple, dict, str, bytes)):
        return False
    if any(hasattr(obj, a) for a in ("to_numpy", "toarray", "__array__", "shape", "dtype")):  # array-likes
        return False
    return callable(obj) or hasattr(obj, "__iter__")


def _is_pair_of_arrays(batch: Any) -> bool:
    """Whether ``batch`` is an ``(X_batch, target_batch)`` pair of a 2-D and a 1-D array or tensor."""
    if not (isinstance(batch, (tuple, list)) and len(batch) == 2):
        return False
    x, t = batch
    return getattr(x, "ndim", None) == 2 and getattr(t, "ndim", None) == 1


class RowFingerprint:
    """An order-sensitive hash of rows and their target, with every column's range, accumulated batch by batch.

    Each row's value bits (of at most :data:`FINGERPRINT_COLUMNS` columns) and target bit are mixed, weighted by its
    global position and summed modulo 2**64 (integer arithmetic wraps), so the result does not depend on batch sizes;
    beside it, the smallest and largest value of every column (exact whatever the batches), so that a column the hash
    does not read cannot change its values' range unseen (a value beyond the first pass's range would be coded at the
    end of its grid).

    Example:
        >>> import torch
        >>> X, t = torch.rand(6, 3, generator=torch.Generator().manual_seed(0)), torch.tensor([1, 0, 1, 0, 0, 1]) > 0
        >>> a, b, c = RowFingerprint(3, X.device), RowFingerprint(3, X.device), RowFingerprint(3, X.device)
        >>> a.update(X, t); b.update(X[:2], t[:2]); b.update(X[2:], t[2:]); c.update(X.flip(0), t.flip(0))
        >>> a.value() == b.value(), a.value() == c.value()
        (True, False)
    """

    def __init__(self, width: int, device: torch.device) -> None:
        k = min(width, FINGERPRINT_COLUMNS)
        self._columns = tensor_on([j * width // k for j in range(k)], device=device)
        self._all = k == width
        w = [_signed(j * 0x9E3779B97F4A7C15 + 0xBF58476D1CE4E5B9) for j in range(k)]
        self._weights = tensor_on(w, dtype=torch.int64, device=device)
        self._weights32 = torch.tensor([((v >> 32) ^ v) & 0xFFFFFFFF | 1 for v in w], dtype=torch.int64)
        self._weights32 = torch.where(self._weights32 >= 2**31, self._weights32 - 2**32, self._weights32).to(
            device=device, dtype=torch.int32
        )
        self._acc = torch.zeros((), dtype=torch.int64, device=device)
        self._range: torch.Tensor | None = None  # (2, width): each column's min and max (NaN where one was NaN)
        self.rows = 0

    def update(self, X: torch.Tensor, target: torch.Tensor) -> None:
        """Add the rows ``X`` (n, F) and their target (n,), which follow the rows seen so far (hashed
        :data:`_FINGERPRINT_ROWS` rows at a time)."""
        for part, t in zip(X.split(_FINGERPRINT_ROWS), target.split(_FINGERPRINT_ROWS)):
            self._update(part, t)
        if X.shape[0]:
            lo, hi = X.amin(0), X.amax(0)  # on a CPU 5 x faster than torch.aminmax(X, dim=0) over rows
            both = torch.stack([lo, hi])
            if self._range is None:
                self._range = both
            else:
                self._range = torch.stack([torch.minimum(self._range[0], lo), torch.maximum(self._range[1], hi)])

    def _update(self, X: torch.Tensor, target: torch.Tensor) -> None:
        n = X.shape[0]
        size = X.element_size()
        X = X if self._all else X.index_select(1, self._columns)
        bits = X.contiguous().view({2: torch.int16, 4: torch.int32, 8: torch.int64}[size])
        if size == 8:
            h = (bits * self._weights).sum(1)
        else:  # products in 32 bits (wrapping), their row sums in 64: a third of the work of 64-bit products
            h = (bits.to(torch.int32) * self._weights32).sum(1, dtype=torch.int64)
        h += target.long() * _signed(0xD6E8FEB86659FD93)
        pos = torch.arange(self.rows, self.rows + n, dtype=torch.int64, device=X.device)
        self._acc += (h * (pos * _signed(0x94D049BB133111EB) + 1)).sum()
        self.rows += n

    def value(self) -> tuple[int, bytes]:
        """The hash and the columns' ranges (as bytes; one host sync each)."""
        ranges = b"" if self._range is None else self._range.to("cpu", torch.float64).numpy().tobytes()
        return int(self._acc), ranges


class BatchSource:
    """A checked, re-iterable view of a user's source of ``(X_batch, target_batch)`` batches.

    Args:
        source: a DataLoader, a Dataset of ``(x, target)`` samples, a callable returning a fresh iterator of
            batches, or a re-iterable object.
        name: the argument's name in error messages.
        trim: hand the heap's free pages back to the operating system after each batch
            (:func:`torch_amore.data.heap.trim_heap`).

    The first pass learns the width, dtype and device of the features, the number of rows and their fingerprint;
    every later pass must match them.

    Example:
        >>> import torch
        >>> X, t = torch.rand(10, 2, generator=torch.Generator().manual_seed(0)), torch.arange(10) % 2 == 0
        >>> src = BatchSource(lambda: ((X[i : i + 4], t[i : i + 4]) for i in range(0, 10, 4)))
        >>> [len(b) for b, _ in src.batches("facts")], src.rows, src.width
        ([4, 4, 2], 10, 2)
    """

    def __init__(self, source: Any, name: str = "X", trim: bool = False) -> None:
        self.name, self.trim = name, trim
        self._fresh = _fresh_iterators(source, name)
        self.rows: int | None = None
        self.width: int | None = None
        self.dtype: torch.dtype | None = None
        self.device: torch.device | None = None
        self._fingerprint: tuple[int, bytes] | None = None
        self._last: Iterator | None = None
        self.n_passes = 0

    def batches(self, what: str) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """One pass over the source (``what``: its purpose, for messages): checked ``(X_batch, target_batch)``
        pairs, X floating (n, F) and the target boolean (n,) on X's device; an unfinished pass is not compared."""
        it = self._fresh()
        if it is self._last and self._last is not None:
            raise ValueError(
                f"Expected `{self.name}` to give a fresh iterator for each pass, but the {what} pass got the same "
                f"iterator object as the pass before (a one-shot iterator); {HELP}."
            )
        self._last = it
        first = self.rows is None
        fp = None
        seen = index = 0
        for batch in it:  # not enumerate(it): its result tuple holds a batch until the source makes the next
            X, target = self._check(batch, index, what, first)
            if fp is None:
                fp = RowFingerprint(X.shape[1], X.device)
            if not first and seen + X.shape[0] > self.rows:
                self._count_error(what, f"more than {self.rows}")
            index += 1
            if X.shape[0] == 0:  # nothing to add (a batch of no rows is allowed)
                continue
            fp.update(X, target)
            seen += X.shape[0]
            yield X, target
            del batch, X, target  # not held while the source makes the next batch
            if self.trim:
                trim_heap()
        self.n_passes += 1
        self._check_pass(what, first, seen, fp)

    def _check_pass(self, what: str, first: bool, seen: int, fp: RowFingerprint | None) -> None:
        """The first pass learns the row count and fingerprint; a later one is compared with them."""
        if first:
            if D.any_rank(seen == 0):  # every rank of a DDP run raises together
                whose = "" if not D.is_sharded() else f" on rank {D.rank()}" if seen == 0 else " on another rank"
                raise ValueError(
                    f"Expected `{self.name}` to yield at least one row{' on every rank' if D.is_sharded() else ''}, "
                    f"but it yielded none{whose}; {HELP}."
                )
            self.rows, self._fingerprint = seen, fp.value()
            return
        if seen != self.rows:
            self._count_error(what, str(seen))
        if fp.value() != self._fingerprint:
            raise ValueError(
                f"Expected `{self.name}` to yield the same rows in the same order on every pass, but the {what} pass "
                "yielded them in another order or with other values (a shuffling loader or random augmentation?); "
                f"{HELP}, e.g. DataLoader(..., shuffle=False)."
            )

    def _count_error(self, what: str, got: str) -> None:
        one_shot = got == "0"
        hint = " (a one-shot iterator or generator is exhausted after one pass)" if one_shot else ""
        raise ValueError(
            f"Expected `{self.name}` to yield {self.rows} rows on every pass, as on the first, but the {what} pass "
            f"yielded {got}{hint}; {HELP}."
        )

    def _check(self, batch: Any, index: int, what: str, first: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The checked ``(X_batch, target_batch)`` of batch ``index``."""
        if not isinstance(batch, (tuple, list)) or len(batch) != 2:
            raise TypeError(
                f"Expected each batch of `{self.name}` to be a pair (X_batch, target_batch), but batch {index} of the "
                f"{what} pass is a {type(batch).__name__}"
                + (f" of length {len(batch)}" if isinstance(batch, (tuple, list)) else "")
                + "."
            )
        X, _ = V.to_tensor_2d(batch[0], "X_batch")
        if self.width is None:
            self.width, self.dtype, self.device = X.shape[1], X.dtype, X.device
        for label, got, want, fix in (
            ("width", X.shape[1], self.width, "yield batches of the same columns"),
            ("dtype", X.dtype, self.dtype, f"convert every batch, e.g. X_batch.to({self.dtype})"),
            ("device", X.device, self.device, f"move every batch to one device, e.g. X_batch.to('{self.device}')"),
        ):
            if got != want:
                raise ValueError(
                    f"Expected every batch of `{self.name}` to have the {label} of its first batch ({want}), but batch "
                    f"{index} of the {what} pass has {got}; {fix}."
                )
        return X, _target(batch[1], X.shape[0], X.device, index)


def _target(target: Any, n: int, device: torch.device, index: int) -> torch.Tensor:
    """The boolean (n,) target of batch ``index`` on ``device``."""
    t = target if isinstance(target, torch.Tensor) else torch.as_tensor(np.asarray(target))
    t = t.reshape(-1) if t.ndim == 2 and 1 in t.shape else t
    if t.ndim != 1 or t.shape[0] != n:
        raise ValueError(
            f"Expected the target of each batch to have one entry per row of X_batch ({n}), but batch {index} has "
            f"shape {tuple(t.shape)}."
        )
    if t.dtype != torch.bool:
        bad = torch.isnan(t).any() if t.is_floating_point() else False
        if bool(bad) or not bool(((t == 0) | (t == 1)).all()):
            raise TypeError(
                f"Expected the target of each batch to be boolean (or 0/1), but batch {index} holds other values; "
                "yield a mask, e.g. (labels == 1)."
            )
        t = t != 0
    return t.to(device)


def _fresh_iterators(source: Any, name: str) -> Callable[[], Iterator]:
    """A function giving a new iterator over ``source``'s batches for each pass."""
    if isinstance(source, DataLoader):
        if isinstance(source.sampler, RandomSampler):
            raise ValueError(
                f"Expected `{name}` to yield its rows in the same order on every pass, but the DataLoader shuffles "
                f"(a RandomSampler); pass DataLoader(..., shuffle=False)."
            )
        return lambda: iter(source)
    if isinstance(source, Dataset):
        loader = DataLoader(source, batch_size=DATASET_BATCH, shuffle=False)
        return lambda: iter(loader)
    if hasattr(source, "__next__") or (hasattr(source, "__iter__") and iter(source) is source):
        raise ValueError(
            f"Expected `{name}` to be re-iterable (it is read two or more times), but got a one-shot "
            f"{type(source).__name__}; {HELP}, e.g. `lambda: make_batches()`."
        )
    if callable(source):

        def call() -> Iterator:
            out = source()
            try:
                return iter(out)
            except TypeError:
                raise TypeError(
                    f"Expected the callable `{name}` to return an iterator of (X_batch, target_batch) pairs, but it "
                    f"returned a {type(out).__name__}."
                ) from None

        return call
    return lambda: iter(source)
