"""The memory model: what one rule search needs, what the machine or device can give, and the check between them.

:func:`check_memory` compares :func:`estimate_memory` (the peak working memory of one search beyond the caller's
data) with :func:`available_memory` before any heavy work, and raises a ``MemoryError`` naming the size, the limit
and the knobs that shrink the search.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore._utils import distributed as D

__all__ = ["available_memory", "check_memory", "conversion_memory", "estimate_memory", "search_memory"]

#: Peak bytes of working memory beyond X itself, per strategy: per searched value (row x feature: the grid codes and
#: the passes' buffers, which are sized to the data) and per row (the target and its counts, the row indices of the
#: rule tree's levels, the beam's node masks, the polished rule sets' sorted columns, masks and prefix tables), plus
#: a floor (the buffers' minimum sizes). An upper envelope of the peak resident memory and of the peak address space
#: measured on CPU (``benchmarks/bench_memory.py``; docs/performance.md, Memory).
_BYTES_PER_VALUE = {"paper": 3.5, "beam": 6, "exact": 12}
_BYTES_PER_ROW = {"paper": 100, "beam": 150, "exact": 100}
_FLOOR_BYTES = {"paper": 64 << 20, "beam": 100 << 20, "exact": 120 << 20}
#: The paper tree's count and candidate tables per (feature, grid), plus per node of its widest level and
#: (feature, grid) (about 4 KiB per grid cell measured at 2,000 and 30,000 quantile grids).
_BYTES_PER_GRID_CELL = 4096
_BYTES_PER_NODE_CELL = 256
#: The beam's (nodes x features x fine grids) int64 count tables, for about 16 nodes at a time, per (feature, grid).
_BYTES_PER_FINE_CELL = 128
_KMEANS_BYTES_PER_VALUE = 64  # sorted columns and fixed-point prefix sums, a chunk of at most 2**22 values at a time
_FINE_GRIDS = 1024  # the beam's fine grids per feature (at most)
#: Beyond ``_MANY_GRIDS`` grids per feature the rule tree's per-node counts and candidate intervals grow with rows x
#: features x grids (grids up to the number of rows: no more can hold a sample): this many bytes per (row, feature,
#: grid beyond ``_MANY_GRIDS``). Measured at 200 to 30,000 quantile and uniform grids, 20,000 to 300,000 rows; the
#: peak of identical calls varies (100,000 x 128 at 300 grids: 351 to 1,076 MiB), this covers the largest seen.
_BYTES_PER_VALUE_GRID = 0.3
_MANY_GRIDS = 100
#: Below this many rows the polish keeps each polished column sorted (an int32 order and three flags per row).
_SORTED_ROWS = 1 << 18


def search_memory(
    n: int,
    n_features: int,
    n_grids: int,
    *,
    strategy: str = "beam",
    max_length: int = 2,
    top_k: int = 3,
    bin_strategy: str = "uniform",
) -> int:
    """Estimated peak bytes of working memory of the rule search on ``n`` rows and ``n_features`` searched features,
    beyond X itself (``max_length`` counts up to ``n_features``).

    Example:
        >>> round(search_memory(10**6, 10, 10) / 2**20)  # MiB
        302
    """
    kind = strategy if strategy in _BYTES_PER_VALUE else "exact"
    length = max(1, min(max_length, n_features))
    nodes = top_k ** (length - 1)  # the widest level of the rule tree is counted at once
    # at max_length <= 2 the paper strategy also computes the grid's optimum (an exact search) where it is cheap
    kinds = [kind, "exact"] if kind == "paper" and length <= 2 else [kind]
    need = max(int(n * n_features * _BYTES_PER_VALUE[k]) + n * _BYTES_PER_ROW[k] + _FLOOR_BYTES[k] for k in kinds)
    need += n_features * (n_grids + 1) * (_BYTES_PER_GRID_CELL + _BYTES_PER_NODE_CELL * nodes)
    need += int(_BYTES_PER_VALUE_GRID * n * n_features * max(0, min(n_grids, n) - _MANY_GRIDS))
    if kind == "beam":  # the default strategy runs the beam after the paper tree, then the polish
        need += n_features * (max(n_grids, _FINE_GRIDS) + 1) * _BYTES_PER_FINE_CELL
        if n < _SORTED_ROWS:  # the sorted columns of up to four polished rule sets
            need += 7 * n * min(n_features, 4 * length)
    if bin_strategy == "kmeans":
        need += _KMEANS_BYTES_PER_VALUE * min(n * n_features, max(n, 1 << 22))
    return need


def conversion_memory(X: Any) -> int:
    """Bytes that turning ``X`` into the float tensor the search reads allocates: DataFrames (twice their float64
    values where columns mix dtypes), integer, bool or non-contiguous arrays and integer tensors are copied; a float
    tensor, view or ``expand`` alike, is used as it is.

    Example:
        >>> conversion_memory(np.zeros((1000, 4), dtype=np.int32))  # a float64 copy
        32000
        >>> conversion_memory(torch.zeros(1, 4).expand(1000, 4))
        0
    """
    shape = getattr(X, "shape", None)
    if shape is None or len(shape) != 2:
        return 0
    n_values = int(shape[0]) * int(shape[1])
    if isinstance(X, torch.Tensor):  # int64: a mask of the values beyond 2**53 too
        return 0 if X.is_floating_point() else 8 * n_values + (n_values if X.dtype == torch.int64 else 0)
    if isinstance(X, np.ndarray):
        if X.dtype.kind == "f" and X.dtype.itemsize <= 8:
            return 0 if X.flags.c_contiguous else X.dtype.itemsize * n_values
        wide = X.dtype.kind in "iu" and X.dtype.itemsize == 8  # 64-bit integers: a mask of those beyond 2**53
        return 8 * n_values + (n_values if wide else 0)
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # a DataFrame: pandas gathers mixed columns, then float64
        return 16 * n_values + 16 * int(shape[0])
    return 0


def estimate_memory(
    X: Any,
    *,
    n_grids: int = 10,
    strategy: str = "beam",
    max_length: int = 2,
    top_k: int = 3,
    bin_strategy: str = "uniform",
    features: Sequence[int] | None = None,
) -> int:
    """Estimated peak bytes of one :func:`torch_amore.extract_rules` call on ``X`` (N, F) beyond what the caller
    holds: :func:`conversion_memory` plus :func:`search_memory` on the searched ``features`` (default all).

    Example:
        >>> X = torch.zeros(1, 10).expand(10**6, 10)  # a view: nothing to convert
        >>> estimate_memory(X) == search_memory(10**6, 10, 10)
        True
    """
    n, n_features = (int(s) for s in X.shape)
    n_searched = n_features if features is None else len(features)
    search = search_memory(
        n, n_searched, n_grids, strategy=strategy, max_length=max_length, top_k=top_k, bin_strategy=bin_strategy
    )
    return conversion_memory(X) + search


def available_memory(device: torch.device | str = "cpu") -> tuple[int | None, str]:
    """Bytes that can still be allocated on ``device``, and which limit gives them (``None`` where unknown).

    CPU: the smallest of the available RAM, the cgroup (container) limit minus its usage, ``RLIMIT_AS`` minus the
    address space the process maps and its threads may still reserve, and ``RLIMIT_DATA`` minus the data it maps.
    CUDA: the device's free memory plus what torch's caching allocator holds unused. Other devices: unknown.

    Example:
        >>> free, limit = available_memory("cpu")
        >>> free is None or free >= 0
        True
        >>> available_memory("meta")
        (None, "unknown on 'meta'")
    """
    device = torch.device(device)
    try:
        if device.type == "cuda":
            return _cuda_free(device), f"the free memory of {device} (torch.cuda.mem_get_info)"
        if device.type != "cpu":
            return None, f"unknown on {device.type!r}"
        found = [(v, name) for v, name in _cpu_limits() if v is not None]
        return min(found, key=lambda f: f[0]) if found else (None, "unknown on 'cpu'")
    except (OSError, ValueError, RuntimeError):
        return None, f"unknown on {str(device)!r}"


def _cuda_free(device: torch.device) -> int:
    """Free bytes on a CUDA device plus what torch's caching allocator holds unused there."""
    cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return int(torch.cuda.mem_get_info(device)[0]) + max(0, int(cached))


