"""Codes on disk: memory-mapped files in a folder the user names, removed afterwards.

When even the codes of streamed extraction do not fit in memory, they are kept in memory-mapped files of a fresh
folder inside ``codes_dir``. Touched pages would stay resident until the mapping goes, so a background thread hands
them back every :data:`TRIM_SECONDS` (``madvise(MADV_DONTNEED)``; a writer at once, :meth:`DiskCodes.trim`): they stay
in the page cache, and the resident memory is the search's working memory, not the codes. The folder is removed when
the extraction ends, also on an error, or when its extractor is closed or collected.
"""

from __future__ import annotations

import math
import mmap
import os
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

import torch

__all__ = ["TRIM_SECONDS", "DiskCodes", "check_codes_dir"]

#: how often the mapped pages are handed back to the page cache (seconds)
TRIM_SECONDS = 0.02


class _Trimmer:
    """A daemon thread that calls ``madvise(MADV_DONTNEED)`` on every mapping every ``interval`` seconds."""

    def __init__(self, maps: list[mmap.mmap], interval: float) -> None:
        self.maps, self.interval = maps, interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="torch_amore-codes-trim", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.trim()

    def trim(self) -> None:
        _hand_back(self.maps)

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join()


def _hand_back(maps: list[mmap.mmap]) -> None:
    """``madvise(MADV_DONTNEED)`` on each mapping: its pages leave the resident set (not the page cache)."""
    for mm in list(maps):
        mm.madvise(mmap.MADV_DONTNEED)


def _cleanup(folder: Path, trimmer: list[_Trimmer]) -> None:
    for t in trimmer:
        t.stop()
    shutil.rmtree(folder, True)


def check_codes_dir(codes_dir: Any) -> Path:
    """``codes_dir`` as a :class:`~pathlib.Path` of an existing folder (a ``TypeError`` for what is no path, a
    ``ValueError`` for a path that is no folder), checked before any pass over the data.

    Example:
        >>> check_codes_dir(3)
        Traceback (most recent call last):
        ...
        TypeError: Expected `codes_dir` to be a path (str or os.PathLike) of an existing folder, but got 3.
    """
    if not isinstance(codes_dir, (str, os.PathLike)):
        raise TypeError(
            f"Expected `codes_dir` to be a path (str or os.PathLike) of an existing folder, but got {codes_dir!r}."
        )
    root = Path(codes_dir)
    if not root.is_dir():
        raise ValueError(f"Expected `codes_dir` to be an existing folder, but got {str(root)!r}; create it first.")
    return root


class DiskCodes:
    """A fresh folder inside ``codes_dir`` holding memory-mapped tensors (``None``: tensors in memory).

    Example:
        >>> import tempfile, os
        >>> with tempfile.TemporaryDirectory() as root:
        ...     disk = DiskCodes(root)
        ...     t = disk.empty((4, 3), torch.uint8, torch.device("cpu"))
        ...     _ = t.fill_(7)
        ...     print(int(t.sum()), len(os.listdir(disk.folder)))
        ...     disk.close()
        ...     print(os.listdir(root))
        84 1
        []
    """

    def __init__(self, codes_dir: str | os.PathLike | None, trim_seconds: float = TRIM_SECONDS) -> None:
        self.folder: Path | None = None
        self._maps: list[mmap.mmap] = []
        self._trimmer: list[_Trimmer] = []  # started with the first mapping
        self._trim_seconds = trim_seconds
        if codes_dir is None:
            self._finalizer = None
            return
        root = check_codes_dir(codes_dir)
        self.folder = Path(tempfile.mkdtemp(prefix="torch_amore_codes_", dir=root))
        self._finalizer = weakref.finalize(self, _cleanup, self.folder, self._trimmer)
        self._count = 0

    def empty(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        """An uninitialised tensor: in memory, or in a memory-mapped file of the folder (CPU only)."""
        if self.folder is None:
            return torch.empty(shape, dtype=dtype, device=device)
        if device.type != "cpu":
            raise ValueError(
                f"Expected batches on the CPU to keep the codes on disk (`codes_dir`), but they are on {device}; "
                "pass codes_dir=None to keep them on the device, or yield CPU batches."
            )
        numel = math.prod(shape)
        nbytes = numel * torch.empty((), dtype=dtype).element_size()
        if nbytes == 0:
            return torch.empty(shape, dtype=dtype, device=device)
        self._count += 1
        path = self.folder / f"codes_{self._count}.bin"
        with open(path, "w+b") as f:
            f.truncate(nbytes)  # a sparse file: blocks are allocated as the codes are written
            mm = mmap.mmap(f.fileno(), nbytes)
        self._maps.append(mm)
        if not self._trimmer and hasattr(mmap, "MADV_DONTNEED"):  # Linux, macOS; elsewhere the pages stay mapped
            self._trimmer.append(_Trimmer(self._maps, self._trim_seconds))
        return torch.frombuffer(mm, dtype=dtype, count=numel).view(shape)

    def trim(self) -> None:
        """Hand the mapped pages back now, as the thread does every ``trim_seconds`` (e.g. after each block of codes
        written: then at most a block stays resident, however the thread is scheduled); in memory: nothing."""
        if self._trimmer:
            self._trimmer[0].trim()

    def close(self) -> None:
        """Stop handing pages back and remove the folder and its files (the tensors stay readable until released,
        on POSIX systems)."""
        if self._finalizer is not None:
            self._finalizer()
