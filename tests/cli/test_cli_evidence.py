"""`torch-amore rules --holdout --permutations --stability`: the verdict line, the evidence columns and the JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torch_amore.cli import main


@pytest.fixture
def table(tmp_path: Path) -> Path:
    """800 rows: the label is mostly 'yes' inside a box on a and b, with 10 % 'yes' elsewhere; c is noise."""
    rng = np.random.default_rng(0)
    a, b, c = rng.uniform(size=(3, 800))
    inside = (a > 0.6) & (b < 0.5)
    label = np.where(inside, rng.random(800) < 0.8, rng.random(800) < 0.1)
    path = tmp_path / "box.csv"
    pd.DataFrame({"a": a, "b": b, "c": c, "label": label.astype(int)}).to_csv(path, index=False)
    return path


def test_flags_print_the_verdict_and_columns_and_write_the_fields(table, tmp_path, capsys):
    out = tmp_path / "rules.json"
    argv = ["rules", str(table), "--target-column", "label", "--min-support", "30", "--holdout", "0.3",
            "--permutations", "19", "--stability", "2", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    assert "verdict: " in stdout and "beat the search on shuffled targets at 0.05, 19 permutations" in stdout
    assert "holdout=0.3, permutations=19, stability=2, seed=0, level=0.95" in stdout  # the options line names them
    header = next(line for line in stdout.splitlines() if line.lstrip().startswith("#  rule"))
    assert "held-out confidence [95% CI]" in header and "p(perm)" in header and "stability" in header
    saved = json.loads(out.read_text())["rule_sets"]
    assert saved and all({"held_out", "p_value", "stability"} <= set(rs) for rs in saved)
    assert saved[0]["p_value"] == 0.05 and saved[0]["held_out"]["p_value"] < 0.01


def test_a_bad_flag_is_one_line_naming_it(table, capsys):
    assert main(["rules", str(table), "--target-column", "label", "--permutations", "-1"]) == 2
    assert "--permutations" in capsys.readouterr().err


def test_with_holdout_the_json_min_support_count_is_that_of_the_rows_searched(table, tmp_path):
    out = tmp_path / "rules.json"
    argv = ["rules", str(table), "--target-column", "label", "--min-support", "0.1", "--holdout", "0.3"]
    assert main([*argv, "--json", str(out)]) == 0
    label = pd.read_csv(table)["label"].to_numpy()
    size = int(label.sum())
    searched = len(label) - (round(0.3 * size) + round(0.3 * (len(label) - size)))  # 30 % of each side held out
    params = json.loads(out.read_text())["params"]
    assert params["min_support_count"] == math.ceil(0.1 * searched) < math.ceil(0.1 * len(label))
