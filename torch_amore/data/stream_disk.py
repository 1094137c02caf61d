"""Codes on disk: memory-mapped files in a folder the user names, removed afterwards.

When even the codes of streamed extraction (:mod:`torch_amore.search.stream`) do not fit in memory, they are kept in
files of a fresh folder inside ``codes_dir`` (:func:`torch.from_file`, shared: the operating system pages them in and
out
as the search reads them). The folder is removed when the extraction ends, also on an error; an extractor returned by
:func:`torch_amore.search.extract.prepare` removes it when it is closed or collected.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import weakref
from pathlib import Path

import torch

__all__ = ["DiskCodes"]


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

    def __init__(self, codes_dir: str | os.PathLike | None) -> None:
        self.folder: Path | None = None
        if codes_dir is None:
            self._finalizer = None
            return
        root = Path(codes_dir)
        if not root.is_dir():
            raise ValueError(f"Expected `codes_dir` to be an existing folder, but got {str(root)!r}; create it first.")
        self.folder = Path(tempfile.mkdtemp(prefix="torch_amore_codes_", dir=root))
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.folder, True)
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
        self._count += 1
        path = self.folder / f"codes_{self._count}.bin"
        numel = math.prod(shape)
        return torch.from_file(str(path), shared=True, size=numel, dtype=dtype).view(shape)

    def close(self) -> None:
        """Remove the folder and its files (the tensors stay readable until released, on POSIX systems)."""
        if self._finalizer is not None:
            self._finalizer()
