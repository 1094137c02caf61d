"""Argument checks shared by the public functions.

Every check raises a ``ValueError`` or ``TypeError`` that names the argument and shows the bad value, and runs
before any heavy work.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore.data.column_stats import EXACT_INT

#: Most distinct values of a categorical feature (one grid per category).
MAX_CATEGORIES = 4096

_ONE_HOT = "one-hot encode them first, e.g. `X = pd.get_dummies(X, columns={cols}, dtype=float)`"
_DATES = (
    "convert them to numbers first, e.g. days since an origin: "
    "`X[{col!r}] = (X[{col!r}] - pd.Timestamp('1970-01-01')) / pd.Timedelta(days=1)` "
    "(a duration: `X[{col!r}] / pd.Timedelta(days=1)`)"
)


def to_tensor_2d(X: Any, name: str = "X") -> tuple[torch.Tensor, list[str] | None]:
    """Turn a tensor, numpy array or pandas DataFrame into a floating (N, F) tensor and a DataFrame's column names.

    The tensor stays on its device, detached, its floating dtype kept (integers and bools become float64). Anything
    that is not real numbers on a device holding data is a ``TypeError``/``ValueError`` naming ``name``.
    """
    return to_tensor(X, name)


def to_tensor(
    X: Any, name: str = "X", *, samples: bool = False, keep_integers: bool = False
) -> tuple[torch.Tensor, list[str] | None]:
    """:func:`to_tensor_2d`, with two options for the inputs of a model: ``samples``, any shape (N, ...) with N >= 1
    (e.g. images); ``keep_integers``, integer and boolean arrays keep their dtype (not a DataFrame's).

    Example:
        >>> import numpy as np
        >>> to_tensor(np.zeros((2, 1, 3), dtype=np.int64), "inputs", samples=True, keep_integers=True)[0].dtype
        torch.int64
        >>> to_tensor(np.zeros((0, 3)), "inputs", samples=True)
        Traceback (most recent call last):
        ...
        ValueError: Expected `inputs` to have shape (N, ...) with N >= 1, but got (0, 3).
    """
    names = None
    if hasattr(X, "columns") and hasattr(X, "to_numpy"):  # pandas DataFrame, without importing pandas
        names = [str(c) for c in X.columns]
        X = _frame_to_numpy(X, name)
    elif hasattr(X, "to_numpy") and hasattr(X, "dtype"):
        raise TypeError(
            f"Expected `{name}` to be 2-D (N, F), but got a pandas {type(X).__name__}; for one feature pass "
            f"`{name}.to_frame()`."
        )
    elif hasattr(X, "toarray") and hasattr(X, "nnz"):
        raise TypeError(
            f"Expected `{name}` to be a dense array, but got a scipy sparse matrix; pass `{name}.toarray()`."
        )
    if isinstance(X, np.ndarray):
        X = numpy_to_tensor(X, name, keep_integers)
    elif not isinstance(X, torch.Tensor):
        raise TypeError(
            f"Expected `{name}` to be a torch.Tensor, numpy array or pandas DataFrame, but got {type(X).__name__}."
        )
    X = check_dense_tensor(X, name)
    if samples and (X.ndim < 2 or X.shape[0] == 0):
        raise ValueError(f"Expected `{name}` to have shape (N, ...) with N >= 1, but got {tuple(X.shape)}.")
    if not samples and X.ndim != 2:
        raise ValueError(f"Expected `{name}` to have shape (N, F) (2 dimensions), but got shape {tuple(X.shape)}.")
    if not X.is_floating_point() and not keep_integers:
        check_exact_integers(X, name)
        X = X.to(torch.float64)
    return X, names


def check_dense_tensor(X: torch.Tensor, name: str) -> torch.Tensor:
    """``X`` detached, after checking that it is a dense tensor of real numbers on a device that holds data."""
    if X.layout != torch.strided:
        raise TypeError(f"Expected `{name}` to be a dense tensor, but got layout {X.layout}; pass `{name}.to_dense()`.")
    if X.is_nested:
        raise TypeError(f"Expected `{name}` to be a dense (N, F) tensor, but got a nested tensor.")
    if X.is_quantized:
        raise TypeError(
            f"Expected `{name}` to hold real numbers, but got a quantized tensor; pass `{name}.dequantize()`."
        )
    if X.device.type == "meta":
        raise ValueError(
            f"Expected `{name}` on a device that holds data, but it is on 'meta' (shapes only); create it on 'cpu' or "
            "'cuda'."
        )
    if X.is_complex():
        raise TypeError(f"Expected `{name}` to have a real numeric dtype, but got {X.dtype}.")
    return X.detach()


def check_not_meta(value: Any, name: str) -> None:
    """A tensor in ``value`` (itself, or inside tuples, lists and dicts) on the 'meta' device is a ``ValueError``
    naming ``name`` (torch would fail later, inside an operation)."""
    stack, seen = [(value, 0)], 0
    while stack and seen < 10_000:  # a bounded walk: batches are small containers
        item, depth = stack.pop()
        seen += 1
        if isinstance(item, torch.Tensor):
            if item.device.type == "meta":
                raise ValueError(
                    f"Expected `{name}` on a device that holds data, but it holds a tensor on 'meta' (shapes only, no "
                    "values); create it on 'cpu' or 'cuda'."
                )
        elif depth < 4 and isinstance(item, tuple | list):
            stack.extend((v, depth + 1) for v in item)
        elif depth < 4 and isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values())


def is_frame(value: Any) -> bool:
    """A pandas DataFrame (duck-typed: no import of pandas)."""
    return hasattr(value, "columns") and hasattr(value, "index") and hasattr(value, "to_numpy")


def align_rows(values: Any, frame: Any, name: str, frame_name: str = "X") -> Any:
    """``values`` (e.g. a target mask or labels) in the row order of ``frame``, when both are pandas objects.

    Equal indexes pass; the same labels in another order are aligned by label; any other index is a ``ValueError``
    (used by position, it would silently pair rows with other rows' values). Anything else passes unchanged.

    Example:
        >>> import pandas as pd
        >>> X = pd.DataFrame({"a": [1.0, 2.0, 3.0]}, index=[10, 11, 12])
        >>> align_rows(pd.Series([True, False, True], index=[12, 11, 10]), X, "target").tolist()
        [True, False, True]
    """
    if not (is_frame(frame) and hasattr(values, "index") and hasattr(values, "to_numpy")):
        return values
    if is_frame(values) and values.shape[1] != 1:
        return values  # not a column: the shape checks downstream say so
    if values.index.equals(frame.index):
        return values
    same_labels = (
        len(values.index) == len(frame.index)
        and values.index.is_unique
        and frame.index.is_unique
        and bool(frame.index.isin(values.index).all())
    )
    if same_labels:
        return values.reindex(frame.index)
    raise ValueError(
        f"Expected `{name}` (a pandas {type(values).__name__}) to be indexed like `{frame_name}`: its index labels "
        f"differ from `{frame_name}`'s ({show_index(values.index)} against {show_index(frame.index)}), so its rows "
        f"cannot be matched to `{frame_name}`'s; give it `{frame_name}`'s index, or pass `{name}.to_numpy()` to pair "
        "the rows by position."
    )


def show_index(index: Any) -> str:
    """A pandas index in a message: its length and first labels.

    Example:
        >>> import pandas as pd
        >>> show_index(pd.RangeIndex(5))
        '5 labels [0, 1, 2, ...]'
    """
    head = ", ".join(repr(v) for v in index[:3].tolist())
    return f"{len(index)} labels [{head}{', ...' if len(index) > 3 else ''}]"


def check_model_device(model: torch.nn.Module, name: str = "model") -> None:
    """A model with a parameter or buffer on the 'meta' device is a ``ValueError`` naming it, before any forward."""
    for kind, named in (("parameter", model.named_parameters()), ("buffer", model.named_buffers())):
        for key, tensor in named:
            if tensor.device.type == "meta":
                raise ValueError(
                    f"Expected `{name}` on a device that holds data, but its {kind} `{key}` is on 'meta' (shapes only, "
                    "no values); materialise it first, e.g. `model.to_empty(device='cpu')` and load its weights."
                )


def numpy_to_tensor(X: np.ndarray, name: str, keep_integers: bool = False) -> torch.Tensor:
    """A numeric numpy array as a tensor, sharing memory where it can: floating dtypes kept, integers and bools as
    float64 unless ``keep_integers``; anything else is a ``TypeError`` naming ``name``.

    Example:
        >>> numpy_to_tensor(np.arange(3, dtype=np.int32), "inputs", keep_integers=True).dtype
        torch.int32
        >>> numpy_to_tensor(np.array(["a"]), "inputs")
        Traceback (most recent call last):
        ...
        TypeError: Expected `inputs` to have a numeric dtype, but got <U1 (strings: one-hot encode them first, e.g. \
with pandas.get_dummies).
    """
    kind = X.dtype.kind
    if kind in "Mm":
        raise TypeError(
            f"Expected `{name}` to hold numbers, but got dtype {X.dtype} (dates or durations); convert them to numbers "
            f"first, e.g. days since an origin: `({name} - np.datetime64('1970-01-01')) / np.timedelta64(1, 'D')`."
        )
    if kind == "c":
        raise TypeError(f"Expected `{name}` to have a real numeric dtype, but got {X.dtype}.")
    if kind not in "biuf":
        hint = " (strings: one-hot encode them first, e.g. with pandas.get_dummies)" if kind in "OUS" else ""
        raise TypeError(f"Expected `{name}` to have a numeric dtype, but got {X.dtype}{hint}.")
    to_float = kind in "biu" and not keep_integers
    if kind in "iu" and to_float:
        check_exact_integers(X, name)
    if to_float or X.dtype.itemsize > 8:  # long double too: torch has no float128
        return torch.from_numpy(X.astype(np.float64))
    with warnings.catch_warnings():  # a read-only array is fine: X is never written to
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(np.ascontiguousarray(X))


def check_exact_integers(X: np.ndarray | torch.Tensor, name: str) -> None:
    """Integers beyond 2**53 that float64 would round (the search compares float64 values) are an error."""
    if isinstance(X, torch.Tensor) and X.dtype == torch.uint64:
        X = X.cpu().numpy()
    where, values = np.zeros((0, X.ndim), dtype=np.int64), np.zeros(0, dtype=np.int64)
    if isinstance(X, torch.Tensor) and X.dtype == torch.int64:  # only the values beyond 2**53 travel to the CPU
        big = (X > EXACT_INT) | (X < -EXACT_INT)
        if bool(big.any()):
            where, values = torch.nonzero(big).cpu().numpy(), X[big].cpu().numpy()
    elif isinstance(X, np.ndarray) and X.dtype.itemsize == 8 and X.dtype.kind in "iu":  # narrower ones are exact
        big = (X > EXACT_INT) | (X < -EXACT_INT)
        where, values = np.argwhere(big), X[big]
    lossy = _rounded_by_float64(values)
    bad = int(lossy.sum())
    if D.any_rank(bad > 0):  # every shard of a DDP run raises together
        example = "on another rank's shard"
        if bad:
            k = int(np.argmax(lossy))
            at = tuple(int(i) for i in where[k])
            example = f"e.g. {int(values[k])} at index {at} (it would become {int(values[k].astype(np.float64))})"
        raise ValueError(
            f"Expected the integers in `{name}` to be exactly representable as float64 (|x| <= 2**53), but {bad} "
            f"would be rounded, {example}; subtract an offset or rescale such columns first (e.g. nanosecond "
            "timestamps to seconds), or convert them to float yourself if rounding is acceptable."
        )


def _rounded_by_float64(values: np.ndarray) -> np.ndarray:
    """Which of the (64-bit) integers ``values`` change when converted to float64."""
    as_float = values.astype(np.float64)
    top = 2.0**63 if values.dtype.kind == "i" else 2.0**64
    inside = (as_float < top) & (as_float >= -top)  # 2**63 itself does not convert back to int64
    return ~inside | (np.where(inside, as_float, 0).astype(values.dtype) != values)


_NUMERIC_OBJECTS = ("integer", "floating", "mixed-integer-float", "boolean", "decimal", "empty")


def _column_kind(col: Any) -> str:
    """``"number"``, ``"text"`` (strings, categories), ``"date"`` (dates, durations, periods) or ``"other"``."""
    import pandas as pd

    t, dtype = pd.api.types, col.dtype
    if t.is_bool_dtype(dtype) or (t.is_numeric_dtype(dtype) and not t.is_complex_dtype(dtype)):
        return "number"
    if t.is_datetime64_any_dtype(dtype) or t.is_timedelta64_dtype(dtype) or isinstance(dtype, pd.PeriodDtype):
        return "date"
    if t.is_object_dtype(dtype):
        return "number" if t.infer_dtype(col, skipna=True) in _NUMERIC_OBJECTS else "text"
    if isinstance(dtype, pd.CategoricalDtype) or t.is_string_dtype(dtype):
        return "text"
    return "other"


def _frame_to_numpy(df: Any, name: str) -> np.ndarray:
    """The float64 values of a DataFrame whose columns are all numeric or boolean (else a ``TypeError`` saying how to
    encode the others)."""
    import pandas as pd

    by_kind: dict[str, list] = {"text": [], "date": [], "other": []}
    for label, col in df.items():
        kind = _column_kind(col)
        if kind != "number":
            by_kind[kind].append(label)
        elif pd.api.types.is_integer_dtype(col.dtype):
            wide = np.uint64 if pd.api.types.is_unsigned_integer_dtype(col.dtype) else np.int64
            check_exact_integers(col.to_numpy(dtype=wide, na_value=0), f"{name}[{label!r}]")
    problems = []
    text, dates = by_kind["text"], by_kind["date"]
    if text:
        problems.append(f"columns {text} hold strings or categories: {_ONE_HOT.format(cols=text)}")
    if dates:
        problems.append(f"columns {dates} hold dates or durations: {_DATES.format(col=dates[0])}")
    if by_kind["other"]:
        dtypes = [str(df[c].dtype) for c in by_kind["other"]]
        problems.append(f"columns {by_kind['other']} have unsupported dtypes {dtypes}")
    if problems:
        raise TypeError(f"Expected `{name}` to hold numeric or boolean columns, but " + "; ".join(problems) + ".")
    return df.to_numpy(dtype=np.float64, na_value=np.nan)


def check_not_empty(X: torch.Tensor, name: str = "X") -> None:
    """``X`` has at least one row (over all shards of a DDP run: a shard may be empty) and one column."""
    if D.global_count(X.shape[0]) == 0 or X.shape[1] == 0:
        raise ValueError(f"Expected `{name}` with at least one row and one column, but got shape {tuple(X.shape)}.")


def converted(X: Any, target: Any) -> tuple[torch.Tensor, Any, list[str] | None]:
    """``X`` as a floating (N, F) tensor (at least one row and column), ``target`` in its row order, its column
    names."""
    if not isinstance(target, torch.Tensor):  # a tensor has no index to align (e.g. the explainer's subgroup)
        target = align_rows(target, X, "target")
    X_t, frame_names = to_tensor_2d(X)
    check_not_empty(X_t)
    return X_t, target, frame_names


def check_finite(X: torch.Tensor, name: str = "X", *, any_inf: bool) -> None:
    """+-inf is an error (NaN is a missing value). ``any_inf``: whether any shard holds +-inf, known already; ``X``
    is only read to describe the error."""
    if any_inf:  # every shard of a DDP run raises together
        rows, cols = torch.nonzero(torch.isinf(X), as_tuple=True)
        if rows.numel() == 0:
            raise ValueError(f"Expected `{name}` to hold finite values, but another rank's shard holds +-inf.")
        raise ValueError(
            f"Expected `{name}` to hold finite values (NaN marks a missing value), but found +-inf at "
            f"{int(rows.numel())} entries, first at row {int(rows[0])}, column {int(cols[0])}."
        )


def to_mask(target: Any, n: int, name: str = "target") -> torch.Tensor:
    """Boolean (N,) mask of ``n`` booleans or 0/1 numbers (NaN, other numbers, strings and pandas NA refused).

    Example:
        >>> to_mask([1, 0, 1], 3).tolist()
        [True, False, True]
        >>> to_mask([0.9, 0.1], 2)
        Traceback (most recent call last):
        ...
        TypeError: Expected `target` to be boolean (or 0/1), but got values [0.1..., 0.9...] of dtype torch.float64; ...
    """
    target = to_labels(_mask_values(target, name), n, name, what="booleans", per="row of X")
    if target.dtype != torch.bool:
        if target.is_floating_point() and torch.isnan(target).any():
            raise ValueError(f"Expected `{name}` to be boolean, but it holds NaN.")
        uniq = torch.unique(target)
        if not bool(((uniq == 0) | (uniq == 1)).all()):
            raise TypeError(
                f"Expected `{name}` to be boolean (or 0/1), but got values {uniq[:5].tolist()} of dtype "
                f"{target.dtype}; build a mask first, e.g. `{name} = (predictions == 1)`."
            )
        target = target != 0
    return target


def to_target(target: Any, n: int, device: torch.device, name: str = "target") -> torch.Tensor:
    """Boolean (N,) subgroup mask on ``device`` (:func:`to_mask`) that holds some but not all samples (over all
    ranks of a DDP run)."""
    target = to_mask(target, n, name)
    counts = torch.stack([target.count_nonzero(), torch.full((), n, device=target.device)])  # int64, no host copy
    n_t, n = D.all_reduce_sum(counts).tolist()  # all shards of a DDP run; one transfer
    if n_t == 0:
        raise ValueError(f"Expected `{name}` to select at least one sample, but the subgroup is empty.")
    if n_t == n:
        raise ValueError(
            f"Expected `{name}` to leave some samples out, but it covers all {n} samples: every rule would have "
            "ratio 1."
        )
    return target.to(device)


def _mask_values(target: Any, name: str) -> Any:
    """``target`` after the mask-specific checks (pandas NA, object arrays, strings); the rest is :func:`to_labels`'."""
    if hasattr(target, "to_numpy") and bool(target.isna().to_numpy().any()):  # pandas Series or DataFrame
        raise ValueError(f"Expected `{name}` to be boolean, but it holds missing values (NA).")
    target = _as_array(target, name, "booleans")
    if isinstance(target, np.ndarray):
        kind = target.dtype.kind
        if kind == "O":
            return _object_target(target, name)
        if kind not in "biuf":
            raise TypeError(
                f"Expected `{name}` to be boolean (or 0/1), but got dtype {target.dtype} (e.g. "
                f"{target.reshape(-1)[:3].tolist()}); build a mask first, e.g. `{name} = (labels == 'yes')`."
            )
    return target


def _as_array(values: Any, name: str, what: str) -> Any:
    """A pandas object, list or tuple of per-sample values as a numpy array; anything else as it is."""
    if hasattr(values, "to_numpy"):
        values = values.to_numpy()
    if isinstance(values, (list, tuple)):
        try:
            return np.asarray(values)
        except ValueError as err:
            raise ValueError(f"Expected `{name}` to be a flat sequence of {what}, but it is ragged.") from err
    return values


def _object_target(target: np.ndarray, name: str) -> np.ndarray:
    """An object array of bools or numbers as a numeric array."""
    flat = target.reshape(-1)
    bad = [v for v in flat if not isinstance(v, (int, float, np.number, np.bool_))]
    if bad:
        raise TypeError(
            f"Expected `{name}` to be boolean (or 0/1), but it holds {type(bad[0]).__name__} values such as "
            f"{bad[0]!r}; build a mask first, e.g. `{name} = (labels == 'yes')`."
        )
    return flat.astype(np.float64).reshape(target.shape)


def to_labels(
    values: Any,
    n: int | None,
    name: str = "labels",
    *,
    what: str = "numbers or booleans",
    per: str = "sample of `inputs`",
) -> torch.Tensor:
    """Per-sample values (N,) of ``what`` as a tensor (on a given tensor's device); (N, 1) or (1, N) is flattened;
    ``n`` entries, one per ``per`` (any number when ``n`` is None).

    Example:
        >>> to_labels([True, False], 2).tolist()
        [True, False]
        >>> to_labels(np.array(["a", "b"]), 2)
        Traceback (most recent call last):
        ...
        TypeError: Expected `labels` to hold numbers or booleans, but got dtype <U1.
    """
    values = _as_array(values, name, what)
    if isinstance(values, np.ndarray):
        if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
            raise TypeError(f"Expected `{name}` to hold {what}, but got dtype {values.dtype}.")
        values = torch.as_tensor(values if values.flags.writeable else values.copy())  # e.g. a pandas view
    if not isinstance(values, torch.Tensor):
        raise TypeError(f"Expected `{name}` to be a tensor or array of shape (N,), but got {type(values).__name__}.")
    values = check_dense_tensor(values, name)
    values = values.reshape(-1) if values.ndim == 2 and 1 in values.shape else values
    if values.ndim != 1:
        raise ValueError(f"Expected `{name}` to have shape (N,), but got shape {tuple(values.shape)}.")
    if n is not None and values.shape[0] != n:
        raise ValueError(f"Expected `{name}` to have one entry per {per} ({n}), but got {values.shape[0]}.")
    return values


def to_class_labels(labels: Any, n: int, name: str = "labels") -> torch.Tensor:
    """Class indices ``0..C-1`` (N,) as an int64 CPU tensor (whole floats and booleans accepted), every class with a
    sample.

    Example:
        >>> to_class_labels([0, 1, 1.0, True], 4).tolist()
        [0, 1, 1, 1]
        >>> to_class_labels([0, 2], 2)
        Traceback (most recent call last):
        ...
        ValueError: Expected every class 0..2 to have samples, but class(es) [1] have none (labels must be class \
indices 0..C-1).
    """
    labels = to_labels(labels, n, name, what="class indices").detach().cpu()
    if labels.is_floating_point():
        if not bool((labels == labels.round()).all()):
            raise TypeError(f"Expected `{name}` to hold integer class indices, but they hold fractional values.")
    labels = labels.to(torch.int64)
    if bool((labels < 0).any()):
        raise ValueError(f"Expected `{name}` to be class indices >= 0, but got {int(labels.min())}.")
    counts = counting.bincount(labels, 2)
    empty = torch.nonzero(counts == 0).flatten().tolist()
    if empty:
        raise ValueError(
            f"Expected every class 0..{counts.numel() - 1} to have samples, but class(es) {empty[:10]} have none "
            f"({name} must be class indices 0..C-1)."
        )
    return labels
