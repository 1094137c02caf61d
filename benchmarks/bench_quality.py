"""Search quality: the beam strategy against the paper's search, a decision tree and pysubgroup's beam search.

For every task row (``benchmarks/_tasks.py``) four methods look for the rule set of highest fitness
(tp - fp) / T at the same ``max_length`` and ``min_support``:

- ``paper``: ``torch_amore.extract_rules(..., strategy="paper")``, the paper's ratio-driven rule tree;
- ``beam``: ``torch_amore.extract_rules(..., strategy="beam")``, the default strategy;
- ``tree``: scikit-learn's ``DecisionTreeClassifier(max_depth=max_length, min_samples_leaf=min_support)``, best node
  over all root-to-node paths (:func:`torch_amore.decision_tree_rules`), the paper's baseline;
- ``beam20``: the default strategy with ``beam_width=20`` (a wider beam: what more width buys, at what time);
- ``exact``: ``strategy="exact"`` on a 32-cut equal-frequency grid (``n_grids=32, bin_strategy="quantile"``), the
  provably best rule set on that grid (the reference; ``refused`` when its estimated work exceeds
  ``exact_budget``). Its own check: the default's fitness >= exact - 0.005 (its cuts off the grid may exceed it);
- ``pysubgroup``: pysubgroup's ``BeamSearch`` (beam width 20) with selectors from
  ``create_selectors(data, nbins=n_grids, intervals_only=False)`` (equal-frequency one-sided cut points), a
  ``MinSupportConstraint(min_support)``, the fitness quality function below and depth ``2 * max_length`` one-sided
  conditions, on at most ``max_length`` distinct features (so it may express the same intervals as the others and
  no more). pysubgroup is a benchmark-only dependency: ``pip install --no-deps pysubgroup && pip install statsmodels``
  (its metadata pins numpy < 2, which a plain install would downgrade to; it runs on numpy 2); without it the column
  is skipped.

Every rule set is re-measured on the data (``RuleSet.from_rules``), so all four columns use the same metrics. The
check line of a row passes when the beam strategy's fitness is >= max(paper, tree, pysubgroup) - 0.005 and its time
is <= 5 x the paper strategy's. Times are wall-clock seconds of one call (the best of ``--repeat`` calls for calls
under 10 s; the two strategies alternate), data already in memory; derived features (RDKit descriptors, the MNIST
latent layer) are cached by ``_tasks.py`` and not timed.

Usage::

    python benchmarks/bench_quality.py                        # all rows
    python benchmarks/bench_quality.py --rows diabetes_l3,multimode --repeat 3
    python benchmarks/bench_quality.py --quick                # the small rows only (those of tests/test_quality.py)
    python benchmarks/bench_quality.py --markdown table.md    # also write the summary table as markdown
    python benchmarks/bench_quality.py --min-confidence 0.9   # best rule sets of confidence >= 0.9 only
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tasks  # noqa: E402

import torch_amore  # noqa: E402
from torch_amore import Rule, RuleSet  # noqa: E402

METHODS = ("paper", "beam", "beam20", "exact", "tree", "pysubgroup")
RIVALS = ("paper", "tree", "pysubgroup")  # the default must match the best of these
EXACT_GRID = dict(n_grids=32, bin_strategy="quantile")  # the grid of the exact reference
TOLERANCE = 0.005  # beam fitness may trail the best competitor by this much
TIME_FACTOR = 5.0  # beam time may be this many times the paper strategy's
QUICK_ROWS = ("diabetes_l1", "diabetes_l3", "box_small", "multimode")


@dataclass
class Result:
    """The best rule set of one method on one row, re-measured on the row's data."""

    method: str
    rule_set: RuleSet | None
    seconds: float
    note: str = ""

    @property
    def fitness(self) -> float:
        return self.rule_set.fitness if self.rule_set is not None else -math.inf


def _timed(fn, repeat: int):
    """``fn()``'s value and its best wall-clock time over ``repeat`` calls (calls over 10 s are not repeated)."""
    best, out = math.inf, None
    for _ in range(max(1, repeat)):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
        if best > 10.0:
            break
    return out, best


def _measure(rule_set: RuleSet, task: _tasks.Task) -> RuleSet:
    return RuleSet.from_rules(rule_set.rules, torch.from_numpy(task.X), torch.from_numpy(task.target))


# ------------------------------------------------------------------------------------------------------ methods


