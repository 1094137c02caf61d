"""Counting host syncs in tests: torch.profiler's sync ops, and ``Tensor.tolist`` calls (a device-to-host copy that
the CPU profiler does not show as an op)."""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim",
            "aten::unique_consecutive")  # fmt: skip


@dataclass
class Syncs:
    aten: int = 0  # .item(), int(t), bool(t), nonzero / boolean indexing, unique
    tolist: int = 0  # Tensor.tolist calls
    ops: int = 0  # top-level aten ops
    tolist_by_module: Counter = field(default_factory=Counter)  # Tensor.tolist calls by the calling module
    bincount: int = 0  # torch.bincount calls: no sync on CPU, two on CUDA (it reads its input's min and max)


@contextlib.contextmanager
def count_syncs() -> Iterator[Syncs]:
    """Counts, in the block, the sync ops seen by torch.profiler (CPU) and the calls of ``Tensor.tolist``."""
    out = Syncs()
    original = torch.Tensor.tolist

    def counting(self):
        out.tolist += 1
        out.tolist_by_module[sys._getframe(1).f_globals.get("__name__")] += 1
        return original(self)

    torch.Tensor.tolist = counting
    try:
        # every thread: on small data the search runs the rule tree on a second thread
        # (torch_amore._utils.threads.beside)
        all_threads = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
        with profile(activities=[ProfilerActivity.CPU], experimental_config=all_threads) as prof:
            yield out
    finally:
        torch.Tensor.tolist = original
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    out.aten = sum(e.name in SYNC_OPS for e in events)
    out.bincount = sum(e.name == "aten::bincount" for e in events)
    out.ops = sum(e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::") for e in events)
