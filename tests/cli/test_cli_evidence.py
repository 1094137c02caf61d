"""`torch-amore rules --holdout --holdout-rows --permutations --stability`: the verdict line, the evidence columns
and the JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from torch_amore import extract_rules
from torch_amore.cli import main
from torch_amore.explain.explanation import RegionalExplanation


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


@pytest.fixture
def split_table(table: Path, tmp_path: Path) -> Path:
    """The same rows with a column ``split`` that keeps every fourth row apart as 'test'."""
    df = pd.read_csv(table)
    df["split"] = np.where(np.arange(len(df)) % 4 == 1, "test", "train")
    path = tmp_path / "split.csv"
    df.to_csv(path, index=False)
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


def test_with_holdout_the_json_min_support_count_is_that_of_the_rows_searched(table, tmp_path, capsys):
    out = tmp_path / "rules.json"
    argv = ["rules", str(table), "--target-column", "label", "--min-support", "0.1", "--holdout", "0.3"]
    assert main([*argv, "--json", str(out)]) == 0
    label = pd.read_csv(table)["label"].to_numpy()
    size = int(label.sum())
    searched = len(label) - (round(0.3 * size) + round(0.3 * (len(label) - size)))  # 30 % of each side held out
    params = json.loads(out.read_text())["params"]
    assert params["min_support_count"] == math.ceil(0.1 * searched) < math.ceil(0.1 * len(label))
    printed = capsys.readouterr().out  # the options line and the legend say the same of the rows searched
    assert f"min_support=0.1 ({math.ceil(0.1 * searched)} rows)" in printed
    n_target = size - round(0.3 * size)
    assert f"(base rate {n_target / searched:.3f} of the rows searched)" in printed


def test_holdout_rows_hold_out_the_rows_of_a_condition(split_table, tmp_path, capsys):
    out = tmp_path / "rules.json"
    argv = ["rules", str(split_table), "--target-column", "label", "--min-support", "0.1", "--holdout-rows",
            "split == 'test'", "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    stdout = capsys.readouterr().out
    df = pd.read_csv(split_table)
    held, label = np.array(df["split"] == "test"), df["label"].to_numpy().astype(bool)
    X = torch.from_numpy(df[["a", "b", "c"]].to_numpy())  # split is excluded: the condition uses it
    expected = extract_rules(
        X, torch.from_numpy(label), min_support=0.1, holdout_rows=torch.from_numpy(held), feature_names=["a", "b", "c"]
    )
    got = RegionalExplanation.from_json(out)
    assert expected and got.rule_sets == expected
    assert [rs.held_out for rs in got.rule_sets] == [rs.held_out for rs in expected]
    best = got.rule_sets[0]  # its held-out numbers are those of its mask on the held-out rows
    mask = best.mask(X).numpy()
    assert best.held_out.support == int((mask & held).sum()) and best.held_out.support > 0
    assert math.isclose(best.held_out.confidence, (mask & held & label).sum() / (mask & held).sum())
    searched = int((~held).sum())
    assert got.params["min_support_count"] == math.ceil(0.1 * searched)
    assert got.params["held_out_subgroup"] == int((held & label).sum())
    assert got.params["held_out_rows"] == int(held.sum())
    assert got.base_rate == pytest.approx((label & ~held).sum() / searched)  # the rows the lift compares with
    searched_label = int((label & ~held).sum())
    assert stdout.splitlines()[1] == (  # under the subgroup's line: which rows, and how many of the subgroup
        f"held out: {int(held.sum())} of 800 rows, {int((label & held).sum())} of the subgroup "
        f"(--holdout-rows \"split == 'test'\"); the search saw the other {searched}"
    )
    assert f"min_support=0.1 ({math.ceil(0.1 * searched)} rows)" in stdout  # of the rows searched
    assert "level=0.95" in stdout and "held-out confidence [95% CI]" in stdout
    assert f"(base rate {searched_label / searched:.3f} of the rows searched)" in stdout  # the table's numbers' rows
    assert "split" in stdout.splitlines()[0]  # named among the excluded columns


def test_holdout_fraction_says_which_rows_were_held_out(table, tmp_path, capsys):
    out = tmp_path / "rules.json"
    argv = ["rules", str(table), "--target-column", "label", "--min-support", "30", "--holdout", "0.3", "--seed", "3"]
    assert main([*argv, "--json", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    df = pd.read_csv(table)
    label = df["label"].to_numpy().astype(bool)
    n, size = len(label), int(label.sum())
    held_label, held_other = round(0.3 * size), round(0.3 * (n - size))  # stratified: 30 % of each side
    searched = n - held_label - held_other
    assert lines[1] == (  # under the subgroup's line, as with --holdout-rows
        f"held out: {held_label + held_other} of {n} rows, {held_label} of the subgroup (--holdout 0.3 of each side, "
        f"--seed 3); the search saw the other {searched}"
    )
    X = torch.from_numpy(df[["a", "b", "c"]].to_numpy())
    for rs in RegionalExplanation.from_json(out).rule_sets:  # its numbers on the searched rows and on the others
        assert rs.support + rs.held_out.support == int(rs.mask(X).sum())


def _legend(lines: list[str]) -> list[str]:
    """The lines from the table's legend (``confidence: ...``) to the ``best:`` line."""
    start = next(i for i, line in enumerate(lines) if line.startswith("confidence: "))
    end = next(i for i, line in enumerate(lines) if line.startswith("best: "))
    return lines[start:end]


