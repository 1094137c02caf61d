"""The one sample of local rules, ``local_x``: read as X's row (a pandas Series by X's column names), checked, copied
to a float64 CPU tensor."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.data.validation import check_dense_tensor, is_frame

__all__ = ["to_local_x"]


def to_local_x(local_x: Any, n_features: int, frame_names: Sequence[str] | None = None) -> torch.Tensor | None:
    """One sample (F,) as a float64 CPU tensor, a copy (``None`` stays ``None``).

    ``frame_names``: the column names of a DataFrame ``X`` (:func:`to_tensor_2d`'s). A pandas Series (or a one-row
    DataFrame) whose labels are those names, in any order, is read by name; one labelled ``0..F-1`` (a default
    ``RangeIndex``), or any when ``X`` has no column names, is read by position; any other labels are a
    ``ValueError`` naming the missing columns.

    Example:
        >>> import pandas as pd
        >>> to_local_x(pd.Series({"b": 2.0, "a": 1.0}), 2, ["a", "b"]).tolist()
        [1.0, 2.0]
        >>> to_local_x(pd.Series({"b": 2.0, "c": 1.0}), 2, ["a", "b"])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected `local_x` (a pandas Series) to be labelled by the columns of `X`, but it lacks ['a']...
    """
    if local_x is None:
        return None
    if hasattr(local_x, "to_numpy") or isinstance(local_x, (list, tuple, np.ndarray)):
        if hasattr(local_x, "to_numpy") and frame_names is not None:
            local_x = _by_column_name(local_x, list(frame_names))
        try:
            raw = local_x.to_numpy() if hasattr(local_x, "to_numpy") else local_x
            local_x = torch.from_numpy(np.array(raw, dtype=np.float64))  # a copy: pandas may hand a read-only view
        except (TypeError, ValueError) as err:
            raise TypeError(
                f"Expected `local_x` to be one sample of {n_features} numbers, but it holds non-numeric values: {err}"
            ) from err
    if not isinstance(local_x, torch.Tensor):
        raise TypeError(f"Expected `local_x` to be one sample of shape ({n_features},), got {type(local_x).__name__}.")
    local_x = check_dense_tensor(local_x, "local_x")
    if local_x.ndim == 2 and local_x.shape[0] == 1:
        local_x = local_x[0]
    if local_x.ndim != 1 or local_x.shape[0] != n_features:
        raise ValueError(f"Expected `local_x` to have shape ({n_features},), but got shape {tuple(local_x.shape)}.")
    return local_x.to("cpu", torch.float64)


def _by_column_name(local_x: Any, names: list[str]) -> Any:
    """A pandas Series (or a one-row DataFrame) ``local_x`` in the order of a DataFrame's column ``names`` (see
    :func:`to_local_x`)."""
    labels = local_x.columns if is_frame(local_x) else getattr(local_x, "index", None)
    if labels is None or getattr(labels, "nlevels", 1) != 1:
        return local_x  # no labels to go by (the shape checks downstream speak of a MultiIndex's values)
    keys = [str(v) for v in labels]
    if len(keys) == len(names) and len(set(keys)) == len(keys) and set(keys) == set(names):
        order = [keys.index(name) for name in names]
        return local_x.iloc[:, order] if is_frame(local_x) else local_x.iloc[order]
    raw = labels.tolist()
    if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in raw) and raw == list(range(len(raw))):
        return local_x  # default labels 0..F-1: by position
    known, columns = set(keys), set(names)
    missing = [name for name in names if name not in known]
    extra = [key for key in keys if key not in columns]
    repeated = sorted({key for key in keys if keys.count(key) > 1})
    found = [f"lacks {missing[:10]}"] if missing else []
    found += [f"has {extra[:10]} besides"] if extra else []
    found += [f"repeats {repeated[:10]}"] if repeated else []
    raise ValueError(
        f"Expected `local_x` (a pandas {type(local_x).__name__}) to be labelled by the columns of `X`, but it "
        f"{' and '.join(found)}; select them by name (`local_x[X.columns]`), or pass `local_x.to_numpy()` to read "
        "its values by position."
    )
