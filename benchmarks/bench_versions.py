"""The default strategy of this checkout against another checkout of torch_amore (e.g. an older commit), same run.

"Not slower than before at default settings" needs the time of today's default next to an earlier one on the same
machine at the same moment. Every measurement runs in a fresh process (a checkout per process: two versions of a
package cannot share one) on one CPU thread (``OMP_NUM_THREADS=1``); the two checkouts alternate A, B, A, B ...
``--rounds`` times per row and the ratio A/B is taken round by round, so that drifting machine load cancels.

Per row, each process times ``import torch_amore``, one warm-up call on the row's first 2,000 samples, then the
**first** call on the whole row and ``--repeat`` more calls: their median (or with ``--stat min`` the fastest, the
least disturbed by other jobs) is the **warm** time. Rows (``--rows``, a comma list):

- ``diabetes``: the paper's diabetes task, 70,000 x 15, 10 k-means grids, ``max_length`` 3, ``min_support`` 1000;
- ``adult_like``: a one-hot-heavy table of the adult census's shape, 22,792 x 108 (4 float, 2 int and 102 one-hot
  0/1 columns typed ``"cat"``), 8 k-means grids, ``max_length`` 3, ``min_support`` 1000 (``_tasks.adult_like``);
- ``tox21_ar``, ``tox21_ahr``: RDKit descriptors of Tox21 (NR-AR: 7,026 x 200; NR-AhR), 10 k-means grids,
  ``max_length`` 2, ``min_support`` 150 (needs RDKit; the descriptors are cached after the first run);
- ``mnist7``: a CNN's 128-d latent layer on 8,000 MNIST images, 6 k-means grids, ``max_length`` 2;
- ``latent_10k``: latent-like 10,000 x 16, ``max_length`` 3; ``latent_1m``: latent-like 1,000,000 x 128,
  ``max_length`` 2 (slow: about a minute per process), ``min_support = max(50, N // 100)``
  (``_tasks.latent_issue``: N(0, 1), every even column ReLU-clipped, a two-condition subgroup, 2 % label noise).

Besides the rows (``--no-extras`` skips them), in the same run:

- **sequence**: eight calls at latent-like 10,000 x 16 in one fresh process, right after ``import torch_amore`` (no
  warm-up), per checkout and round; the goal: every call at most the warm median + 20 ms (no hiccup);
- **import**: the median ``import torch_amore`` time (a fresh process: torch's import included) of each checkout;
- **tree**: scikit-learn's ``DecisionTreeClassifier(max_depth=3)`` fit on the latent-like 10,000 x 16 data (one
  thread, median of ``--repeat`` fits after one), against this checkout's warm ``latent_10k`` time.

Printed: a table per row (first and warm time of each checkout, the ratio per round, the median ratio), the geometric
means of the median ratios (first and warm), the sequences, the import times and the tree ratio. Usage::

    git worktree add --detach ../base <commit>         # the checkout to compare with, e.g. the one before a change
    python benchmarks/bench_versions.py --baseline ../base --rounds 5
    python benchmarks/bench_versions.py --baseline ../base --rounds 5 --rows diabetes,adult_like,latent_10k

Real data are read from ``../shared/data`` (or ``$TORCH_AMORE_DATA``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = ("diabetes", "adult_like", "tox21_ar", "tox21_ahr", "mnist7", "latent_10k", "latent_1m")
WARMUP_ROWS = 2000
SEQUENCE = 8
HICCUP_S = 0.020  # a call of the sequence may take the warm median + this


def _load(name: str):
    """(X, target, keyword arguments of extract_rules) of a row, as torch tensors."""
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import _tasks

    if name.startswith("latent_"):
        n, f, length = {"latent_10k": (10_000, 16, 3), "latent_1m": (1_000_000, 128, 2)}[name]
        X, target = _tasks.latent_issue(n, f)
        kwargs = {"max_length": length, "min_support": max(50, n // 100)}
        return torch.from_numpy(X), torch.from_numpy(target), kwargs
    task = (
        _tasks.adult_like() if name == "adult_like" else _tasks.TASKS["diabetes_l3" if name == "diabetes" else name]()
    )
    kwargs = {"max_length": task.max_length, "min_support": task.min_support, "n_grids": task.n_grids,
              "bin_strategy": task.bin_strategy, "feature_types": task.feature_types}  # fmt: skip
    return torch.from_numpy(np.ascontiguousarray(task.X)), torch.from_numpy(task.target), kwargs


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def worker(checkout: str, name: str, repeat: int) -> None:
    """Time ``checkout``'s default strategy on row ``name`` (or the ``sequence``, or the scikit-learn ``tree``);
    print one JSON line."""
    sys.path.insert(0, checkout)
    t0 = time.perf_counter()
    import torch_amore  # first: its import time includes torch's

    import_s = time.perf_counter() - t0
    import torch

    torch.set_num_threads(1)
    if name == "tree":
        from sklearn.tree import DecisionTreeClassifier

        X, target, _ = _load("latent_10k")
        X, target = X.numpy(), target.numpy()
        DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, target)  # warm-up
        times = [
            _timed(lambda: DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, target)) for _ in range(repeat)
        ]
        print(json.dumps({"median": statistics.median(times), "min": min(times)}))
        return
    X, target, kwargs = _load("latent_10k" if name == "sequence" else name)
    if name == "sequence":  # right after the import: no warm-up
        times = [_timed(lambda: torch_amore.extract_rules(X, target, **kwargs)) for _ in range(SEQUENCE)]
        print(json.dumps({"times": times, "import": import_s, "file": torch_amore.__file__}))
        return
    warm_kwargs = dict(kwargs, min_support=min(kwargs["min_support"], WARMUP_ROWS // 20))
    torch_amore.extract_rules(X[:WARMUP_ROWS], target[:WARMUP_ROWS], **warm_kwargs)  # warm-up on a small part
    found = []
    first = _timed(lambda: found.append(torch_amore.extract_rules(X, target, **kwargs)))
    times = [_timed(lambda: torch_amore.extract_rules(X, target, **kwargs)) for _ in range(repeat)]
    best = found[0][0].fitness if found[0] else None
    print(json.dumps({"first": first, "median": statistics.median(times), "min": min(times), "fitness": best,
                      "import": import_s, "file": torch_amore.__file__}))  # fmt: skip


def measure(checkout: Path, name: str, repeat: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, __file__, "--worker", str(checkout), "--row", name, "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError(f"row {name} at {checkout} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if "file" in result:  # the right checkout ran
        assert Path(result["file"]).resolve().is_relative_to(checkout.resolve()), result["file"]
    return result


def _ratios(pairs: list[tuple[dict, dict]], key: str) -> list[float]:
    return [a[key] / b[key] for a, b in pairs]


def geometric_mean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="the other checkout (a folder holding torch_amore/)")
    parser.add_argument("--rows", default=",".join(r for r in ROWS if r != "latent_1m"),
                        help=f"comma list of rows among {', '.join(ROWS)} (default: all but latent_1m)")  # fmt: skip
    parser.add_argument("--rounds", type=int, default=5, help="A/B pairs per row (default 5)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per process after the first (default 3)")
    parser.add_argument("--stat", choices=("median", "min"), default="median",
                        help="the warm time of a process: the median of its calls after the first, or the fastest "
                             "(least disturbed by other jobs on a shared machine)")  # fmt: skip
    parser.add_argument("--no-extras", action="store_true", help="skip the sequence, import and tree measurements")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.row, args.repeat)
        return
    if not args.baseline:
        parser.error("--baseline is required")
    here, base = HERE.parent, Path(args.baseline).resolve()
    rows = [r for r in args.rows.split(",") if r]
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        parser.error(f"unknown rows {unknown}; rows are {', '.join(ROWS)}")
    print(f"A = this checkout ({here}), B = baseline ({base}); one thread, fresh process per measurement, "
          f"{args.rounds} alternating rounds; warm = the {args.stat} of {args.repeat} calls after the first; "
          f"ratio = A / B per round")  # fmt: skip
    print("| row | A first / warm s (fitness) | B first / warm s (fitness) | first ratio per round "
          "| warm ratio per round | median first ratio | median warm ratio |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    medians: dict[str, tuple[float, float]] = {}
    imports: dict[str, list[float]] = {"A": [], "B": []}
    warm_a: dict[str, float] = {}
    for name in rows:
        pairs = []
        for _ in range(args.rounds):
            pairs.append((measure(here, name, args.repeat), measure(base, name, args.repeat)))
            imports["A"].append(pairs[-1][0]["import"])
            imports["B"].append(pairs[-1][1]["import"])
        first, warm = _ratios(pairs, "first"), _ratios(pairs, args.stat)
        medians[name] = (statistics.median(first), statistics.median(warm))
        cell = []
        for side in (0, 1):
            f_s = statistics.median(p[side]["first"] for p in pairs)
            w_s = statistics.median(p[side][args.stat] for p in pairs)
            fit = pairs[-1][side]["fitness"]
            cell.append(f"{f_s:.3f} / {w_s:.3f} ({fit:.3f})" if fit is not None else f"{f_s:.3f} / {w_s:.3f} (-)")
        warm_a[name] = statistics.median(p[0][args.stat] for p in pairs)
        print(f"| {name} | {cell[0]} | {cell[1]} | {', '.join(f'{r:.2f}' for r in first)} "
              f"| {', '.join(f'{r:.2f}' for r in warm)} | **{medians[name][0]:.2f}** | **{medians[name][1]:.2f}** |",
              flush=True)  # fmt: skip
    if medians:
        g_first = geometric_mean([m[0] for m in medians.values()])
        g_warm = geometric_mean([m[1] for m in medians.values()])
        worst = max(max(m) for m in medians.values())
        print(f"\ngeometric mean of the median ratios over {len(medians)} rows: first {g_first:.2f}, warm "
              f"{g_warm:.2f} (goal: at most 1.00); largest row ratio {worst:.2f} (goal: at most 1.10)")  # fmt: skip
    if args.no_extras:
        return
    print(f"\nsequence: {SEQUENCE} calls at latent-like 10,000 x 16 right after `import torch_amore` (seconds)")
    for _ in range(args.rounds):
        for label, checkout in (("A", here), ("B", base)):
            r = measure(checkout, "sequence", args.repeat)
            imports[label].append(r["import"])
            warm = statistics.median(r["times"])
            worst = max(r["times"]) - warm
            verdict = "no hiccup" if worst <= HICCUP_S else "hiccup"
            print(f"  {label}: {' '.join(f'{t:.3f}' for t in r['times'])}  (median {warm:.3f}, slowest "
                  f"+{1000 * worst:.0f} ms: {verdict})", flush=True)  # fmt: skip
    ia, ib = statistics.median(imports["A"]), statistics.median(imports["B"])
    print(f"\nimport torch_amore (torch included), median of {len(imports['A'])} fresh processes: A {ia:.3f} s, "
          f"B {ib:.3f} s, ratio {ia / ib:.2f}")  # fmt: skip
    trees = [measure(here, "tree", args.repeat)[args.stat] for _ in range(args.rounds)]
    tree = statistics.median(trees)
    if "latent_10k" in warm_a:
        print(f"\nscikit-learn DecisionTreeClassifier(max_depth=3) fit on latent-like 10,000 x 16: {tree:.4f} s; "
              f"A's warm latent_10k call {warm_a['latent_10k']:.4f} s: ratio {warm_a['latent_10k'] / tree:.2f} "
              f"(goal: at most 1.10)")  # fmt: skip
    else:
        print(f"\nscikit-learn DecisionTreeClassifier(max_depth=3) fit on latent-like 10,000 x 16: {tree:.4f} s "
              f"(add the row latent_10k for the ratio)")  # fmt: skip


if __name__ == "__main__":
    main()