def test_every_evidence_column_has_a_legend_line(table, capsys):
    argv = ["rules", str(table), "--target-column", "label", "--min-support", "30", "--holdout", "0.3",
            "--permutations", "19", "--stability", "2", "--level", "0.9"]  # fmt: skip
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    header = next(line for line in lines if line.lstrip().startswith("#  rule"))
    assert header.split("fitness")[1].split() == ["held-out", "confidence", "[90%", "CI]", "p(held-out)", "p(perm)",
                                                  "stability"]  # fmt: skip
    label = pd.read_csv(table)["label"].to_numpy().astype(bool)
    n, size = len(label), int(label.sum())
    searched, searched_label = n - round(0.3 * size) - round(0.3 * (n - size)), size - round(0.3 * size)
    assert _legend(lines) == [
        f"confidence: the subgroup's share of the rows covered (base rate {searched_label / searched:.3f} of the rows "
        "searched); fitness: (in - out) / subgroup",
        "held-out: measured on rows the search did not see (confidence with its 90% Clopper-Pearson interval; "
        "p(held-out): exact binomial test against their base rate, Holm-adjusted)",
        "p(perm): the share of 19 searches on shuffled targets that reach this fitness ((1 + k) / (P + 1))",
        "stability: the share of 2 half-samples that find nearly the same rows (Jaccard index >= 0.8)",
    ]


def test_without_rows_held_out_the_base_rate_is_of_all_rows(table, capsys):
    assert main(["rules", str(table), "--target-column", "label", "--min-support", "30", "--permutations", "19"]) == 0
    lines = capsys.readouterr().out.splitlines()
    label = pd.read_csv(table)["label"].to_numpy().astype(bool)
    assert not any(line.startswith("held out: ") for line in lines)
    assert _legend(lines) == [
        f"confidence: the subgroup's share of the rows covered (base rate {label.mean():.3f}); fitness: (in - out) / "
        "subgroup",
        "p(perm): the share of 19 searches on shuffled targets that reach this fitness ((1 + k) / (P + 1))",
    ]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--holdout-rows", "split == 'test'", "--holdout", "0.3"], "either --holdout"),
        (["--holdout-rows", "split = 'test'"], "--holdout-rows \"split = 'test'\": cannot parse"),
        (["--holdout-rows", "spilt == 'test'"], "unknown column 'spilt' (did you mean 'split'?)"),
        (["--holdout-rows", "a > 2"], "Expected --holdout-rows to hold at least one row"),
        (["--holdout-rows", "label == 0"], "Expected target rows both among the held-out rows and among the rows"),
        (["--holdout-rows", "split == 'test'", "--features", "a,split"], "used by the target, --holdout-rows or"),
    ],
)
def test_bad_holdout_rows_are_one_line_naming_the_flag(split_table, capsys, extra, message):
    assert main(["rules", str(split_table), "--target-column", "label", *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
