"""Search-quality sweep: the beam strategy against the others over a grid of settings, not just each row's own.

``bench_quality.py`` compares the methods at each row's paper settings. This sweep varies the settings around them,
to find where the beam strategy loses or is slow: for every row (``benchmarks/_tasks.py``; all but the large ``box``
by default) and every grid point

- ``max_length`` in ``--lengths`` (default 1, 2, 3),
- ``min_support`` = the row's ``min_support`` x each of ``--support-factors`` (default 0.25, 0.5, 1, 2, 4; rounded,
  at least 1),
- ``min_confidence`` in ``--confidences`` (default none and 0.9),

it runs the four methods of ``bench_quality.py`` (``beam``, ``paper``, ``tree``, ``pysubgroup``; same functions,
same re-measured metrics) and prints one line: each method's fitness (``-`` where it found no rule set), the beam
and paper strategies' seconds and their ratio, and the flags

- ``LOSS``: the beam strategy's fitness < max(paper, tree, pysubgroup) - 0.005 (or it found nothing where another
  method found a rule set);
- ``GAP``: the beam strategy's fitness < the exact optimum on a 32-cut equal-frequency grid - 0.005 (the
  ``exact`` column, ``strategy="exact"`` with ``min_gain=0`` at ``max_length`` min(l, 2): the best single condition
  at l = 1, the exhaustive pair optimum at l = 2 and 3, which a search allowed more conditions must reach too;
  ``beam20`` is the beam strategy with ``beam_width=20``; ``--no-exact`` skips both, ``--no-beam20`` the latter);
- ``SLOW``: the beam strategy took more than 5 x the paper strategy's time (the raw ratio; small calls are noisy);
- ``ERR``: a method raised (the message is printed; the sweep goes on).

The tree's and pysubgroup's results do not depend on torch_amore's search, and pysubgroup is slow, so theirs are
cached (fitness, confidence, support, seconds, rule text) in ``sweep_quality_cache.json`` in the cache folder of
``_tasks.py`` (``$TORCH_AMORE_CACHE`` or ``~/.cache/torch_amore``), keyed by the row, its data and settings, the
method and its version: a re-run recomputes only the beam and paper strategies. ``--refresh`` ignores the cache
(and overwrites it). The summary lists the points, the LOSS points from the worst deficit down (with the rule sets
of the beam strategy and the best rival), the SLOW points and the total time. The exit code is always 0: it is a
report, not a check.

Usage::

    python benchmarks/sweep_quality.py                                   # the default grid (fills the cache once)
    python benchmarks/sweep_quality.py --rows diabetes_l3,multimode --lengths 2,3 --confidences none
    python benchmarks/sweep_quality.py --support-factors 0.5,1 --repeat 3 --markdown sweep.md
    python benchmarks/sweep_quality.py --no-pysubgroup --verbose         # every method's rule set on every point
    python benchmarks/sweep_quality.py --refresh                         # recompute the cached tree and pysubgroup
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _tasks  # noqa: E402
import bench_quality  # noqa: E402

METHODS = ("beam", "paper", "beam20", "exact", "tree", "pysubgroup")
RIVALS = bench_quality.RIVALS
CACHED = ("tree", "pysubgroup")  # independent of torch_amore's search: cached
TOLERANCE = bench_quality.TOLERANCE
TIME_FACTOR = bench_quality.TIME_FACTOR
DEFAULT_ROWS = tuple(name for name in _tasks.TASKS if name != "box")
CACHE_VERSION = "1"  # bump when the cached methods' settings in bench_quality change
CACHE_FILE = "sweep_quality_cache.json"


@dataclass
class Cell:
    """One method's best rule set at one grid point, as numbers and text (what the cache holds)."""

    method: str
    fitness: float | None  # None: no rule set found (or an error)
    confidence: float | None
    support: int | None
    seconds: float
    rules: str
    note: str = ""
    cached: bool = False

    @property
    def value(self) -> float:
        return self.fitness if self.fitness is not None else -math.inf

    @classmethod
    def from_result(cls, result: bench_quality.Result) -> Cell:
        rs = result.rule_set
        if rs is None:
            return cls(result.method, None, None, None, result.seconds, "", result.note)
        text = " AND ".join(rule.format(precision=4) for rule in rs.rules)
        return cls(result.method, float(rs.fitness), float(rs.confidence), int(rs.support), result.seconds, text)

    @classmethod
    def error(cls, method: str, exc: BaseException) -> Cell:
        return cls(method, None, None, None, 0.0, "", f"ERR {type(exc).__name__}: {exc}")

    def to_json(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("method", "cached")}


