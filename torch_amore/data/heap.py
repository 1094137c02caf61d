"""Freed heap memory handed back to the operating system between the batches of a streamed pass.

glibc's ``malloc`` keeps freed blocks of a few MiB in its heap, which returns only what lies above its top, so a pass
would hold a batch's freed temporaries while reading the next. :func:`trim_heap` calls ``malloc_trim(0)`` (about a
millisecond); where the C library has none (macOS, Windows, musl) it does nothing.
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
