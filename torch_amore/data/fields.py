"""The error of a malformed serialized field, :class:`FieldError`, and the path that names the field: shared by the
readers of rules (:mod:`torch_amore.rules.serialization`) and of concept bases (:mod:`torch_amore.concepts.saving`).

Example:
    >>> with at_path("rule_sets[2]"):
    ...     raise FieldError("rules[0].low", "expected a number.")
    Traceback (most recent call last):
    ...
    torch_amore.data.fields.FieldError: Invalid `rule_sets[2].rules[0].low`: expected a number.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["FieldError", "at_path", "join"]


class FieldError(ValueError):
    """A malformed serialized field. ``path`` names it (``rule_sets[2].rules[0].feature``)."""

    def __init__(self, path: str, problem: str) -> None:
        self.path, self.problem = path, problem
        super().__init__(f"Invalid `{path}`: {problem}" if path else f"Invalid input: {problem}")


def join(prefix: str, path: str) -> str:
    """``prefix`` and a path inside it: ``join("rule_sets[2]", "rules[0]") == "rule_sets[2].rules[0]"``."""
    if not prefix:
        return path
    if not path:
        return prefix
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


@contextmanager
def at_path(prefix: str) -> Iterator[None]:
    """Prefix the path of any :class:`FieldError` raised inside with ``prefix``."""
    try:
        yield
    except FieldError as e:
        raise FieldError(join(prefix, e.path), e.problem) from None
