"""Command-line entry point: regional rules for a subgroup of a CSV or Parquet table.

``torch-amore rules data.csv --target "diabetes == 1" --max-length 2 --min-support 500`` reads the table, defines the
subgroup with a pandas ``DataFrame.eval`` expression (or a column of 0/1 model predictions, ``--target-column``),
one-hot encodes string columns, runs :func:`torch_amore.extract_rules` on the remaining columns and prints the rule sets
(optionally writing them as JSON). ``python -m torch_amore`` is the same program.

Bad input (missing file, unknown column, bad expression, empty subgroup, bad option) is reported as one line on stderr,
``torch-amore: error: ...``, with exit code 2 and no traceback.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import math
import os
import re
import sys
import tokenize
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from torch_amore import __version__
from torch_amore import _validation as V
from torch_amore._typing import BIN_STRATEGIES
from torch_amore.distinct import distinct_rule_sets
from torch_amore.options import STRATEGIES
from torch_amore.rules import RuleSet
from torch_amore.search import extract_rules

PROG = "torch-amore"

_PARQUET_SUFFIXES = (".parquet", ".pq")


class CLIError(Exception):
    """Bad input: reported as one line on stderr with exit code 2."""


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are raised (and reported on one line by :func:`main`) instead of printed."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CLIError(message)


# --------------------------------------------------------------------------------------------------- option types


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, but got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, but got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


def _min_support(text: str) -> int | float:
    """A positive count (``500``) or a fraction of the rows in (0, 1) (``0.05``)."""
    bad = f"expected a count >= 1 (e.g. 500) or a fraction in (0, 1) (e.g. 0.05), but got {text!r}"
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(bad) from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(bad)
    if value.is_integer():
        return int(value)
    if value > 1:
        raise argparse.ArgumentTypeError(bad)
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], but got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], but got {text!r}")
    return value


def _name_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, but got {text!r}")
    return names


# --------------------------------------------------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    """The ``torch-amore`` argument parser (its ``rules`` sub-command holds all options)."""
    parser = _Parser(
        prog=PROG,
        description="Regional IF-THEN rules (AMORE) that describe a subgroup of a table, e.g. the rows a model "
        "predicts as positive.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    rules = sub.add_parser(
        "rules",
        help="extract rule sets for a subgroup of a CSV/Parquet table",
        description="Extract regional rule sets for a subgroup of a CSV or Parquet table and print them, best "
        "fitness first. String and categorical columns are one-hot encoded (columns named like "
        "'gender_Female'); the column(s) used by --target or --target-column are excluded from the features "
        "automatically.",
        epilog='Example: torch-amore rules data.csv --target "diabetes == 1" --max-length 2 --min-support 500',
    )
    rules.add_argument("table", help="path of a .csv/.tsv file (optionally compressed, e.g. .csv.gz) or a "
                       ".parquet file (needs pyarrow)")
    target = rules.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--target",
        metavar="EXPR",
        help="the subgroup as a boolean pandas DataFrame.eval expression on the columns, e.g. \"diabetes == 1\" or "
        "\"gender == 'Female' and age > 50\" (quote column names with spaces in backticks); the columns it "
        "uses are excluded from the features",
    )
    target.add_argument(
        "--target-column",
        metavar="COLUMN",
        help="a column of 0/1 (or True/False) model predictions; rows with 1 form the subgroup; the column is "
        "excluded from the features",
    )
    rules.add_argument("--max-length", type=_int_at_least(1), default=2, metavar="L",
                       help="l_max: at most L conditions per rule set (default: 2)")
    rules.add_argument("--min-support", type=_min_support, default=0.05, metavar="S",
                       help="s_min: at least S rows per rule set, a count (500) or a fraction of the rows (0.05) "
                       "(default: 0.05)")
    rules.add_argument("--n-grids", type=_int_at_least(2), default=10, metavar="G",
                       help="n_g: initial value grids per numeric feature (default: 10)")
    rules.add_argument("--bin-strategy", choices=BIN_STRATEGIES, default="uniform",
                       help="how the grids are placed (default: uniform)")
    rules.add_argument("--top-k", type=_int_at_least(1), default=3, metavar="K",
                       help="K: candidate rules kept at each node of the rule tree (default: 3)")
    rules.add_argument("--strategy", choices=STRATEGIES, default="beam",
                       help="paper: the paper's ratio-driven rule tree exactly; beam: that tree plus a beam search "
                       "over fitness-optimal intervals (default: beam)")
    rules.add_argument("--min-confidence", type=_fraction, metavar="C",
                       help="report only rule sets with confidence >= C (default: all)")
    rules.add_argument("--beam-width", type=_int_at_least(1), default=5, metavar="W",
                       help="rule sets kept per length by the beam strategy (default: 5)")
    rules.add_argument("--features", type=_name_list, metavar="A,B,C",
                       help="only these columns as features (a string column name selects all its one-hot columns; "
                       "one-hot names such as gender_Female select one)")
    rules.add_argument("--exclude", type=_name_list, action="append", default=[], metavar="A,B",
                       help="leave these columns out of the features (repeatable, comma-separated)")
    rules.add_argument("--max-categories", type=_int_at_least(1), default=100, metavar="M",
                       help="a string column with more than M distinct values is an error (exclude it, e.g. an id "
                       "column) (default: 100)")
    rules.add_argument("--limit", type=_int_at_least(1), metavar="N",
                       help="report only the N best rule sets (printed and in --json) (default: all)")
    rules.add_argument("--all", action="store_true", dest="all_rule_sets",
                       help="report every rule set found; by default near-duplicates (covered rows with a Jaccard "
                       "index >= 0.9: the fitter one is kept) and negative-fitness rule sets are left out")
    rules.add_argument("--html", metavar="PATH", help="also write a self-contained HTML report (rule table, a plot "
                       "per top rule set, options)")
    rules.add_argument("--json", metavar="PATH", help="also write the reported rule sets as a JSON list of "
                       "RuleSet.to_dict() objects")
    rules.add_argument("--device", default="cpu", help="torch device for the search, e.g. cuda (default: cpu)")
    rules.add_argument("--progress", action="store_true", help="show a progress bar over the rule tree")
    rules.set_defaults(func=_run_rules)
    return parser


# ---------------------------------------------------------------------------------------------------- data input


def read_table(path: str) -> pd.DataFrame:
    """Read a CSV/TSV (compression inferred from the suffix) or Parquet file; column names become strings."""
    p = Path(path)
    if not p.exists():
        raise CLIError(f"file not found: {path}")
    if p.is_dir():
        raise CLIError(f"expected a CSV or Parquet file, but {path} is a directory")
    suffixes = [s.lower() for s in p.suffixes]
    try:
        if suffixes and suffixes[-1] in _PARQUET_SUFFIXES:
            if importlib.util.find_spec("pyarrow") is None:
                raise CLIError(f"reading Parquet files needs pyarrow (pip install pyarrow); cannot read {path}")
            df = pd.read_parquet(p, engine="pyarrow")
        else:
            df = pd.read_csv(p, sep="\t" if ".tsv" in suffixes else ",")
    except CLIError:
        raise
    except (OSError, ValueError) as err:  # includes pandas' EmptyDataError/ParserError and decoding errors
        raise CLIError(f"cannot read {path}: {err}") from None
    df.columns = [str(c) for c in df.columns]
    if len(df) == 0:
        raise CLIError(f"{path} has no data rows")
    return df


def _show_columns(columns: Sequence[str], limit: int = 20) -> str:
    shown = ", ".join(columns[:limit])
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > limit else "")


def referenced_columns(expr: str, columns: Sequence[str]) -> list[str]:
    """The columns an eval expression names (bare identifiers or `backtick quoted`), in table order.

    Example:
        >>> referenced_columns("gender == 'age' and `blood glucose` > 100", ["age", "gender", "blood glucose"])
        ['gender', 'blood glucose']
    """
    names = set(re.findall(r"`([^`]*)`", expr))
    rest = re.sub(r"`[^`]*`", " _ ", expr)
    try:
        names |= {t.string for t in tokenize.generate_tokens(io.StringIO(rest).readline) if t.type == tokenize.NAME}
    except (tokenize.TokenError, SyntaxError):  # DataFrame.eval reports the syntax error
        pass
    return [c for c in columns if c in names]


def subgroup_from_expression(df: pd.DataFrame, expr: str) -> tuple[np.ndarray, list[str]]:
    """Boolean (N,) mask of ``DataFrame.eval(expr)`` and the columns the expression uses."""
    if not expr.strip():
        raise CLIError("--target is empty; give a boolean expression such as \"diabetes == 1\"")
    used = referenced_columns(expr, list(df.columns))
    try:
        result = df.eval(expr)
    except pd.errors.UndefinedVariableError as err:
        raise CLIError(f"unknown column in --target {expr!r}: {err}; columns are: {_show_columns(list(df.columns))}") \
            from None
    except SyntaxError as err:
        raise CLIError(f"cannot parse --target {expr!r}: {err.msg}") from None
    except Exception as err:  # DataFrame.eval raises many types for expressions it cannot evaluate
        raise CLIError(f"cannot evaluate --target {expr!r}: {type(err).__name__}: {err}") from None
    if not isinstance(result, pd.Series) or len(result) != len(df):
        raise CLIError(
            f"--target {expr!r} must give one True/False per row (a boolean expression on the columns, such as "
            f"\"diabetes == 1\"), but it gives a {type(result).__name__}"
        )
    if result.dtype == "boolean":  # nullable booleans: missing is not in the subgroup
        result = result.fillna(False)
    if result.dtype != bool:
        raise CLIError(
            f"--target {expr!r} must be a boolean expression such as \"diabetes == 1\", but it gives values of "
            f"dtype {result.dtype}"
        )
    return np.array(result.to_numpy(dtype=bool), dtype=bool), used


def subgroup_from_column(df: pd.DataFrame, column: str) -> np.ndarray:
    """Boolean (N,) mask from a column of 0/1 (or True/False) predictions."""
    if column not in df.columns:
        raise CLIError(f"unknown --target-column {column!r}; columns are: {_show_columns(list(df.columns))}")
    col = df[column]
    n_missing = int(col.isna().sum())
    if n_missing:
        raise CLIError(f"--target-column {column!r} has {n_missing} missing values; expected 0/1 in every row")
    if col.dtype == bool or col.dtype == "boolean":
        return np.array(col.to_numpy(dtype=bool), dtype=bool)
    if not pd.api.types.is_numeric_dtype(col):
        raise CLIError(f"--target-column {column!r} must hold 0/1 predictions, but it has dtype {col.dtype}; "
                       f"use --target \"{column} == ...\" for other values")
    values = col.to_numpy(dtype=np.float64)
    bad = np.unique(values[(values != 0) & (values != 1)])
    if bad.size:
        raise CLIError(f"--target-column {column!r} must hold 0/1 predictions, but it also holds "
                       f"{[v.item() for v in bad[:5]]}; use --target \"{column} == ...\" to pick one class")
    return values == 1


def _is_categorical(col: pd.Series) -> bool:
    return isinstance(col.dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(col) or col.dtype == object


def _dummy_owner(name: str, df: pd.DataFrame, candidates: Sequence[str]) -> str | None:
    """The string column whose one-hot column ``name`` (``<column>_<value>``) would be, if any."""
    for c in candidates:
        if name.startswith(c + "_") and _is_categorical(df[c]):
            values = {str(v) for v in df[c].dropna().unique()}
            if name[len(c) + 1:] in values:
                return c
    return None


def encode_features(
    df: pd.DataFrame,
    *,
    exclude: Sequence[str] = (),
    features: Sequence[str] | None = None,
    max_categories: int = 100,
) -> tuple[np.ndarray, list[str], list[str]]:
    """The feature matrix of a table: numeric columns as they are, string/categorical columns one-hot encoded.

    One-hot columns are named ``<column>_<value>`` and typed ``"cat"``; a row whose string value is missing gets NaN
    in all of that column's one-hot columns (so it satisfies no rule on them). Boolean columns become 0/1.

    Returns:
        ``(X, names, types)``: float64 (N, F) values, feature names and ``float``/``int``/``cat`` types.

    Example:
        >>> df = pd.DataFrame({"age": [30, 41, 52], "gender": ["F", None, "M"], "y": [0, 1, 1]})
        >>> X, names, types = encode_features(df, exclude=["y"])
        >>> names, types
        (['age', 'gender_F', 'gender_M'], ['int', 'cat', 'cat'])
        >>> X[1].tolist()
        [41.0, nan, nan]
    """
    excluded = set(exclude)
    candidates = [c for c in df.columns if c not in excluded]
    keep_dummies: dict[str, set[str] | None] = {}  # column -> selected one-hot names (None: all)
    if features is None:
        selected = candidates
    else:
        chosen: set[str] = set()
        for name in features:
            if name in excluded:
                raise CLIError(f"--features names {name!r}, which is excluded (used by the target or --exclude)")
            if name in candidates:
                chosen.add(name)
                keep_dummies[name] = None
                continue
            owner = _dummy_owner(name, df, candidates)
            if owner is None:
                raise CLIError(f"unknown column {name!r} in --features; columns are: "
                               f"{_show_columns(list(df.columns))}")
            chosen.add(owner)
            if keep_dummies.get(owner, set()) is not None:
                keep_dummies.setdefault(owner, set()).add(name)
        selected = [c for c in candidates if c in chosen]
    if not selected:
        raise CLIError("no feature columns left (all columns are used by the target or excluded)")

    blocks: list[np.ndarray] = []
    names: list[str] = []
    types: list[str] = []
    for c in selected:
        col = df[c]
        if col.dtype == bool or col.dtype == "boolean":
            blocks.append(col.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)[:, None])
            names.append(c)
            types.append("cat")
        elif pd.api.types.is_numeric_dtype(col) and not pd.api.types.is_complex_dtype(col):
            values = np.array(col.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
            if np.isinf(values).any():
                raise CLIError(f"column {c!r} holds infinite values; replace them or remove the column with "
                               f"--exclude {c}")
            blocks.append(values[:, None])
            names.append(c)
            types.extend(V.infer_feature_types(torch.from_numpy(values[:, None])))
        elif _is_categorical(col):
            present = col.dropna()
            n_values = int(present.astype(str).nunique())
            if n_values > max_categories:
                raise CLIError(f"column {c!r} has {n_values} distinct values (more than --max-categories "
                               f"{max_categories}); remove it with --exclude {c} or raise --max-categories")
            labels = col.where(col.isna(), col.astype(str))
            dummies = pd.get_dummies(labels, prefix=c, prefix_sep="_", dtype=np.float64)
            wanted = keep_dummies.get(c)
            if wanted is not None:
                dummies = dummies[[d for d in dummies.columns if d in wanted]]
            values = dummies.to_numpy(dtype=np.float64, copy=True)
            values[col.isna().to_numpy()] = np.nan
            blocks.append(values)
            names.extend(str(d) for d in dummies.columns)
            types.extend(["cat"] * dummies.shape[1])
        else:
            raise CLIError(f"column {c!r} has unsupported dtype {col.dtype}; remove it with --exclude {c}")
    seen: set[str] = set()
    dup = [n for n in names if n in seen or seen.add(n)]
    if dup:
        raise CLIError(f"one-hot encoding produced duplicate feature names {dup[:5]}; rename or --exclude columns")
    if not names:
        raise CLIError("no feature columns left (all selected columns are empty)")
    return np.concatenate(blocks, axis=1), names, types


# ---------------------------------------------------------------------------------------------------------- output


def format_table(rule_sets: Sequence[RuleSet]) -> str:
    """The rule sets as an aligned text table: rank, rule, support, confidence, fitness.

    Example:
        >>> from torch_amore.rules import Rule
        >>> rs = RuleSet((Rule(0, "age", low=50.0),), support=120, confidence=0.75, fitness=0.2)
        >>> print(format_table([rs]))
        rank  rule       support  confidence  fitness
           1  age >= 50      120       0.750    0.200
    """
    rules = [" AND ".join(r.format() for r in rs.rules) or "TRUE" for rs in rule_sets]
    width = max([len("rule")] + [len(r) for r in rules])
    lines = [f"{'rank':>4}  {'rule':<{width}}  {'support':>7}  {'confidence':>10}  {'fitness':>7}"]
    for i, (rs, text) in enumerate(zip(rule_sets, rules), start=1):
        lines.append(f"{i:>4}  {text:<{width}}  {rs.support:>7}  {rs.confidence:>10.3f}  {rs.fitness:>7.3f}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------------- command


def _run_rules(args: argparse.Namespace) -> int:
    df = read_table(args.table)
    n = len(df)
    if args.target is not None:
        target, used = subgroup_from_expression(df, args.target)
        label = f"--target {args.target!r}"
        target_name = args.target.strip()
    else:
        target = subgroup_from_column(df, args.target_column)
        used = [args.target_column]
        label = f"--target-column {args.target_column!r}"
        target_name = f"{args.target_column} == 1"
    n_target = int(target.sum())
    if n_target == 0:
        raise CLIError(f"the subgroup {label} selects no rows (of {n})")
    if n_target == n:
        raise CLIError(f"the subgroup {label} selects all {n} rows; rules need rows outside the subgroup")

    if isinstance(args.min_support, int) and args.min_support > n:
        raise CLIError(f"--min-support {args.min_support} is larger than the table ({n} rows)")
    exclude = list(dict.fromkeys(name for group in args.exclude for name in group))
    unknown = [name for name in exclude if name not in df.columns]
    if unknown:
        raise CLIError(f"unknown column(s) {unknown} in --exclude; columns are: {_show_columns(list(df.columns))}")
    X, names, types = encode_features(
        df, exclude=list(used) + exclude, features=args.features, max_categories=args.max_categories
    )

    try:
        device = torch.device(args.device)
        X_t = torch.from_numpy(X)
        if device.type != "cpu":
            X_t = X_t.to(device, dtype=torch.float32 if device.type == "mps" else torch.float64)
    except (RuntimeError, AssertionError) as err:  # unknown device string, or a device torch was not built for
        raise CLIError(f"cannot use --device {args.device!r}: {str(err).splitlines()[0]}") from None
    try:
        found = extract_rules(
            X_t,
            torch.from_numpy(target),
            max_length=args.max_length,
            min_support=args.min_support,
            n_grids=args.n_grids,
            bin_strategy=args.bin_strategy,
            top_k=args.top_k,
            feature_names=names,
            feature_types=types,
            target_name=target_name,
            strategy=args.strategy,
            min_confidence=args.min_confidence,
            beam_width=args.beam_width,
            progress=args.progress,
        )
    except (ValueError, TypeError) as err:  # the library's checks of user-controlled values
        raise CLIError(str(err)) from None
    n_found = len(found)
    if not args.all_rule_sets:
        found = distinct_rule_sets(found, X_t, min_fitness=0.0)
    if args.limit is not None:
        found = found[: args.limit]

    if args.json is not None:  # written first: a bad path fails before anything is printed
        try:
            with open(args.json, "w", encoding="utf-8") as fh:
                json.dump([rs.to_dict() for rs in found], fh, indent=2)
                fh.write("\n")
        except OSError as err:
            raise CLIError(f"cannot write --json {args.json}: {err.strerror or err}") from None
    if args.html is not None:
        _write_html(args, found, X_t, target, names, target_name)

    print(
        f"subgroup {target_name}: {n_target} of {n} rows ({100 * n_target / n:.1f}%); {len(names)} features "
        f"(excluded: {', '.join(dict.fromkeys(list(used) + exclude)) or 'none'})"
    )
    print(
        f"max_length={args.max_length}, min_support={args.min_support}, n_grids={args.n_grids}, "
        f"bin_strategy={args.bin_strategy}, top_k={args.top_k}, strategy={args.strategy}"
        + (f", min_confidence={args.min_confidence}" if args.min_confidence is not None else "")
    )
    if found:
        print(format_table(found))
        if len(found) < n_found and not args.all_rule_sets:
            print(f"({n_found - len(found)} of {n_found} rule sets not shown: near-duplicates, negative fitness"
                  + (" or beyond --limit" if args.limit is not None else "") + "; --all lists every one)")
    else:
        print("no rule set found: no interval has a probability ratio > 1 with enough support; try a smaller "
              "--min-support")
    if args.json is not None:
        print(f"wrote {len(found)} rule sets to {args.json}")
    if args.html is not None:
        print(f"wrote the HTML report to {args.html}")
    return 0


def _write_html(args: argparse.Namespace, found: list[RuleSet], X: torch.Tensor, target: np.ndarray,
                names: list[str], target_name: str) -> None:  # fmt: skip
    from torch_amore.explanation import RegionalExplanation

    options = ("max_length", "min_support", "n_grids", "bin_strategy", "top_k", "strategy", "min_confidence")
    params = {k: getattr(args, k) for k in options} | {"table": args.table, "target_name": target_name,
                                                        "n_samples": len(target), "subgroup_size": int(target.sum())}
    explanation = RegionalExplanation(found, torch.from_numpy(target), None, list(range(len(names))), names, params,
                                      features_matrix=X.cpu())  # fmt: skip
    try:
        explanation.to_html(args.html)
    except OSError as err:
        raise CLIError(f"cannot write --html {args.html}: {err.strerror or err}") from None


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``torch-amore`` command line; returns the exit status (0 ok, 2 bad input).

    Example:
        >>> main(["rules", "no_such_file.csv", "--target", "y == 1"])
        2
    """
    parser = build_parser()
    try:
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help and --version
            return exc.code if isinstance(exc.code, int) else 0
        return args.func(args)
    except CLIError as err:
        print(f"{PROG}: error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
