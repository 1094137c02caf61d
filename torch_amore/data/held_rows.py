"""Rows held out of a search by the caller (``holdout_rows=`` of :func:`torch_amore.extract_rules` and
:meth:`torch_amore.RegionalRuleExplainer.explain`): a boolean mask of the rows or their positions, checked and made
one (N,) boolean mask; a boolean pandas Series goes by its index when the data are a DataFrame, as a Series target
does.

Example:
    >>> resolve_holdout_rows([3, 0], 4).tolist()
    [True, False, False, True]
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore.data.validation import align_rows

__all__ = ["aligned_holdout_rows", "check_holdout_rows", "resolve_holdout_rows"]


def aligned_holdout_rows(holdout_rows: Any, frame: Any, frame_name: str = "X") -> Any:
    """A boolean pandas Series ``holdout_rows`` in the row order of the DataFrame ``frame``, by its index
    (:func:`torch_amore.data.validation.align_rows`: other labels are a ``ValueError``); anything else (row positions,
    arrays, tensors) as it is.

    Example:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"a": [1.0, 2.0, 3.0]}, index=[10, 11, 12])
        >>> aligned_holdout_rows(pd.Series([True, False, False], index=[12, 11, 10]), frame).tolist()
        [False, False, True]
    """
    if getattr(getattr(holdout_rows, "dtype", None), "kind", None) != "b":
        return holdout_rows
    return align_rows(holdout_rows, frame, "holdout_rows", frame_name)


def _as_array(holdout_rows: Any) -> np.ndarray:
    """``holdout_rows`` as a one-dimensional numpy array (a ``TypeError``/``ValueError`` naming it otherwise)."""
    if isinstance(holdout_rows, (str, bytes)):
        raise TypeError(
            "Expected `holdout_rows` to be a boolean mask or an array of row indices, but got "
            f"{type(holdout_rows).__name__} {holdout_rows[:40]!r}."
        )
    if hasattr(holdout_rows, "to_numpy"):
        holdout_rows = holdout_rows.to_numpy()
    if isinstance(holdout_rows, torch.Tensor):
        holdout_rows = holdout_rows.detach().to("cpu").numpy()
    try:
        rows = np.asarray(holdout_rows)
    except (TypeError, ValueError) as err:
        raise TypeError(f"Expected `holdout_rows` to be a boolean mask or an array of row indices: {err}") from None
    if rows.ndim != 1:
        raise ValueError(f"Expected `holdout_rows` to be one-dimensional, but got shape {rows.shape}.")
    return rows


def _rows_array(holdout_rows: Any) -> np.ndarray:
    """:func:`_as_array` of booleans or integers (an empty array counts as integers)."""
    rows = _as_array(holdout_rows)
    if rows.dtype != bool and not np.issubdtype(rows.dtype, np.integer) and rows.size:
        raise TypeError(f"Expected `holdout_rows` to hold booleans or integer row indices, but got dtype {rows.dtype}.")
    return rows


def check_holdout_rows(holdout_rows: Any) -> Any:
    """``holdout_rows`` as given, checked as far as it can be before the rows are known (one-dimensional booleans or
    integers: a ``TypeError``/``ValueError`` naming it otherwise); for arguments kept until the data come, as a
    callback's.

    Example:
        >>> check_holdout_rows([0, 5])
        [0, 5]
        >>> check_holdout_rows([0.5])
        Traceback (most recent call last):
        ...
        TypeError: Expected `holdout_rows` to hold booleans or integer row indices, but got dtype float64.
    """
    if holdout_rows is not None:
        _rows_array(holdout_rows)
    return holdout_rows


def _index_mask(rows: np.ndarray, n: int) -> np.ndarray:
    """The (n,) mask of distinct integer row indices in ``[0, n)``."""
    rows = rows.astype(np.int64)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"Expected `holdout_rows` indices in [0, {n}), but got {int(rows.min())}..{int(rows.max())}.")
    if np.unique(rows).size != rows.size:
        if rows.size == n and rows.min() >= 0 and rows.max() <= 1:
            raise ValueError(
                f"Expected `holdout_rows` as a boolean mask or distinct row indices, but got {n} integers 0/1 (a 0/1 "
                "column?): pass it as booleans, e.g. `holdout_rows=rows.astype(bool)`."
            )
        raise ValueError("Expected distinct row indices in `holdout_rows`, but some repeat.")
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask


def resolve_holdout_rows(holdout_rows: Any, n: int, rows_of: str = "X") -> torch.Tensor:
    """``holdout_rows`` (a boolean mask of the ``n`` rows, or distinct row indices in ``[0, n)``) as an (n,) boolean
    CPU mask, holding some but not all rows; ``rows_of``: what the rows are of, in messages. In a sharded (DDP) run
    these are one rank's rows, which may hold none or all of them: the search checks both parts over all ranks.

    Example:
        >>> resolve_holdout_rows([3, 0], 4).tolist()
        [True, False, False, True]
    """
    rows = _rows_array(holdout_rows)
    if rows.dtype == bool:
        if rows.shape[0] != n:
            raise ValueError(
                f"Expected a boolean `holdout_rows` of length {n} (the rows of {rows_of}), but got {rows.shape[0]}."
            )
        mask = rows.copy()
    else:
        mask = _index_mask(rows, n)
    if D.is_sharded():
        return torch.from_numpy(mask)
    if not mask.any():
        raise ValueError("Expected `holdout_rows` to hold at least one row, but it holds none.")
    if mask.all():
        raise ValueError(f"Expected `holdout_rows` to leave rows to search, but it holds all the rows of {rows_of}.")
    return torch.from_numpy(mask)
