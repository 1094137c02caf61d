"""Spawn a function on several gloo ranks of one machine and read back what each rank saved."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.multiprocessing as mp


def spawn_ranks(worker: Callable[..., None], world: int, tmp: Path, timeout: float = 240.0) -> list[Any]:
    """Run ``worker(rank, world, init_file, out_dir)`` in ``world`` spawned processes and load each rank's
    ``rank{r}.pt`` from ``tmp``; fail (not hang) when they do not finish within ``timeout`` seconds."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    ctx = mp.start_processes(
        worker, args=(world, str(tmp / "init"), str(tmp)), nprocs=world, join=False, start_method="spawn"
    )
    deadline = time.monotonic() + timeout
    while not ctx.join(timeout=1.0):
        if time.monotonic() > deadline:
            for p in ctx.processes:
                p.kill()
            pytest.fail(f"distributed workers did not finish within {timeout} s (a collective call deadlocked?)")
    return [torch.load(tmp / f"rank{r}.pt", weights_only=False) for r in range(world)]
