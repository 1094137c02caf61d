"""The ``torch-amore rules`` command: read the table, make the subgroup from the target expression or column, search,
print the rule table and write the files asked for.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from torch_amore.cli.expression import ExpressionError, parse_expression, show_columns
from torch_amore.cli.table import encode_features, is_text, read_table, subgroup_from_column
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.explanation_text import holds_out, searched_counts
from torch_amore.report.distinct import distinct_rule_sets
from torch_amore.rules.evidence_columns import aligned_evidence, legend_lines, verdict_line
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extract import extract_rules
from torch_amore.search.options import SearchOptions


class CLIError(Exception):
    """Bad input: reported as one line on stderr with exit code 2."""


def subgroup_from_expression(df: pd.DataFrame, expr: str, flag: str = "--target") -> tuple[np.ndarray, list[str]]:
    """Boolean (N,) mask of a condition on the columns (:mod:`torch_amore.cli.expression`) and the columns it uses,
    in table order; ``flag``: the option that gave it, named in errors.

    Example:
        >>> df = pd.DataFrame({"age": [30, 60, 70], "y": [1, 1, 0]})
        >>> mask, used = subgroup_from_expression(df, "y == 1 and age > 40")
        >>> mask.tolist(), used
        ([False, True, False], ['age', 'y'])
    """
    columns = list(df.columns)
    try:
        parsed = parse_expression(expr, columns)
        mask = parsed.evaluate(df)
    except ExpressionError as err:
        message = str(err)
        if "columns are:" not in message:
            message += f"; columns are: {show_columns(columns)}"
        raise CLIError(f"{flag} {expr!r}: {message}") from None
    return mask, [c for c in columns if c in parsed.columns]


def _flag_names(message: str) -> str:
    """A library message with option names (```min_support```) written as the command line's flags."""
    for name in (*SearchOptions.names(), "holdout_rows"):
        message = message.replace(f"`{name}`", "--" + name.replace("_", "-"))
    return message


def _expand(spec: list | dict, names: list[str], owners: dict[str, list[str]], flag: str, default: Any) -> list:
    """Per-feature values from a ``--feature-*`` spec: a list with one value per feature, or a mapping of feature
    (or string column) names to values (``default`` for the others)."""
    if isinstance(spec, list):
        if len(spec) != len(names):
            values = f"{len(spec)} value{'s' if len(spec) != 1 else ''}"
            raise CLIError(
                f"{flag} has {values}, but there are {len(names)} features ({show_columns(names)}); give "
                "one per feature or name=value pairs"
            )
        return spec
    values = [default] * len(names)
    index = {n: i for i, n in enumerate(names)}
    for key, value in spec.items():
        targets = [key] if key in index else owners.get(key, [])
        if not targets:
            raise CLIError(f"unknown feature {key!r} in {flag}; features are: {show_columns(names)}")
        for name in targets:
            values[index[name]] = value
    return values


def _build_options(
    args: argparse.Namespace, names: list[str], types: list[str], owners: dict[str, list[str]]
) -> SearchOptions:
    """The one :class:`~torch_amore.SearchOptions` of a command line: its flags over the library's defaults, with
    the encoded columns' types where ``--feature-types`` does not name them."""
    given = {name: getattr(args, name) for name in SearchOptions.names() if getattr(args, name, None) is not None}
    chosen = _expand(given.pop("feature_types", {}), names, owners, "--feature-types", None)
    given["feature_types"] = [c or t for c, t in zip(chosen, types)]
    for field, default in (("feature_scale", 1.0), ("feature_offset", 0.0)):
        if field in given:
            given[field] = _expand(given[field], names, owners, "--" + field.replace("_", "-"), default)
    try:
        return SearchOptions(**given)
    except (ValueError, TypeError) as err:
        raise CLIError(_flag_names(str(err))) from None