# -------------------------------------------------------------------------------------------------------- cache


def _package_version(name: str) -> str:
    try:
        return version(name)
    except PackageNotFoundError:
        return "?"


def method_version(method: str) -> str:
    """The version string of a cached method's results: the sweep's, bench_quality's settings and the package's."""
    if method == "tree":
        return f"sweep{CACHE_VERSION}/scikit-learn-{_package_version('scikit-learn')}"
    return f"sweep{CACHE_VERSION}/pysubgroup-{_package_version('pysubgroup')}/bw20"


def cache_key(task: _tasks.Task, method: str) -> str:
    """Row, data fingerprint (shape, subgroup size, grids), max_length, min_support, min_confidence, method, version."""
    n, f = task.shape
    conf = "none" if task.min_confidence is None else f"{task.min_confidence:g}"
    return "|".join(
        [task.name, f"{n}x{f}", f"T{int(task.target.sum())}", f"{task.n_grids}{task.bin_strategy}",
         f"l{task.max_length}", f"s{task.min_support}", f"c{conf}", method, method_version(method)]
    )  # fmt: skip


class Cache:
    """A JSON dict of :class:`Cell` s; every new entry is written at once (atomically), so an interrupted sweep keeps
    what it has computed."""

    def __init__(self, path: Path, refresh: bool) -> None:
        self.path, self.refresh = path, refresh
        self.data: dict[str, dict] = self._read()

    def _read(self) -> dict[str, dict]:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def get(self, key: str, method: str) -> Cell | None:
        entry = None if self.refresh else self.data.get(key)
        if entry is None:
            return None
        return Cell(method, **entry, cached=True)

    def put(self, key: str, cell: Cell) -> None:
        if cell.note.startswith("ERR"):
            return  # errors are not cached
        self.data = {**self._read(), **self.data, key: cell.to_json()}
        tmp = self.path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(self.data, indent=0, sort_keys=True))
        os.replace(tmp, self.path)


# ------------------------------------------------------------------------------------------------------ running


def grid(task: _tasks.Task, lengths, factors, confidences) -> list[_tasks.Task]:
    """The task at every (max_length, min_support, min_confidence) of the grid (duplicate supports dropped)."""
    supports = sorted({max(1, int(round(f * task.min_support))) for f in factors})
    return [
        dataclasses.replace(task, max_length=length, min_support=s, min_confidence=conf)
        for length in lengths
        for s in supports
        for conf in confidences
    ]


def _safe(method: str, fn) -> Cell:
    try:
        return Cell.from_result(fn())
    except Exception as exc:  # the library may change under the sweep: report, go on
        return Cell.error(method, exc)


