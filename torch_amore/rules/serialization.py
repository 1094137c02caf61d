"""Checked reading of serialized objects: each field goes through a checker, and a bad one raises
:class:`FieldError`, a ``ValueError`` naming the field's full path, what was expected and what was found. Nothing is
ever ``eval``-ed or unpickled.

Example:
    >>> try:
    ...     load_items([{"n": 1}, {"n": -2}], lambda d: expect_int(d["n"], "n", low=0), "items")
    ... except FieldError as e:
    ...     print(e)
    Invalid `items[1].n`: expected an integer >= 0, but got -2.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from torch_amore._version import __version__
from torch_amore.data.fields import FieldError, at_path, join

T = TypeVar("T")

#: The version of the serialized format written by ``to_dict`` (older files, without a version, still load).
FORMAT_VERSION = 1
#: The most digits an integer in JSON text may have (nothing written holds more than 20; Python refuses more than
#: 4,300 with a message that names no field).
MAX_INT_DIGITS = 100


def parse_json(text: str | bytes) -> Any:
    """The value of a JSON document; malformed or too deeply nested text, or an integer of more than
    :data:`MAX_INT_DIGITS` digits, raises :class:`FieldError` (not a ``RecursionError`` or a ``ValueError`` of
    Python's integer conversion).

    Example:
        >>> parse_json('{"a": [1, 2]}')
        {'a': [1, 2]}
        >>> parse_json("[" * 100_000 + "]" * 100_000)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid input: the JSON is nested too deeply to read (more levels...
        >>> parse_json('{"n_samples": ' + "9" * 5000 + "}")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid input: expected integers of at most 100 digits, but the...
    """
    try:
        return json.loads(text, parse_int=_parse_int)
    except RecursionError:
        raise FieldError(
            "", "the JSON is nested too deeply to read (more levels than Python's recursion limit allows)."
        ) from None
    except UnicodeDecodeError as err:
        raise FieldError("", f"expected UTF-8 JSON text, but the bytes do not decode ({err.reason}).") from None
    except json.JSONDecodeError as err:
        raise FieldError("", f"expected JSON text, but it does not parse: {err}.") from None


def _parse_int(text: str) -> int:
    """An integer literal of the JSON text; a :class:`FieldError` when it has more than :data:`MAX_INT_DIGITS`
    digits (checked before Python converts it)."""
    digits = len(text) - text.startswith("-")
    if digits > MAX_INT_DIGITS:
        raise FieldError(
            "", f"expected integers of at most {MAX_INT_DIGITS} digits, but the JSON holds one of {digits} digits."
        )
    return int(text)


def load_items(items: Any, load: Callable[[Any], T], path: str) -> list[T]:
    """Read a JSON list with ``load`` item by item, errors naming ``path[i]``."""
    if not isinstance(items, list | tuple):
        raise FieldError(path, f"expected a list, but got {_show(items)}.")
    out = []
    for i, item in enumerate(items):
        with at_path(f"{path}[{i}]"):
            out.append(load(item))
    return out


def _show(value: Any) -> str:
    """A short repr of ``value``; a value nested too deeply to repr (e.g. 100,000 dicts) is named by its type."""
    try:
        text = repr(value)
    except RecursionError:
        return "(nested too deeply to show)"
    except ValueError:  # an integer of more digits than Python converts to text
        digits = int(value.bit_length() * 0.30103) if isinstance(value, int) else None
        return f"(an integer of about {digits} digits)" if digits else f"(a {type(value).__name__})"
    return text if len(text) <= 80 else text[:77] + "..."


def expect_mapping(data: Any, path: str = "") -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise FieldError(path, f"expected a JSON object (dict), but got {type(data).__name__} {_show(data)}.")
    return data


def expect_keys(data: Mapping[str, Any], required: Sequence[str], optional: Sequence[str], path: str = "") -> None:
    """Every required key present, no unknown key."""
    for key in required:
        if key not in data:
            raise FieldError(join(path, key), "this required key is missing.")
    known = set(required) | set(optional)
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise FieldError(join(path, unknown[0]), f"unknown key (known keys: {sorted(known)}).")


def expect_int(value: Any, path: str, *, low: int | None = None, high: int | None = None) -> int:
    """An integer (not a bool, not a float such as 1.9 or 1.0) in ``[low, high)``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise FieldError(path, f"expected an integer, but got {type(value).__name__} {_show(value)}.")
    value = int(value)
    if low is not None and value < low:
        raise FieldError(path, f"expected an integer >= {low}, but got {value}.")
    if high is not None and value >= high:
        raise FieldError(path, f"expected an integer < {high}, but got {value}.")
    return value


def expect_float(
    value: Any, path: str, *, low: float = -math.inf, high: float = math.inf, finite: bool = True
) -> float:
    """A real number (int or float, not a bool or a string) in ``[low, high]``; finite unless ``finite=False``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise FieldError(path, f"expected a number, but got {type(value).__name__} {_show(value)}.")
    try:
        out = float(value)
    except OverflowError:
        raise FieldError(path, f"expected a number within float64 range, but got {_show(value)}.") from None
    if math.isnan(out) or (finite and math.isinf(out)):
        raise FieldError(path, f"expected a finite number, but got {out}.")
    if not low <= out <= high:
        raise FieldError(path, f"expected a number in [{low}, {high}], but got {out}.")
    return out


def expect_str(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise FieldError(path, f"expected a string, but got {type(value).__name__} {_show(value)}.")
    return value


def expect_choice(value: Any, path: str, choices: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in choices:
        raise FieldError(path, f"expected one of {list(choices)}, but got {_show(value)}.")
    return value


def expect_format_version(data: Mapping[str, Any], path: str = "") -> int:
    """The ``format_version`` of a serialized object (1 for files written before versions existed)."""
    if "format_version" not in data:
        return 1
    version = expect_int(data["format_version"], join(path, "format_version"), low=1)
    if version > FORMAT_VERSION:
        raise FieldError(
            join(path, "format_version"),
            f"this file uses format version {version}, but this torch_amore reads versions up to {FORMAT_VERSION}: "
            "upgrade torch_amore to read it.",
        )
    return version


def version_fields() -> dict[str, Any]:
    """The ``format_version`` and ``torch_amore_version`` entries every top-level ``to_dict`` writes."""
    return {"format_version": FORMAT_VERSION, "torch_amore_version": __version__}