def _device(text: str) -> torch.device:
    """The ``--device``: cpu, or an available cuda/mps device."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        device = None
    if device is None or device.type not in ("cpu", "cuda", "mps"):
        raise CLIError(f"cannot use --device {text!r}: expected cpu, cuda, cuda:N or mps")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise CLIError(f"cannot use --device {text!r}: CUDA is not available here; use --device cpu")
        count = torch.cuda.device_count()
        if device.index is not None and device.index >= count:
            raise CLIError(
                f"cannot use --device {text!r}: there {'is' if count == 1 else 'are'} {count} CUDA "
                f"device{'s' if count != 1 else ''} (cuda:0 to cuda:{count - 1})"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise CLIError(f"cannot use --device {text!r}: MPS is not available here; use --device cpu")
    return device


def format_table(
    rule_sets: Sequence[RuleSet],
    *,
    flag_negative: bool = False,
    positions: Sequence[int] | None = None,
    base_rate: float | None = None,
    params: Mapping[str, Any] | None = None,
) -> str:
    """The rule sets as an aligned text table: ``#`` (``positions``, 1-based places in the full list; default
    1, 2, ...), rule, support, confidence, fitness (and, with ``flag_negative``, a note on rule sets with negative
    fitness), the evidence columns some rule set carries, then the legend: a line on confidence and fitness (with
    the ``base_rate`` when given, of the rows searched when ``params`` say rows were held out) and a line per
    evidence column (:func:`torch_amore.rules.evidence_columns.legend_lines`, its counts from ``params``).

    Example:
        >>> from torch_amore.rules.rule import Rule
        >>> rs = RuleSet((Rule(0, "age", low=50.0),), support=120, confidence=0.75, fitness=0.2)
        >>> print(format_table([rs], positions=[3], base_rate=0.25))
           #  rule       support  confidence  fitness
           3  age >= 50      120       0.750    0.200
        confidence: the subgroup's share of the rows covered (base rate 0.250); fitness: (in - out) / subgroup
        >>> tested = RuleSet(rs.rules, support=120, confidence=0.75, fitness=0.2, p_value=0.05)
        >>> table = format_table([tested], base_rate=0.25, params={"holdout": 0.3, "permutations": 19})
        >>> print(table.splitlines()[0]); print(table.splitlines()[-2].split("; ")[0])
           #  rule       support  confidence  fitness  p(perm)
        confidence: the subgroup's share of the rows covered (base rate 0.250 of the rows searched)
        >>> print(table.splitlines()[-1])
        p(perm): the share of 19 searches on shuffled targets that reach this fitness ((1 + k) / (P + 1))
    """
    positions = list(range(1, len(rule_sets) + 1)) if positions is None else list(positions)
    rules = [" AND ".join(r.format() for r in rs.rules) or "TRUE" for rs in rule_sets]
    width = max([len("rule")] + [len(r) for r in rules])
    extra, cells = aligned_evidence(rule_sets)  # held-out numbers, p-values, stability: when computed
    lines = [f"{'#':>4}  {'rule':<{width}}  {'support':>7}  {'confidence':>10}  {'fitness':>7}{extra}"]
    for i, rs, text, cell in zip(positions, rule_sets, rules, cells):
        note = "  negative fitness" if flag_negative and rs.fitness < 0 else ""
        lines.append(
            f"{i:>4}  {text:<{width}}  {rs.support:>7}  {rs.confidence:>10.3f}  {rs.fitness:>7.3f}{cell}{note}"
        )
    params = params or {}
    of = " of the rows searched" if holds_out(dict(params)) else ""
    base = "" if base_rate is None else f" (base rate {base_rate:.3f}{of})"
    lines.append(f"confidence: the subgroup's share of the rows covered{base}; fitness: (in - out) / subgroup")
    lines += legend_lines(rule_sets, params)  # what the evidence columns mean
    return "\n".join(lines)


def _describe_rows(options: SearchOptions, n_found: int, limit: int | None) -> str:
    """What the rows of the table are, in one line."""
    what = (
        f"every node of the rule tree (the top_k={options.top_k} candidate intervals at each node, up to "
        f"max_length={options.max_length} conditions)"
    )
    if options.strategy != "paper":
        what += f", plus the beam search's best rule sets (beam_width={options.beam_width} per length)"
    if options.min_confidence is not None:
        what += f", with confidence >= {options.min_confidence:g}"
    kept = f"; kept the {limit} best" if limit is not None and n_found > limit else ""
    return f"{n_found} rule set{'s' if n_found != 1 else ''} found: {what}, best fitness first{kept}"


def _describe_options(options: SearchOptions, n: int, n_target: int, *, held: bool = False) -> str:
    """The search options in one line (per-feature lists left out), with the row count ``min_support`` means on the
    ``n`` rows searched; the evidence options only when some evidence is asked for (``seed`` and ``level`` mean
    nothing without it; ``held``: rows are held out by ``--holdout-rows``, whose intervals take ``level``)."""
    left_out = {"feature_types", "feature_scale", "feature_offset", "progress"}
    if not options.wants_evidence:
        left_out |= {"permutations", "stability", "seed"} | (set() if held else {"level"})
    shown = []
    for key, value in options.to_dict().items():
        if key in left_out:
            continue
        if key == "min_support":
            value = "auto" if value is None else value
            shown.append(f"{key}={value} ({options.support_count(n, n_target)} rows)")
        elif value is not None:
            shown.append(f"{key}={value}")
    return "options: " + ", ".join(shown)


def _write(flag: str, path: str, explanation: RegionalExplanation) -> None:
    """``--json`` (:meth:`RegionalExplanation.to_json`) or ``--html`` (:meth:`RegionalExplanation.to_html`)."""
    try:
        explanation.to_json(path) if flag == "--json" else explanation.to_html(path)
    except OSError as err:
        raise CLIError(f"cannot write {flag} {path}: {err.strerror or err}") from None


def _one_hot_owners(df: pd.DataFrame, names: list[str]) -> dict[str, list[str]]:
    """For each string column, the one-hot feature names it became."""
    return {
        c: [n for n in names if n.startswith(c + "_") and n not in df.columns] for c in df.columns if is_text(df[c])
    }


def _subgroup(df: pd.DataFrame, args: argparse.Namespace) -> tuple[np.ndarray, list[str], str, str]:
    """The subgroup mask, the columns it uses, how the user gave it, and its name in printed rules."""
    if args.target is not None:
        target, used = subgroup_from_expression(df, args.target)
        label, name = f"--target {args.target!r}", " ".join(args.target.split())
    else:
        try:
            target, used = subgroup_from_column(df, args.target_column), [args.target_column]
        except ValueError as err:
            raise CLIError(str(err)) from None
        label, name = f"--target-column {args.target_column!r}", f"{args.target_column} == 1"
    n, n_target = len(df), int(target.sum())
    if n_target == 0:
        raise CLIError(f"the subgroup {label} selects no rows (of {n})")
    if n_target == n:
        raise CLIError(f"the subgroup {label} selects all {n} rows; rules need rows outside the subgroup")
    return target, used, label, name


@dataclass
class _Run:
    """What one ``rules`` command computed: the inputs of the search and its result."""

    args: argparse.Namespace
    n: int
    target: np.ndarray
    target_label: str
    target_name: str
    excluded: list[str]
    X: np.ndarray
    names: list[str]
    options: SearchOptions
    device: torch.device
    held: np.ndarray | None = None  # the rows of --holdout-rows
    n_found: int = 0
    found: list[RuleSet] = dataclass_field(default_factory=list)

    @property
    def negative(self) -> list[RuleSet]:
        return [rs for rs in self.found if rs.fitness < 0]

    def shown(self) -> list[RuleSet]:
        """The rule sets of the printed table: all with ``--all``, else the distinct ones with fitness >= 0
        (:func:`torch_amore.report.distinct.distinct_rule_sets`)."""
        if self.args.all_rule_sets:
            return list(self.found)
        return distinct_rule_sets(self.found, torch.from_numpy(self.X), min_fitness=0.0)

    def rows(self) -> dict[str, Any]:
        """The counts of the run's rows, as an explanation's ``params`` hold them: all rows, the subgroup's, the
        ``holdout`` fraction and, with ``--holdout-rows``, the rows held out and the subgroup's among them."""
        rows = {"n_samples": self.n, "subgroup_size": int(self.target.sum()), "holdout": self.options.holdout}
        if self.held is not None:
            rows.update(held_out_rows=int(self.held.sum()), held_out_subgroup=int((self.held & self.target).sum()))
        return rows

    def params(self) -> dict[str, Any]:
        """The search options and the counts of the run's rows (:meth:`rows`), as an explanation's ``params``."""
        return {**self.options.to_dict(), **self.rows()}

    def held_out_line(self) -> str | None:
        """``held out: N of M rows, K of the subgroup (how); the search saw the other S`` with ``--holdout`` or
        ``--holdout-rows`` (``None`` without): the rows the held-out columns are measured on."""
        if self.held is None and self.options.holdout is None:
            return None
        searched, searched_target = self.searched()
        if self.held is not None:
            how = f"--holdout-rows {self.args.holdout_rows!r}"
        else:
            how = f"--holdout {self.options.holdout:g} of each side, --seed {self.options.seed}"
        return (
            f"held out: {self.n - searched} of {self.n} rows, {int(self.target.sum()) - searched_target} of the "
            f"subgroup ({how}); the search saw the other {searched}"
        )

    def searched(self) -> tuple[int, int]:
        """The rows the search saw and its target rows among them: with ``--holdout`` or ``--holdout-rows``, those not
        held out (:func:`torch_amore.explain.explanation_text.searched_counts`)."""
        return searched_counts(self.rows())

    def explanation(self) -> RegionalExplanation:
        """The kept rule sets (negative fitness included) as the library's explanation, for ``--json``; its
        ``params`` hold every search option (as the explainer's do) and the facts of the run."""
        params = {
            **self.options.to_dict(),
            "min_support_count": self.options.support_count(*self.searched()),
            "source": "torch-amore rules",
            "table": str(self.args.table),
            "target": self.target_label,
            "target_name": self.target_name,
            **self.rows(),
            "excluded": self.excluded,
            "device": str(self.device),
        }
        if self.held is not None:
            params["holdout_rows"] = self.args.holdout_rows
        return RegionalExplanation(
            rule_sets=list(self.found),
            subgroup=torch.from_numpy(self.target),
            threshold=None,
            features=list(range(len(self.names))),
            feature_names=list(self.names),
            params=params,
            features_matrix=torch.from_numpy(self.X),
            message="" if self.found else "no rule set found",
        )