def _cpu_limits() -> list[tuple[int | None, str]]:
    """Each CPU memory limit that applies (bytes left, or ``None`` where it does not), with its name."""
    return [
        (_ram_available(), "the available RAM (MemAvailable)"),
        (_cgroup_available(), "the cgroup (container) memory limit"),
        (
            _less(_rlimit_left("RLIMIT_AS", "VmSize"), _thread_reserve()),
            "the address-space limit RLIMIT_AS (ulimit -v)",
        ),
        (_rlimit_left("RLIMIT_DATA", "VmData"), "the data-segment limit RLIMIT_DATA (ulimit -d)"),
    ]


def _ram_available() -> int | None:
    """Linux's ``MemAvailable``; elsewhere the free pages ``os.sysconf`` reports (``None`` where neither exists)."""
    value = _proc_field("/proc/meminfo", "MemAvailable")
    if value is None and hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
        value = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return value


def _proc_field(path: str, field: str, unit: int = 1024) -> int | None:
    """A ``Field:   123 kB`` line of a ``/proc`` file, in bytes (``unit``: 1 for a count)."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * unit
    except (OSError, ValueError, IndexError):
        return None
    return None


def _rlimit_left(limit: str, field: str) -> int | None:
    """A resource limit's soft value minus the process's current size of what it counts (``/proc/self/status``
    ``field``); ``None`` where it is unlimited or unknown."""
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    soft = resource.getrlimit(getattr(resource, limit))[0]
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = _proc_field("/proc/self/status", field)
    return None if used is None else max(0, soft - used)


def _less(value: int | None, minus: int) -> int | None:
    return None if value is None else max(0, value - minus)


#: Address space a glibc thread's own malloc arena reserves (64 MiB on 64-bit), beside its stack.
_ARENA_BYTES = 64 << 20


def _thread_reserve() -> int:
    """Address space that the threads a search may still start reserve (a stack and a malloc arena each), which
    ``RLIMIT_AS`` counts though little of it is touched: torch's intra-op threads and, with two or more, one beside."""
    wanted = torch.get_num_threads() + (1 if torch.get_num_threads() >= 2 else 0)
    running = _proc_field("/proc/self/status", "Threads", unit=1) or 1
    stack = 8 << 20
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
        stack = soft if 0 < soft < (1 << 30) else stack
    except (ImportError, ValueError, OSError):
        pass
    return max(0, wanted - running) * (stack + _ARENA_BYTES)


