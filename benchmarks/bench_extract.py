"""Speed and memory of the rule engine against a literal loop implementation and a decision-tree fit.

Rows:
  (a) the paper's diabetes task (../shared/data/diabetes_paper_task.npz) at max_length=3, kmeans, n_grids=10,
      min_support=1000;
  (b) synthetic N=200,000 x F=1,000 float32 Gaussian features with a planted two-feature region, uniform grids,
      n_grids=10, max_length=2, min_support=2,000.

Each row times, in this one process: torch_amore's paper strategy (the engine), the beam strategy (the default), the
naive version of ``naive_amore.py`` (for every grid: mask the data and count), and scikit-learn's
``DecisionTreeClassifier(max_depth=max_length, min_samples_leaf=min_support)`` fit, and prints ratios against the
engine. It also measures the engine's peak extra resident memory against the size of X.

Usage:
    python benchmarks/bench_extract.py                # both rows (the naive version of (b) takes minutes)
    python benchmarks/bench_extract.py --rows b --n 50000 --features 200   # a smaller (b)
    python benchmarks/bench_extract.py --skip-naive   # engine, beam and tree only
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from naive_amore import naive_extract  # noqa: E402

import torch_amore as ta  # noqa: E402
from torch_amore.grids.edges import grid_edges  # noqa: E402

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return -1


def measure(fn):
    """(result, seconds, peak extra resident MiB) of ``fn()``; the peak is reset first where Linux allows it."""
    gc.collect()
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # reset the peak resident set size
        base = _rss_kib("VmRSS")
    except OSError:
        base = _rss_kib("VmHWM")
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = _rss_kib("VmHWM")
    return out, seconds, max(0, peak - base) / 1024


def tree_fit(X: np.ndarray, target: np.ndarray, depth: int, leaf: int) -> float:
    from sklearn.tree import DecisionTreeClassifier

    tree = DecisionTreeClassifier(max_depth=depth, min_samples_leaf=leaf, random_state=0).fit(X, target)
    paths = tree.decision_path(X).tocsc()
    hits = paths.T @ target.astype(np.int64)
    support = np.asarray(paths.sum(0)).ravel()
    return float(((2 * hits - support) / target.sum())[1:].max())


def run_row(name, X, target, *, max_length, min_support, n_grids, bin_strategy, feature_types, skip_naive):
    print(
        f"\n== ({name}) N={X.shape[0]:,} F={X.shape[1]:,} {X.dtype}, max_length={max_length}, "
        f"min_support={min_support}, n_grids={n_grids}, {bin_strategy}"
    )
    kw = dict(
        max_length=max_length,
        min_support=min_support,
        n_grids=n_grids,
        bin_strategy=bin_strategy,
        feature_types=feature_types,
    )
    x_mib = X.element_size() * X.numel() / 2**20
    paper, t_paper, mem_paper = measure(lambda: ta.extract_rules(X, target, strategy="paper", **kw))
    beam, t_beam, mem_beam = measure(lambda: ta.extract_rules(X, target, strategy="beam", **kw))
    rows = [
        ("torch_amore paper (engine)", t_paper, paper[0].fitness if paper else float("nan")),
        ("torch_amore beam (default)", t_beam, beam[0].fitness if beam else float("nan")),
    ]
    if not skip_naive:

        def naive():
            Xd = X.double()
            edges = grid_edges(Xd, n_grids, bin_strategy).tolist()
            return naive_extract(
                Xd,
                target,
                edges=edges,
                is_cat=[t == "cat" for t in feature_types],
                max_length=max_length,
                min_support=min_support,
                top_k=3,
            )

        ref, t_naive, _ = measure(naive)
        best_naive = max(((2 * a - b) / int(target.sum()) for _, b, a in ref), default=float("nan"))
        rows.append(("naive loops (pseudo-code)", t_naive, best_naive))
    Xn, tn = X.double().numpy(), target.numpy()
    fit, t_tree, _ = measure(lambda: tree_fit(Xn, tn, max_length, min_support))
    rows.append(("sklearn DecisionTree fit", t_tree, fit))
    print(f"{'method':30s} {'seconds':>9s} {'x engine':>9s} {'best fitness':>13s}")
    for label, sec, fitv in rows:
        print(f"{label:30s} {sec:9.2f} {sec / t_paper:9.2f} {fitv:13.3f}")
    print(
        f"engine peak extra memory: {mem_paper:.0f} MiB = {mem_paper / x_mib:.2f} x size of X ({x_mib:.0f} MiB); "
        f"beam: {mem_beam:.0f} MiB = {mem_beam / x_mib:.2f} x"
    )
    if paper:
        print("engine best:", paper[0])
    if beam:
        print("beam best:  ", beam[0])
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rows", default="a,b")
    p.add_argument("--n", type=int, default=200_000)
    p.add_argument("--features", type=int, default=1_000)
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--skip-naive", action="store_true")
    args = p.parse_args(argv)
    print(
        f"torch {torch.__version__}, threads={torch.get_num_threads()}, cpus={os.cpu_count()}, "
        f"load={os.getloadavg()[0]:.1f}"
    )
    if "a" in args.rows.split(","):
        with np.load(Path(args.data) / "diabetes_paper_task.npz") as d:
            X = torch.from_numpy(d["X"])
            target = torch.from_numpy(d["target"])
            types = [str(t) for t in d["feature_types"]]
        run_row(
            "a: diabetes",
            X,
            target,
            max_length=3,
            min_support=1000,
            n_grids=10,
            bin_strategy="kmeans",
            feature_types=types,
            skip_naive=args.skip_naive,
        )
    if "b" in args.rows.split(","):
        g = torch.Generator().manual_seed(0)
        X = torch.randn(args.n, args.features, generator=g)
        i, j = 10, args.features // 2
        box = (X[:, i].abs() < 0.8) & (X[:, j] > 0.3)
        target = box ^ (torch.rand(args.n, generator=g) < 0.05)
        run_row(
            "b: synthetic",
            X,
            target,
            max_length=2,
            min_support=2000,
            n_grids=10,
            bin_strategy="uniform",
            feature_types=["float"] * args.features,
            skip_naive=args.skip_naive,
        )


if __name__ == "__main__":
    main()
