"""Tables for the command line: CSV/Parquet files read strictly (a row with fewer or more fields than the header, or
a column named twice, is an error that pandas would hide), and their columns encoded as features (strings one-hot).
Every problem is a :class:`TableError` (a ``ValueError``) with a one-line message.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import importlib.util
import io
import lzma
import warnings
import zipfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from torch_amore.cli.expression import show_columns
from torch_amore.cli.expression_evaluation import is_date
from torch_amore.data import arguments as A
from torch_amore.data import validation as V

PARQUET_SUFFIXES = (".parquet", ".pq")
_OPENERS = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}


class TableError(ValueError):
    """A table that cannot be read or encoded as it is; the message is one line and names the fix."""


# ---------------------------------------------------------------------------------------------------------- reading


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a CSV/TSV (``.gz``/``.bz2``/``.xz``/``.zip`` compressed or not) or Parquet file; names become strings.

    Raises:
        TableError: missing file, a directory, unreadable or empty content, CSV rows whose number of fields differs
            from the header's, or a header that names a column twice.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "t.csv")
        >>> _ = open(path, "w").write("a,b,y\\n1,2,0\\n3\\n")
        >>> read_table(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.cli.table.TableError: cannot read ...t.csv: 1 row has fewer fields than the header's 3 (first: \
line 3 has 1); write missing values as empty fields, e.g. 1,,0
    """
    p = Path(path)
    if not p.exists():
        raise TableError(f"file not found: {path}")
    if p.is_dir():
        raise TableError(f"expected a CSV or Parquet file, but {path} is a directory")
    suffixes = [s.lower() for s in p.suffixes]
    try:
        if suffixes and suffixes[-1] in PARQUET_SUFFIXES:
            if importlib.util.find_spec("pyarrow") is None:
                raise TableError(f"reading Parquet files needs pyarrow (pip install pyarrow); cannot read {path}")
            df = pd.read_parquet(p, engine="pyarrow")
        else:
            sep = "\t" if ".tsv" in suffixes else ","
            _check_csv_shape(p, sep)
            df = pd.read_csv(p, sep=sep)
    except TableError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, csv.Error) as err:  # pandas' errors are ValueErrors
        raise TableError(f"cannot read {path}: {' '.join(str(err).split())}") from None
    df.columns = [str(c) for c in df.columns]
    if len(df) == 0:
        raise TableError(f"{path} has no data rows")
    return df


@contextmanager
def _open_text(path: Path) -> Iterator[io.TextIOBase]:
    suffix = path.suffix.lower()
    if suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.namelist() if not m.endswith("/")]
            if len(members) != 1:
                raise TableError(f"cannot read {path}: expected one file in the zip archive, found {len(members)}")
            with archive.open(members[0]) as raw:
                yield io.TextIOWrapper(raw, encoding="utf-8-sig", newline="")
        return
    opener = _OPENERS.get(suffix)
    if opener is None and suffix in (".zst", ".tar"):
        raise TableError(f"cannot read {path}: use an uncompressed, .gz, .bz2, .xz or .zip file")
    with (opener or open)(path, "rt", encoding="utf-8-sig", newline="") as fh:
        yield fh


def _check_csv_shape(path: Path, sep: str) -> None:
    """Raise :class:`TableError` when a non-blank CSV row has fewer or more fields than the header, or the header
    names a column twice; quoting follows the CSV standard, as in ``pandas.read_csv``."""
    limit = csv.field_size_limit()
    csv.field_size_limit(2**31 - 1)  # pandas reads fields of any length
    try:
        with _open_text(path) as fh:
            counts = _count_bad_rows(csv.reader(fh, delimiter=sep), path)
    finally:
        csv.field_size_limit(limit)
    if counts is None:
        return  # no header: pandas reports the empty file
    n, bad = counts
    for kind, advice in (
        ("fewer", f"write missing values as empty fields, e.g. {sep.join(['1', '', '0'])}"),
        ("more", "remove trailing delimiters or quote fields that contain the delimiter"),
    ):
        count, (line, fields) = bad[kind]
        if count:
            rows = f"{count} row{'s have' if count > 1 else ' has'}"
            raise TableError(
                f"cannot read {path}: {rows} {kind} fields than the header's {n} (first: line {line} "
                f"has {fields}); {advice}"
            )


