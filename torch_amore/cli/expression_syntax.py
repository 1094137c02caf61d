"""The syntax of the target language (:mod:`torch_amore.cli.expression`): backquoted names are replaced, the text is
parsed with :mod:`ast` and every node checked against the grammar before anything is evaluated.
"""

from __future__ import annotations

import ast
import difflib
import operator
from collections.abc import Callable, Sequence
from typing import Any

from torch_amore.data.arguments import did_you_mean

#: The language in short, for error messages.
ALLOWED = "column names, numbers, 'strings', True/False, comparisons, and/or/not, in [...], + - * /"

_MAX_LENGTH = 100_000  # characters; longer texts are refused before parsing

_WHAT = {
    ast.Attribute: "attribute access",
    ast.Call: "function calls",
    ast.Subscript: "subscripts (indexing)",
    ast.Slice: "slices",
    ast.Lambda: "lambda functions",
    **dict.fromkeys((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp), "comprehensions"),
    **dict.fromkeys((ast.JoinedStr, ast.FormattedValue), "f-strings"),
    ast.NamedExpr: "assignments (:=)",
    ast.IfExp: "conditional expressions (a if b else c)",
    ast.Dict: "dicts",
    ast.Starred: "* unpacking",
    ast.Await: "await",
    **dict.fromkeys((ast.Yield, ast.YieldFrom), "yield"),
}

_COMPARE: dict[type, tuple[str, Callable[[Any, Any], Any]]] = {
    ast.Eq: ("==", operator.eq),
    ast.NotEq: ("!=", operator.ne),
    ast.Lt: ("<", operator.lt),
    ast.LtE: ("<=", operator.le),
    ast.Gt: (">", operator.gt),
    ast.GtE: (">=", operator.ge),
}
_OTHER_BINOPS = {
    ast.Pow: "**",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.MatMult: "@",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.BitXor: "^",
}


class ExpressionError(ValueError):
    """An expression that is not in the language, names an unknown column, or does not give one bool per row."""


def show_columns(columns: Sequence[str], limit: int = 20) -> str:
    """The first ``limit`` column names, comma-separated, with the total when there are more.

    Example:
        >>> show_columns(["a", "b", "c"], limit=2)
        'a, b, ... (3 in all)'
    """
    columns = [str(c) for c in columns]
    shown = ", ".join(columns[:limit])
    return shown + (f", ... ({len(columns)} in all)" if len(columns) > limit else "")


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
            if isinstance(elt, ast.Name) and elt.id not in self.names and elt.id not in self.columns:
                raise ExpressionError(
                    f"a bare word inside 'in [...]': {elt.id} (did you mean \"{elt.id}\"? strings are quoted)"
                )
            if _literal(elt) is None:
                raise self.refuse("anything but numbers, strings and True/False inside 'in [...]'", elt)

    def column(self, node: ast.Name) -> None:
        name = self.names.get(node.id, node.id)
        if node.id not in self.names and node.id.startswith("__"):
            raise self.refuse("dunder names", node)
        if name not in self.columns:
            hint = did_you_mean(name, self.columns)
            raise ExpressionError(f"unknown column {name!r}{hint}; columns are: {show_columns(self.columns)}")
        self.used.append(name)

    def constant(self, node: ast.Constant) -> None:
        if node.value is None:
            raise self.refuse("None", node)
        if not isinstance(node.value, (bool, int, float, str)):
            raise self.refuse(f"{type(node.value).__name__} literals", node)

    def compare(self, node: ast.Compare) -> None:
        self.bare_word(node)
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

    def bare_word(self, node: ast.Compare) -> None:
        """A column compared with a bare word that is no column: the word is meant as a string, so say how to
        quote it (with the closest column, where one is close)."""
        operands = [node.left, *node.comparators]
        words = [o for o in operands if isinstance(o, ast.Name) and o.id not in self.names]
        unknown = [o for o in words if o.id not in self.columns and not o.id.startswith("__")]
        has_column = any(isinstance(o, ast.Name) and self.names.get(o.id, o.id) in self.columns for o in operands)
        if not unknown or not has_column:
            return
        word = unknown[0]
        text = ast.get_source_segment(self.source, node) or ""
        start, end = word.col_offset - node.col_offset, word.end_col_offset - node.col_offset
        quoted = text[:start] + f'"{word.id}"' + text[end:]
        for placeholder, name in self.names.items():
            quoted = quoted.replace(placeholder, f"`{name}`")
        close = difflib.get_close_matches(word.id, self.columns, n=1)
        column = f"{close[0]!r}, or " if close else ""
        raise ExpressionError(
            f"unknown column {word.id!r} (did you mean {column}{' '.join(quoted.split())}? strings are quoted); "
            f"columns are: {show_columns(self.columns)}"
        )


def equals_hint(text: str) -> str:
    """The expression with each lone ``=`` outside strings and backquotes written ``==``, where that parses; ``''``
    where it does not (or there is none).

    Example:
        >>> equals_hint("predicted = 0")
        'predicted == 0'
        >>> equals_hint("`a=b` >= 1")
        ''
    """
    out, i, changed = [], 0, False
    while i < len(text):
        ch = text[i]
        if ch in "'\"":
            j = _string_end(text, i)
        elif ch == "`":
            j = text.find("`", i + 1) + 1 or len(text)
        elif ch == "=" and text[i - 1 : i] not in ("=", "!", "<", ">") and text[i + 1 : i + 2] != "=":
            out.append("==")
            changed, i = True, i + 1
            continue
        else:
            j = i + 1
        out.append(text[i:j])
        i = j
    fixed = "".join(out)
    if not changed:
        return ""
    try:
        ast.parse(_replace_backquotes(fixed)[0].strip(), mode="eval")
    except (SyntaxError, ValueError, ExpressionError):
        return ""
    return fixed


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
