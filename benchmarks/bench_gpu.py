"""The rule search on a device (a GPU) beside the same calls on the CPU, on the grid of ``bench_scaling.py``.

Data: ``bench_scaling.latent_task`` (latent-like float32 features with a planted two-feature box, 10 % label noise),
``min_support = N / 100``. Cells: N in {10k, 100k, 1M} x F in {16, 128, 1024} x max_length in {2, 3} (``--n``,
``--f``, ``--lengths`` choose; ``--quick``: one tiny cell). Per cell and strategy (``paper``, ``beam``: the default),
:func:`torch_amore.extract_rules` runs

- on ``--device`` (default ``cuda``), X and the target moved there first;
- on the CPU with one thread (``cpu-1``) and with all threads (``cpu-all``, ``--threads``);
- and, per cell, LightGBM's single tree on the CPU (``lgbm``; a benchmark-only dependency, ``pip install lightgbm``;
  the row is left out when it is missing).

Columns:

- ``seconds``: median of ``--repeat`` calls after one warm-up call, with ``torch.cuda.synchronize`` around each on
  CUDA;
- ``peak MiB``: ``torch.cuda.max_memory_allocated`` during a call beyond what was allocated before it (X is already
  on the device) on CUDA; the peak extra resident memory (``/proc/self/status``) on the CPU;
- ``syncs``: host synchronisations of one call. On CUDA, from torch.profiler's CUDA runtime events: the
  ``cuda*Synchronize`` calls plus the blocking ``cudaMemcpy`` calls; ``DtoH``: its device-to-host copies. On the CPU,
  the suite's proxy (``tests/sync_count.py``: the aten ops that would wait for a device, plus ``Tensor.tolist``
  calls); ``bincounts``: on the CPU, the calls of ``torch.bincount``, which on CUDA read their input's minimum and
  maximum on the host (two syncs each, not in the proxy);
- ``prepare`` ... ``other``: seconds per stage of one more call, the stages run one after the other (on the CPU the
  default strategy otherwise runs the rule tree beside the beam on small data), each timed with a device sync at its
  ends: ``prepare`` (checks, column facts, binning), ``tree`` (the paper's rule tree), ``exact`` (the grid's optimum,
  or the exact strategy), ``beam`` (fine grids, pair seeds, the beam), ``polish``, ``other`` (the rest of the call:
  readable rules, sorting, dropping duplicates);
- ``fitness``: the best rule set's; ``= cpu``: whether the call's rule sets have the supports and fitnesses of the
  ``cpu-all`` call, in order.

Usage:
    python benchmarks/bench_gpu.py --quick --device cpu                 # a tiny cell: does it run?
    python benchmarks/bench_gpu.py --n 1000000 --f 128 --lengths 2      # the 1,000,000 x 128 cell
    python benchmarks/bench_gpu.py                                      # the whole grid (the CPU rows take hours)
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import importlib.util
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
from bench_extract import measure  # noqa: E402
from bench_scaling import latent_task, lgbm_fitness  # noqa: E402
from sync_count import count_syncs  # noqa: E402

import torch_amore as ta  # noqa: E402
from torch_amore._utils.threads import done  # noqa: E402
from torch_amore.search import extract as search  # noqa: E402
from torch_amore.search import extractor  # noqa: E402

STAGES = ("prepare", "tree", "exact", "beam", "polish")
#: the CUDA runtime calls that block the host until the device is done
CUDA_SYNC_CALLS = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy")


def synchronize(device: torch.device) -> None:
    """Wait for ``device`` (a no-op off CUDA)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float, float]:
    """(result, seconds, peak MiB) of ``fn()`` on ``device``: CUDA's peak allocation beyond the memory allocated
    before the call, or the CPU's peak extra resident memory."""
    if device.type != "cuda":
        return measure(fn)
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    out = fn()
    synchronize(device)
    seconds = time.perf_counter() - t0
    return out, seconds, (torch.cuda.max_memory_allocated(device) - base) / 2**20


def host_syncs(fn: Callable[[], Any], device: torch.device) -> tuple[int, int | None, int | None]:
    """(host syncs, device-to-host copies, ``bincount`` calls) of one call of ``fn`` (see the module's docstring): on
    the CPU the suite's proxy, no copy count, and the calls of ``torch.bincount`` (each two syncs on CUDA, which the
    proxy does not see); on CUDA the profiler's counts and no ``bincount`` count (its syncs are among them)."""
    if device.type != "cuda":
        with count_syncs() as counted:
            fn()
        return counted.aten + counted.tolist, None, counted.bincount
    from torch.profiler import ProfilerActivity, profile

    synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
    names = [e.name for e in prof.events()]
    syncs = sum(n in CUDA_SYNC_CALLS for n in names)
    dtoh = sum("DtoH" in n or "Device -> Pageable" in n or "Device -> Pinned" in n for n in names)
    return syncs, dtoh, None


@contextlib.contextmanager
def stage_clock(device: torch.device) -> Iterator[dict[str, float]]:
    """Seconds per stage of the calls in the block (the outermost stage only), the stages run one after the other."""
    spent: dict[str, float] = defaultdict(float)
    depth = [0]

    def clocked(name: str, fn: Callable) -> Callable:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if depth[0]:
                return fn(*args, **kwargs)
            depth[0] += 1
            synchronize(device)
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                synchronize(device)
                spent[name] += time.perf_counter() - t0
                depth[0] -= 1

        return wrapper

    E = search.Extractor
    patched = [(search, "prepare"), (extractor, "beside"), (E, "run"), (E, "run_exact"), (E, "run_beam"), (E, "polish")]
    saved = [(owner, name, getattr(owner, name)) for owner, name in patched]
    search.prepare = clocked("prepare", search.prepare)
    extractor.beside = lambda fn, n_elements: done(fn())  # one stage after the other
    E.run, E.run_exact = clocked("tree", E.run), clocked("exact", E.run_exact)
    E.run_beam, E.polish = clocked("beam", E.run_beam), clocked("polish", E.polish)
    try:
        yield spent
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def stages(fn: Callable[[], Any], device: torch.device) -> dict[str, float]:
    """Seconds per stage of one call of ``fn``, and ``other``: the rest of the call."""
    synchronize(device)
    t0 = time.perf_counter()
    with stage_clock(device) as spent:
        fn()
    synchronize(device)
    total = time.perf_counter() - t0
    return {**{s: spent.get(s, 0.0) for s in STAGES}, "other": max(0.0, total - sum(spent.values()))}