def _count_bad_rows(reader, path: Path) -> tuple[int, dict[str, tuple[int, tuple[int, int]]]] | None:
    """The header's field count and, for rows with fewer/more fields, their count and (line, fields) of the first."""
    header = next(reader, None)
    if header is None:
        return None
    n = len(header)
    seen: set[str] = set()
    dup = [name for name in header if name in seen or seen.add(name)]
    if dup:
        raise TableError(f"cannot read {path}: the header names column {dup[0]!r} more than once; rename it")
    bad = {"fewer": (0, (0, 0)), "more": (0, (0, 0))}
    for row in reader:
        if len(row) == n or not row or (len(row) == 1 and not row[0].strip()):  # pandas skips blank lines
            continue
        kind = "fewer" if len(row) < n else "more"
        count, first = bad[kind]
        bad[kind] = (count + 1, first if count else (reader.line_num, len(row)))
    return n, bad


# --------------------------------------------------------------------------------------------------------- subgroup


def subgroup_from_column(df: pd.DataFrame, column: str) -> np.ndarray:
    """Boolean (N,) mask from a column of 0/1 (or True/False) predictions.

    Example:
        >>> subgroup_from_column(pd.DataFrame({"pred": [0, 1, 1]}), "pred").tolist()
        [False, True, True]
    """
    if column not in df.columns:
        raise TableError(f"unknown --target-column {column!r}; columns are: {show_columns(list(df.columns))}")
    col = df[column]
    n_missing = int(col.isna().sum())
    if n_missing:
        raise TableError(f"--target-column {column!r} has {n_missing} missing values; expected 0/1 in every row")
    if pd.api.types.is_bool_dtype(col.dtype):
        return np.array(col.to_numpy(dtype=bool), dtype=bool)
    if not pd.api.types.is_numeric_dtype(col) or isinstance(col.dtype, pd.CategoricalDtype):
        raise TableError(
            f"--target-column {column!r} must hold 0/1 predictions, but it has dtype {col.dtype}; "
            f'use --target "{column} == ..." for other values'
        )
    values = col.to_numpy(dtype=np.float64)
    bad = np.unique(values[(values != 0) & (values != 1)])
    if bad.size:
        shown = [v.item() for v in bad[:5]]
        raise TableError(
            f"--target-column {column!r} must hold 0/1 predictions, but it also holds {shown}; use "
            f'--target "{column} == ..." to pick one class'
        )
    return values == 1


# --------------------------------------------------------------------------------------------------------- features


def is_text(col: pd.Series) -> bool:
    """Whether a column is one-hot encoded: categorical, string or object dtype.

    Example:
        >>> is_text(pd.Series(["a", "b"])), is_text(pd.Series([1.5, 2.0])), is_text(pd.Series([True, False]))
        (True, False, False)
    """
    return isinstance(col.dtype, pd.CategoricalDtype) or pd.api.types.is_string_dtype(col) or col.dtype == object


def _dummy_owner(name: str, df: pd.DataFrame, candidates: Sequence[str]) -> str | None:
    """The text column whose one-hot column ``name`` (``<column>_<value>``) would be, if any."""
    for c in candidates:
        if name.startswith(c + "_") and is_text(df[c]):
            values = {str(v) for v in df[c].dropna().unique()}
            if name[len(c) + 1 :] in values:
                return c
    return None


def _select(
    df: pd.DataFrame, candidates: list[str], features: Sequence[str] | None, excluded: set[str]
) -> tuple[list[str], dict[str, set[str] | None]]:
    """The columns ``--features`` selects, and per text column the one-hot names it keeps (None: all)."""
    if features is None:
        return candidates, {}
    keep: dict[str, set[str] | None] = {}  # its keys: the chosen columns
    for name in features:
        if name in excluded:
            raise TableError(
                f"--features names {name!r}, which is excluded (used by the target, --holdout-rows or --exclude)"
            )
        if name in candidates:
            keep[name] = None
            continue
        owner = _dummy_owner(name, df, candidates)
        if owner is None:
            raise TableError(f"unknown column {name!r} in --features; columns are: {show_columns(list(df.columns))}")
        if keep.get(owner, set()) is not None:
            keep.setdefault(owner, set()).add(name)
    return [c for c in candidates if c in keep], keep