def run_amore(task: _tasks.Task, strategy: str, repeat: int = 1, *, method: str | None = None, **options) -> Result:
    """``extract_rules`` with the row's settings (``options`` override them); an exact search refused up front for
    its estimated work gives an empty result noted ``refused``."""
    X = torch.from_numpy(task.X)
    target = torch.from_numpy(task.target)
    settings = dict(n_grids=task.n_grids, bin_strategy=task.bin_strategy, min_confidence=task.min_confidence)
    settings.update(options)

    def call():
        return torch_amore.extract_rules(
            X, target, max_length=task.max_length, min_support=task.min_support, feature_names=task.feature_names,
            feature_types=task.feature_types, strategy=strategy, **settings,
        )  # fmt: skip

    try:
        rule_sets, seconds = _timed(call, repeat)
    except ValueError as err:
        if "exact_budget" not in str(err):
            raise
        return Result(method or strategy, None, 0.0, "refused")
    return Result(method or strategy, _measure(rule_sets[0], task) if rule_sets else None, seconds, "none found")


def run_exact(task: _tasks.Task, repeat: int = 1) -> Result:
    """The exact optimum on a 32-cut equal-frequency grid (``top_k=1``)."""
    return run_amore(task, "exact", repeat, top_k=1, **EXACT_GRID)


def run_beam20(task: _tasks.Task, repeat: int = 1) -> Result:
    return run_amore(task, "beam", repeat, method="beam20", beam_width=20)


def run_tree(task: _tasks.Task, repeat: int = 1) -> Result:
    def call():
        return torch_amore.decision_tree_rules(
            task.X, task.target, max_depth=task.max_length, min_samples_leaf=task.min_support,
            feature_names=task.feature_names, feature_types=task.feature_types,
        )  # fmt: skip

    rule_sets, seconds = _timed(call, repeat)
    if task.min_confidence is not None:  # the best node among those confident enough
        rule_sets = [rs for rs in rule_sets if rs.confidence >= task.min_confidence]
    return Result("tree", _measure(rule_sets[0], task) if rule_sets else None, seconds, "no node confident enough")


def pysubgroup_available() -> bool:
    try:
        import pysubgroup  # noqa: F401
    except Exception:  # an ImportError, or a failure inside pysubgroup's own imports
        return False
    return True


def fitness_qf():
    """A pysubgroup quality function computing the paper's fitness (tp - fp) / T, with an optimistic estimate.

    Refining a subgroup can at best keep all its positives and drop all its negatives, so ``tp / T`` bounds the
    fitness of every refinement (pysubgroup's bounded measures use this to prune).
    """
    import pysubgroup as ps

    class FitnessQF(ps.SimplePositivesQF, ps.BoundedInterestingnessMeasure):
        def evaluate(self, subgroup, target, data, statistics=None):
            s = self.ensure_statistics(subgroup, target, data, statistics)
            return (2 * s.positives_count - s.size_sg) / self.dataset_statistics.positives_count

        def optimistic_estimate(self, subgroup, target, data, statistics=None):
            s = self.ensure_statistics(subgroup, target, data, statistics)
            return s.positives_count / self.dataset_statistics.positives_count

    return FitnessQF()


class MaxFeaturesConstraint:
    """pysubgroup constraint: the selectors of a subgroup name at most ``max_features`` distinct attributes."""

    def __init__(self, max_features: int) -> None:
        self.max_features = max_features

    @property
    def is_monotone(self) -> bool:
        return True

    def is_satisfied(self, subgroup, statistics=None, data=None) -> bool:
        return len({sel.attribute_name for sel in subgroup.selectors}) <= self.max_features


def pysubgroup_rules(selectors, task: _tasks.Task) -> tuple[Rule, ...]:
    """pysubgroup selectors as torch_amore rules: interval selectors (``lb <= x < ub``, the same convention) on one
    attribute merge into one interval; an equality selector becomes a categorical rule (``x == value``)."""
    column = {name: j for j, name in enumerate(task.feature_names)}
    bounds: dict[int, tuple[float, float]] = {}
    values: dict[int, float] = {}
    for sel in selectors:
        j = column[sel.attribute_name]
        if hasattr(sel, "attribute_value"):
            values[j] = float(sel.attribute_value)
        else:
            lo, hi = bounds.get(j, (-math.inf, math.inf))
            bounds[j] = (max(lo, float(sel.lower_bound)), min(hi, float(sel.upper_bound)))
    rules = []
    for j in sorted(set(bounds) | set(values)):
        name = task.feature_names[j]
        if j in values:
            rules.append(Rule(j, name, value=values[j], kind="cat"))
        else:
            kind = task.feature_types[j] if task.feature_types and task.feature_types[j] == "int" else "float"
            rules.append(Rule(j, name, low=bounds[j][0], high=bounds[j][1], kind=kind))
    return tuple(rules)