def _read_int(path: str) -> int | None:
    try:
        with open(path) as f:
            text = f.read().strip()
        return int(text) if text.isdigit() else None  # "max" (cgroup v2): no limit
    except OSError:
        return None


def _cgroup_dirs() -> list[tuple[str, str, str]]:
    """(folder, limit file, usage file) of this process's memory cgroup, v2 and v1, and of the mount's root (which is
    the process's own cgroup inside a container's namespace)."""
    own = {"v2": "", "v1": ""}
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                if controllers == "":
                    own["v2"] = path
                elif "memory" in controllers.split(","):
                    own["v1"] = path
    except (OSError, ValueError):
        pass
    v2, v1 = "/sys/fs/cgroup", "/sys/fs/cgroup/memory"
    return [
        *((d, "memory.max", "memory.current") for d in {v2, v2 + own["v2"].rstrip("/")}),
        *((d, "memory.limit_in_bytes", "memory.usage_in_bytes") for d in {v1, v1 + own["v1"].rstrip("/")}),
    ]


def _cgroup_available() -> int | None:
    """The smallest cgroup memory limit minus its usage over this process's cgroups (``None`` where none is set)."""
    left = []
    for folder, limit, usage in _cgroup_dirs():
        cap, used = _read_int(os.path.join(folder, limit)), _read_int(os.path.join(folder, usage))
        if cap is not None and used is not None and cap < 2**60:
            left.append(max(0, cap - used))
    return min(left) if left else None


def check_memory(
    X: Any,
    device: torch.device | str | None = None,
    *,
    n_grids: int,
    strategy: str,
    max_length: int,
    top_k: int = 3,
    bin_strategy: str = "uniform",
    features: Sequence[int] | None = None,
) -> None:
    """Raise a ``MemoryError`` naming the size, the limit and the knobs when one search on ``X`` would not fit in the
    memory of ``device`` (default: ``X``'s device, CPU for numpy and pandas input). Input that is not (N, F) is left
    to the argument checks.

    Example:
        >>> check_memory(torch.zeros(100, 3), n_grids=10, strategy="beam", max_length=2)  # fits: nothing happens
    """
    shape = getattr(X, "shape", None)
    if shape is None or len(shape) != 2:
        return
    if device is None:
        device = X.device if isinstance(X, torch.Tensor) else "cpu"
    device = torch.device(device)
    need = estimate_memory(
        X,
        n_grids=n_grids,
        strategy=strategy,
        max_length=max_length,
        top_k=top_k,
        bin_strategy=bin_strategy,
        features=features,
    )
    free, limit = available_memory(device)
    short = free is not None and need > free
    if not D.any_rank(short):  # every shard of a DDP run raises together
        return
    if not short:
        raise MemoryError("The rule search does not fit in the memory of another rank of this distributed run.")
    n, n_searched = int(shape[0]), int(shape[1]) if features is None else len(features)
    copy = conversion_memory(X)
    raise MemoryError(
        f"The rule search needs about {_size(need)} of working memory for {n} rows x {n_searched} searched features "
        f"(n_grids={n_grids}, strategy={strategy!r}, max_length={max_length}"
        + (f"; {_size(copy)} of it to copy X into a float tensor" if copy else "")
        + f"), but only {_size(free)} are available on {device} ({limit}); search fewer features (`features=`, e.g. "
        "from select_features), fewer rows (a random sample), a smaller `n_grids`, a smaller `max_length`, or "
        "strategy='paper' (the least memory)"
        + ("; pass X as a contiguous float32 tensor or array (no copy)" if copy else "")
        + "."
    )


def _size(n_bytes: int) -> str:
    """``n_bytes`` in KiB, MiB or GiB."""
    for unit, size in (("GiB", 2**30), ("MiB", 2**20)):
        if n_bytes >= size:
            return f"{n_bytes / size:.{2 if unit == 'GiB' else 1}f} {unit}"
    return f"{n_bytes / 2**10:.1f} KiB"


def check_search_memory(X: Any, options: Any, columns: Sequence[int] | None) -> None:
    """:func:`check_memory` of a search of ``X`` (on ``columns``; ``None``: all) with ``options`` (a
    :class:`~torch_amore.search.options.SearchOptions`)."""
    knobs = {k: getattr(options, k) for k in ("n_grids", "strategy", "max_length", "top_k", "bin_strategy")}
    check_memory(X, features=columns, **knobs)
