"""How far to trust a rule (issue 40): calibration on noise, power on a planted box, interval coverage, and cost.

Parts (``--parts``, comma-separated):

1. ``calibration``: ``--n-datasets`` seeded null data sets (target independent of X, base rate 0.1), a third each of
   2,000 x 16 uniform, 5,000 x 128 ReLU Gaussian, and 3,000 x 24 mixed (8 float, 8 integer 0..9, 8 binary category
   columns); ``max_length=2, min_support=50``. Counts of the best rule set's search-aware ``p_value <= 0.05``
   (``--permutations`` P, default 99) and of a Holm-adjusted held-out ``p_value <= 0.05`` (``holdout=0.3``; the best
   rule set's, and any rule set's), with the 99.5 % quantile of Binomial(n, 0.05) they must stay under.
2. ``power``: ``--seeds`` planted boxes at 5,000 x 128 (ReLU Gaussian; 5 % of the rows in a box on features 0 and 1,
   confidence 0.8 inside, 0.1 outside), ``max_length=2, min_support=100``: the share with ``p_value <= 0.01`` and with
   a held-out ``p_value <= 0.01`` (``holdout=0.3``).
3. ``coverage``: the best rule set of one planted data set, its true confidence from the generator (Monte Carlo over
   2,000,000 fresh rows), and ``--draws`` fresh held-out sets of 1,500 rows: how often the 95 % interval covers it.
4. ``cost``: one thread; one default search against 99 permutations (the null's preparation plus ``--cost-perms``
   timed permutations, scaled to 99) at each of ``--sizes`` (default 10,000 x 128 and 100,000 x 128, latent-like data
   of ``_tasks.latent_like``, ``max_length`` 2), beside the same permutations without the shared counts of all rows
   and as a literal loop of ``extract_rules`` (same run, interleaved), with a breakdown of one permutation's search by
   stage, and the call with permutations on ``--side-threads`` threads (default: the CPU's), its permutations side by
   side; then the ``max_length`` 3 permutation, ``holdout=0.3`` and ``stability=20`` against one search.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_significance.py                     # the full run (hours)
    OMP_NUM_THREADS=1 python benchmarks/bench_significance.py --parts calibration --every 15   # counts as it goes
    OMP_NUM_THREADS=1 python benchmarks/bench_significance.py --parts cost --cost-perms 20     # the cost alone
    python benchmarks/bench_significance.py --n-datasets 12 --permutations 19 --seeds 4 --draws 1000 \\
        --sizes 10000x128 --cost-perms 3                                           # a reduced run (minutes)
    python benchmarks/bench_significance.py --parts cost --sizes 1000000x128 --device cuda   # where a GPU is lent
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from collections import defaultdict
from pathlib import Path

import numpy as np
import torch
from scipy.stats import binom

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tasks import latent_like  # noqa: E402

import torch_amore  # noqa: E402
import torch_amore.search.extractor as extractor_module  # noqa: E402
from torch_amore.rules.held_out import held_out_metrics  # noqa: E402
from torch_amore.search.evidence_split import permutation_order  # noqa: E402
from torch_amore.search.extract import search_plan  # noqa: E402
from torch_amore.search.extractor import Extractor  # noqa: E402
from torch_amore.search.null_search import NullSearch  # noqa: E402
from torch_amore.search.options import SearchOptions  # noqa: E402
from torch_amore.search.plan import SearchPlan  # noqa: E402
from torch_amore.search.readable import ReadableRules  # noqa: E402
from torch_amore.strategies.all_rows import AllRows  # noqa: E402
from torch_amore.strategies.beam import BeamSearch  # noqa: E402
from torch_amore.strategies.refine import Refinement  # noqa: E402

KINDS = ("uniform 2000x16", "relu 5000x128", "mixed 3000x24")
BOX_EDGE = 0.7601  # P(ReLU(N(0,1)) > c) = 1 - Phi(c) = sqrt(0.05): the box on two features holds 5 % of the rows


def null_data(kind: str, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One null data set of ``kind``: X and a target drawn independently of it at base rate 0.1."""
    rng = np.random.default_rng([seed, 7])
    if kind.startswith("uniform"):
        X = rng.uniform(size=(2000, 16))
    elif kind.startswith("relu"):
        X = np.maximum(rng.standard_normal((5000, 128)), 0)
    else:
        n = 3000
        X = np.concatenate(
            [rng.uniform(size=(n, 8)), rng.integers(0, 10, size=(n, 8)), rng.integers(0, 2, size=(n, 8))], axis=1
        ).astype(np.float64)
    target = rng.random(X.shape[0]) < 0.1
    return torch.from_numpy(X), torch.from_numpy(target)


