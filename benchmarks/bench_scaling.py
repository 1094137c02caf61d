"""How the rule search scales with N and F, against the fastest tree learners, in one process.

Data: latent-like float32 features (Gaussian, every other column ReLU-clipped) with a planted two-feature box
(``x_3 >= 0.5 and x_7 < 1``) and 10 % label noise. Cells: N in {10k, 100k, 1M} x F in {16, 128, 1024} x
max_length in {2, 3}, min_support = N / 100. Per cell, in the same process:

- ``paper`` and ``beam`` (the default): :func:`torch_amore.extract_rules`;
- ``tree``: scikit-learn ``DecisionTreeClassifier(max_depth=l, min_samples_leaf=s_min)`` fit;
- ``lgbm``: LightGBM, one tree (``num_leaves=2**l, max_depth=l, min_data_in_leaf=s_min``, 255 bins; a
  benchmark-only dependency: ``pip install lightgbm``; skipped when missing).

Columns: seconds (median of ``--repeat``; the methods take turns, one call each per repeat), best fitness (the tree
learners: the best node / leaf with at least s_min rows), peak extra resident memory as a multiple of X's size,
passes over X (seconds / one read pass over X timed in the same run), and for torch_amore the aten ops and host syncs
of one call (torch.profiler, counted on a separate call). ``--busy`` runs every cell a second time beside one busy
process and reports the default-threads time over the one-thread time (a busy machine).

Usage:
    python benchmarks/bench_scaling.py --n 10000 100000 --f 16 128 --lengths 2      # a few cells
    python benchmarks/bench_scaling.py                                            # all cells (long: hours)
    python benchmarks/bench_scaling.py --n 10000 --f 16 128 --busy                # contention ratios
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import multiprocessing as mp
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_extract import measure, tree_fit  # noqa: E402

import torch_amore as ta  # noqa: E402

#: aten operations that wait for the device (a host synchronisation on a GPU).
SYNC_OPS = (
    "aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
)  # fmt: skip


def latent_task(n: int, f: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(X float32 (n, f), target) with a planted box on features 3 and 7 (or the first two when f < 8)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, f, generator=g)
    X[:, ::2] = X[:, ::2].clamp(min=0)
    a, b = (3, 7) if f >= 8 else (0, 1)
    target = (X[:, a] >= 0.5) & (X[:, b] < 1.0)
    return X, target ^ (torch.rand(n, generator=g) < 0.1)


def op_counts(fn) -> tuple[int, int]:
    """(top-level aten operations, host synchronisations) of one call of ``fn``, on every thread (on small data the
    search runs the rule tree on a second thread): the profiler's sync operations plus the ``Tensor.tolist`` calls
    (a copy to the host that the CPU profiler does not record)."""
    from torch.profiler import ProfilerActivity, profile

    original, calls = torch.Tensor.tolist, []
    torch.Tensor.tolist = lambda t: calls.append(1) or original(t)
    all_threads = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
    try:
        with profile(activities=[ProfilerActivity.CPU], experimental_config=all_threads) as prof:
            fn()
    finally:
        torch.Tensor.tolist = original
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    return len(top), sum(e.name in SYNC_OPS for e in events) + len(calls)


def lgbm_fitness(X: np.ndarray, target: np.ndarray, depth: int, leaf: int) -> float | None:
    try:
        import lightgbm
    except ImportError:
        return None
    params = dict(objective="binary", num_leaves=2**depth, max_depth=depth, min_data_in_leaf=leaf, max_bin=255,
                  learning_rate=1.0, verbose=-1, num_threads=torch.get_num_threads(), deterministic=True)  # fmt: skip
    booster = lightgbm.train(params, lightgbm.Dataset(X, target.astype(np.int64)), num_boost_round=1)
    leaves = booster.predict(X, pred_leaf=True).reshape(-1).astype(np.int64)
    support = np.bincount(leaves)
    hits = np.bincount(leaves, weights=target.astype(np.float64))
    fit = (2 * hits - support) / target.sum()
    return float(fit[support >= leaf].max()) if (support >= leaf).any() else None


def _calls(X: torch.Tensor, target: torch.Tensor, length: int, s_min: int, methods: list[str]) -> dict:
    """Per method, the call to time; each returns its best fitness (``None`` when it has no rule)."""
    X_np, t_np = X.numpy(), target.numpy()

    def search(strategy: str):
        def call() -> float | None:
            found = ta.extract_rules(X, target, max_length=length, min_support=s_min, strategy=strategy)
            return found[0].fitness if found else None

        return call

    known = {
        "paper": search("paper"),
        "beam": search("beam"),
        "tree": lambda: tree_fit(X_np, t_np, length, s_min),
        "lgbm": lambda: lgbm_fitness(X_np, t_np, length, s_min),
    }
    return {m: known[m] for m in methods}


def run_cell(n: int, f: int, length: int, repeat: int, methods: list[str]) -> list[dict]:
    """One row per method: the methods take turns, one call each per repeat, the first one rotating (the machine's
    speed drifts by several percent within a run; one method after the other would carry that drift into their
    ratios)."""
    X, target = latent_task(n, f)
    s_min = n // 100
    x_mib = X.numel() * X.element_size() / 2**20
    bandwidth = statistics.median(measure(lambda: float(X.sum()))[1] for _ in range(3))
    calls = _calls(X, target, length, s_min, methods)
    if "lgbm" in calls and importlib.util.find_spec("lightgbm") is None:  # a benchmark-only dependency
        del calls["lgbm"]
    names = list(calls)
    runs: dict[str, list] = {m: [] for m in names}
    for r in range(repeat):
        for m in names[r % len(names) :] + names[: r % len(names)]:
            runs[m].append(measure(calls[m]))  # (fitness, seconds, peak MiB)
    rows = []
    for m in names:
        seconds = statistics.median(run[1] for run in runs[m])
        ops, syncs = op_counts(calls[m]) if m in ("paper", "beam") else (None, None)
        rows.append(dict(N=n, F=f, l=length, method=m, seconds=seconds, fitness=runs[m][0][0],
                         mem_x=max(run[2] for run in runs[m]) / x_mib, passes=seconds / bandwidth, ops=ops,
                         syncs=syncs))  # fmt: skip
    return rows


def _spin() -> None:
    while True:
        pass


def contention_ratio(n: int, f: int, length: int, repeat: int) -> tuple[float, float]:
    """(one-thread seconds, default-threads seconds) of the default strategy beside one busy process."""
    X, target = latent_task(n, f)
    busy = mp.get_context("spawn").Process(target=_spin, daemon=True)
    busy.start()
    try:
        default = torch.get_num_threads()
        times = collections.defaultdict(list)
        for _ in range(repeat):
            for threads in (1, default):
                torch.set_num_threads(threads)
                t0 = time.perf_counter()
                ta.extract_rules(X, target, max_length=length, min_support=n // 100)
                times[threads].append(time.perf_counter() - t0)
        torch.set_num_threads(default)
    finally:
        busy.terminate()
    return statistics.median(times[1]), statistics.median(times[default])


def _fmt(v, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--f", type=int, nargs="+", default=[16, 128, 1024])
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--methods", nargs="+", default=["paper", "beam", "tree", "lgbm"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--busy", action="store_true", help="contention mode: default threads vs one thread")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    if args.busy:
        print("| N | F | l | one thread (s) | default threads (s) | ratio |\n|---|---|---|---|---|---|")
        for n in args.n:
            for f in args.f:
                for length in args.lengths:
                    one, default = contention_ratio(n, f, length, args.repeat)
                    print(f"| {n:,} | {f} | {length} | {one:.3f} | {default:.3f} | {default / one:.2f} |", flush=True)
        return
    print("| N | F | l | method | seconds | fitness | peak extra mem / X | passes over X | aten ops | syncs |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for n in args.n:
        for f in args.f:
            for length in args.lengths:
                for r in run_cell(n, f, length, args.repeat, args.methods):
                    cells = [
                        f"{n:,}",
                        f,
                        length,
                        r["method"],
                        f"{r['seconds']:.3f}",
                        _fmt(r["fitness"], ".3f"),
                        f"{r['mem_x']:.2f}",
                        f"{r['passes']:.0f}",
                        _fmt(r["ops"], "d"),
                        _fmt(r["syncs"], "d"),
                    ]
                    print("| " + " | ".join(map(str, cells)) + " |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