def _encode_column(
    col: pd.Series, name: str, keep: set[str] | None, max_categories: int
) -> tuple[np.ndarray, list[str], list[str]]:
    """One column as (N, k) float64 values, names and types."""
    if pd.api.types.is_bool_dtype(col.dtype):
        return col.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)[:, None], [name], ["cat"]
    if is_date(col.dtype):
        raise TableError(
            f"column {name!r} holds dates or durations ({col.dtype}); rules cannot use them as they are: add a "
            f"numeric column to the table (e.g. the year, or days since a date) and --exclude {name}"
        )
    if pd.api.types.is_complex_dtype(col.dtype):
        raise TableError(f"column {name!r} holds complex numbers; remove it with --exclude {name}")
    if pd.api.types.is_numeric_dtype(col.dtype) and not isinstance(col.dtype, pd.CategoricalDtype):
        if pd.api.types.is_integer_dtype(col.dtype):  # integers beyond 2**53 would be rounded by float64
            try:
                V.check_exact_integers(np.asarray(col.dropna().to_numpy()), f"column {name!r}")
            except ValueError as err:
                raise TableError(f"{err} (or --exclude {name})") from None
        values = np.array(col.to_numpy(dtype=np.float64, na_value=np.nan), dtype=np.float64)
        if np.isinf(values).any():
            raise TableError(
                f"column {name!r} holds infinite values; replace them or remove the column with --exclude {name}"
            )
        return values[:, None], [name], A.infer_feature_types(torch.from_numpy(values[:, None]))
    if is_text(col):
        return _one_hot(col, name, keep, max_categories)
    raise TableError(f"column {name!r} has unsupported dtype {col.dtype}; remove it with --exclude {name}")


def _one_hot(
    col: pd.Series, name: str, keep: set[str] | None, max_categories: int
) -> tuple[np.ndarray, list[str], list[str]]:
    missing = col.isna().to_numpy()
    codes, uniques = pd.factorize(col.astype(str).to_numpy(dtype=object)[~missing], sort=True)
    if len(uniques) > max_categories:
        raise TableError(
            f"column {name!r} has {len(uniques)} distinct values (more than --max-categories "
            f"{max_categories}); remove it with --exclude {name} or raise --max-categories"
        )
    names = [f"{name}_{c}" for c in uniques]
    chosen = [i for i, n in enumerate(names) if keep is None or n in keep]
    values = np.full((len(col), len(chosen)), np.nan)
    values[~missing] = (codes[:, None] == np.array(chosen, dtype=codes.dtype)[None, :]).astype(np.float64)
    return values, [names[i] for i in chosen], ["cat"] * len(chosen)


def encode_features(
    df: pd.DataFrame,
    *,
    exclude: Sequence[str] = (),
    features: Sequence[str] | None = None,
    max_categories: int = 100,
) -> tuple[np.ndarray, list[str], list[str]]:
    """The feature matrix of a table: numeric columns as they are, string/categorical columns one-hot encoded.

    One-hot columns are named ``<column>_<value>`` and typed ``"cat"``; a row whose string value is missing gets NaN
    in all of that column's one-hot columns (so it satisfies no rule on them). Boolean columns become 0/1. Date and
    duration columns raise :class:`TableError` with advice; columns without any value are left out with a warning.

    Args:
        df: the table.
        exclude: columns left out (e.g. those the target uses).
        features: only these columns (a text column's name selects all its one-hot columns, a one-hot name one).
        max_categories: a text column with more distinct values is an error (e.g. an id column).

    Returns:
        ``(X, names, types)``: float64 (N, F) values, feature names and ``float``/``int``/``cat`` types.

    Example:
        >>> df = pd.DataFrame({"age": [30, 41, 52], "gender": ["F", None, "M"], "y": [0, 1, 1]})
        >>> X, names, types = encode_features(df, exclude=["y"])
        >>> names, types
        (['age', 'gender_F', 'gender_M'], ['int', 'cat', 'cat'])
        >>> X[1].tolist()
        [41.0, nan, nan]
    """
    excluded = set(exclude)
    candidates = [c for c in df.columns if c not in excluded]
    selected, keep = _select(df, candidates, features, excluded)
    if not selected:
        raise TableError("no feature columns left (all columns are used by the target or excluded)")
    blocks, names, types = [], [], []
    for c in selected:
        if df[c].isna().all():
            warnings.warn(f"column {c!r} has no values (all missing); it is left out of the features", stacklevel=2)
            continue
        values, col_names, col_types = _encode_column(df[c], c, keep.get(c), max_categories)
        blocks.append(values)
        names.extend(col_names)
        types.extend(col_types)
    seen: set[str] = set()
    dup = [n for n in names if n in seen or seen.add(n)]
    if dup:
        raise TableError(f"one-hot encoding produced duplicate feature names {dup[:5]}; rename or --exclude columns")
    if not names:
        raise TableError("no feature columns left (all selected columns are empty)")
    return np.concatenate(blocks, axis=1), names, types
