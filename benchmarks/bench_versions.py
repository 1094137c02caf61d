"""The default strategy of this checkout against another checkout of torch_amore (e.g. an older commit), same run.

"Not slower than before at default settings" needs the time of today's default next to an earlier one on the same
machine at the same moment. Each measurement runs in its own process (a checkout per process: two versions of a
package cannot share one), one CPU thread, ``--repeat`` calls after a warm-up, their median
(or with ``--stat min`` the fastest, the least disturbed by other jobs);
the two checkouts alternate A, B, A, B ... ``--rounds`` times per row and the ratio A/B is taken round by round, so
that drifting machine load cancels. The rows are ``_tasks.py``'s at their own settings, with ``max_length`` 1, 2
and 3 for diabetes and the rows' own otherwise, plus the 10,000 x 128 latent-like layer of ``bench_scaling``.

Usage::

    git worktree add --detach ../base <commit>         # the checkout to compare with, e.g. the one before a change
    OMP_NUM_THREADS=1 python benchmarks/bench_versions.py --baseline ../base --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROWS = ("diabetes_l1", "diabetes_l2", "diabetes_l3", "box_small", "multimode", "mnist7", "tox21_ar", "latent_10k")


def _load(name: str):
    """(X, target, keyword arguments of extract_rules) of a row."""
    import numpy as np
    import torch

    sys.path.insert(0, str(HERE))
    import _tasks

    if name == "latent_10k":
        X, target = _tasks.latent_like(10_000, 128)
        return X, target, {"max_length": 2, "min_support": 100}
    if name.startswith("diabetes_l"):
        task = _tasks.diabetes(1 if name == "diabetes_l1" else 3)
        length = int(name[-1])
    else:
        task = _tasks.TASKS[name]()
        length = task.max_length
    kwargs = {"max_length": length, "min_support": task.min_support, "n_grids": task.n_grids,
              "bin_strategy": task.bin_strategy, "feature_types": task.feature_types}  # fmt: skip
    return torch.from_numpy(np.ascontiguousarray(task.X)), torch.from_numpy(task.target), kwargs


def worker(checkout: str, name: str, repeat: int) -> None:
    """Time the default strategy of ``checkout`` on row ``name``; print a JSON line (median and fastest seconds, best
    fitness)."""
    import torch

    sys.path.insert(0, checkout)
    import torch_amore

    torch.set_num_threads(1)
    X, target, kwargs = _load(name)
    torch_amore.extract_rules(X, target, **kwargs)  # warm-up
    times, best = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        found = torch_amore.extract_rules(X, target, **kwargs)
        times.append(time.perf_counter() - t0)
        best = found[0].fitness if found else None
    print(json.dumps({"median": statistics.median(times), "min": min(times), "fitness": best,
                      "file": torch_amore.__file__}))  # fmt: skip


def measure(checkout: Path, name: str, repeat: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout)}
    cmd = [sys.executable, __file__, "--worker", str(checkout), "--row", name, "--repeat", str(repeat)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert Path(result["file"]).resolve().is_relative_to(checkout.resolve()), result["file"]  # the right checkout ran
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", help="the other checkout (a folder holding torch_amore/)")
    parser.add_argument("--rows", default=",".join(ROWS))
    parser.add_argument("--rounds", type=int, default=3, help="A/B pairs per row (default 3)")
    parser.add_argument("--repeat", type=int, default=3, help="timed calls per process (default 3)")
    parser.add_argument("--stat", choices=("median", "min"), default="median",
                        help="each process's time: the median of its calls, or the fastest (least disturbed by other "
                             "jobs on a shared machine)")  # fmt: skip
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--row", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.row, args.repeat)
        return
    if not args.baseline:
        parser.error("--baseline is required")
    here, base = HERE.parent, Path(args.baseline)
    print(f"each process: {args.repeat} calls, their {args.stat}; {args.rounds} rounds")
    print("| row | this checkout: s (fitness) | baseline: s (fitness) | ratio per round | median ratio |")
    print("|---|---|---|---|---|")
    for name in args.rows.split(","):
        pairs = [(measure(here, name, args.repeat), measure(base, name, args.repeat)) for _ in range(args.rounds)]
        ratios = [a[args.stat] / b[args.stat] for a, b in pairs]
        a_s = statistics.median(a[args.stat] for a, _ in pairs)
        b_s = statistics.median(b[args.stat] for _, b in pairs)
        fa, fb = pairs[-1][0]["fitness"], pairs[-1][1]["fitness"]
        print(
            f"| {name} | {a_s:.3f} ({fa:.3f}) | {b_s:.3f} ({fb:.3f}) | {', '.join(f'{r:.2f}' for r in ratios)} "
            f"| **{statistics.median(ratios):.2f}** |",
            flush=True,
        )


if __name__ == "__main__":
    main()
