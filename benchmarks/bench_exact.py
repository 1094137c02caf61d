"""Exact search: its time against the default strategy's, and what the default's seeding costs.

Same process, one thread, alternating calls, medians of ``--repeat``:

1. ``strategy="exact"`` at ``max_length=2`` with 32 equal-frequency cuts against the default strategy (its own
   default settings and the same 32-cut grid) on latent-like data (Gaussian, half the columns ReLU-clipped, a
   planted two-feature box with 10 % label noise; ``bench_scaling``'s recipe), 10,000 x 128, and the MNIST latent
   row ``mnist7`` of ``_tasks.py``;
2. at 100,000 x 1,000: whether the exact search is refused up front, how fast, and with what message;
3. the default strategy with and without the exact-pair seeding (:mod:`torch_amore.strategies.seeding`) on the benchmark
rows
   at ``max_length=2``: time ratio and fitness.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_exact.py --repeat 3
    python benchmarks/bench_exact.py --device cuda       # where a GPU is available
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tasks  # noqa: E402
from _tasks import latent_like  # noqa: E402

import torch_amore  # noqa: E402
import torch_amore.strategies.seeding as seeding  # noqa: E402


def timed(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def alternate(calls: dict, repeat: int) -> dict[str, tuple[float, object]]:
    """Median seconds and the last result of each call, the calls alternating."""
    times: dict[str, list[float]] = {k: [] for k in calls}
    last = {}
    for _ in range(repeat):
        for name, fn in calls.items():
            seconds, last[name] = timed(fn)
            times[name].append(seconds)
    return {k: (statistics.median(v), last[k]) for k, v in times.items()}


def best(rule_sets) -> float:
    return rule_sets[0].fitness if rule_sets else float("nan")


def exact_vs_default(name: str, X: torch.Tensor, target: torch.Tensor, s_min: int, repeat: int, **own) -> None:
    grid = dict(n_grids=32, bin_strategy="quantile")
    calls = {
        "default (own settings)": lambda: torch_amore.extract_rules(X, target, max_length=2, min_support=s_min, **own),
        "default (32 quantile)": lambda: torch_amore.extract_rules(X, target, max_length=2, min_support=s_min, **grid),
        "exact (32 quantile)": lambda: torch_amore.extract_rules(
            X, target, max_length=2, min_support=s_min, strategy="exact", top_k=1, **grid
        ),
    }
    res = alternate(calls, repeat)
    base = res["default (own settings)"][0]
    print(f"== {name}: {tuple(X.shape)} on {X.device}, s_min={s_min}")
    for k, (sec, out) in res.items():
        print(f"  {k:<24} {sec:8.3f} s  ({sec / base:4.2f}x)  fitness {best(out):.4f}")


def refused(repeat: int) -> None:
    X, target = latent_like(100_000, 1_000)
    t0 = time.perf_counter()
    try:
        torch_amore.extract_rules(X, target, max_length=2, min_support=1000, n_grids=32, bin_strategy="quantile",
                                  strategy="exact")  # fmt: skip
        print("== 100,000 x 1,000: not refused")
    except ValueError as err:
        print(f"== 100,000 x 1,000: refused after {time.perf_counter() - t0:.2f} s (binning included):\n  {err}")
    res = alternate({"default": lambda: torch_amore.extract_rules(X, target, max_length=2, min_support=1000)}, 1)
    print(f"  default strategy on it: {res['default'][0]:.2f} s, fitness {best(res['default'][1]):.4f}")


def seeding_row(name: str, repeat: int) -> None:
    task = _tasks.TASKS[name]()
    X, target = torch.from_numpy(task.X), torch.from_numpy(task.target)
    kw = dict(max_length=2, min_support=task.min_support, n_grids=task.n_grids, bin_strategy=task.bin_strategy,
              feature_types=task.feature_types)  # fmt: skip
    budget = seeding.SEED_BUDGET

    def unseeded():
        seeding.SEED_BUDGET = 0
        try:
            return torch_amore.extract_rules(X, target, **kw)
        finally:
            seeding.SEED_BUDGET = budget

    res = alternate({"seeded": lambda: torch_amore.extract_rules(X, target, **kw), "unseeded": unseeded}, repeat)
    (s1, r1), (s0, r0) = res["seeded"], res["unseeded"]
    print(f"  {name:<12} seeded {s1:7.3f} s fitness {best(r1):.4f} | unseeded {s0:7.3f} s fitness "
          f"{best(r0):.4f} | time ratio {s1 / s0:4.2f}")  # fmt: skip


def seeding_cost(rows: list[str], repeat: int) -> None:
    print("== seeding: default strategy with and without the exact-pair seeds (max_length=2)")
    for name in rows:
        seeding_row(name, repeat)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--parts", default="latent,mnist,refuse,seeding")
    parser.add_argument("--rows", default="diabetes_l1,box_small,multimode,mnist7,tox21_ar")
    args = parser.parse_args(argv)
    parts = args.parts.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, load {load:.1f}")
    if "latent" in parts:
        X, target = latent_like(10_000, 128)
        exact_vs_default("latent-like", X.to(args.device), target.to(args.device), 100, args.repeat)
    if "mnist" in parts:
        t = _tasks.mnist7()
        X, target = torch.from_numpy(t.X).to(args.device), torch.from_numpy(t.target).to(args.device)
        exact_vs_default("mnist7", X, target, t.min_support, args.repeat, n_grids=6, bin_strategy="kmeans")
    if "refuse" in parts:
        refused(args.repeat)
    if "seeding" in parts:
        seeding_cost(args.rows.split(","), args.repeat)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(load {load:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