@contextlib.contextmanager
def cpu_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _signature(rule_sets: list) -> list[tuple[int, float]]:
    return [(rs.support, round(rs.fitness, 12)) for rs in rule_sets]


def run_cell(n: int, f: int, length: int, args: argparse.Namespace, device: torch.device) -> list[dict[str, Any]]:
    """The rows of one cell: per strategy the device, ``cpu-1`` and ``cpu-all``; then LightGBM."""
    X, target = latent_task(n, f)
    s_min = n // 100
    places = [(str(device), device, None)] + [(name, torch.device("cpu"), k) for name, k in args.cpu_rows]
    rows = []
    for strategy in args.strategies:
        reference, cpu_syncs = None, None
        for where, dev, threads in places:
            Xd, td = X.to(dev), target.to(dev)

            def call(Xd=Xd, td=td, strategy=strategy) -> list:
                return ta.extract_rules(Xd, td, max_length=length, min_support=s_min, strategy=strategy)

            with cpu_threads(threads) if threads else contextlib.nullcontext():
                found = call()  # warm-up: CUDA kernels load, caches fill
                runs = [timed(call, dev) for _ in range(args.repeat)]
                if dev.type != "cpu" or cpu_syncs is None:  # the CPU proxy does not depend on the threads
                    syncs, dtoh, bincounts = host_syncs(call, dev)
                    cpu_syncs = (syncs, dtoh, bincounts) if dev.type == "cpu" else cpu_syncs
                else:
                    syncs, dtoh, bincounts = cpu_syncs
                per_stage = stages(call, dev)
            if where == "cpu-all":
                reference = _signature(found)
            rows.append(dict(N=n, F=f, l=length, method=strategy, where=where, found=found, dtoh=dtoh, syncs=syncs,
                             bincounts=bincounts, seconds=statistics.median(r[1] for r in runs),
                             mem=max(r[2] for r in runs), **per_stage))  # fmt: skip
            del Xd, td
        for row in rows[-len(places) :]:
            row["same"] = None if reference is None else _signature(row["found"]) == reference
    if "lgbm" in args.baselines and importlib.util.find_spec("lightgbm") is not None:
        X_np, t_np = X.numpy(), target.numpy()
        runs = [measure(lambda: lgbm_fitness(X_np, t_np, length, s_min)) for _ in range(args.repeat)]
        rows.append(dict(N=n, F=f, l=length, method="lgbm (1 tree)", where="cpu-all", fitness=runs[0][0],
                         seconds=statistics.median(r[1] for r in runs), mem=max(r[2] for r in runs)))  # fmt: skip
    return rows


def _fmt(v: Any, spec: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "NO"
    return format(v, spec)


COLUMNS = ["N", "F", "l", "method", "where", "seconds", "peak MiB", "syncs", "DtoH", "bincounts", *STAGES, "other",
           "fitness", "= cpu"]  # fmt: skip


def format_row(r: dict[str, Any]) -> str:
    found = r.get("found")
    fitness = r.get("fitness", found[0].fitness if found else None)
    cells = [f"{r['N']:,}", r["F"], r["l"], r["method"], r["where"], f"{r['seconds']:.3f}", f"{r['mem']:.1f}",
             _fmt(r.get("syncs"), "d"), _fmt(r.get("dtoh"), "d"), _fmt(r.get("bincounts"), "d"),
             *(_fmt(r.get(s), ".3f") for s in (*STAGES, "other")), _fmt(fitness, ".3f"),
             _fmt(r.get("same"), "")]  # fmt: skip
    return "| " + " | ".join(map(str, cells)) + " |"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", help="where the search runs beside the CPU (default: cuda)")
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--f", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--strategies", nargs="+", default=["paper", "beam"], choices=["paper", "beam", "exact"])
    parser.add_argument("--cpu", nargs="*", default=["one", "all"], choices=["one", "all"],
                        help="the CPU rows: one thread, all threads (none: --cpu with no value)")  # fmt: skip
    parser.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)), help="'all threads' on the CPU")
    parser.add_argument("--no-lgbm", dest="baselines", action="store_const", const=(), default=("lgbm",))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one tiny cell (2,000 x 8, max_length 2), 2 repeats")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.f, args.lengths, args.repeat = [2000], [8], [2], 2
    rows = {"one": ("cpu-1", 1), "all": ("cpu-all", args.threads)}
    args.cpu_rows = [rows[k] for k in ("one", "all") if k in args.cpu]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("No CUDA device: pass --device cpu (or another device) to run the benchmark without one.")
    card = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU"
    print(f"{datetime.date.today()}: torch {torch.__version__}, device {device} ({card}), "
          f"{args.threads} CPU threads for cpu-all, median of {args.repeat}")  # fmt: skip
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for n in args.n:
        for f in args.f:
            for length in args.lengths:
                for row in run_cell(n, f, length, args, device):
                    print(format_row(row), flush=True)


if __name__ == "__main__":
    main()
