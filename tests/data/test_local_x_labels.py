"""A pandas Series ``local_x`` goes by its labels when X is a DataFrame, as a Series target goes by its index: a
reordered Series gives the rule sets of the numpy row, labels that are not X's columns are a ValueError naming
``local_x``, and no warning is given on the way."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

import torch_amore as ta
from torch_amore.data.local_x import to_local_x

OPTS = {"min_support": 30, "max_length": 2, "n_grids": 8}


def frame() -> tuple[pd.DataFrame, pd.Series, int]:
    """Three columns of different ranges (reading one for another moves the sample), the box a >= 0.6, c < 0.5,
    and a row inside it whose a, b and c differ."""
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"a": rng.uniform(0, 1, 400), "b": rng.uniform(5, 9, 400), "c": rng.uniform(0, 1, 400)})
    t = (df["a"] > 0.6) & (df["c"] < 0.5)
    i = int(np.flatnonzero(t.to_numpy())[0])
    return df, t, i


def summary(found: list) -> list:
    return [(rs.rules, rs.support, rs.confidence, rs.fitness) for rs in found]


@pytest.mark.parametrize("evidence", [{}, {"permutations": 3}], ids=["plain", "with-evidence"])
def test_a_reordered_series_is_read_by_its_labels(evidence):
    df, t, i = frame()
    row = df.to_numpy()[i]
    by_row = ta.extract_rules(df, t, local_x=row, **OPTS, **evidence)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "NumPy array is not writable" (nor any other) warning
        in_order = ta.extract_rules(df, t, local_x=df.iloc[i], **OPTS, **evidence)
        reordered = ta.extract_rules(df, t, local_x=df.iloc[i][["c", "b", "a"]], **OPTS, **evidence)
    assert by_row and summary(reordered) == summary(in_order) == summary(by_row)
    # local rules: every rule set holds the sample, checked on its values by column name
    assert all(bool(rs.mask(row[None, :])[0]) for rs in reordered)


def test_a_one_row_frame_is_read_by_its_column_labels():
    df, t, i = frame()
    by_row = ta.extract_rules(df, t, local_x=df.to_numpy()[i], **OPTS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reordered = ta.extract_rules(df, t, local_x=df.iloc[[i]][["b", "c", "a"]], **OPTS)
    assert by_row and summary(reordered) == summary(by_row)


def test_a_series_with_default_labels_is_read_by_position_into_a_copy():
    df, t, i = frame()
    values = pd.Series(df.to_numpy()[i].copy())  # RangeIndex 0..2: no names to go by
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = ta.extract_rules(df, t, local_x=values, **OPTS)
    assert summary(got) == summary(ta.extract_rules(df, t, local_x=df.to_numpy()[i], **OPTS))
    before = values.tolist()
    local = to_local_x(values, 3)
    local.fill_(-1.0)  # pandas hands out a read-only view of its values: the sample must not write through it
    assert values.tolist() == before and local.tolist() == [-1.0] * 3


def test_no_warning_of_a_read_only_array_in_a_fresh_process():
    # PyTorch says "The given NumPy array is not writable" once per process: a fresh one sees it if it is given
    code = (
        "import warnings, pandas as pd\n"
        "from torch_amore.data.local_x import to_local_x\n"
        "warnings.simplefilter('error')\n"
        "df = pd.DataFrame({'a': [1.0, 2.0], 'b': [3.0, 4.0]})\n"
        "print(to_local_x(df.iloc[1], 2).tolist())\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[2.0, 4.0]"


@pytest.mark.parametrize(
    ("labels", "words"),
    [
        (["c", "b", "z"], ["lacks ['a']", "has ['z'] besides"]),
        (["c", "b", "a", "label"], ["has ['label'] besides"]),
        (["a", "b", "b"], ["lacks ['c']", "repeats ['b']"]),
        ([2, 0, 1], ["lacks ['a', 'b', 'c']"]),
    ],
)
def test_labels_that_are_not_the_columns_of_x_are_a_value_error_naming_local_x(labels, words):
    df, t, i = frame()
    local = pd.Series(np.arange(len(labels), dtype=float), index=labels)
    with pytest.raises(ValueError, match="Expected `local_x` .a pandas Series. to be labelled by the columns") as info:
        ta.extract_rules(df, t, local_x=local, **OPTS)
    assert all(w in str(info.value) for w in words), str(info.value)
