"""How the rule search uses CPU threads: one thread for its many small operations, the caller's for large passes.

Between a few passes over the whole data (binning, per-grid counts of all rows), the search issues many small tensor
operations (per node, per length, per candidate). Split across threads, every small operation waits for all of its
threads; on a busy machine (a browser, another training run, the other processes of a DDP job) one descheduled thread
stalls each of them. Measured on 2 cores beside other busy processes (diabetes, 70,000 x 15, ``max_length=3``): 0.58 s
on one thread and 2.8 s on torch's default two threads.

So, on CPU, :func:`torch_amore.extract_rules` runs the search with ``torch.set_num_threads(1)`` and gives the caller's
thread count back to passes over at least :data:`PARALLEL_MIN_ELEMENTS` elements (which split into large chunks per
thread and do gain from threads). The caller's setting is restored when the call returns or raises. Nothing changes
on other devices.
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import torch

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
