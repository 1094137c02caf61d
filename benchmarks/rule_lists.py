"""Rule lists of a fixed set of calls, written to JSON and compared with another checkout's: "behaviour unchanged".

A change meant to keep every result (a re-design, a speed-up) must give the same rule sets on the same inputs. This
script runs ``extract_rules`` on 35 cases and records, per case,
``repr([(rs.rules, rs.support, rs.confidence, rs.fitness) for rs in rule_sets])`` (or the error message of a call
that refuses):

- the 5 quality tasks of ``bench_quality.py`` (``diabetes_l1``, ``diabetes_l3``, ``box_small``, ``multimode``,
  ``mnist7``) x the 3 strategies (``beam``, ``paper``, ``exact``), at the tasks' own settings;
- 20 seeded random cases (``random_00`` ... ``random_19``) of 600-3,000 rows with float columns with NaN, integer
  columns and categorical columns, every binning (uniform, quantile, k-means), ``max_length`` 1-3, fractional and
  count ``min_support``, a planted region plus label noise.

Usage::

    python benchmarks/rule_lists.py --out new.json                  # this checkout's rule lists
    git worktree add --detach ../base <commit>                      # the checkout to compare with
    python benchmarks/rule_lists.py --baseline ../base              # run both (each in its own process), compare
    python benchmarks/rule_lists.py --compare old.json new.json     # compare two files

The comparison prints each case that differs and exits with 1 when any does. ``--cases random`` (or a comma list of
case names) runs a part of them; ``mnist7`` trains a small CNN once and caches its latent layer (``_tasks.py``).

``--cases explain`` (not part of ``all``) runs the explainer's paths instead: ``RegionalRuleExplainer.explain`` in
memory and streamed, and the Lightning callback (on ``trainer.test``) in memory and streamed, each on the inputs and
on a hidden layer of a seeded, untrained MLP over 2,000 seeded rows: 8 cases, e.g. ``explain:stream:layer``::

    python benchmarks/rule_lists.py --cases explain --baseline ../base
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
QUALITY_TASKS = ("diabetes_l1", "diabetes_l3", "box_small", "multimode", "mnist7")
STRATEGIES = ("beam", "paper", "exact")
N_RANDOM = 20
BINNINGS = ("uniform", "quantile", "kmeans")


EXPLAIN_CASES = [f"{how}:{mode}:{space}" for how in ("explain", "callback") for mode in ("memory", "stream")
                 for space in ("inputs", "layer")]  # fmt: skip


def case_names() -> list[str]:
    """Every case of ``all``, in the order they run."""
    quality = [f"{task}:{strategy}" for task in QUALITY_TASKS for strategy in STRATEGIES]
    return quality + [f"random_{seed:02d}" for seed in range(N_RANDOM)]


def random_case(seed: int) -> tuple[object, object, dict]:
    """(X, target, options) of a seeded random case with NaN, integer and categorical columns."""
    import numpy as np

    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(600, 3000))
    n_float, n_int, n_cat = int(rng.integers(2, 6)), int(rng.integers(1, 3)), int(rng.integers(1, 3))
    floats = rng.standard_normal((n, n_float))
    floats[rng.random((n, n_float)) < 0.05] = np.nan
    ints = rng.integers(0, 12, size=(n, n_int)).astype(float)
    cats = rng.integers(0, 4, size=(n, n_cat)).astype(float)
    X = np.concatenate([floats, ints, cats], axis=1)
    region = (np.nan_to_num(floats[:, 0]) > 0.2) & (ints[:, 0] >= 4)
    if seed % 2:
        region &= cats[:, 0] != 1
    target = region ^ (rng.random(n) < 0.1)
    types = ["float"] * n_float + ["int"] * n_int + ["cat"] * n_cat
    options = {
        "max_length": 1 + seed % 3,
        "min_support": 0.05 if seed % 4 == 0 else int(n // 25),
        "n_grids": int(rng.integers(3, 9)),
        "bin_strategy": BINNINGS[seed % 3],
        "feature_types": types,
        "strategy": STRATEGIES[(seed // 3) % 3],
    }
    if options["strategy"] == "exact" and options["max_length"] == 3:
        options["max_length"] = 2
    return X.astype(np.float32 if seed % 5 == 0 else np.float64), target, options


def quality_case(task_name: str, strategy: str) -> tuple[object, object, dict]:
    """(X, target, options) of a bench_quality task at its own settings with one strategy."""
    sys.path.insert(0, str(HERE))
    import _tasks

    task = _tasks.TASKS[task_name]()
    options = {
        "max_length": task.max_length,
        "min_support": task.min_support,
        "n_grids": task.n_grids,
        "bin_strategy": task.bin_strategy,
        "feature_types": task.feature_types,
        "strategy": strategy,
    }
    return task.X, task.target, options


def explain_case(name: str) -> list:
    """The rule sets of an ``explain`` or callback case (``{how}:{mode}:{space}``)."""
    import tempfile

    import torch
    from torch import nn

    import torch_amore

    how, mode, space = name.split(":")
    g = torch.Generator().manual_seed(7)
    X = torch.randn(2000, 6, generator=g)
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    layer = "1" if space == "layer" else None
    options = dict(max_length=2, min_support=0.05, n_grids=6, stream=mode == "stream")
    if how == "explain":
        explainer = torch_amore.RegionalRuleExplainer(net, layer=layer)
        return explainer.explain(X, 1, batch_size=256, **options).rule_sets
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x)

        def test_step(self, batch, batch_idx):
            return None

    with tempfile.TemporaryDirectory() as root:
        callback = torch_amore.RegionalRuleExtractor(target=1, data="test", layer=None if layer is None else "net.1",
                                                     dirpath=root, log_figures=False, **options)  # fmt: skip
        trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False, enable_progress_bar=False,
                             enable_model_summary=False, default_root_dir=root, callbacks=[callback])  # fmt: skip
        loader = DataLoader(TensorDataset(X, torch.zeros(len(X), dtype=torch.long)), batch_size=256)
        trainer.test(Module(), dataloaders=loader, verbose=False)
        return callback.explanation.rule_sets


def rule_list(name: str) -> str:
    """The repr of one case's rule list (or ``error: <type>: <message>`` when the call refuses)."""
    import torch_amore

    if name.split(":")[0] in ("explain", "callback"):
        rule_sets = explain_case(name)
        return repr([(rs.rules, rs.support, rs.confidence, rs.fitness) for rs in rule_sets])
    if name.startswith("random_"):
        X, target, options = random_case(int(name.split("_")[1]))
    else:
        task_name, strategy = name.split(":")
        X, target, options = quality_case(task_name, strategy)
    try:
        rule_sets = torch_amore.extract_rules(X, target, **options)
    except (ValueError, RuntimeError) as err:
        return f"error: {type(err).__name__}: {err}"
    return repr([(rs.rules, rs.support, rs.confidence, rs.fitness) for rs in rule_sets])


