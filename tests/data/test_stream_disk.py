"""Codes on disk (torch_amore.data.stream_disk): the mapped pages leave the resident set, the values stay."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest
import torch

from torch_amore.data.stream_disk import DiskCodes


def _rss_file_mib() -> float:
    """File-backed and shared resident memory of this process (Linux ``/proc/self/status``), in MiB."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return sum(int(fields[k].split()[0]) for k in ("RssFile", "RssShmem")) / 1024


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_mapped_pages_leave_the_resident_set(tmp_path: Path) -> None:
    disk = DiskCodes(tmp_path, trim_seconds=0.01)
    try:
        codes = disk.empty((64, 2**20), torch.uint8, torch.device("cpu"))  # 64 MiB in a file
        before = _rss_file_mib()
        codes.fill_(3)  # every page touched: resident until handed back
        deadline = time.monotonic() + 5.0
        while _rss_file_mib() - before > 16 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _rss_file_mib() - before <= 16  # at most a quarter of the mapping stays resident
        assert int(codes[:, ::4096].sum()) == 3 * 64 * 256  # the values are read back from the page cache
        assert len(list(disk.folder.iterdir())) == 1
    finally:
        disk.close()
    assert list(tmp_path.iterdir()) == []


def test_in_memory_without_a_folder() -> None:
    disk = DiskCodes(None)
    t = disk.empty((3, 2), torch.int16, torch.device("cpu"))
    assert t.shape == (3, 2) and t.dtype == torch.int16 and disk.folder is None
    disk.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_trim_hands_the_pages_back_at_once(tmp_path: Path) -> None:
    disk = DiskCodes(tmp_path, trim_seconds=3600.0)  # the thread waits an hour: only trim() hands pages back
    try:
        codes = disk.empty((64, 2**20), torch.uint8, torch.device("cpu"))
        before = _rss_file_mib()
        codes.fill_(5)
        assert _rss_file_mib() - before >= 48  # written pages are resident
        disk.trim()
        assert _rss_file_mib() - before <= 16
        assert int(codes[:, ::4096].sum()) == 5 * 64 * 256
    finally:
        disk.close()
    DiskCodes(None).trim()  # in memory: nothing to hand back