def box_columns(rng: np.random.Generator, n: int, f: int) -> np.ndarray:
    return np.maximum(rng.standard_normal((n, f)), 0)


def box_target(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    inside = (X[:, 0] > BOX_EDGE) & (X[:, 1] > BOX_EDGE)
    u = rng.random(X.shape[0])
    return np.where(inside, u < 0.8, u < 0.1)


def planted(seed: int, n: int = 5000, f: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng([seed, 11])
    X = box_columns(rng, n, f)
    return torch.from_numpy(X), torch.from_numpy(box_target(X, rng))


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


def calibration_table(counts: dict[str, list[int]]) -> None:
    total = [sum(c[j] for c in counts.values()) for j in range(4)]
    for kind, c in [*counts.items(), ("all", total)]:
        limit = int(binom.ppf(0.995, c[0], 0.05))
        print(f"  {kind:<16} n={c[0]:>4}  p<=0.05: search-aware {c[1]:>3}  held-out best {c[2]:>3}  held-out any "
              f"{c[3]:>3}  (99.5% quantile of Binomial({c[0]}, 0.05): {limit})", flush=True)  # fmt: skip


def calibration(n_datasets: int, permutations: int, every: int) -> None:
    """The calibration part; with ``every``, the counts so far after every ``every`` data sets (a partial run's)."""
    print(f"== calibration: {n_datasets} null data sets, P={permutations}, max_length=2, min_support=50", flush=True)
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0, 0])  # data sets, perm, held best, held any
    t0 = time.perf_counter()
    for i in range(n_datasets):
        kind = KINDS[i % len(KINDS)]
        X, t = null_data(kind, i)
        kw = {"max_length": 2, "min_support": 50, "seed": i}
        perm = quiet(torch_amore.extract_rules, X, t, permutations=permutations, **kw)
        held = quiet(torch_amore.extract_rules, X, t, holdout=0.3, **kw)
        c = counts[kind]
        c[0] += 1
        c[1] += bool(perm) and perm[0].p_value <= 0.05
        c[2] += bool(held) and held[0].held_out.p_value <= 0.05
        c[3] += any(rs.held_out.p_value <= 0.05 for rs in held)
        if every and (i + 1) % every == 0 and i + 1 < n_datasets:
            print(f"  -- after {i + 1} data sets ({time.perf_counter() - t0:.0f} s):", flush=True)
            calibration_table(counts)
    calibration_table(counts)
    print(f"  ({time.perf_counter() - t0:.0f} s)", flush=True)


def power(seeds: int, permutations: int, every: int) -> None:
    """The power part; with ``every``, the counts so far after every ``every`` seeds."""
    print(f"== power: {seeds} planted boxes at 5000 x 128, max_length=2, min_support=100, P={permutations}", flush=True)
    smallest = 1 / (permutations + 1)
    perm_hits = held_hits = 0
    t0 = time.perf_counter()
    for s in range(seeds):
        X, t = planted(s)
        kw = {"max_length": 2, "min_support": 100, "seed": s}
        best = quiet(torch_amore.extract_rules, X, t, permutations=permutations, **kw)[0]
        held = quiet(torch_amore.extract_rules, X, t, holdout=0.3, **kw)[0]
        perm_hits += best.p_value <= max(0.01, smallest)
        held_hits += held.held_out.p_value <= 0.01
        if (every and (s + 1) % every == 0) or s + 1 == seeds:
            print(f"  after {s + 1} seeds ({time.perf_counter() - t0:.0f} s): p_value <= {max(0.01, smallest):g}: "
                  f"{perm_hits}/{s + 1}; held-out p_value <= 0.01: {held_hits}/{s + 1}", flush=True)  # fmt: skip


