"""The ``torch-amore`` command line: real runs checked against a pandas recomputation, and one-line errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from torch_amore.cli import encode_features, main, referenced_columns

ROOT = Path(__file__).resolve().parents[1]
DIABETES = ROOT.parent / "shared" / "data" / "diabetes_prediction_dataset.csv"
needs_diabetes = pytest.mark.skipif(not DIABETES.exists(), reason="diabetes CSV not available")


# ------------------------------------------------------------------------------------------------------ helpers


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "torch_amore", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


def _parse_rows(stdout: str) -> list[tuple[int, str, int, float, float]]:
    """(rank, rule text, support, confidence, fitness) of every printed table row."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["rank", "rule"]) + 1
    rows = []
    for line in lines[start:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            break
        rank, rest = line.strip().split(maxsplit=1)
        text, support, conf, fit = rest.rsplit(maxsplit=3)
        rows.append((int(rank), text.strip(), int(support), float(conf), float(fit)))
    return rows


def _pandas_mask(df: pd.DataFrame, rule: dict, string_columns: list[str]) -> pd.Series:
    """Rows of the raw table satisfying one rule of a JSON rule set (NaN satisfies nothing), with pandas only."""
    name = rule["name"]
    if name in df.columns:
        col = df[name]
        if rule["value"] is not None:
            return col == rule["value"]
        mask = col.notna()
        if rule["low"] is not None:
            mask &= col >= rule["low"]
        if rule["high"] is not None:
            mask &= col < rule["high"]
        return mask
    owner = next(c for c in string_columns if name.startswith(c + "_"))
    category = name[len(owner) + 1 :]
    assert rule["value"] in (0.0, 1.0)
    is_cat = df[owner].astype("string") == category
    return (is_cat if rule["value"] == 1.0 else ~is_cat & df[owner].notna()).fillna(False).astype(bool)


def _recompute(df: pd.DataFrame, target: pd.Series, rule_set: dict, string_columns: list[str]) -> tuple:
    mask = pd.Series(True, index=df.index)
    for rule in rule_set["rules"]:
        mask &= _pandas_mask(df, rule, string_columns)
    hits = int((mask & target).sum())
    covered = int(mask.sum())
    n_target = int(target.sum())
    return covered, hits / covered, (2 * hits - covered) / n_target


def _check_against_pandas(stdout: str, json_path: Path, df: pd.DataFrame, target: pd.Series, string_columns):
    rows = _parse_rows(stdout)
    rule_sets = json.loads(json_path.read_text())
    assert len(rows) == len(rule_sets) > 0
    for (rank, text, support, conf, fit), rs in zip(rows, rule_sets):
        exp_support, exp_conf, exp_fit = _recompute(df, target, rs, string_columns)
        assert support == exp_support, (rank, text)
        assert conf == pytest.approx(round(exp_conf, 3), abs=1e-9), (rank, text)
        assert fit == pytest.approx(round(exp_fit, 3), abs=1e-9), (rank, text)
        assert rs["support"] == exp_support
        assert rs["confidence"] == pytest.approx(exp_conf, abs=1e-12)
        assert rs["fitness"] == pytest.approx(exp_fit, abs=1e-12)
        for rule in rs["rules"]:  # the printed text names the JSON rules' features
            assert rule["name"] in text
    fits = [r[4] for r in rows]
    assert fits == sorted(fits, reverse=True)
    return rows, rule_sets


@pytest.fixture(scope="module")
def small_csv(tmp_path_factory) -> Path:
    """600 rows with string columns: label is 'yes' mostly where color is red and size is large."""
    rng = np.random.default_rng(0)
    n = 600
    color = rng.choice(["red", "green", "blue"], size=n)
    size = rng.uniform(0, 10, size=n).round(2)
    city = rng.choice(["Oslo", "Lima", "Pune"], size=n).astype(object)
    city[rng.random(n) < 0.1] = None
    count = rng.integers(0, 6, size=n)
    noise = rng.random(n) < 0.05
    label = np.where(((color == "red") & (size > 5)) ^ noise, "yes", "no")
    pred = ((color == "red") & (size > 6)).astype(int)
    df = pd.DataFrame({"color": color, "size": size, "city": city, "count": count, "label": label, "pred": pred})
    path = tmp_path_factory.mktemp("cli") / "small.csv"
    df.to_csv(path, index=False)
    return path


# ------------------------------------------------------------------------------------------------ successful runs


@needs_diabetes
def test_module_on_diabetes_matches_pandas(tmp_path):
    out = tmp_path / "rules.json"
    proc = _run_module(
        "rules", str(DIABETES), "--target", "diabetes == 1", "--max-length", "1", "--min-support", "500",
        "--json", str(out),
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    df = pd.read_csv(DIABETES)
    target = df["diabetes"] == 1
    rows, rule_sets = _check_against_pandas(proc.stdout, out, df, target, ["gender", "smoking_history"])
    assert all(len(rs["rules"]) == 1 for rs in rule_sets)
    assert all(rule["name"] != "diabetes" for rs in rule_sets for rule in rs["rules"])
    assert f"{int(target.sum())} of {len(df)} rows" in proc.stdout


@needs_diabetes
def test_main_on_diabetes_with_features_and_limit(tmp_path, capsys):
    out = tmp_path / "rules.json"
    code = main([
        "rules", str(DIABETES), "--target", "diabetes == 1 and age >= 40", "--max-length", "2",
        "--min-support", "0.01", "--features", "bmi,HbA1c_level,blood_glucose_level,gender", "--limit", "4",
        "--strategy", "paper", "--min-confidence", "0.6", "--json", str(out),
    ])
    stdout = capsys.readouterr().out
    assert code == 0
    df = pd.read_csv(DIABETES)
    target = (df["diabetes"] == 1) & (df["age"] >= 40)
    rows, rule_sets = _check_against_pandas(stdout, out, df, target, ["gender", "smoking_history"])
    assert len(rows) == len(rule_sets) == 4
    allowed = {"bmi", "HbA1c_level", "blood_glucose_level", "gender_Female", "gender_Male", "gender_Other"}
    names = {rule["name"] for rs in rule_sets for rule in rs["rules"]}
    assert names <= allowed
    assert all(rs["support"] >= 1000 for rs in rule_sets)  # 1% of 100,000 rows
    assert all(conf >= 0.6 for _, _, _, conf, _ in rows)
    # the paper strategy records the probability ratio of every step
    assert all(len(rs["ratios"]) == len(rs["rules"]) for rs in rule_sets)
    assert "excluded: age, diabetes" in stdout  # both columns of the expression, in table order


def test_string_categorical_columns(small_csv, tmp_path, capsys):
    out = tmp_path / "rules.json"
    code = main(["rules", str(small_csv), "--target", "label == 'yes'", "--min-support", "40", "--exclude", "pred",
                 "--json", str(out)])
    stdout = capsys.readouterr().out
    assert code == 0
    df = pd.read_csv(small_csv)
    target = df["label"] == "yes"
    rows, rule_sets = _check_against_pandas(stdout, out, df, target, ["color", "city"])
    names = {rule["name"] for rs in rule_sets for rule in rs["rules"]}
    assert not any(name.startswith("label") for name in names)
    # the planted subgroup: red and large
    best = {rule["name"] for rule in rule_sets[0]["rules"]}
    assert best == {"color_red", "size"}
    assert all(rule["kind"] == "cat" for rs in rule_sets for rule in rs["rules"] if rule["name"].startswith("color_"))
    assert "color_red == 1" in rows[0][1]


def test_target_column_of_predictions(small_csv, tmp_path, capsys):
    out = tmp_path / "rules.json"
    code = main(["rules", str(small_csv), "--target-column", "pred", "--min-support", "30", "--exclude", "label",
                 "--json", str(out), "--n-grids", "8", "--bin-strategy", "kmeans"])
    stdout = capsys.readouterr().out
    assert code == 0
    df = pd.read_csv(small_csv)
    _, rule_sets = _check_against_pandas(stdout, out, df, df["pred"] == 1, ["color", "city"])
    names = {rule["name"] for rs in rule_sets for rule in rs["rules"]}
    assert "pred" not in names and not any(n.startswith("label") for n in names)
    assert "excluded: pred, label" in stdout


def test_missing_category_is_nan_in_every_one_hot_column(small_csv):
    df = pd.read_csv(small_csv)
    X, names, types = encode_features(df, exclude=["label", "pred"])
    assert names == ["color_blue", "color_green", "color_red", "size", "city_Lima", "city_Oslo", "city_Pune", "count"]
    assert types == ["cat", "cat", "cat", "float", "cat", "cat", "cat", "int"]
    city = X[:, 4:7]
    missing = df["city"].isna().to_numpy()
    assert missing.any()
    assert np.isnan(city[missing]).all()
    assert (city[~missing].sum(axis=1) == 1).all()
    np.testing.assert_array_equal(X[:, 2], (df["color"] == "red").to_numpy(dtype=float))


def test_features_select_single_one_hot_columns(small_csv):
    df = pd.read_csv(small_csv)
    _, names, _ = encode_features(df, exclude=["label"], features=["city_Oslo", "size", "color"])
    assert names == ["color_blue", "color_green", "color_red", "size", "city_Oslo"]


def test_referenced_columns():
    cols = ["a", "b", "my col", "Female"]
    assert referenced_columns("a > 1 and `my col` == 'Female'", cols) == ["a", "my col"]
    assert referenced_columns("b.isna()", cols) == ["b"]


def test_parquet(small_csv, tmp_path, capsys):
    path = tmp_path / "small.parquet"
    if importlib.util.find_spec("pyarrow") is None:
        path.write_bytes(b"PAR1 not really parquet")
        assert main(["rules", str(path), "--target", "label == 'yes'"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("torch-amore: error: ") and "pyarrow" in err and err.count("\n") == 1
    else:
        pd.read_csv(small_csv).to_parquet(path)
        assert main(["rules", str(path), "--target", "label == 'yes'", "--min-support", "40"]) == 0
        assert _parse_rows(capsys.readouterr().out)


def test_help_says_target_columns_are_excluded(capsys):
    assert main(["rules", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "excluded from the features automatically" in text
    assert main(["--version"]) == 0


# -------------------------------------------------------------------------------------------------------- errors


BAD_INPUTS = [
    (["{missing}", "--target", "label == 'yes'"], "file not found"),
    (["{dir}", "--target", "label == 'yes'"], "directory"),
    (["{empty}", "--target", "label == 'yes'"], "cannot read"),
    (["{header}", "--target", "label == 'yes'"], "no data rows"),
    (["{csv}", "--target", "colour == 'red'"], "unknown column in --target"),
    (["{csv}", "--target", "size >"], "cannot parse --target"),
    (["{csv}", "--target", "size + 1"], "boolean expression"),
    (["{csv}", "--target", "color + 1 > 0"], "cannot evaluate --target"),
    (["{csv}", "--target", "1 == 1"], "one True/False per row"),
    (["{csv}", "--target", "size > 100"], "selects no rows"),
    (["{csv}", "--target", "size >= -100"], "selects all 600 rows"),
    (["{csv}", "--target-column", "prediction"], "unknown --target-column"),
    (["{csv}", "--target-column", "count"], "0/1 predictions"),
    (["{csv}", "--target-column", "color"], "0/1 predictions"),
    (["{csv}"], "one of the arguments --target --target-column is required"),
    (["{csv}", "--target", "pred == 1", "--target-column", "pred"], "not allowed with"),
    (["{csv}", "--target", "pred == 1", "--max-length", "0"], "--max-length"),
    (["{csv}", "--target", "pred == 1", "--min-support", "-5"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "abc"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "1.5"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "601"], "larger than the table"),
    (["{csv}", "--target", "pred == 1", "--n-grids", "1"], "--n-grids"),
    (["{csv}", "--target", "pred == 1", "--top-k", "0"], "--top-k"),
    (["{csv}", "--target", "pred == 1", "--limit", "0"], "--limit"),
    (["{csv}", "--target", "pred == 1", "--bin-strategy", "equal"], "invalid choice"),
    (["{csv}", "--target", "pred == 1", "--strategy", "greedy"], "invalid choice"),
    (["{csv}", "--target", "pred == 1", "--min-confidence", "1.5"], "--min-confidence"),
    (["{csv}", "--target", "pred == 1", "--beam-width", "0"], "--beam-width"),
    (["{csv}", "--target", "pred == 1", "--features", "size,weight"], "unknown column 'weight' in --features"),
    (["{csv}", "--target", "pred == 1", "--features", "pred"], "excluded"),
    (["{csv}", "--target", "pred == 1", "--exclude", "weight"], "in --exclude"),
    (["{csv}", "--target", "pred == 1", "--max-categories", "2"], "distinct values"),
    (["{csv}", "--target", "pred == 1", "--exclude", "color,size,city,count,label"], "no feature columns left"),
    (["{csv}", "--target", "pred == 1", "--device", "toaster"], "cannot use --device"),
    (["{csv}", "--target", "pred == 1", "--json", "{nodir}"], "cannot write --json"),
    (["{inf}", "--target", "y == 1"], "infinite values"),
    ([], "required"),
]


@pytest.mark.parametrize(("args", "expected"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(args, expected, small_csv, tmp_path, capsys):
    (tmp_path / "empty.csv").write_text("")
    (tmp_path / "header.csv").write_text("a,b,y\n")
    (tmp_path / "inf.csv").write_text("a,y\n1.0,0\ninf,1\n2.0,1\n")
    paths = {
        "missing": tmp_path / "nope.csv",
        "dir": tmp_path,
        "empty": tmp_path / "empty.csv",
        "header": tmp_path / "header.csv",
        "inf": tmp_path / "inf.csv",
        "csv": small_csv,
        "nodir": tmp_path / "no" / "such" / "dir.json",
    }
    argv = [a.format(**{k: str(v) for k, v in paths.items()}) for a in args]
    code = main(["rules", *argv] if argv else ["rules"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err.startswith("torch-amore: error: ")
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n")
    assert expected in captured.err


def test_module_bad_input_has_no_traceback(small_csv):
    proc = _run_module("rules", str(small_csv), "--target", "weight > 3")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch-amore: error: unknown column in --target")