def _search(run: _Run) -> list[RuleSet]:
    """The run's search on its device; the library's errors on user-controlled values as one-line CLI errors."""
    X_t, device = torch.from_numpy(run.X), run.device
    if device.type != "cpu":
        X_t = X_t.to(device, dtype=torch.float32 if device.type == "mps" else torch.float64)
    held = None if run.held is None else torch.from_numpy(run.held).to(device)
    try:
        return extract_rules(
            X_t,
            torch.from_numpy(run.target),
            options=run.options,
            feature_names=run.names,
            target_name=run.target_name,
            holdout_rows=held,
        )
    except torch.cuda.OutOfMemoryError:
        raise CLIError(
            f"out of memory on {device}: use fewer rows, fewer features (--features/--exclude), a smaller "
            "--n-grids or --beam-width, or --device cpu"
        ) from None
    except MemoryError as err:
        raise CLIError(
            _flag_names(str(err)) or "out of memory: use fewer rows, fewer features or a smaller --n-grids"
        ) from None
    except (ValueError, TypeError) as err:  # the library's checks of user-controlled values
        raise CLIError(_flag_names(str(err))) from None


def _prepare(args: argparse.Namespace) -> _Run:
    """Everything before the search: device, table, subgroup, features and options (all checked)."""
    device = _device(args.device)
    for flag, path in (("--json", args.json), ("--html", args.html)):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise CLIError(f"cannot write {flag} {path}: its folder does not exist")
    try:
        df = read_table(args.table)
    except ValueError as err:
        raise CLIError(str(err)) from None
    target, used, label, target_name = _subgroup(df, args)
    held = None
    if args.holdout_rows is not None:
        held, held_by = subgroup_from_expression(df, args.holdout_rows, "--holdout-rows")
        used = [*used, *held_by]
    exclude = list(dict.fromkeys(name for group in args.exclude for name in group))
    unknown = [name for name in exclude if name not in df.columns]
    if unknown:
        raise CLIError(f"unknown column(s) {unknown} in --exclude; columns are: {show_columns(list(df.columns))}")
    excluded = list(dict.fromkeys(list(used) + exclude))
    try:
        X, names, types = encode_features(
            df, exclude=excluded, features=args.features, max_categories=args.max_categories
        )
    except ValueError as err:
        raise CLIError(str(err)) from None
    options = _build_options(args, names, types, _one_hot_owners(df, names))
    return _Run(args, len(df), target, label, target_name, excluded, X, names, options, device, held)


