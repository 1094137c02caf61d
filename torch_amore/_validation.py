"""Argument checks shared by the public functions.

Every check raises a ``ValueError`` or ``TypeError`` that names the argument and shows the bad value, and runs
before any heavy work.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore import distributed as D
from torch_amore._typing import BIN_STRATEGIES, FEATURE_TYPES


def to_tensor_2d(X: Any, name: str = "X") -> tuple[torch.Tensor, list[str] | None]:
    """Turn a tensor, numpy array or pandas DataFrame into a floating (N, F) tensor.

    Returns the tensor (on its own device, floating dtype kept; integer and bool inputs become float64) and the
    column names of a DataFrame (``None`` otherwise).
    """
    names = None
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # pandas DataFrame, without importing pandas
        names = [str(c) for c in X.columns]
        try:
            X = X.to_numpy(dtype=np.float64, na_value=np.nan)
        except (TypeError, ValueError) as err:
            bad = [
                str(c)
                for c, dt in zip(X.columns, X.dtypes)
                if not (np.issubdtype(np.dtype(dt), np.number) or np.dtype(dt) == np.bool_)
            ]
            raise TypeError(
                f"Expected `{name}` to hold numeric columns only, but columns {bad} are not numeric; "
                "one-hot encode categorical columns first (e.g. pandas.get_dummies)."
            ) from err
    if isinstance(X, np.ndarray):
        if X.dtype == object or not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
            raise TypeError(f"Expected `{name}` to have a numeric dtype, but got {X.dtype}.")
        with warnings.catch_warnings():  # a read-only array is fine: X is never written to
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            X = torch.from_numpy(np.ascontiguousarray(X))
    elif not isinstance(X, torch.Tensor):
        raise TypeError(
            f"Expected `{name}` to be a torch.Tensor, numpy array or pandas DataFrame, but got {type(X).__name__}."
        )
    if X.is_complex():
        raise TypeError(f"Expected `{name}` to have a real numeric dtype, but got {X.dtype}.")
    if X.ndim != 2:
        raise ValueError(f"Expected `{name}` to have shape (N, F) (2 dimensions), but got shape {tuple(X.shape)}.")
    if not X.is_floating_point():
        X = X.to(torch.float64)
    return X, names


def check_finite(X: torch.Tensor, name: str = "X") -> None:
    """NaN is a missing value; +-inf is an error."""
    if D.any_rank(bool(torch.isinf(X).any())):  # every shard of a DDP run raises together
        rows, cols = torch.nonzero(torch.isinf(X), as_tuple=True)
        if rows.numel() == 0:
            raise ValueError(f"Expected `{name}` to hold finite values, but another rank's shard holds +-inf.")
        raise ValueError(
            f"Expected `{name}` to hold finite values (NaN marks a missing value), but found +-inf at "
            f"{int(rows.numel())} entries, first at row {int(rows[0])}, column {int(cols[0])}."
        )


def to_target(target: Any, n: int, device: torch.device, name: str = "target") -> torch.Tensor:
    """Boolean (N,) subgroup mask on ``device``; 0/1 integers are accepted."""
    if hasattr(target, "to_numpy"):
        target = target.to_numpy()
    if isinstance(target, (list, tuple)):
        target = np.asarray(target)
    if isinstance(target, np.ndarray):
        target = torch.from_numpy(np.array(target))  # a copy: read-only arrays (pandas) cannot be shared
    if not isinstance(target, torch.Tensor):
        raise TypeError(
            f"Expected `{name}` to be a boolean tensor or array of shape (N,), got {type(target).__name__}."
        )
    target = target.reshape(-1) if target.ndim == 2 and 1 in target.shape else target
    if target.ndim != 1:
        raise ValueError(f"Expected `{name}` to have shape (N,), but got shape {tuple(target.shape)}.")
    if target.shape[0] != n:
        raise ValueError(f"Expected `{name}` to have one entry per row of X ({n}), but got {target.shape[0]}.")
    if target.dtype != torch.bool:
        if target.is_floating_point() and torch.isnan(target).any():
            raise ValueError(f"Expected `{name}` to be boolean, but it holds NaN.")
        uniq = torch.unique(target)
        if not bool(((uniq == 0) | (uniq == 1)).all()):
            raise TypeError(
                f"Expected `{name}` to be boolean (or 0/1), but got values {uniq[:5].tolist()} of dtype {target.dtype}."
            )
        target = target != 0
    n_t, n = (int(v) for v in D.all_reduce_sum(torch.tensor([int(target.sum()), n])))  # all shards of a DDP run
    if n_t == 0:
        raise ValueError(f"Expected `{name}` to select at least one sample, but the subgroup is empty.")
    if n_t == n:
        raise ValueError(
            f"Expected `{name}` to leave some samples out, but it covers all {n} samples: every rule would have "
            "ratio 1."
        )
    return target.to(device)


def check_min_support(min_support: Any) -> int | float:
    """``min_support`` as given, checked: an int count >= 1 or a float fraction in (0, 1).

    A float is always a fraction: ``1.0`` or ``50.0`` are refused (write ``1`` or ``50`` for a count).
    """
    if isinstance(min_support, bool) or not isinstance(min_support, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `min_support` to be an int count or a float in (0, 1), but got {min_support!r}.")
    if isinstance(min_support, (float, np.floating)):
        if not 0.0 < float(min_support) < 1.0:
            whole = float(min_support).is_integer()
            hint = f" (for a count of samples pass the int {int(min_support)})" if whole else ""
            raise ValueError(f"Expected a float `min_support` to be a fraction in (0, 1), but got {min_support}{hint}.")
        return float(min_support)
    if min_support < 1:
        raise ValueError(f"Expected an int `min_support` to be a count >= 1, but got {min_support}.")
    return int(min_support)


def resolve_min_support(min_support: Any, n: int) -> int:
    """The count of samples meant by ``min_support`` (see :func:`check_min_support`) on ``n`` samples."""
    value = check_min_support(min_support)
    if isinstance(value, float):
        value = int(math.ceil(value * n))
    if value > n:
        raise ValueError(f"Expected `min_support` to lie in [1, {n}] (the number of samples), but got {min_support}.")
    return value


def check_int(value: Any, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"Expected `{name}` to be an integer >= {low}, but got {value!r}.")
    if value < low:
        raise ValueError(f"Expected `{name}` to be an integer >= {low}, but got {value}.")
    return int(value)


def check_choice(value: Any, name: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"Expected `{name}` to be one of {list(choices)}, but got {value!r}.")
    return value


def check_bin_strategy(value: Any) -> str:
    return check_choice(value, "bin_strategy", BIN_STRATEGIES)


def resolve_names(feature_names: Sequence[str] | None, frame_names: list[str] | None, n_features: int) -> list[str]:
    if feature_names is None:
        return frame_names if frame_names is not None else [f"feature_{i}" for i in range(n_features)]
    if isinstance(feature_names, str):
        raise TypeError("Expected `feature_names` to be a sequence of strings, but got a single string.")
    names = [str(n) for n in feature_names]
    if len(names) != n_features:
        raise ValueError(f"Expected `feature_names` to have {n_features} entries (columns of X), but got {len(names)}.")
    return names


def resolve_features(features: Any, n_features: int) -> list[int]:
    """Feature indices to search (``None``: all); accepts a ``FeatureSelection``-like object with ``.features``."""
    if features is None:
        return list(range(n_features))
    if hasattr(features, "features") and not isinstance(features, (torch.Tensor, np.ndarray)):
        features = features.features
    if isinstance(features, torch.Tensor):
        features = features.tolist()
    if isinstance(features, np.ndarray):
        features = features.tolist()
    try:
        idx = [int(f) for f in features]
    except (TypeError, ValueError) as err:
        raise TypeError(f"Expected `features` to be a sequence of feature indices, but got {features!r}.") from err
    bad = [f for f in idx if f < 0 or f >= n_features]
    if bad:
        raise ValueError(f"Expected `features` indices in [0, {n_features - 1}], but got {bad[:5]}.")
    if not idx:
        raise ValueError("Expected `features` to name at least one feature, but it is empty.")
    return sorted(set(idx))


def resolve_affine(values: Any, name: str, n_features: int, default: float) -> list[float]:
    if values is None:
        return [default] * n_features
    vals = [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]
    if len(vals) != n_features:
        raise ValueError(f"Expected `{name}` to have {n_features} entries (columns of X), but got {len(vals)}.")
    if not all(math.isfinite(v) for v in vals):
        raise ValueError(f"Expected `{name}` to hold finite numbers, but got {vals}.")
    return vals


def integer_columns(X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per column: (all non-missing values are integers, the non-missing values are exactly {0, 1}).

    One chunked pass over X, vectorized over columns.
    """
    n, n_features = X.shape
    is_int = torch.ones(n_features, dtype=torch.bool, device=X.device)
    in01 = torch.ones_like(is_int)
    has0, has1, seen = torch.zeros_like(is_int), torch.zeros_like(is_int), torch.zeros_like(is_int)
    alive = torch.arange(n_features, device=X.device)  # columns that may still be integer-valued
    step = max(1, (1 << 22) // max(1, n_features))
    for r0 in range(0, n, step):
        if alive.numel() == 0:
            break
        chunk = X[r0 : r0 + step]
        chunk = chunk if alive.numel() == n_features else chunk[:, alive]
        nan = torch.isnan(chunk)
        whole = ((chunk == torch.round(chunk)) | nan).all(0)
        zero, one = chunk == 0, chunk == 1
        is_int[alive] &= whole
        in01[alive] &= (zero | one | nan).all(0)
        has0[alive] |= zero.any(0)
        has1[alive] |= one.any(0)
        seen[alive] |= (~nan).any(0)
        alive = alive[is_int[alive]]
    is_int, in01 = D.all_ranks(torch.stack([is_int, in01]))  # over the shards of a DDP run (no-op otherwise)
    seen, has0, has1 = D.any_rank(torch.stack([seen, has0, has1]))
    return is_int & seen, in01 & is_int & has0 & has1


def infer_feature_types(X: torch.Tensor) -> list[str]:
    """``cat`` for columns with exactly the values {0, 1}, ``int`` for other integer-valued columns, else ``float``."""
    is_int, binary = integer_columns(X)
    return ["cat" if b else ("int" if i else "float") for i, b in zip(is_int.tolist(), binary.tolist())]


def resolve_feature_types(feature_types: Sequence[str] | None, X: torch.Tensor) -> list[str]:
    n_features = X.shape[1]
    if feature_types is None:
        return infer_feature_types(X)
    if isinstance(feature_types, str):
        raise TypeError("Expected `feature_types` to be a sequence such as ['float', 'int', 'cat'], got a string.")
    types = [str(t) for t in feature_types]
    if len(types) != n_features:
        raise ValueError(f"Expected `feature_types` to have {n_features} entries (columns of X), but got {len(types)}.")
    bad = sorted({t for t in types if t not in FEATURE_TYPES})
    if bad:
        raise ValueError(f"Expected `feature_types` entries in {list(FEATURE_TYPES)}, but got {bad}.")
    return types


def to_local_x(local_x: Any, n_features: int) -> torch.Tensor | None:
    if local_x is None:
        return None
    if hasattr(local_x, "to_numpy"):
        local_x = local_x.to_numpy(dtype=np.float64)
    if isinstance(local_x, (list, tuple, np.ndarray)):
        local_x = torch.as_tensor(np.asarray(local_x, dtype=np.float64))
    if not isinstance(local_x, torch.Tensor):
        raise TypeError(f"Expected `local_x` to be one sample of shape ({n_features},), got {type(local_x).__name__}.")
    if local_x.ndim == 2 and local_x.shape[0] == 1:
        local_x = local_x[0]
    if local_x.ndim != 1 or local_x.shape[0] != n_features:
        raise ValueError(f"Expected `local_x` to have shape ({n_features},), but got shape {tuple(local_x.shape)}.")
    return local_x.detach().to("cpu", torch.float64)
