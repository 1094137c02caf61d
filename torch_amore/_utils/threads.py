"""How the rule search uses CPU threads: one thread for its many small operations, the caller's for large passes.

Split across threads, every small tensor operation waits for all of its threads, and on a busy machine one
descheduled thread stalls each of them (diabetes, 70,000 x 15, 2 busy cores: 0.58 s on one thread, 2.8 s on two).
So on CPU the search runs with ``torch.set_num_threads(1)`` (:func:`search_threads`) and gives the caller's count
back to passes over at least :data:`PARALLEL_MIN_ELEMENTS` elements (:func:`parallel_pass`). On small data,
independent stages may run on a second Python thread (:func:`beside`); large passes are not split across Python
threads, since a second thread's allocator arena raised the peak memory by a third at 1,000,000 x 16. Whole searches
that do not depend on each other (the permutations and half-samples of the evidence) run side by side on the
caller's threads, one torch thread each (:func:`side_by_side`).
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import torch

from torch_amore._utils import distributed as D

R = TypeVar("R")
T = TypeVar("T")

#: Passes over at least this many elements use the caller's thread count inside the search.
PARALLEL_MIN_ELEMENTS = 1 << 22

_CALLER_THREADS: contextvars.ContextVar[int | None] = contextvars.ContextVar("torch_amore_threads", default=None)


@contextmanager
def search_threads(device: torch.device | str = "cpu") -> Iterator[None]:
    """Run the block on one CPU thread, restoring the caller's thread count afterwards (re-entrant; a no-op off CPU).

    Example:
        >>> import torch
        >>> before = torch.get_num_threads()
        >>> with search_threads("cpu"):
        ...     torch.get_num_threads()
        1
        >>> torch.get_num_threads() == before
        True
    """
    if torch.device(device).type != "cpu" or _CALLER_THREADS.get() is not None:
        yield
        return
    caller = torch.get_num_threads()
    token = _CALLER_THREADS.set(caller)
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(caller)
        _CALLER_THREADS.reset(token)


@contextmanager
def parallel_pass(n_elements: int) -> Iterator[None]:
    """Inside :func:`search_threads`, run a pass over ``n_elements`` elements on the caller's threads when it is large.

    Example:
        >>> import torch
        >>> with search_threads("cpu"):
        ...     with parallel_pass(PARALLEL_MIN_ELEMENTS):
        ...         inside = torch.get_num_threads()
        ...     after = torch.get_num_threads()
        >>> after
        1
    """
    caller = _CALLER_THREADS.get()
    if caller is None or caller == 1 or n_elements < PARALLEL_MIN_ELEMENTS:
        yield
        return
    torch.set_num_threads(caller)
    try:
        yield
    finally:
        torch.set_num_threads(1)


#: Data of at most this many elements may run independent stages of the search side by side (:func:`beside`).
BESIDE_MAX_ELEMENTS = 1 << 21
_POOL: list[ThreadPoolExecutor] = []  # one thread, made on first use
_POOL_LOCK = threading.Lock()


def _forget_pool() -> None:
    """In a forked child the parent's pool thread does not exist: make a new pool on first use."""
    global _POOL_LOCK
    _POOL.clear()
    _POOL_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _in_modes(fn: Callable[[], R], inference: bool, grad: bool) -> R:
    """``fn()`` in the caller's autograd modes (thread-local: a pool thread sets them itself)."""
    with torch.inference_mode(inference), torch.set_grad_enabled(grad):
        return fn()


def beside(fn: Callable[[], R], n_elements: int) -> Callable[[], R]:
    """Start ``fn`` on a second thread beside this one's next work; returns the function that waits for its result
    (or raises what it raised).

    Only inside :func:`search_threads` with a caller's thread count of 2 or more, on at most
    :data:`BESIDE_MAX_ELEMENTS` elements, and outside a sharded run (whose collectives must come in the same order
    on every process); else ``fn`` runs at once. ``fn`` must not depend on what this thread does meanwhile.

    Example:
        >>> import torch
        >>> with search_threads("cpu"):
        ...     later = beside(lambda: torch.arange(4).sum(), 4)
        ...     now = torch.arange(3).sum()
        ...     int(later()) + int(now)
        9
    """
    caller = _CALLER_THREADS.get()
    if caller is None or caller < 2 or n_elements > BESIDE_MAX_ELEMENTS or D.is_sharded():
        return done(fn())
    with _POOL_LOCK:
        if not _POOL:  # made inside the search: a new thread takes its torch setting (1 thread) at its first operation
            _POOL.append(ThreadPoolExecutor(1, thread_name_prefix="torch_amore"))
    future = _POOL[0].submit(_in_modes, fn, torch.is_inference_mode_enabled(), torch.is_grad_enabled())
    return future.result


def done(result: R) -> Callable[[], R]:
    """A result already computed, in the form :func:`beside` returns.

    Example:
        >>> done(3)()
        3
    """
    return lambda: result


def caller_threads() -> int:
    """The caller's CPU thread count: that of :func:`search_threads` inside it, else torch's.

    Example:
        >>> import torch
        >>> caller_threads() == torch.get_num_threads()
        True
    """
    caller = _CALLER_THREADS.get()
    return torch.get_num_threads() if caller is None else caller


def side_by_side(fn: Callable[[T], R], items: Iterable[T], workers: int) -> Iterator[R]:
    """``fn(item)`` for each of ``items``, in their order, on up to ``workers`` Python threads side by side, each
    running its operations on one torch thread (and none of :func:`parallel_pass` or :func:`beside` of its own), in
    the caller's autograd modes. For independent, deterministic calls: the results are those of ``map(fn, items)``.

    In order, one after the other, with ``workers < 2`` and in a sharded run (whose collectives must come in the same
    order on every process). The first exception a call raises is raised; the calls not started are cancelled.

    Example:
        >>> list(side_by_side(lambda k: k * k, range(5), workers=2))
        [0, 1, 4, 9, 16]
    """
    items = list(items)
    if workers < 2 or len(items) < 2 or D.is_sharded():
        yield from map(fn, items)
        return
    inference, grad = torch.is_inference_mode_enabled(), torch.is_grad_enabled()

    def run(item: T) -> R:
        token = _CALLER_THREADS.set(1)  # the searches inside take one thread and start no other
        try:
            return _in_modes(lambda: fn(item), inference, grad)
        finally:
            _CALLER_THREADS.reset(token)

    # inside search_threads: the pool's threads take one torch thread at their first operation; the caller's count
    # comes back afterwards
    with search_threads("cpu"):
        pool = ThreadPoolExecutor(min(workers, len(items)), thread_name_prefix="torch_amore_side")
        try:
            yield from pool.map(run, items)
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
