"""The options of the Lightning callback's ``verify=``: their names and values checked when the callback is made,
with the checks :meth:`~torch_amore.RegionalExplanation.verify` makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from torch_amore.data.arguments import check_flag, check_int, did_you_mean
from torch_amore.rules.held_out import check_level
from torch_amore.verify.interventions import check_method

__all__ = ["VALUE_CHECKS", "VERIFY_OPTIONS", "check_verify_options"]

VERIFY_OPTIONS = ("rule_sets", "method", "n_controls", "level", "seed", "batch_size", "progress")


def _level(value: Any) -> float:
    """``level`` checked (:func:`~torch_amore.rules.held_out.check_level`); a numpy float narrower than float64 as the
    decimal it was written as (``np.float32(0.9)``: 0.9)."""
    level = check_level(value)
    if isinstance(value, np.floating) and value.dtype.itemsize < 8:
        level = float(np.format_float_scientific(value, unique=True))
    return level


#: The checks of ``verify``'s option values (each returns the value to use), for ``verify`` itself and the callback.
VALUE_CHECKS: dict[str, Callable[[Any], Any]] = {
    "method": check_method,
    "n_controls": lambda v: check_int(v, "n_controls", 0),
    "level": _level,
    "seed": lambda v: check_int(v, "seed", 0),
    "batch_size": lambda v: check_int(v, "batch_size", 1),
    "progress": lambda v: check_flag(v, "progress"),
}


def check_verify_options(verify: Any, target: Any) -> dict[str, Any] | None:
    """The options of ``verify=`` (``True``: the defaults, ``False``: ``None``), checked before any training: their
    names, and their values with the checks :meth:`RegionalExplanation.verify` makes (``rule_sets`` only as a count:
    the rule sets are not found yet).

    Example:
        >>> check_verify_options({"n_controls": 3}, 1)
        {'n_controls': 3}
        >>> check_verify_options({"n_control": 3}, 1)
        Traceback (most recent call last):
        ...
        TypeError: Unexpected option 'n_control' in `verify` (did you mean 'n_controls'?).
        >>> check_verify_options({"level": 5}, 1)
        Traceback (most recent call last):
        ...
        ValueError: Expected `level` to be a number in (0, 1) such as 0.95, but got 5.
    """
    if verify is False or verify is None:
        return None
    if verify is not True and not isinstance(verify, dict):
        raise TypeError(f"Expected `verify` to be a bool or a dict of verify options, but got {verify!r}.")
    options = {} if verify is True else dict(verify)
    for key in options:
        if key not in VERIFY_OPTIONS:
            raise TypeError(f"Unexpected option {key!r} in `verify`{did_you_mean(key, VERIFY_OPTIONS)}.")
    checks = {**VALUE_CHECKS, "rule_sets": lambda v: check_int(v, "rule_sets", 1)}  # a count: none are found yet
    for key, value in options.items():
        checks[key](value)
    if hasattr(target, "__len__") and not isinstance(target, tuple) and not callable(target):
        raise ValueError("Expected a `target` on the model outputs (class, callable, range) with `verify`, not a mask.")
    return options
