"""The ``torch-amore`` command line (also ``python -m torch_amore``): regional rules for a subgroup of a table.

Bad input is one line ``torch-amore: error: ...`` on stderr with exit code 2; an unexpected failure is one line
``torch-amore: internal error: ...`` with exit code 1 (``TORCH_AMORE_TRACEBACK=1`` shows the traceback).
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from torch_amore._utils.typing import BIN_STRATEGIES, FEATURE_TYPES
from torch_amore._version import __version__
from torch_amore.cli.expression import GRAMMAR
from torch_amore.cli.rules_command import CLIError, _flag_names, _run_rules
from torch_amore.search.options import STRATEGIES, SearchOptions

PROG = "torch-amore"
_DEFAULTS = SearchOptions()


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are raised (and reported on one line by :func:`main`) instead of printed."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise CLIError(message + _flag_hint(message, self.flags()))

    def flags(self) -> list[str]:
        """The long option strings of this parser and of its sub-commands."""
        flags: list[str] = []
        for action in self._actions:
            flags += [s for s in action.option_strings if s.startswith("--")]
            if isinstance(action.choices, dict):  # the sub-commands
                flags += [f for p in action.choices.values() if isinstance(p, _Parser) for f in p.flags()]
        return list(dict.fromkeys(flags))


def _flag_hint(message: str, flags: list[str]) -> str:
    """`` (did you mean '--max-length'?)`` for the misspelled flags of argparse's "unrecognized arguments" message.

    Example:
        >>> _flag_hint("unrecognized arguments: --max-lenght 2", ["--max-length", "--min-support"])
        " (did you mean '--max-length'?)"
    """
    if not message.startswith("unrecognized arguments: "):
        return ""
    given = [t.split("=")[0] for t in message.split(": ", 1)[1].split() if t.startswith("--")]
    close = [(flag, difflib.get_close_matches(flag, flags, n=1)) for flag in given]
    close = [(flag, match[0]) for flag, match in close if match]
    if not close:
        return ""
    if len(close) == 1:
        return f" (did you mean {close[0][1]!r}?)"
    return " (did you mean " + ", ".join(f"{match!r} for {flag}" for flag, match in close) + "?)"


# --------------------------------------------------------------------------------------------------- option types


def _parser_of(convert: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert(text)``, or an error that says ``what`` was expected."""

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, but got {text!r}") from None

    return parse


def _int_or_float(text: str) -> int | float:
    try:
        return int(text)
    except ValueError:
        return float(text)


_integer = _parser_of(int, "an integer")
_float = _parser_of(float, "a number")
#: An int when the text is one (``500``), else a float (``0.05``); ranges are checked by SearchOptions.
_number = _parser_of(_int_or_float, "a number")


