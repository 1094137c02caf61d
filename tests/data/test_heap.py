"""trim_heap (torch_amore.data.heap): the heap's free pages leave the resident set."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from torch_amore.data.heap import trim_heap


def _rss_anon_mib() -> float:
    """Anonymous resident memory of this process (Linux ``/proc/self/status``), in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return int(fields["RssAnon"].split()[0]) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_freed_blocks_below_the_heap_top_are_handed_back() -> None:
    if not trim_heap():
        pytest.skip("the C library has no malloc_trim (not glibc)")
    blocks = [bytearray(1 << 16) for _ in range(1024)]  # 64 MiB in heap blocks of 64 KiB, every page written
    pin = bytearray(1 << 16)  # a block above them keeps the heap's top in use: free() alone returns nothing
    held = _rss_anon_mib()
    blocks.clear()
    freed = _rss_anon_mib()
    if held - freed >= 32:
        pytest.skip("the allocator handed the blocks back itself (e.g. MALLOC_MMAP_THRESHOLD_ set)")
    assert trim_heap()
    assert freed - _rss_anon_mib() >= 32  # at least half of the freed blocks left the resident set
    assert len(pin) == 1 << 16
