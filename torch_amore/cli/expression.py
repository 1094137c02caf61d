"""A small expression language for subgroups of a table (the command line's ``--target``), which cannot run code.

The text is parsed with :mod:`ast` and checked against a short list of allowed constructs before anything is
evaluated; the evaluation is written here, on numpy arrays of the columns (neither Python's built-in evaluator nor
pandas' expression evaluator is ever called).

Grammar (Python syntax, a small subset of it)::

    expr       := expr "or" expr | expr "and" expr | "not" expr | expr ("&" | "|") expr | "~" expr
                | comparison | "(" expr ")"
    comparison := value (("==" | "!=" | "<" | "<=" | ">" | ">=") value)+       # chained: 1 < x <= 5
                | value ("in" | "not in") "[" literal ("," literal)* "]"
    value      := column | literal | value ("+" | "-" | "*" | "/") value | "-" value | "(" value ")"
    column     := a column name that is a Python identifier (age), or any name in backquotes (`blood glucose`)
    literal    := number (1, -2.5, 1e3) | 'string' | "string" | True | False

Semantics: comparisons are elementwise over the rows; a missing value (NaN, empty CSV field) is never ``==``, ``<``,
``<=``, ``>``, ``>=`` or ``in`` anything, and ``!=`` / ``not in`` are the negations of ``==`` / ``in``. Text columns
(strings, categories) compare with quoted strings; arithmetic is done in float64; integer columns compared with
integers are compared exactly. The result must be one True/False per row.
"""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

#: The language in one line, for help texts.
GRAMMAR = (
    "column names (backquote names that are not Python identifiers: `blood glucose`), numbers, 'strings', "
    "True/False, comparisons (== != < <= > >=, chained as in 1 < x <= 5), and/or/not (also & | ~), "
    "x in [v1, v2] / x not in [...], and + - * / on numeric columns"
)

#: The language in short, for error messages.
ALLOWED = "column names, numbers, 'strings', True/False, comparisons, and/or/not, in [...], + - * /"

_MAX_LENGTH = 100_000  # characters; longer texts are refused before parsing

_WHAT = {
    ast.Attribute: "attribute access",
    ast.Call: "function calls",
    ast.Subscript: "subscripts (indexing)",
    ast.Slice: "slices",
    ast.Lambda: "lambda functions",
    ast.ListComp: "comprehensions",
    ast.SetComp: "comprehensions",
    ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions",
    ast.JoinedStr: "f-strings",
    ast.FormattedValue: "f-strings",
    ast.NamedExpr: "assignments (:=)",
    ast.IfExp: "conditional expressions (a if b else c)",
    ast.Dict: "dicts",
    ast.Starred: "* unpacking",
    ast.Await: "await",
    ast.Yield: "yield",
    ast.YieldFrom: "yield",
}

_COMPARE: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
}
_ARITH: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Add: ("+", operator.add),
    ast.Sub: ("-", operator.sub),
    ast.Mult: ("*", operator.mul),
    ast.Div: ("/", operator.truediv),
}
_LOGIC: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.BitAnd: ("&", np.logical_and),
    ast.BitOr: ("|", np.logical_or),
}
_OTHER_BINOPS = {ast.Pow: "**", ast.FloorDiv: "//", ast.Mod: "%", ast.MatMult: "@", ast.LShift: "<<",
                 ast.RShift: ">>", ast.BitXor: "^"}  # fmt: skip


class ExpressionError(ValueError):
    """An expression that is not in the language, names an unknown column, or does not give one bool per row."""