def _positive(text: str) -> int:
    value = _integer(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, but got {value}")
    return value


def _name_list(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated column names, but got {text!r}")
    return names


def _per_feature(parse_value: Callable[[str], Any]) -> Callable[[str], list | dict]:
    """A parser of ``v1,v2,...`` (one value per feature) or ``name=v,name=v`` (the named features only, each once).

    Example:
        >>> _per_feature(float)("size=2,count=10")
        {'size': 2.0, 'count': 10.0}
        >>> _per_feature(float)("size=2,size=10")
        Traceback (most recent call last):
        ...
        argparse.ArgumentTypeError: name 'size' given more than once in 'size=2,size=10'
    """

    def parse(text: str) -> list | dict:
        items = [t.strip() for t in text.split(",")]
        if not text.strip() or any(not t for t in items):
            raise argparse.ArgumentTypeError(f"expected v1,v2,... or name=v,name=v, but got {text!r}")
        if not any("=" in t for t in items):
            return [parse_value(t) for t in items]
        out = {}
        for item in items:
            name, sep, value = item.partition("=")
            name = name.strip()
            if not sep or not name:
                raise argparse.ArgumentTypeError(f"expected name=value pairs, but got {item!r} in {text!r}")
            if name in out:
                raise argparse.ArgumentTypeError(f"name {name!r} given more than once in {text!r}")
            out[name] = parse_value(value.strip())
        return out

    return parse


def _feature_type(text: str) -> str:
    if text not in FEATURE_TYPES:
        raise argparse.ArgumentTypeError(f"expected feature types in {list(FEATURE_TYPES)}, but got {text!r}")
    return text


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
        epilog='Example: torch-amore rules data.csv --target "diabetes == 1" --max-length 2 --min-support 500. '
        "Exit status: 0 on success, 2 for bad input (one line on stderr), 1 for an internal error.",
    )
    rules.add_argument(
        "table",
        help="path of a .csv/.tsv file (optionally compressed: .gz, .bz2, .xz, .zip) or a "
        ".parquet file (needs pyarrow); every CSV row must have as many fields as the header",
    )
    _add_target_arguments(rules)
    _add_search_arguments(rules)
    _add_feature_arguments(rules)
    _add_output_arguments(rules)
    rules.set_defaults(func=_run_rules)
    return parser


def _add_target_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("subgroup (one of)")
    target = group.add_mutually_exclusive_group(required=True)
    target.add_argument(
        "--target",
        metavar="EXPR",
        help='the subgroup as a condition on the columns, e.g. "diabetes == 1" or "gender == \'Female\' and '
        f'50 <= age < 70". The language allows only {GRAMMAR}. Nothing else (attribute access, calls, '
        "indexing, '@' names, lambdas) is accepted, and no code is run. A missing value satisfies no comparison "
        "except != and 'not in'. The columns it uses are excluded from the features.",
    )
    target.add_argument(
        "--target-column",
        metavar="COLUMN",
        help="a column of 0/1 (or True/False) model predictions; rows with 1 form the subgroup; the column is "
        "excluded from the features",
    )


def _add_search_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    group = parser.add_argument_group("search options (the fields of torch_amore.SearchOptions)")
    group.add_argument(
        "--max-length",
        type=_integer,
        metavar="L",
        help=f"l_max: at most L conditions per rule set (default: {d.max_length})",
    )
    group.add_argument(
        "--min-support",
        type=_number,
        metavar="S",
        help="s_min: at least S rows per rule set, an integer count (500) or a fraction of the rows "
        "in (0, 1) (0.05) (default: 5%% of the rows, at most half the subgroup)",
    )
    group.add_argument(
        "--n-grids",
        type=_integer,
        metavar="G",
        help=f"n_g: initial value grids per numeric feature (default: {d.n_grids})",
    )
    group.add_argument(
        "--bin-strategy", choices=BIN_STRATEGIES, help=f"how the grids are placed (default: {d.bin_strategy})"
    )
    group.add_argument(
        "--top-k",
        type=_integer,
        metavar="K",
        help=f"K: candidate rules kept at each node of the rule tree (default: {d.top_k})",
    )
    group.add_argument(
        "--strategy",
        choices=STRATEGIES,
        help="paper: the paper's ratio-driven rule tree exactly; beam: that tree plus a beam search "
        "over fitness-optimal intervals; exact: the top-k rule sets of highest fitness on the grid, provably "
        f"(max length <= 3) (default: {d.strategy})",
    )
    group.add_argument(
        "--min-confidence",
        type=_float,
        metavar="C",
        help="report only rule sets with confidence >= C, in [0, 1] (default: all)",
    )
    group.add_argument(
        "--beam-width",
        type=_integer,
        metavar="W",
        help=f"rule sets kept per length by the beam strategy (default: {d.beam_width})",
    )
    group.add_argument(
        "--feature-types",
        type=_per_feature(_feature_type),
        metavar="SPEC",
        help="feature types, float/int/cat: one per feature (int,float,cat,...) or per name "
        "(age=int,bmi=float; a string column's name sets all its one-hot columns) (default: one-hot "
        "and bool columns cat, integer columns int, others float)",
    )
    group.add_argument(
        "--feature-scale",
        type=_per_feature(_float),
        metavar="SPEC",
        help="print bounds in original units, raw = value * scale + offset: one scale per feature "
        "(1,2.5,...) or per name (age=12.3) (default: 1)",
    )
    group.add_argument(
        "--feature-offset",
        type=_per_feature(_float),
        metavar="SPEC",
        help="offsets for --feature-scale, one per feature or per name (default: 0)",
    )
    group.add_argument(
        "--exact-budget",
        type=_integer,
        metavar="B",
        help="work allowed to --strategy exact, in grid-cell updates (about 10 ns each on one CPU "
        "thread); a search estimated to need more is refused up front, and at max length 3 one that runs out of it "
        f"stops there and says so (default: {d.exact_budget})",
    )
    group.add_argument(
        "--optimum-budget",
        type=_integer,
        metavar="B",
        help="work allowed to compute the grid's optimum that beam/paper results are compared with "
        f"(max length <= 2; grid-cell updates; 0: never) (default: {d.optimum_budget})",
    )
    group.add_argument(
        "--min-gain",
        type=_float,
        metavar="G",
        help="the fitness each condition must add to its rule set; a condition adding less is dropped "
        f"(0: keep every condition found) (default: {d.min_gain})",
    )
    group.add_argument(
        "--progress",
        action="store_true",
        default=None,
        help="show progress bars over the rule tree and the beam search (on stderr)",
    )
    _add_evidence_arguments(parser)


def _add_evidence_arguments(parser: argparse.ArgumentParser) -> None:
    d = _DEFAULTS
    group = parser.add_argument_group("how far to trust the rules (docs/trust.md)")
    group.add_argument(
        "--holdout",
        type=_float,
        metavar="F",
        help="hold out a fraction F in (0, 1) of the rows (stratified by the subgroup, seeded) and show each rule "
        "set's confidence there, with its interval and a Holm-adjusted p-value (default: none)",
    )
    group.add_argument(
        "--holdout-rows",
        metavar="EXPR",
        help='hold out the rows where EXPR holds, a condition on the columns as for --target (e.g. "split == '
        "'test'\"): the search sees the others and each rule set gets its numbers on these, as with --holdout; "
        "the columns it uses are excluded from the features (not with --holdout)",
    )
    group.add_argument(
        "--permutations",
        type=_integer,
        metavar="P",
        help="run the same search on P seeded permutations of the subgroup: a p-value that knows the search "
        f"(99 allows 0.01) (default: {d.permutations})",
    )
    group.add_argument(
        "--stability",
        type=_integer,
        metavar="B",
        help=f"search B seeded half-samples again: the share that finds nearly the same rows (default: {d.stability})",
    )
    group.add_argument(
        "--seed", type=_integer, metavar="S", help=f"seed of --holdout, --permutations, --stability (default: {d.seed})"
    )
    group.add_argument(
        "--level",
        type=_float,
        metavar="L",
        help=f"confidence level of the held-out intervals, in (0, 1); 1 - L is the verdict's threshold "
        f"(default: {d.level})",
    )


def _add_feature_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("features")
    group.add_argument(
        "--features",
        type=_name_list,
        metavar="A,B,C",
        help="only these columns as features (a string column name selects all its one-hot columns; "
        "one-hot names such as gender_Female select one)",
    )
    group.add_argument(
        "--exclude",
        type=_name_list,
        action="append",
        default=[],
        metavar="A,B",
        help="leave these columns out of the features (repeatable, comma-separated)",
    )
    group.add_argument(
        "--max-categories",
        type=_positive,
        default=100,
        metavar="M",
        help="a string column with more than M distinct values is an error (exclude it, e.g. an id "
        "column) (default: 100)",
    )


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--device", default="cpu", help="torch device for the search: cpu, cuda, cuda:N or mps (default: cpu)"
    )
    group = parser.add_argument_group("output")
    group.add_argument(
        "--all",
        action="store_true",
        dest="all_rule_sets",
        help="print every rule set found, those with negative fitness (covering more rows outside the "
        "subgroup than inside) flagged; by default near-duplicates (covered rows with a Jaccard index "
        ">= 0.9: the fitter one is kept) and negative-fitness rule sets are left out with a note",
    )
    group.add_argument(
        "--limit",
        type=_positive,
        metavar="N",
        help="keep only the N best rule sets (printed and in --json) (default: all)",
    )
    group.add_argument(
        "--json",
        metavar="PATH",
        help="also write the rule sets (all kept ones, negative fitness included) as a "
        "torch_amore.RegionalExplanation JSON file (read it with RegionalExplanation.from_json)",
    )
    group.add_argument(
        "--html",
        metavar="PATH",
        help="also write a self-contained HTML report (rule table, a plot per top rule set, options)",
    )


# --------------------------------------------------------------------------------------------------------- command


def _one_line(message: str) -> str:
    return " ".join(str(message).split())


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """Warnings of the library and of table reading as one line each, with option names as flags."""
    print(f"{PROG}: warning: {_one_line(_flag_names(str(message)))}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``torch-amore`` command line; returns the exit status (0 ok, 2 bad input, 1 internal error).

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
        with warnings.catch_warnings():
            warnings.showwarning = _show_warning
            warnings.simplefilter("default", UserWarning)  # each distinct warning once
            return args.func(args)
    except CLIError as err:
        print(f"{PROG}: error: {_one_line(str(err))}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into e.g. `head`
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - silence the flush at exit
        return 0
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # a bug: one line, the traceback on request
        if os.environ.get("TORCH_AMORE_TRACEBACK"):
            raise
        print(
            f"{PROG}: internal error: {type(err).__name__}: {_one_line(str(err))} (set TORCH_AMORE_TRACEBACK=1 "
            "for the traceback)",
            file=sys.stderr,
        )
        return 1