def _report(run: _Run) -> None:
    """Print what was run and the table of rule sets."""
    n_target = int(run.target.sum())
    features = f"{len(run.names)} feature{'s' if len(run.names) != 1 else ''}"
    print(
        f"subgroup {run.target_name}: {n_target} of {run.n} rows ({100 * n_target / run.n:.1f}%); {features} "
        f"(excluded: {', '.join(run.excluded) or 'none'})"
    )
    held_out = run.held_out_line()
    if held_out is not None:
        print(held_out)
    searched, searched_target = run.searched()  # the rows of the table's numbers (not the held-out ones)
    print(_describe_options(run.options, searched, searched_target, held=run.held is not None))
    if not run.found:
        print(
            "no rule set found: no interval has a probability ratio > 1 with enough support; try a smaller "
            "--min-support"
        )
        return
    print(_describe_rows(run.options, run.n_found, run.args.limit))
    params = run.params()
    line = verdict_line(run.found, params)
    if line is not None:
        print(line)
    shown, negative = run.shown(), run.negative
    if shown:
        place = {id(rs): i for i, rs in enumerate(run.found, 1)}  # rule_sets[i] is #i+1, as in --json and --html
        positions = [place[id(rs)] for rs in shown]
        base_rate = searched_target / searched
        table = format_table(
            shown, flag_negative=run.args.all_rule_sets, positions=positions, base_rate=base_rate, params=params
        )
        print(table)
    if run.found and run.found[0].optimum is not None:
        print(f"best: {run.found[0].optimum_text()}")
    hidden = len(run.found) - len(shown)
    if hidden:
        print(
            f"{hidden} of {len(run.found)} rule sets not shown: near-duplicates of a fitter one, or negative fitness "
            f"({len(negative)}: covering more rows outside the subgroup than inside); --all shows them"
        )


def _run_rules(args: argparse.Namespace) -> int:
    run = _prepare(args)
    found = _search(run)
    run.n_found = len(found)
    run.found = found if args.limit is None else found[: args.limit]
    explanation = run.explanation()
    for flag, path in (("--json", args.json), ("--html", args.html)):  # written first: a bad path fails early
        if path is not None:
            _write(flag, path, explanation)
    _report(run)
    if args.json is not None:
        extra = f" ({len(run.negative)} with negative fitness)" if run.negative else ""
        print(f"wrote {len(run.found)} rule sets{extra} to {args.json}")
    if args.html is not None:
        print(f"wrote the HTML report to {args.html}")
    return 0