def run_pysubgroup(task: _tasks.Task, repeat: int = 1, beam_width: int = 20, any_features: bool = False) -> Result:
    """pysubgroup's beam search; ``any_features`` lifts the limit of ``max_length`` distinct features (its
    ``2 * max_length`` one-sided conditions may then name up to ``2 * max_length`` features)."""
    import pandas as pd
    import pysubgroup as ps

    data = pd.DataFrame(task.X, columns=task.feature_names)
    data["__target__"] = task.target

    def call():
        selectors = ps.create_selectors(data, nbins=task.n_grids, intervals_only=False, ignore=["__target__"])
        search = ps.SubgroupDiscoveryTask(
            data, ps.BinaryTarget("__target__", True), selectors, qf=fitness_qf(), depth=2 * task.max_length,
            result_set_size=beam_width, min_quality=-math.inf,
            constraints=[ps.MinSupportConstraint(task.min_support)]
            + ([] if any_features else [MaxFeaturesConstraint(task.max_length)]),
        )  # fmt: skip
        return ps.BeamSearch(beam_width=beam_width).execute(search)

    result, seconds = _timed(call, repeat)
    # the search starts from the empty description with a placeholder quality of 0: it is not a rule set
    best = None
    for quality, subgroup in result.to_descriptions():
        if not subgroup.selectors:  # the search starts from the empty description, with a placeholder quality 0
            continue
        rule_set = RuleSet.from_rules(pysubgroup_rules(subgroup.selectors, task), task.X, task.target)
        if not math.isclose(rule_set.fitness, quality, abs_tol=1e-9):  # the conversion must select the same samples
            raise RuntimeError(f"pysubgroup's {subgroup} has fitness {quality}, its conversion {rule_set.fitness}")
        if task.min_confidence is not None and rule_set.confidence < task.min_confidence:
            continue  # like the others: the best subgroup found that is confident enough
        if best is None or rule_set.fitness > best.fitness:
            best = rule_set
    return Result("pysubgroup", best, seconds, "no subgroup")


# ------------------------------------------------------------------------------------------------------- report


def check(results: dict[str, Result]) -> tuple[bool, bool, str]:
    """(fitness criteria hold, time criterion holds, the row's check line)."""
    beam, paper = results["beam"], results["paper"]
    others = {m: r.fitness for m, r in results.items() if m in RIVALS and r.rule_set is not None}
    rival = max(others, key=others.get) if others else "none"
    others.setdefault(rival, -math.inf)
    fit_ok = beam.fitness >= others[rival] - TOLERANCE
    time_ok = beam.seconds <= TIME_FACTOR * paper.seconds
    line = (
        f"check: beam fitness {beam.fitness:.4f} >= max(others) - {TOLERANCE} = {others[rival] - TOLERANCE:.4f} "
        f"({rival}): {'OK' if fit_ok else 'FAIL'}; beam time {beam.seconds:.2f} s <= {TIME_FACTOR:g} x paper "
        f"{paper.seconds:.2f} s ({beam.seconds / max(paper.seconds, 1e-9):.1f}x): {'OK' if time_ok else 'FAIL'}"
    )
    exact = results.get("exact")
    if exact is not None and exact.rule_set is not None:
        exact_ok = beam.fitness >= exact.fitness - TOLERANCE
        fit_ok = fit_ok and exact_ok
        line += (
            f"; beam >= exact32q {exact.fitness:.4f} - {TOLERANCE}: {'OK' if exact_ok else 'FAIL'} "
            f"(exact time {exact.seconds / max(beam.seconds, 1e-9):.1f}x beam)"
        )
    return fit_ok, time_ok, line


def format_row(task: _tasks.Task, results: dict[str, Result]) -> str:
    n, f = task.shape
    lines = [
        f"== {task.name}: {task.about} (N={n:,}, F={f:,}, max_length={task.max_length}, "
        f"min_support={task.min_support}, n_grids={task.n_grids}, {task.bin_strategy}; "
        f"{int(task.target.sum()):,} in the subgroup)",
        f"  {'method':<11} {'fitness':>8} {'confidence':>10} {'support':>8} {'seconds':>8}  rule set",
    ]
    for m in METHODS:
        r = results.get(m)
        if r is None:
            continue
        rs = r.rule_set
        if rs is None:
            lines.append(f"  {m:<11} {'-':>8} {'-':>10} {'-':>8} {r.seconds:>8.2f}  {r.note}")
            continue
        text = " AND ".join(rule.format(precision=4) for rule in rs.rules)
        lines.append(f"  {m:<11} {rs.fitness:>8.4f} {rs.confidence:>10.3f} {rs.support:>8} {r.seconds:>8.2f}  {text}")
    lines.append("  " + check(results)[2])
    return "\n".join(lines)


