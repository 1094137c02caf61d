"""Freed heap memory handed back to the operating system between the batches of a streamed pass.

glibc's ``malloc`` keeps freed blocks for reuse: blocks of a few MiB (the temporaries of a piece of a batch) go to its
heap once it has raised its threshold for mapping blocks of their own, and the heap returns only what lies above its
top. A pass that frees such temporaries and then reads the next batch would hold both. :func:`trim_heap` calls
``malloc_trim(0)``, which hands every free page of the heap back (about a millisecond); where the C library has no
``malloc_trim`` (macOS, Windows, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

__all__ = ["trim_heap"]


def _malloc_trim() -> Callable[[int], int] | None:
    """The C library's ``malloc_trim``, or ``None`` where there is none."""
    try:
        libc = ctypes.CDLL(None)  # the symbols the process has loaded, the C library's among them
    except (OSError, TypeError):  # Windows: no such handle
        return None
    return getattr(libc, "malloc_trim", None)


_MALLOC_TRIM = _malloc_trim()


def trim_heap() -> bool:
    """Hand the heap's free pages back to the operating system; whether the C library could (glibc).

    Example:
        >>> isinstance(trim_heap(), bool)
        True
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