def run_cases(names: list[str]) -> dict[str, str]:
    """Each case's rule list, in this process."""
    import torch

    torch.set_num_threads(1)
    out = {}
    for name in names:
        out[name] = rule_list(name)
        print(f"{name}: {len(out[name])} characters", file=sys.stderr)
    return out


def run_checkout(checkout: Path, names: list[str]) -> dict[str, str]:
    """Each case's rule list from another checkout of torch_amore, in a process of its own."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(checkout.resolve())}
    cmd = [sys.executable, __file__, "--cases", ",".join(names), "--out", "-"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def compare(old: dict[str, str], new: dict[str, str]) -> int:
    """Print the cases whose rule lists differ; the number of such cases."""
    differ = [name for name in old if name in new and old[name] != new[name]]
    missing = sorted(set(old) ^ set(new))
    for name in differ:
        print(f"DIFFERS {name}\n  old: {old[name][:2000]}\n  new: {new[name][:2000]}")
    if missing:
        print(f"in one file only: {missing}")
    print(f"{len(old) - len(differ)} of {len(old)} cases identical")
    return len(differ) + len(missing)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", help="write this checkout's rule lists to this JSON file ('-': standard output)")
    parser.add_argument("--baseline", type=Path, help="another checkout to compare this one with")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two JSON files")
    parser.add_argument(
        "--cases", default="all", help="'all', 'random', 'quality', 'explain' or a comma list of case names"
    )
    args = parser.parse_args()
    names = case_names()
    if args.cases == "random":
        names = [n for n in names if n.startswith("random_")]
    elif args.cases == "quality":
        names = [n for n in names if not n.startswith("random_")]
    elif args.cases == "explain":
        names = EXPLAIN_CASES
    elif args.cases != "all":
        names = args.cases.split(",")
    if args.compare:
        old, new = (json.loads(Path(p).read_text()) for p in args.compare)
        sys.exit(1 if compare(old, new) else 0)
    if args.baseline:
        old = run_checkout(args.baseline, names)
        new = run_checkout(HERE.parent, names)
        sys.exit(1 if compare(old, new) else 0)
    found = run_cases(names)
    text = json.dumps(found, indent=1, sort_keys=True)
    if args.out in (None, "-"):
        print(text)
    else:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
