"""Evaluation of a checked target expression (:mod:`torch_amore.cli.expression`) on numpy arrays of the columns."""

from __future__ import annotations

import ast
import functools
import operator
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from torch_amore.cli.expression_syntax import _COMPARE, ExpressionError, _literal, _snippet

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


def is_date(dtype: Any) -> bool:
    """Whether a column's dtype holds dates, times, durations or periods (the table refuses them as features, the
    expression as operands)."""
    return (
        pd.api.types.is_datetime64_any_dtype(dtype)
        or pd.api.types.is_timedelta64_dtype(dtype)
        or isinstance(dtype, pd.PeriodDtype)
    )


def _column_value(series: pd.Series, name: str) -> tuple[str, np.ndarray]:
    """``(kind, values)`` of a table column for the expression: ``"bool"`` (bool array), ``"num"`` (int64 array
    without missing values, else float64 with NaN) or ``"str"`` (object array of str, None for missing)."""
    dtype = series.dtype
    if pd.api.types.is_bool_dtype(dtype):
        if not series.isna().any():
            return "bool", series.to_numpy(dtype=bool)
        return "num", series.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    if is_date(dtype):
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
    """Evaluates the nodes of a checked expression on the columns of ``df``; ``source`` is the expression's text with
    backquoted names replaced by the placeholders of ``names`` (for messages)."""

    def __init__(self, source: str, names: dict[str, str], df: pd.DataFrame):
        self.source_text = source
        self.names = names
        self.df = df
        self.cache: dict[str, _Value] = {}

    def source(self, node: ast.AST) -> Callable[[], str]:
        return lambda: _snippet(self.source_text, self.names, node)

    def value(self, node: ast.AST) -> _Value:
        if isinstance(node, ast.Name):
            return self.column(node)
        if isinstance(node, ast.Constant):
            return _scalar(node.value, self.source(node))
        if isinstance(node, ast.BoolOp):
            parts = [self.boolean(v, "and" if isinstance(node.op, ast.And) else "or") for v in node.values]
            combine = np.logical_and if isinstance(node.op, ast.And) else np.logical_or
            data = functools.reduce(combine, [p.data for p in parts])
            return _Value("bool", data, any(p.column for p in parts), self.source(node))
        if isinstance(node, ast.UnaryOp):
            return self.unary(node)
        if isinstance(node, ast.BinOp):
            return self.binary(node)
        if isinstance(node, ast.Compare):
            return self.compare(node)
        raise ExpressionError(f"not allowed: {type(node).__name__}")  # unreachable: the checker refused it

    def column(self, node: ast.Name) -> _Value:
        name = self.names.get(node.id, node.id)
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
    kind = "bool" if isinstance(value, bool) else "num" if isinstance(value, (int, float)) else "str"
    return _Value(kind, value, False, source)


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
        raise ExpressionError(
            f"cannot compare {other.text} ({what}) with the text {txt.text}; write the value without quotes"
        )
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