@dataclass(frozen=True)
class _Value:
    """An evaluated sub-expression: ``kind`` is ``"bool"``, ``"num"`` or ``"str"``; ``data`` an (N,) array or a
    scalar (``column=False``); ``source`` gives its text for messages (computed only when one is raised)."""

    kind: str
    data: Any
    column: bool
    source: Callable[[], str] = field(repr=False, compare=False)

    @property
    def text(self) -> str:
        return self.source()


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
        evaluator = _Evaluator(self, df)
        try:
            with np.errstate(all="ignore"):
                result = evaluator.value(self.tree.body)
        except RecursionError:
            raise ExpressionError("the expression is nested too deeply") from None
        if result.kind != "bool":
            what = "numbers" if result.kind == "num" else "text"
            raise ExpressionError(
                f"the expression gives {what}, not True/False per row; compare it, e.g. {result.text} == 1"
                if result.kind == "num"
                else f"the expression gives {what}, not True/False per row; compare it, e.g. {result.text} == 'a'"
            )
        if not result.column:
            raise ExpressionError(
                f"the expression is always {bool(result.data)}: it must compare a column to give one True/False per "
                "row (e.g. age > 50)"
            )
        return np.asarray(result.data, dtype=bool)


def show_columns(columns: Sequence[str], limit: int = 20) -> str:
    """The first ``limit`` column names, comma-separated, with the total when there are more.

    Example:
        >>> show_columns(["a", "b", "c"], limit=2)
        'a, b, ... (3 in all)'
    """
    columns = [str(c) for c in columns]
    shown = ", ".join(columns[:limit])
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > limit else "")