def markdown(rows: list[tuple[_tasks.Task, dict[str, Result]]]) -> str:
    head = ["row", "N x F", "l, s_min, n_g"]
    for m in METHODS:
        head.append(f"{m} fit / conf / supp / s")
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for task, results in rows:
        n, f = task.shape
        settings = f"{task.max_length}, {task.min_support}, {task.n_grids} {task.bin_strategy}"
        cells = [task.name, f"{n:,} x {f:,}", settings]
        best = max(r.fitness for m, r in results.items() if m != "exact")  # exact: on its own grid
        for m in METHODS:
            r = results.get(m)
            if r is None or r.rule_set is None:
                cells.append("-" if r is None else f"{r.note} / {r.seconds:.1f} s")
                continue
            rs = r.rule_set
            fit = f"**{rs.fitness:.3f}**" if rs.fitness >= best - 1e-12 else f"{rs.fitness:.3f}"
            cells.append(f"{fit} / {rs.confidence:.3f} / {rs.support} / {r.seconds:.2f}")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def warm_up() -> None:
    """One small call of each method, so that no row's timing pays for first-call costs (imports, thread pools)."""
    g = np.random.default_rng(0)
    X = g.random((2000, 4))
    target = (X[:, 0] > 0.6) & (X[:, 2] < 0.5)
    task = _tasks.Task("warm-up", X, target, [f"f{i}" for i in range(4)], 2, 50, 10, "kmeans")
    run_row(task, repeat=1, use_pysubgroup=pysubgroup_available())


def run_row(
    task: _tasks.Task, *, repeat: int, use_pysubgroup: bool, any_features: bool = False, exact: bool = True
) -> dict[str, Result]:
    # the two strategies alternate, so that a burst of load on a shared machine does not favour one of them
    paper, beam = run_amore(task, "paper"), run_amore(task, "beam")
    for _ in range(repeat - 1):
        if max(paper.seconds, beam.seconds) > 10.0:
            break
        paper.seconds = min(paper.seconds, run_amore(task, "paper").seconds)
        beam.seconds = min(beam.seconds, run_amore(task, "beam").seconds)
    results = {"paper": paper, "beam": beam}
    if exact:
        results["beam20"] = run_beam20(task, repeat)
        results["exact"] = run_exact(task, repeat)
    results["tree"] = run_tree(task, repeat)
    if use_pysubgroup:
        results["pysubgroup"] = run_pysubgroup(task, repeat, any_features=any_features)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default=None, help=f"comma-separated rows out of {','.join(_tasks.TASKS)}")
    parser.add_argument("--quick", action="store_true", help=f"only the small rows {','.join(QUICK_ROWS)}")
    parser.add_argument("--repeat", type=int, default=1, help="best-of-n timing for calls under 10 s")
    parser.add_argument("--no-pysubgroup", action="store_true", help="skip pysubgroup")
    parser.add_argument("--no-exact", action="store_true", help="skip the exact and beam_width=20 columns")
    parser.add_argument("--pysubgroup-any-features", action="store_true",
                        help="let pysubgroup's conditions name up to 2 x max_length features")  # fmt: skip
    parser.add_argument("--min-confidence", type=float, default=None,
                        help="every method returns its best rule set of at least this confidence")  # fmt: skip
    parser.add_argument("--markdown", type=Path, default=None, help="also write the summary table to this file")
    args = parser.parse_args(argv)
    names = args.rows.split(",") if args.rows else list(QUICK_ROWS if args.quick else _tasks.TASKS)
    unknown = [n for n in names if n not in _tasks.TASKS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {list(_tasks.TASKS)}")
    use_psg = not args.no_pysubgroup and pysubgroup_available()
    if not use_psg and not args.no_pysubgroup:
        print("pysubgroup is not installed: its column is skipped (pip install --no-deps pysubgroup statsmodels)")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load {load:.1f}")
    warm_up()
    rows, failed = [], []
    for name in names:
        task = _tasks.TASKS[name]()
        if args.min_confidence is not None:
            task = dataclasses.replace(task, name=f"{task.name} (conf>={args.min_confidence:g})",
                                       min_confidence=args.min_confidence)  # fmt: skip
        results = run_row(task, repeat=args.repeat, use_pysubgroup=use_psg, any_features=args.pysubgroup_any_features,
                          exact=not args.no_exact)  # fmt: skip
        rows.append((task, results))
        print(format_row(task, results), flush=True)
        fit_ok, time_ok, _ = check(results)
        if not (fit_ok and time_ok):
            failed.append(name)
    table = markdown(rows)
    print("\n" + table)
    if args.markdown is not None:
        args.markdown.write_text(table + "\n")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\nrows failing a check: {', '.join(failed) if failed else 'none'} (load {load:.1f})")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