def run_point(
    task: _tasks.Task, *, repeat: int, use_pysubgroup: bool, cache: Cache, exact: bool = True, beam20: bool = True
) -> dict[str, Cell]:
    """All methods at one grid point: beam and paper always (alternating, best of ``repeat`` as in bench_quality),
    tree and pysubgroup from the cache when there."""
    paper = _safe("paper", lambda: bench_quality.run_amore(task, "paper"))
    beam = _safe("beam", lambda: bench_quality.run_amore(task, "beam"))
    for _ in range(repeat - 1):
        if max(paper.seconds, beam.seconds) > 10.0 or paper.note.startswith("ERR") or beam.note.startswith("ERR"):
            break
        paper.seconds = min(paper.seconds, _safe("paper", lambda: bench_quality.run_amore(task, "paper")).seconds)
        beam.seconds = min(beam.seconds, _safe("beam", lambda: bench_quality.run_amore(task, "beam")).seconds)
    cells = {"beam": beam, "paper": paper}
    if exact:
        if beam20:
            cells["beam20"] = _safe("beam20", lambda: bench_quality.run_beam20(task))
        shorter = dataclasses.replace(task, max_length=min(task.max_length, 2))  # singles or pairs: exhaustive
        cells["exact"] = _safe("exact", lambda: bench_quality.run_amore(
            shorter, "exact", top_k=1, min_gain=0, **bench_quality.EXACT_GRID))  # fmt: skip
    runners = {"tree": lambda: bench_quality.run_tree(task, repeat)}
    if use_pysubgroup:
        runners["pysubgroup"] = lambda: bench_quality.run_pysubgroup(task, 1)  # slow: timed once
    for method, fn in runners.items():
        key = cache_key(task, method)
        cell = cache.get(key, method)
        if cell is None:
            cell = _safe(method, fn)
            cache.put(key, cell)
        cells[method] = cell
    return cells


def warm_up() -> None:
    """One small call of the beam and paper strategies and the tree (imports, thread pools), as bench_quality does."""
    g = np.random.default_rng(0)
    X = g.random((2000, 4))
    task = _tasks.Task("warm-up", X, (X[:, 0] > 0.6) & (X[:, 2] < 0.5), [f"f{i}" for i in range(4)], 2, 50, 10,
                       "kmeans")  # fmt: skip
    _safe("paper", lambda: bench_quality.run_amore(task, "paper"))
    _safe("beam", lambda: bench_quality.run_amore(task, "beam"))
    _safe("tree", lambda: bench_quality.run_tree(task))


# ------------------------------------------------------------------------------------------------------- report


@dataclass
class Point:
    task: _tasks.Task
    cells: dict[str, Cell]

    @property
    def rival(self) -> str | None:
        """The best of paper, tree and pysubgroup (None when none found a rule set)."""
        others = {m: c.value for m, c in self.cells.items() if m in RIVALS and c.fitness is not None}
        return max(others, key=others.get) if others else None

    @property
    def deficit(self) -> float:
        """max(others) - beam (inf when only the others found a rule set; -inf when nobody did)."""
        rival = self.rival
        return -math.inf if rival is None else self.cells[rival].value - self.cells["beam"].value

    @property
    def ratio(self) -> float:
        beam, paper = self.cells["beam"].seconds, self.cells["paper"].seconds
        return beam / paper if paper > 0 else math.inf

    @property
    def flags(self) -> list[str]:
        out = []
        if self.deficit > TOLERANCE:
            out.append("LOSS")
        exact = self.cells.get("exact")
        if exact is not None and exact.fitness is not None and exact.value - self.cells["beam"].value > TOLERANCE:
            out.append("GAP")
        if self.ratio > TIME_FACTOR:
            out.append("SLOW")
        if any(c.note.startswith("ERR") for c in self.cells.values()):
            out.append("ERR")
        return out


def _conf(task: _tasks.Task) -> str:
    return "none" if task.min_confidence is None else f"{task.min_confidence:g}"


def _fit(cell: Cell | None) -> str:
    if cell is None:
        return "n/a"
    if cell.note.startswith("ERR"):
        return "ERR"
    return "-" if cell.fitness is None else f"{cell.fitness:.4f}"


def header(methods) -> str:
    cols = "".join(f"{m:>11}" for m in methods)
    return f"{'row':<12} {'l':>1} {'s_min':>6} {'conf':>4} {cols} {'beam s':>8} {'paper s':>8} {'ratio':>6}  flags"


