"""A small expression language for subgroups of a table (the command line's ``--target``) that cannot run code.

The text is parsed with :mod:`ast` and checked (:mod:`~torch_amore.cli.expression_syntax`) before it is evaluated on
numpy arrays of the columns (:mod:`~torch_amore.cli.expression_evaluation`); no Python or pandas evaluator is called.

Grammar (Python syntax, a small subset of it)::

    expr       := expr "or" expr | expr "and" expr | "not" expr | expr ("&" | "|") expr | "~" expr
                | comparison | "(" expr ")"
    comparison := value (("==" | "!=" | "<" | "<=" | ">" | ">=") value)+       # chained: 1 < x <= 5
                | value ("in" | "not in") "[" literal ("," literal)* "]"
    value      := column | literal | value ("+" | "-" | "*" | "/") value | "-" value | "(" value ")"
    column     := a column name that is a Python identifier (age), or any name in backquotes (`blood glucose`)
    literal    := number (1, -2.5, 1e3) | 'string' | "string" | True | False

A missing value (NaN, empty CSV field) is never ``==``, ``<``, ``<=``, ``>``, ``>=`` or ``in`` anything; ``!=`` and
``not in`` negate ``==`` and ``in``. Text compares with quoted strings, arithmetic is float64, integer columns compare
exactly with integers. The result must be one True/False per row.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from torch_amore.cli.expression_evaluation import _Evaluator
from torch_amore.cli.expression_syntax import (
    _MAX_LENGTH,
    ALLOWED,
    ExpressionError,
    _Checker,
    _replace_backquotes,
    equals_hint,
    show_columns,
)

__all__ = ["ALLOWED", "GRAMMAR", "Expression", "ExpressionError", "parse_expression", "show_columns"]

#: The language in one line, for help texts.
GRAMMAR = (
    "column names (backquote names that are not Python identifiers: `blood glucose`), numbers, 'strings', "
    "True/False, comparisons (== != < <= > >=, chained as in 1 < x <= 5), and/or/not (also & | ~), "
    "x in [v1, v2] / x not in [...], and + - * / on numeric columns"
)


@dataclass(frozen=True)
class Expression:
    """A parsed, checked target expression; :meth:`evaluate` gives its boolean mask on a table.

    Use :func:`parse_expression` to build one.

    Example:
        >>> df = pd.DataFrame({"age": [30, 55, 70], "blood glucose": [90.0, 160.0, None], "sex": ["F", "M", "F"]})
        >>> expr = parse_expression("sex == 'F' and (age > 50 or `blood glucose` >= 100)", df.columns)
        >>> expr.columns
        ('sex', 'age', 'blood glucose')
        >>> expr.evaluate(df).tolist()
        [False, False, True]
    """

    text: str
    columns: tuple[str, ...]
    tree: ast.Expression = field(repr=False, compare=False)
    names: dict[str, str] = field(repr=False, compare=False)  # placeholder of a backquoted name -> column
    source: str = field(repr=False, compare=False)  # the text with backquoted names replaced by placeholders

    def evaluate(self, df: pd.DataFrame) -> np.ndarray:
        """The (N,) boolean mask of the rows of ``df`` that satisfy the expression.

        Raises:
            ExpressionError: when the expression does not give one True/False per row (e.g. ``age + 1``), compares
                text with numbers, or uses a column whose values cannot be compared (dates).
        """
        missing = [c for c in self.columns if c not in df.columns]
        if missing:
            raise ExpressionError(f"unknown column {missing[0]!r}; columns are: {show_columns(list(df.columns))}")
        evaluator = _Evaluator(self.source, self.names, df)
        try:
            with np.errstate(all="ignore"):
                result = evaluator.value(self.tree.body)
        except RecursionError:
            raise ExpressionError("the expression is nested too deeply") from None
        if result.kind != "bool":
            what, example = ("numbers", "1") if result.kind == "num" else ("text", "'a'")
            raise ExpressionError(
                f"the expression gives {what}, not True/False per row; compare it, e.g. {result.text} == {example}"
            )
        if not result.column:
            raise ExpressionError(
                f"the expression is always {bool(result.data)}: it must compare a column to give one True/False per "
                "row (e.g. age > 50)"
            )
        return np.asarray(result.data, dtype=bool)


def parse_expression(text: str, columns: Sequence[str]) -> Expression:
    """Parse and check a target expression against the table's ``columns`` (see the module docstring's grammar).

    Nothing is evaluated here: attribute access, calls, subscripts, lambdas, comprehensions, f-strings, ``@`` names,
    dunder names and anything else outside the grammar raise :class:`ExpressionError` naming the construct.

    Example:
        >>> parse_expression("age.__class__", ["age", "y"])
        Traceback (most recent call last):
        ...
        torch_amore.cli.expression_syntax.ExpressionError: not allowed: attribute access (age.__class__); allowed \
are column names, numbers, 'strings', True/False, comparisons, and/or/not, in [...], + - * /
    """
    if not isinstance(text, str):
        raise TypeError(f"Expected the expression to be a str, but got {type(text).__name__}.")
    if not text.strip():
        raise ExpressionError('the expression is empty; give a boolean expression such as "diabetes == 1"')
    if len(text) > _MAX_LENGTH:
        raise ExpressionError(f"the expression is {len(text)} characters long (at most {_MAX_LENGTH})")
    columns = [str(c) for c in columns]
    source, names = _replace_backquotes(text)
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError as err:
        where = f" at column {err.offset}" if err.offset else ""  # one line: newlines became spaces
        fixed = equals_hint(text)
        hint = (
            f" (did you mean {' '.join(fixed.split())}? == compares, = is not in the language)"
            if fixed
            else " (backquote column names that are not Python identifiers, e.g. `blood glucose` > 100)"
        )
        raise ExpressionError(f"cannot parse the expression: {err.msg}{where}{hint}") from None
    except (RecursionError, MemoryError):
        raise ExpressionError("cannot parse the expression: it is nested too deeply") from None
    except ValueError as err:  # null bytes, integers with more than 4300 digits
        raise ExpressionError(f"cannot parse the expression: {' '.join(str(err).split())}") from None
    checker = _Checker(source.strip(), names, columns)
    try:
        checker.check(tree.body, in_list=False)
    except RecursionError:
        raise ExpressionError("the expression is nested too deeply") from None
    used = tuple(dict.fromkeys(checker.used))
    return Expression(text=text, columns=used, tree=tree, names=names, source=source.strip())