def true_confidence(rule_set, f: int, n: int = 2_000_000, seed: int = 99) -> float:
    rng = np.random.default_rng([seed, 13])
    hits = support = 0
    for _ in range(n // 200_000):
        X = box_columns(rng, 200_000, f)
        t = box_target(X, rng)
        m = rule_set.mask(torch.from_numpy(X)).numpy()
        support, hits = support + int(m.sum()), hits + int((m & t).sum())
    return hits / support


def coverage(draws: int, level: float = 0.95) -> None:
    f = 8  # the box's generator: features beyond the rule's do not matter, so fewer columns keep the draws cheap
    X, t = planted(0, 5000, f)
    best = quiet(torch_amore.extract_rules, X, t, max_length=2, min_support=100)[0]
    truth = true_confidence(best, f)
    rng = np.random.default_rng([0, 17])
    covered = 0
    for _ in range(draws):
        Xh = box_columns(rng, 1500, f)
        th = torch.from_numpy(box_target(Xh, rng))
        low, high = held_out_metrics([best.mask(torch.from_numpy(Xh))], th, level)[0].confidence_interval
        covered += low <= truth <= high
    print(f"== coverage: {best}\n  true confidence {truth:.4f} (Monte Carlo, 2,000,000 rows); the {level:g} interval "
          f"covers it in {covered}/{draws} = {covered / draws:.3f} of the held-out draws of 1,500 rows")  # fmt: skip


#: (owner, attribute, label) of the stages timed in one permutation's search; nested stages count in each (the beam
#: holds the pair seeds, the beam proper and the readable bounds of its conditions).
STAGES = (
    (NullSearch, "extractor", "target counts per grid"),
    (Extractor, "_tree", "rule tree"),
    (Extractor, "grid_optima", "grid optima"),
    (Extractor, "run_beam", "beam (all)"),
    (extractor_module, "pair_seeds", "  pair seeds"),
    (BeamSearch, "run_by_length", "  beam proper"),
    (BeamSearch, "_node_counts", "    node counts"),
    (BeamSearch, "_expand_seeds", "    seeds' children (null targets)"),
    (AllRows, "seed_counts", "      seeds' node counts"),
    (BeamSearch, "_candidates", "    best intervals of the nodes"),
    (Refinement, "_refine", "    refinement"),
    (ReadableRules, "rules", "readable bounds (all)"),
    (Extractor, "polish", "polish"),
    (Extractor, "finish", "pruning and same-mask check"),
)


def staged(times: dict[str, float]) -> list[tuple[object, str, object]]:
    """The :data:`STAGES` wrapped to add their seconds to ``times`` (a stage that calls itself, as the refinement
    does for its batches of states, counted once); returns what to put back."""
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in STAGES]
    depth: dict[str, int] = defaultdict(int)

    def wrap(label, fn):
        def timed(*a, **k):
            t0 = time.perf_counter()
            depth[label] += 1
            try:
                return fn(*a, **k)
            finally:
                depth[label] -= 1
                if not depth[label]:
                    times[label] += time.perf_counter() - t0

        return timed

    for (owner, name, fn), (_, _, label) in zip(saved, STAGES):
        setattr(owner, name, wrap(label, fn))
    return saved