def format_point(point: Point, methods) -> str:
    t, c = point.task, point.cells
    fits = "".join(f"{_fit(c.get(m)):>11}" for m in methods)
    line = (
        f"{t.name:<12} {t.max_length:>1} {t.min_support:>6} {_conf(t):>4} {fits} {c['beam'].seconds:>8.3f} "
        f"{c['paper'].seconds:>8.3f} {point.ratio:>6.1f}  {' '.join(point.flags)}"
    )
    errors = [f"    {m}: {cell.note}" for m, cell in c.items() if cell.note.startswith("ERR")]
    return "\n".join([line, *errors])


def format_rules(point: Point, methods) -> str:
    lines = []
    for m in methods:
        cell = point.cells.get(m)
        if cell is None:
            continue
        if cell.fitness is None:
            lines.append(f"    {m:<10} {cell.note}")
        else:
            numbers = f"fit {cell.fitness:.4f} conf {cell.confidence:.3f} supp {cell.support}"
            lines.append(f"    {m:<10} {numbers}: {cell.rules}")
    return "\n".join(lines)


def markdown(points: list[Point], methods) -> str:
    head = ["row", "l", "s_min", "conf", *methods, "beam s", "paper s", "ratio", "flags"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in points:
        best = max(c.value for m, c in p.cells.items() if m != "exact")  # exact: on its own grid
        fits = []
        for m in methods:
            text = _fit(p.cells.get(m))
            cell = p.cells.get(m)
            fits.append(f"**{text}**" if cell is not None and cell.fitness is not None and cell.value >= best else text)
        t = p.task
        cells = [t.name, str(t.max_length), str(t.min_support), _conf(t), *fits, f"{p.cells['beam'].seconds:.3f}",
                 f"{p.cells['paper'].seconds:.3f}", f"{p.ratio:.1f}", " ".join(p.flags)]  # fmt: skip
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def summary(points: list[Point], methods, wall: float, n_worst: int) -> str:
    losses = sorted((p for p in points if "LOSS" in p.flags), key=lambda p: -p.deficit)
    gaps = [p for p in points if "GAP" in p.flags]
    slow = sorted((p for p in points if "SLOW" in p.flags), key=lambda p: -p.ratio)
    errors = [p for p in points if "ERR" in p.flags]
    beam_s = sum(p.cells["beam"].seconds for p in points)
    paper_s = sum(p.cells["paper"].seconds for p in points)
    ratios = np.array([p.ratio for p in points]) if points else np.array([math.nan])
    lines = [
        f"\n{len(points)} points: {len(losses)} LOSS, {len(gaps)} GAP, {len(slow)} SLOW, {len(errors)} ERR; "
        f"wall {wall:.1f} s (beam {beam_s:.1f} s, paper {paper_s:.1f} s in all; "
        f"beam/paper time ratio median {np.median(ratios):.1f}, max {np.max(ratios):.1f})"
    ]
    if losses:
        lines.append(f"\nLOSS, worst {min(n_worst, len(losses))} of {len(losses)} (deficit = best other - beam):")
        for p in losses[:n_worst]:
            t, rival = p.task, p.rival
            deficit = "beam found none" if math.isinf(p.deficit) else f"deficit {p.deficit:.4f}"
            lines.append(f"  {t.name} l={t.max_length} s_min={t.min_support} conf={_conf(t)}: beam "
                         f"{_fit(p.cells['beam'])} vs {rival} {_fit(p.cells[rival])} ({deficit})")  # fmt: skip
            lines.append(format_rules(p, ["beam", rival]))
    if gaps:
        lines.append(f"\nGAP (beam below the exact single/pair optimum on a 32-cut quantile grid - {TOLERANCE}):")
        for p in gaps:
            t = p.task
            lines.append(f"  {t.name} l={t.max_length} s_min={t.min_support} conf={_conf(t)}: beam "
                         f"{_fit(p.cells['beam'])} vs exact {_fit(p.cells['exact'])}")  # fmt: skip
            lines.append(format_rules(p, ["beam", "exact"]))
    if slow:
        lines.append(f"\nSLOW, worst {min(n_worst, len(slow))} of {len(slow)} (beam s / paper s):")
        for p in slow[:n_worst]:
            t = p.task
            lines.append(f"  {t.name} l={t.max_length} s_min={t.min_support} conf={_conf(t)}: "
                         f"{p.cells['beam'].seconds:.3f} / {p.cells['paper'].seconds:.3f} = {p.ratio:.1f}")  # fmt: skip
    return "\n".join(lines)


def _floats(text: str, what: str, parser: argparse.ArgumentParser) -> list[float | None]:
    out: list[float | None] = []
    for item in text.split(","):
        item = item.strip()
        if what == "confidences" and item.lower() == "none":
            out.append(None)
            continue
        try:
            out.append(float(item))
        except ValueError:
            parser.error(f"--{what}: {item!r} is not a number" + (' or "none"' if what == "confidences" else ""))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    rows_help = f"comma-separated rows out of {','.join(_tasks.TASKS)} (default: all but box)"
    parser.add_argument("--rows", default=",".join(DEFAULT_ROWS), help=rows_help)
    parser.add_argument("--lengths", default="1,2,3", help="max_length values")
    parser.add_argument("--support-factors", default="0.25,0.5,1,2,4", help="multipliers of each row's min_support")
    parser.add_argument("--confidences", default="none,0.9", help='min_confidence values ("none": no limit)')
    parser.add_argument("--repeat", type=int, default=1, help="best-of-n timing of beam and paper (calls under 10 s)")
    parser.add_argument("--no-pysubgroup", action="store_true", help="skip pysubgroup")
    parser.add_argument("--no-exact", action="store_true", help="skip the exact and beam_width=20 columns")
    parser.add_argument("--no-beam20", action="store_true", help="skip the beam_width=20 column")
    parser.add_argument("--refresh", action="store_true", help="recompute the cached tree and pysubgroup results")
    parser.add_argument("--cache", type=Path, default=None, help=f"cache file (default: cache folder / {CACHE_FILE})")
    parser.add_argument("--markdown", type=Path, default=None, help="also write the table to this file")
    parser.add_argument("--verbose", action="store_true", help="print every method's rule set at every point")
    parser.add_argument("--worst", type=int, default=15, help="how many LOSS and SLOW points the summary lists")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.rows.split(",") if n.strip()]
    unknown = [n for n in names if n not in _tasks.TASKS]
    if unknown:
        parser.error(f"unknown rows {unknown}; choose from {list(_tasks.TASKS)}")
    lengths = [int(x) for x in _floats(args.lengths, "lengths", parser)]
    factors = _floats(args.support_factors, "support-factors", parser)
    confidences = _floats(args.confidences, "confidences", parser)
    use_psg = not args.no_pysubgroup and bench_quality.pysubgroup_available()
    if not use_psg and not args.no_pysubgroup:
        print("pysubgroup is not installed: its column is skipped (pip install --no-deps pysubgroup statsmodels)")
    skipped = ({"pysubgroup"} if not use_psg else set()) | ({"beam20", "exact"} if args.no_exact else set())
    skipped |= {"beam20"} if args.no_beam20 else set()
    methods = [m for m in METHODS if m not in skipped]
    cache = Cache(args.cache or _tasks.cache_dir() / CACHE_FILE, args.refresh)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, load {load:.1f}; "
          f"cache {cache.path}{' (refresh)' if args.refresh else ''}")  # fmt: skip
    t0 = time.perf_counter()
    warm_up()
    points: list[Point] = []
    print(header(methods), flush=True)
    for name in names:
        base = _tasks.TASKS[name]()
        for task in grid(base, lengths, factors, confidences):
            cells = run_point(task, repeat=args.repeat, use_pysubgroup=use_psg, cache=cache, exact=not args.no_exact,
                              beam20=not args.no_beam20)  # fmt: skip
            point = Point(task, cells)
            points.append(point)
            print(format_point(point, methods), flush=True)
            if args.verbose:
                print(format_rules(point, methods), flush=True)
    wall = time.perf_counter() - t0
    if args.markdown is not None:
        args.markdown.write_text(markdown(points, methods) + "\n")
    print(summary(points, methods, wall, args.worst))
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"(load {load:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