def parse_expression(text: str, columns: Sequence[str]) -> Expression:
    """Parse and check a target expression against the table's ``columns`` (see the module docstring's grammar).

    Nothing is evaluated here: attribute access, calls, subscripts, lambdas, comprehensions, f-strings, ``@`` names,
    dunder names and anything else outside the grammar raise :class:`ExpressionError` naming the construct.

    Example:
        >>> parse_expression("age.__class__", ["age", "y"])
        Traceback (most recent call last):
        ...
        torch_amore.cli.expression.ExpressionError: not allowed: attribute access (age.__class__); allowed are column \
names, numbers, 'strings', True/False, comparisons, and/or/not, in [...], + - * /
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
        raise ExpressionError(
            f"cannot parse the expression: {err.msg}{where} (backquote column names that are not Python identifiers, "
            "e.g. `blood glucose` > 100)"
        ) from None
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


# ------------------------------------------------------------------------------------------------------- scanning


def _string_end(text: str, i: int) -> int:
    """Index just after the string literal starting with the quote at ``text[i]``."""
    quote = text[i]
    delim = quote * 3 if text.startswith(quote * 3, i) else quote
    j = i + len(delim)
    while j < len(text):
        if text[j] == "\\":
            j += 2
            continue
        if text.startswith(delim, j):
            return j + len(delim)
        j += 1
    raise ExpressionError(f"cannot parse the expression: unterminated string starting at column {i + 1}")


def _replace_backquotes(text: str) -> tuple[str, dict[str, str]]:
    """``text`` with every `backquoted name` replaced by a placeholder identifier that does not occur in ``text``,
    and the placeholders' names. An ``@`` outside strings (pandas' local variables) is refused here."""
    prefix = "_bq"
    while prefix in text:
        prefix = "_" + prefix
    out: list[str] = []
    names: dict[str, str] = {}
    by_name: dict[str, str] = {}
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            j = _string_end(text, i)
            out.append(text[i:j])
            i = j
        elif ch == "`":
            j = text.find("`", i + 1)
            if j < 0:
                raise ExpressionError(f"cannot parse the expression: unterminated backquote at column {i + 1}")
            name = text[i + 1 : j]
            if name not in by_name:
                by_name[name] = f"{prefix}{len(names)}"
                names[by_name[name]] = name
            out.append(f" {by_name[name]} ")  # spaced: `a`b is two tokens, not the name _bq0b
            i = j + 1
        elif ch in "\r\n":  # an expression may span lines (e.g. from a config file)
            out.append(" ")
            i += 1
        elif ch == "@":
            raise ExpressionError(
                f"not allowed: '@' (at column {i + 1}: {text[i : i + 30]!r}); an expression may only use the table's "
                f"columns and literals; allowed are {ALLOWED}"
            )
        else:
            out.append(ch)
            i += 1
    return "".join(out), names


# ------------------------------------------------------------------------------------------------------- checking


class _Checker:
    """Walks the tree once before evaluation; the first node outside the grammar raises ExpressionError."""

    def __init__(self, source: str, names: dict[str, str], columns: list[str]):
        self.source = source
        self.names = names
        self.columns = columns
        self.used: list[str] = []

    def snippet(self, node: ast.AST) -> str:
        return _snippet(self.source, self.names, node)

    def refuse(self, what: str, node: ast.AST) -> ExpressionError:
        return ExpressionError(f"not allowed: {what} ({self.snippet(node)}); allowed are {ALLOWED}")

    def check(self, node: ast.AST, *, in_list: bool) -> None:
        if type(node) in _WHAT:
            raise self.refuse(_WHAT[type(node)], node)
        if isinstance(node, ast.Name):
            self.column(node)
        elif isinstance(node, ast.Constant):
            self.constant(node)
        elif isinstance(node, (ast.BoolOp, ast.UnaryOp, ast.BinOp)):  # and/or; not, ~, -, +; arithmetic
            self.operands(node)
        elif isinstance(node, ast.Compare):
            self.compare(node)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            self.literal_list(node, in_list=in_list)
        else:
            raise self.refuse(f"{type(node).__name__} expressions", node)  # e.g. bare lists, sets

    def operands(self, node: ast.BoolOp | ast.UnaryOp | ast.BinOp) -> None:
        """The operands of a boolean, unary or binary operator, each checked (some binary operators refused)."""
        if isinstance(node, ast.BoolOp):
            operands = node.values
        elif isinstance(node, ast.UnaryOp):
            operands = [node.operand]
        else:
            if type(node.op) in _OTHER_BINOPS:
                raise self.refuse(f"the {_OTHER_BINOPS[type(node.op)]!r} operator", node)
            operands = [node.left, node.right]
        for v in operands:
            self.check(v, in_list=False)

    def literal_list(self, node: ast.List | ast.Tuple | ast.Set, *, in_list: bool) -> None:
        """A list of literals, allowed only as the right side of ``in``."""
        if not in_list:
            raise self.refuse("lists outside 'x in [...]'", node)
        for elt in node.elts:
            if _literal(elt) is None:
                raise self.refuse("anything but numbers, strings and True/False inside 'in [...]'", elt)

    def column(self, node: ast.Name) -> None:
        name = self.names.get(node.id, node.id)
        if node.id not in self.names and node.id.startswith("__"):
            raise self.refuse("dunder names", node)
        if name not in self.columns:
            close = difflib.get_close_matches(name, self.columns, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ExpressionError(f"unknown column {name!r}{hint}; columns are: {show_columns(self.columns)}")
        self.used.append(name)

    def constant(self, node: ast.Constant) -> None:
        if node.value is None:
            raise self.refuse("None", node)
        if not isinstance(node.value, (bool, int, float, str)):
            raise self.refuse(f"{type(node.value).__name__} literals", node)

    def compare(self, node: ast.Compare) -> None:
        if len(node.ops) > 1 and any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            raise self.refuse("'in' in a chain of comparisons (use parentheses and 'and')", node)
        self.check(node.left, in_list=False)
        for op, right in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                if not isinstance(right, (ast.List, ast.Tuple, ast.Set)):
                    raise self.refuse("'in' with anything but a list of values such as [1, 2]", right)
                self.check(right, in_list=True)
            elif type(op) in _COMPARE:
                self.check(right, in_list=False)
            else:
                raise self.refuse("'is' comparisons (use == or !=)", node)


def _snippet(source: str, names: dict[str, str], node: ast.AST, limit: int = 60) -> str:
    text = ast.get_source_segment(source, node) or type(node).__name__
    for placeholder, name in names.items():
        text = text.replace(placeholder, f"`{name}`")
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _literal(node: ast.AST) -> bool | int | float | str | None:
    """The value of a literal list element (``-1`` included), or None when it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (bool, int, float, str)):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _literal(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
    return None


# ----------------------------------------------------------------------------------------------------- evaluation


def _column_value(series: pd.Series, name: str) -> tuple[str, np.ndarray]:
    """``(kind, values)`` of a table column for the expression: ``"bool"`` (bool array), ``"num"`` (int64 array
    without missing values, else float64 with NaN) or ``"str"`` (object array of str, None for missing)."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        if not series.isna().any():
            return "bool", series.to_numpy(dtype=bool)
        return "num", series.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    if (
        pd.api.types.is_datetime64_any_dtype(dtype)
        or pd.api.types.is_timedelta64_dtype(dtype)
        or isinstance(dtype, pd.PeriodDtype)
    ):
        raise ExpressionError(
            f"column {name!r} holds dates or durations ({dtype}), which the expression cannot compare; convert it "
            "to a number in the table first (e.g. the year, or days since a date)"
        )
    if pd.api.types.is_complex_dtype(dtype):
        raise ExpressionError(f"column {name!r} holds complex numbers ({dtype}), which cannot be compared")
    if pd.api.types.is_numeric_dtype(dtype) and not isinstance(dtype, pd.CategoricalDtype):
        if pd.api.types.is_integer_dtype(dtype) and not series.isna().any():
            return "num", np.asarray(series.to_numpy(dtype=getattr(dtype, "numpy_dtype", dtype)))
        return "num", series.to_numpy(dtype=np.float64, na_value=np.nan)
    values = np.array(series.astype(str).to_numpy(dtype=object), dtype=object, copy=True)  # never a view of df
    values[series.isna().to_numpy()] = None
    return "str", values


class _Evaluator:
    def __init__(self, expression: Expression, df: pd.DataFrame):
        self.expression = expression
        self.df = df
        self.cache: dict[str, _Value] = {}

    def source(self, node: ast.AST) -> Callable[[], str]:
        return lambda: _snippet(self.expression.source, self.expression.names, node)

    def value(self, node: ast.AST) -> _Value:
        if isinstance(node, ast.Name):
            return self.column(node)
        if isinstance(node, ast.Constant):
            return _scalar(node.value, self.source(node))
        if isinstance(node, ast.BoolOp):
            parts = [self.boolean(v, "and" if isinstance(node.op, ast.And) else "or") for v in node.values]
            combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            data = parts[0].data
            for p in parts[1:]:
                data = combine(data, p.data)
            return _Value("bool", data, any(p.column for p in parts), self.source(node))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        raise ExpressionError(f"not allowed: {type(node).__name__}")  # unreachable: the checker refused it

    def column(self, node: ast.Name) -> _Value:
        name = self.expression.names.get(node.id, node.id)
        if name not in self.cache:
            kind, data = _column_value(self.df[name], name)
            self.cache[name] = _Value(kind, data, True, self.source(node))
        return self.cache[name]

    def boolean(self, node: ast.AST, op: str) -> _Value:
        v = self.value(node)
        if v.kind != "bool":
            raise ExpressionError(
                f"the operands of {op!r} must be conditions (True/False per row), but {v.text} gives "
                f"{'numbers' if v.kind == 'num' else 'text'}; compare it first, e.g. ({v.text} == ...)"
            )
        return v

    def unary(self, node: ast.UnaryOp) -> _Value:
        if isinstance(node.op, (ast.Not, ast.Invert)):
            v = self.boolean(node.operand, "not" if isinstance(node.op, ast.Not) else "~")
            return _Value("bool", np.logical_not(v.data), v.column, self.source(node))
        v = self.number(node.operand, "-" if isinstance(node.op, ast.USub) else "+")
        return _Value("num", -v.data if isinstance(node.op, ast.USub) else v.data, v.column, self.source(node))

    def number(self, node: ast.AST, op: str) -> _Value:
        v = self.value(node)
        if v.kind == "str":
            raise ExpressionError(f"{op!r} needs numbers, but {v.text} is text")
        if v.column:
            return _Value("num", np.asarray(v.data, dtype=np.float64), True, v.source)
        try:
            return _Value("num", np.float64(float(v.data)), False, v.source)
        except OverflowError:
            raise ExpressionError(f"the number {v.text} is too large") from None

    def binary(self, node: ast.BinOp) -> _Value:
        if type(node.op) in _LOGIC:
            symbol, fn = _LOGIC[type(node.op)]
            a, b = self.boolean(node.left, symbol), self.boolean(node.right, symbol)
            return _Value("bool", fn(a.data, b.data), a.column or b.column, self.source(node))
        symbol, fn = _ARITH[type(node.op)]
        a, b = self.number(node.left, symbol), self.number(node.right, symbol)
        return _Value("num", fn(a.data, b.data), a.column or b.column, self.source(node))

    def compare(self, node: ast.Compare) -> _Value:
        left = self.value(node.left)
        data: Any = True
        column = False
        for op, right_node in zip(node.ops, node.comparators):
            if isinstance(op, (ast.In, ast.NotIn)):
                assert isinstance(right_node, (ast.List, ast.Tuple, ast.Set))
                step = self.member(left, right_node.elts, negate=isinstance(op, ast.NotIn))
                right = left  # 'in' is never chained (refused by the checker)
            else:
                right = self.value(right_node)
                step = _compare(type(op), left, right)
            data = step if data is True else np.logical_and(data, step)
            column = column or left.column or right.column
            left = right
        return _Value("bool", data, column, self.source(node))

    def member(self, left: _Value, elts: list[ast.expr], *, negate: bool) -> Any:
        """``left in [...]``: one pass over the column (pandas ``isin``) after checking every value's kind."""
        values = [_scalar(_literal(e), self.source(e)) for e in elts]
        for v in values:
            _check_kinds(left, v, "in")
        literals = [v.data for v in values]
        if left.column:
            data = np.array(pd.Series(left.data, copy=False).isin(literals).to_numpy(dtype=bool))
            if left.kind == "num":  # NaN is never in a list
                data = data & ~np.isnan(np.asarray(left.data, dtype=np.float64))
        else:
            data = left.data in literals
        return np.logical_not(data) if negate else data


def _scalar(value: Any, source: Callable[[], str]) -> _Value:
    if isinstance(value, bool):
        return _Value("bool", value, False, source)
    if isinstance(value, (int, float)):
        return _Value("num", value, False, source)
    return _Value("str", value, False, source)


def _check_kinds(a: _Value, b: _Value, symbol: str) -> None:
    """Text compares only with text: name the column and say how to fix the value."""
    if (a.kind == "str") == (b.kind == "str"):
        return
    txt, other = (a, b) if a.kind == "str" else (b, a)
    what = "numbers" if other.kind == "num" else "True/False"
    if txt.column and not other.column:
        example = f"{txt.text} in ['{other.text}']" if symbol == "in" else f"{txt.text} {symbol} '{other.text}'"
        raise ExpressionError(f"cannot compare text {txt.text} with {other.text}; quote the value, e.g. {example}")
    if other.column and not txt.column:
        raise ExpressionError(f"cannot compare {other.text} ({what}) with the text {txt.text}; write the value "
                              "without quotes")  # fmt: skip
    raise ExpressionError(f"cannot compare text {txt.text} with {other.text} ({what})")


def _compare(op: type, a: _Value, b: _Value) -> Any:
    """Elementwise ``a op b`` (a bool array, or a bool when neither is a column)."""
    symbol, fn = _COMPARE[op]
    _check_kinds(a, b, symbol)
    if op is ast.NotEq:
        return np.logical_not(_compare(ast.Eq, a, b))
    if a.kind == "str":
        return _compare_text(fn, a, b)
    try:
        data = fn(a.data, b.data)
    except OverflowError:  # a Python int beyond the column's integer type, in older numpy
        data = fn(np.asarray(a.data, dtype=np.float64), np.asarray(b.data, dtype=np.float64))
    return np.asarray(data, dtype=bool) if (a.column or b.column) else bool(data)


def _compare_text(fn: Callable[[Any, Any], Any], a: _Value, b: _Value) -> Any:
    """Elementwise comparison of text values; a missing value (None) satisfies none."""
    if not (a.column or b.column):
        return bool(fn(a.data, b.data))
    n = len(a.data) if a.column else len(b.data)
    left = a.data if a.column else np.full(n, a.data, dtype=object)
    right = b.data if b.column else np.full(n, b.data, dtype=object)
    present = ~(pd.isna(left) | pd.isna(right))
    out = np.zeros(n, dtype=bool)
    out[present] = np.asarray(fn(left[present], right[present]), dtype=bool)
    return out