def seconds(fn) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def cost_row(n: int, f: int, cost_perms: int, device: str, max_length: int, side_threads: int = 1) -> None:
    """One row of the cost part: one search on the real target and the permutations three ways, interleaved in one
    run (each time a mean over the ``cost_perms`` rounds): the literal loop of ``extract_rules`` on each permuted
    target, :class:`NullSearch` without the shared counts of all rows (``share_all_rows=False``: codes, grids and
    readable bounds made once) and with them (what ``permutations=`` runs); each scaled from ``cost_perms`` timed
    permutations to 99. As in ``permutations=``, the permutations take the codes and grids of the search on the real
    target (timed as one search); the preparation is what they add before their first search, and the first
    searches make the shared counts of all rows (timed among them). Then one call ``extract_rules(...,
    permutations=99)`` end to end, against one search, and with ``side_threads`` > 1 the same call on that many
    threads (the permutations side by side, :func:`torch_amore._utils.threads.side_by_side`)."""
    X, t = latent_like(n, f)
    X, t = X.to(device), t.to(device)
    kw = {"max_length": max_length}
    quiet(torch_amore.extract_rules, X, t, **kw)  # warm-up
    plan = SearchPlan.make(X.shape[0], X.shape[1], SearchOptions(**kw))
    _, _, searched = quiet(search_plan, X, t, plan)  # the search on the real target, whose codes the permutations take

    def prepared() -> NullSearch:
        return quiet(NullSearch, X, t, plan.options, plan=plan, base=searched)

    prep, null = seconds(prepared)
    times: dict[str, float] = defaultdict(float)
    per: dict[str, list[float]] = defaultdict(list)
    for k in range(cost_perms):
        tk = t[torch.from_numpy(permutation_order(n, 0, k)).to(device)]
        per["one"].append(seconds(lambda: quiet(torch_amore.extract_rules, X, t, **kw))[0])  # the real target
        per["literal"].append(seconds(lambda tk=tk: quiet(torch_amore.extract_rules, X, tk, **kw))[0])
        null.share_all_rows = False
        per["unshared"].append(seconds(lambda tk=tk: quiet(null.best_fitness, tk))[0])
        null.share_all_rows = True
        saved = staged(times)
        try:
            dt, _ = seconds(lambda tk=tk: quiet(null.best_fitness, tk))
        finally:
            for owner, name, fn in saved:
                setattr(owner, name, fn)
        per["shared"].append(dt)
    mean = {key: sum(v) / len(v) for key, v in per.items()}
    one = mean["one"]
    total = prep + 99 * mean["shared"]
    print(f"  {n} x {f}, max_length {max_length}: one search {one:.3f} s; 99 permutations {total:.1f} s "
          f"(preparation {prep:.3f} s + 99 x {mean['shared']:.3f} s, from {cost_perms} timed) = {total / one:.1f} x "
          f"one search; same run without the shared counts of all rows {99 * mean['unshared'] / one:.1f} x, as a "
          f"literal loop of extract_rules {99 * mean['literal'] / one:.1f} x")  # fmt: skip
    whole, _ = seconds(lambda: quiet(torch_amore.extract_rules, X, t, permutations=99, **kw))
    extra = (whole - one) / one
    print(f"    end to end: extract_rules(..., permutations=99) {whole:.1f} s = one search + {extra:.1f} x one search")
    if side_threads > 1:  # the permutations side by side on the caller's threads (one torch thread each)
        before = torch.get_num_threads()
        torch.set_num_threads(side_threads)
        try:
            side, _ = seconds(lambda: quiet(torch_amore.extract_rules, X, t, permutations=99, **kw))
        finally:
            torch.set_num_threads(before)
        print(f"    on {side_threads} threads: extract_rules(..., permutations=99) {side:.1f} s, {whole / side:.2f} x "
              f"faster than on one; one search + {(side - one) / one:.1f} x one search (one thread)")  # fmt: skip
    print("    one permutation by stage (seconds; nested stages count in each):")
    for _, _, label in STAGES:
        print(f"      {label:<34} {times[label] / cost_perms:7.3f}")
    print(f"      {'(total)':<34} {mean['shared']:7.3f}")


def evidence_cost(n: int, f: int, device: str) -> None:
    X, t = latent_like(n, f)
    X, t = X.to(device), t.to(device)
    one, _ = seconds(lambda: quiet(torch_amore.extract_rules, X, t, max_length=2))
    held, _ = seconds(lambda: quiet(torch_amore.extract_rules, X, t, max_length=2, holdout=0.3))
    stab, _ = seconds(lambda: quiet(torch_amore.extract_rules, X, t, max_length=2, stability=20))
    print(f"  {n} x {f}: one search {one:.3f} s; holdout=0.3 {held:.3f} s ({held / one:.2f} x); stability=20 "
          f"{stab:.1f} s ({stab / one:.1f} x)")  # fmt: skip


def cost(sizes: list[tuple[int, int]], cost_perms: int, device: str, side_threads: int = 1) -> None:
    print(f"== cost: {torch.get_num_threads()} thread(s), device {device}")
    for n, f in sizes:
        cost_row(n, f, cost_perms, device, 2, side_threads if device == "cpu" else 1)
    n, f = sizes[0]
    cost_row(n, f, cost_perms, device, 3)
    evidence_cost(n, f, device)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", default="calibration,power,coverage,cost")
    parser.add_argument("--n-datasets", type=int, default=200)
    parser.add_argument("--permutations", type=int, default=99)
    parser.add_argument("--seeds", type=int, default=50)
    parser.add_argument("--draws", type=int, default=2000)
    parser.add_argument("--sizes", default="10000x128,100000x128")
    parser.add_argument("--cost-perms", type=int, default=99, help="permutations timed in the cost part")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument(
        "--side-threads", type=int, default=os.cpu_count() or 1, help="threads of the side-by-side line of the cost"
    )
    parser.add_argument("--every", type=int, default=0, help="print the counts so far every this many data sets")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    parts = args.parts.split(",")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), load {load:.1f}")
    if "calibration" in parts:
        calibration(args.n_datasets, args.permutations, args.every)
    if "power" in parts:
        power(args.seeds, args.permutations, args.every)
    if "coverage" in parts:
        coverage(args.draws)
    if "cost" in parts:
        sizes = [tuple(int(v) for v in s.split("x")) for s in args.sizes.split(",")]
        cost(sizes, args.cost_perms, args.device, args.side_threads)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
