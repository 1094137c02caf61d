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

from torch_amore import RegionalExplanation, SearchOptions, extract_rules
from torch_amore.cli.commands import main
from torch_amore.cli.table import TableError, encode_features

ROOT = Path(__file__).resolve().parents[2]
DIABETES = ROOT.parent / "shared" / "data" / "diabetes_prediction_dataset.csv"
needs_diabetes = pytest.mark.skipif(not DIABETES.exists(), reason="diabetes CSV not available")


# ------------------------------------------------------------------------------------------------------ helpers


def _run_module(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run(
        [sys.executable, "-m", "torch_amore", *args], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )


def _parse_rows(stdout: str) -> list[tuple[int, str, int, float, float]]:
    """(#, rule text, support, confidence, fitness) of every printed table row."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["#", "rule"]) + 1
    rows = []
    for line in lines[start:]:
        if not (line[:4].strip().isdigit() and line[4:6] == "  "):
            break
        line = line.removesuffix("  negative fitness")  # the flag of --all
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
    """Every rule set of the JSON file recomputed with pandas; the table shows some of them (distinct, fitness >= 0),
    in order, and a note counts the others."""
    from torch_amore.rules.rule import Rule

    rows = _parse_rows(stdout)
    data = json.loads(json_path.read_text())
    assert data["format"] == "torch_amore.RegionalExplanation"
    rule_sets = data["rule_sets"]
    assert data["params"]["n_samples"] == len(df) and data["params"]["subgroup_size"] == int(target.sum())
    for rs in rule_sets:
        exp_support, exp_conf, exp_fit = _recompute(df, target, rs, string_columns)
        assert rs["support"] == exp_support
        assert rs["confidence"] == pytest.approx(exp_conf, abs=1e-12)
        assert rs["fitness"] == pytest.approx(exp_fit, abs=1e-12)
    by_text = {(" AND ".join(Rule.from_dict(r).format() for r in rs["rules"]), rs["support"]): rs for rs in rule_sets}
    shown = [by_text[(text, support)] for _, text, support, _, _ in rows]
    assert 0 < len(rows) <= len(rule_sets)
    if len(rows) < len(rule_sets):
        assert f"{len(rule_sets) - len(rows)} of {len(rule_sets)} rule sets not shown" in stdout
    for (rank, text, _, conf, fit), rs in zip(rows, shown):
        assert conf == pytest.approx(round(rs["confidence"], 3), abs=1e-9), (rank, text)
        assert fit == pytest.approx(round(rs["fitness"], 3), abs=1e-9) and fit >= 0, (rank, text)
    fits = [r[4] for r in rows]
    assert fits == sorted(fits, reverse=True)
    return rows, shown


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
        "rules",
        str(DIABETES),
        "--target",
        "diabetes == 1",
        "--max-length",
        "1",
        "--min-support",
        "500",
        "--json",
        str(out),
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
    code = main(
        [
            "rules",
            str(DIABETES),
            "--target",
            "diabetes == 1 and age >= 40",
            "--max-length",
            "2",
            "--min-support",
            "0.01",
            "--features",
            "bmi,HbA1c_level,blood_glucose_level,gender",
            "--limit",
            "4",
            "--strategy",
            "paper",
            "--min-confidence",
            "0.6",
            "--json",
            str(out),
            "--min-gain",
            "0",  # the paper's rule tree as it is (with its ratios): four rule sets to keep
        ]
    )
    stdout = capsys.readouterr().out
    assert code == 0
    assert "min_gain=0.0" in stdout
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
    code = main(
        [
            "rules",
            str(small_csv),
            "--target",
            "label == 'yes'",
            "--min-support",
            "40",
            "--exclude",
            "pred",
            "--json",
            str(out),
        ]
    )
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
    code = main(
        [
            "rules",
            str(small_csv),
            "--target-column",
            "pred",
            "--min-support",
            "30",
            "--exclude",
            "label",
            "--json",
            str(out),
            "--n-grids",
            "8",
            "--bin-strategy",
            "kmeans",
        ]
    )
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


def _err_line(captured) -> str:
    """The single stderr line of a failed run (asserting it is one line and nothing went to stdout)."""
    assert captured.out == ""
    assert captured.err.startswith("torch-amore: error: ")
    assert captured.err.count("\n") == 1 and captured.err.endswith("\n")
    return captured.err


BAD_INPUTS = [
    (["{missing}", "--target", "label == 'yes'"], "file not found"),
    (["{dir}", "--target", "label == 'yes'"], "directory"),
    (["{empty}", "--target", "label == 'yes'"], "cannot read"),
    (["{header}", "--target", "label == 'yes'"], "no data rows"),
    (["{short}", "--target", "y == 1"], "2 rows have fewer fields than the header's 3 (first: line 3 has 2)"),
    (["{long}", "--target", "y == 1"], "3 rows have more fields than the header's 2"),
    (["{dup}", "--target", "y == 1"], "names column 'a' more than once"),
    (["{binary}", "--target", "y == 1"], "cannot read"),
    (["{csv}", "--target", "colour == 'red'"], "unknown column 'colour' (did you mean 'color'?)"),
    (["{csv}", "--target", "size >"], "cannot parse"),
    (["{csv}", "--target", "size + 1"], "gives numbers, not True/False"),
    (["{csv}", "--target", "color + 1 > 0"], "'+' needs numbers"),
    (["{csv}", "--target", "color == 1"], "quote the value"),
    (["{csv}", "--target", "1 == 1"], "always True"),
    (["{csv}", "--target", "size > 100"], "selects no rows"),
    (["{csv}", "--target", "size >= -100"], "selects all 600 rows"),
    (["{csv}", "--target", "   "], "empty"),
    (["{csv}", "--target-column", "prediction"], "unknown --target-column"),
    (["{csv}", "--target-column", "count"], "0/1 predictions"),
    (["{csv}", "--target-column", "color"], "0/1 predictions"),
    (["{csv}"], "one of the arguments --target --target-column is required"),
    (["{csv}", "--target", "pred == 1", "--target-column", "pred"], "not allowed with"),
    (["{csv}", "--target", "pred == 1", "--max-length", "0"], "--max-length"),
    (["{csv}", "--target", "pred == 1", "--max-length", "two"], "--max-length"),
    (["{csv}", "--target", "pred == 1", "--min-support", "-5"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "abc"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "1.5"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "1.0"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--min-support", "601"], "--min-support"),
    (["{csv}", "--target", "pred == 1", "--n-grids", "1"], "--n-grids"),
    (["{csv}", "--target", "pred == 1", "--n-grids", "40000"], "32767"),
    (["{csv}", "--target", "pred == 1", "--top-k", "0"], "--top-k"),
    (["{csv}", "--target", "pred == 1", "--limit", "0"], "--limit"),
    (["{csv}", "--target", "pred == 1", "--bin-strategy", "equal"], "invalid choice"),
    (["{csv}", "--target", "pred == 1", "--strategy", "greedy"], "invalid choice"),
    (["{csv}", "--target", "pred == 1", "--min-confidence", "1.5"], "--min-confidence"),
    (["{csv}", "--target", "pred == 1", "--beam-width", "0"], "--beam-width"),
    (["{csv}", "--target", "pred == 1", "--feature-types", "int,cat"], "--feature-types has 2 values, but there"),
    (["{csv}", "--target", "pred == 1", "--feature-types", "size=integer"], "expected feature types"),
    (["{csv}", "--target", "pred == 1", "--feature-types", "weight=int"], "unknown feature 'weight'"),
    (["{csv}", "--target", "pred == 1", "--feature-scale", "size=0"], "--feature-scale"),
    (["{csv}", "--target", "pred == 1", "--feature-offset", "size=abc"], "--feature-offset"),
    (["{csv}", "--target", "pred == 1", "--feature-scale", "1,2"], "--feature-scale has 2 values"),
    (
        ["{csv}", "--target", "pred == 1", "--feature-types", "size=int,size=float"],
        "argument --feature-types: name 'size' given more than once in 'size=int,size=float'",
    ),
    (
        ["{csv}", "--target", "pred == 1", "--feature-scale", "size=2,count=3,size=10"],
        "argument --feature-scale: name 'size' given more than once",
    ),
    (
        ["{csv}", "--target", "pred == 1", "--feature-offset", "count=1, count =2"],
        "argument --feature-offset: name 'count' given more than once",
    ),
    (["{csv}", "--target", "pred == 1", "--features", "size,weight"], "unknown column 'weight' in --features"),
    (["{csv}", "--target", "pred == 1", "--features", "pred"], "excluded"),
    (["{csv}", "--target", "pred == 1", "--exclude", "weight"], "in --exclude"),
    (["{csv}", "--target", "pred == 1", "--max-categories", "2"], "distinct values"),
    (["{csv}", "--target", "pred == 1", "--exclude", "color,size,city,count,label"], "no feature columns left"),
    (["{csv}", "--target", "pred == 1", "--device", "toaster"], "cannot use --device"),
    (["{csv}", "--target", "pred == 1", "--device", "meta"], "cannot use --device 'meta'"),
    (["{csv}", "--target", "pred == 1", "--device", "cuda:99"], "cannot use --device 'cuda:99'"),
    (["{csv}", "--target", "pred == 1", "--json", "{nodir}"], "cannot write --json"),
    (["{inf}", "--target", "y == 1"], "infinite values"),
    ([], "required"),
]


@pytest.fixture
def bad_paths(small_csv, tmp_path) -> dict[str, Path]:
    files = {
        "empty.csv": "",
        "header.csv": "a,b,y\n",
        "inf.csv": "a,y\n1.0,0\ninf,1\n2.0,1\n",
        "short.csv": "a,b,y\n1,2,0\n3,4\n5,,1\n6\n",
        "long.csv": "a,y\n1,0,\n2,1,\n3,0,\n",  # pandas would silently take `a` as the index
        "dup.csv": "a,a,y\n1,2,0\n3,4,1\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "binary.csv").write_bytes(b"a,y\n\xff\xfe\x00\x01,1\n")
    paths = {name.split(".")[0]: tmp_path / name for name in [*files, "binary.csv"]}
    paths.update(missing=tmp_path / "nope.csv", dir=tmp_path, csv=small_csv, nodir=tmp_path / "no" / "dir.json")
    return paths


@pytest.mark.parametrize(("args", "expected"), BAD_INPUTS, ids=[m for _, m in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(args, expected, bad_paths, capsys):
    argv = [a.format(**{k: str(v) for k, v in bad_paths.items()}) for a in args]
    code = main(["rules", *argv] if argv else ["rules"])
    captured = capsys.readouterr()
    assert code == 2
    assert expected in _err_line(captured)


def test_module_bad_input_has_no_traceback(small_csv):
    proc = _run_module("rules", str(small_csv), "--target", "weight > 3")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch-amore: error: --target 'weight > 3': unknown column")
    assert "columns are: color, size, city, count, label, pred" in lines[0]


def test_library_memory_error_and_internal_errors_are_one_line(small_csv, monkeypatch, capsys):
    import torch_amore.cli.rules_command as cli

    def too_big(*args, **kwargs):
        raise MemoryError("Expected the search to fit in memory, but it needs 12.0 GiB; lower `n_grids`.")

    monkeypatch.setattr(cli, "extract_rules", too_big)
    assert main(["rules", str(small_csv), "--target", "pred == 1"]) == 2
    assert "needs 12.0 GiB; lower --n-grids" in _err_line(capsys.readouterr())

    def bug(*args, **kwargs):
        raise RuntimeError("something\nbroke")

    monkeypatch.setattr(cli, "extract_rules", bug)
    assert main(["rules", str(small_csv), "--target", "pred == 1"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("torch-amore: internal error: RuntimeError: something broke") and err.count("\n") == 1


def test_dates_are_refused_with_advice():
    df = pd.DataFrame({"day": pd.to_datetime(["2020-01-01", "2021-06-01", "2022-01-01"]), "y": [0, 1, 1]})
    with pytest.raises(TableError, match="dates") as info:
        encode_features(df, exclude=["y"])
    assert "--exclude day" in str(info.value) and "the year" in str(info.value)


# ---------------------------------------------------------------------------------------------- hostile targets


def _hostile(marker: Path) -> list[str]:
    m = str(marker)
    return [
        f"label == 'yes' and @os.system('touch {m}') == 0",
        f"size.__class__.__init__.__globals__['os'].system('touch {m}')",
        "size.__class__.__init__.__globals__",
        f"__import__('os').system('touch {m}') == 0",
        f"open('{m}', 'w')",
        f"(lambda: __import__('os').system('touch {m}'))() == 0",
        f"[__import__('os').system('touch {m}') for _ in [1]] == 1",
        f"f\"{{__import__('os').system('touch {m}')}}\" == '0'",
        f"size[__import__('os').system('touch {m}')] > 0",
        "__builtins__ == 1",
        "().__class__.__bases__[0].__subclasses__()",
        f"size > 1 if __import__('os').system('touch {m}') else size < 1",
        f"(size := __import__('os').system('touch {m}')) == 0",
        "size ** 9 ** 9 ** 9 > 1",
    ]


def test_hostile_targets_exit_2_with_one_line_and_no_side_effect(small_csv, tmp_path, capsys):
    marker = tmp_path / "pwned"
    before = small_csv.read_bytes()
    expressions = _hostile(marker)
    assert len(expressions) >= 10
    for expr in expressions:
        code = main(["rules", str(small_csv), "--target", expr, "--json", str(tmp_path / "out.json")])
        err = _err_line(capsys.readouterr())
        assert code == 2, expr
        assert "not allowed" in err and "columns are: color, size, city" in err, err
        assert not marker.exists(), expr
        assert not (tmp_path / "out.json").exists()
    assert small_csv.read_bytes() == before


@pytest.mark.parametrize("index", [0, 1])  # the two exploits of issue 12 (each run imports torch)
def test_hostile_targets_through_the_module(small_csv, tmp_path, index):
    marker = tmp_path / "pwned"
    proc = _run_module("rules", str(small_csv), "--target", _hostile(marker)[index])
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("torch-amore: error: --target") and "not allowed" in lines[0]
    assert not marker.exists()


def test_target_expression_mask_matches_numpy(small_csv, tmp_path, capsys):
    out = tmp_path / "rules.json"
    expr = "(color in ['red', 'blue'] and 2.5 < size <= 8) or `count` * 2 - 1 >= 9"
    assert main(["rules", str(small_csv), "--target", expr, "--min-support", "30", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    df = pd.read_csv(small_csv)
    color, size, count = df["color"].to_numpy(), df["size"].to_numpy(), df["count"].to_numpy()
    want = ((np.isin(color, ["red", "blue"])) & (size > 2.5) & (size <= 8)) | (count * 2 - 1 >= 9)
    assert 0 < want.sum() < len(df)
    assert f"{int(want.sum())} of {len(df)} rows" in stdout
    assert "excluded: color, size, count" in stdout
    explanation = RegionalExplanation.from_json(out)
    assert explanation.params["subgroup_size"] == int(want.sum())
    assert explanation.params["min_support_count"] == 30 and explanation.params["n_samples"] == len(df)
    assert not {r.name for rs in explanation for r in rs.rules} & {"size", "count", "color_red", "color_blue"}


# --------------------------------------------------------------------------------------- options and output


def test_every_search_option_flag_equals_extract_rules(small_csv, tmp_path, capsys):
    """The CLI's rules equal extract_rules on the same encoded data with the same SearchOptions (issue 14, 1)."""
    out = tmp_path / "rules.json"
    argv = [
        "rules", str(small_csv), "--target", "label == 'yes'", "--exclude", "pred", "--json", str(out),
        "--max-length", "3", "--min-support", "25", "--n-grids", "6", "--bin-strategy", "quantile", "--top-k", "2",
        "--strategy", "paper", "--min-confidence", "0.3", "--beam-width", "3",
        "--feature-types", "count=float,city=cat", "--feature-scale", "size=2.5,count=10",
        "--feature-offset", "size=-1", "--exact-budget", "123456789", "--optimum-budget", "0", "--progress", "--all",
        "--min-gain", "0.004", "--holdout", "0.3", "--permutations", "2", "--stability", "1", "--seed", "3",
        "--level", "0.9",
    ]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    df = pd.read_csv(small_csv)
    X, names, types = encode_features(df, exclude=["label", "pred"])
    assert names == ["color_blue", "color_green", "color_red", "size", "city_Lima", "city_Oslo", "city_Pune", "count"]
    options = SearchOptions(
        max_length=3, min_support=25, n_grids=6, bin_strategy="quantile", top_k=2, strategy="paper",
        min_confidence=0.3, beam_width=3, feature_types=["cat", "cat", "cat", "float", "cat", "cat", "cat", "float"],
        feature_scale=[1, 1, 1, 2.5, 1, 1, 1, 10], feature_offset=[0, 0, 0, -1, 0, 0, 0, 0], exact_budget=123456789,
        progress=True, optimum_budget=0, min_gain=0.004, holdout=0.3, permutations=2, stability=1, seed=3, level=0.9,
    )  # fmt: skip
    assert set(SearchOptions.names()) == {
        f for f in options.to_dict() if options.to_dict()[f] != getattr(SearchOptions(), f)
    }, "every option is set to a non-default value by a flag"
    expected = extract_rules(X, (df["label"] == "yes").to_numpy(), options=options, feature_names=names,
                             target_name="label == 'yes'")  # fmt: skip
    got = RegionalExplanation.from_json(out)
    assert len(expected) > 3
    assert got.rule_sets == expected
    assert {k: got.params[k] for k in SearchOptions.names()} == options.to_dict()
    assert got.params["min_support_count"] == 25
    scaled = [r for rs in got for r in rs.rules if r.name == "size"]
    assert scaled and all(r.scale == 2.5 and r.offset == -1 for r in scaled)


def test_beam_and_default_options_equal_extract_rules(small_csv, tmp_path, capsys):
    out = tmp_path / "rules.json"
    assert main(["rules", str(small_csv), "--target-column", "pred", "--exclude", "label", "--json", str(out)]) == 0
    stdout = capsys.readouterr().out
    df = pd.read_csv(small_csv)
    X, names, types = encode_features(df, exclude=["pred", "label"])
    expected = extract_rules(X, (df["pred"] == 1).to_numpy(), options=SearchOptions(feature_types=types),
                             feature_names=names, target_name="pred == 1")  # fmt: skip
    assert RegionalExplanation.from_json(out).rule_sets == expected
    d = SearchOptions()
    assert (f"options: max_length={d.max_length}, min_support=auto (30 rows), n_grids={d.n_grids}, "
            f"bin_strategy={d.bin_strategy}, top_k={d.top_k}, strategy={d.strategy}, beam_width={d.beam_width}"
            ) in stdout  # fmt: skip
    assert "permutations=" not in stdout and "seed=" not in stdout  # no evidence asked for: no evidence options
    assert f"{len(expected)} rule sets found: every node of the rule tree (the top_k=3 candidate" in stdout


def test_header_says_what_the_rows_are_and_negative_fitness_is_flagged(small_csv, tmp_path, capsys):
    argv = ["rules", str(small_csv), "--target", "label == 'yes'", "--exclude", "pred", "--min-support", "40",
            "--strategy", "paper", "--top-k", "3"]  # fmt: skip
    assert main(argv) == 0
    default = capsys.readouterr().out
    assert main([*argv, "--all"]) == 0
    everything = capsys.readouterr().out
    rows, all_rows = _parse_rows(default), _parse_rows(everything)
    negative = [r for r in all_rows if r[4] < 0]
    assert negative, "the case must have negative-fitness rule sets"
    # paper strategy, max_length=2, top_k=3: at most 3 + 9 rule sets (every node of the tree)
    assert len(all_rows) <= 3 + 9
    assert (
        f"{len(all_rows)} rule sets found: every node of the rule tree (the top_k=3 candidate intervals at each "
        "node, up to max_length=2 conditions), best fitness first" in default
    )
    assert all(r[1:] in [a[1:] for a in all_rows] and r[4] >= 0 for r in rows)
    assert (
        f"{len(all_rows) - len(rows)} of {len(all_rows)} rule sets not shown: near-duplicates of a fitter one, "
        f"or negative fitness ({len(negative)}: covering more rows outside the subgroup than inside); --all "
        "shows them" in default
    )
    flagged = [line for line in everything.splitlines() if line.endswith("negative fitness")]
    assert len(flagged) == len(negative)
    assert "not shown" not in everything


def test_limit_keeps_the_best(small_csv, capsys):
    argv = ["rules", str(small_csv), "--target", "label == 'yes'", "--exclude", "pred", "--min-support", "40"]
    assert main(argv) == 0
    full = _parse_rows(capsys.readouterr().out)
    assert main([*argv, "--limit", "2"]) == 0
    limited = capsys.readouterr().out
    assert _parse_rows(limited) == full[:2]
    assert "; kept the 2 best" in limited


def test_library_warnings_are_one_line(small_csv, monkeypatch, capsys):
    import warnings

    import torch_amore.cli.rules_command as cli

    real = cli.extract_rules

    def warn_then_search(*args, **kwargs):
        warnings.warn("`min_support` (500) exceeds the subgroup (\n77 rows).", UserWarning, stacklevel=2)
        return real(*args, **kwargs)

    monkeypatch.setattr(cli, "extract_rules", warn_then_search)
    assert main(["rules", str(small_csv), "--target", "pred == 1", "--min-support", "40"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "torch-amore: warning: --min-support (500) exceeds the subgroup ( 77 rows).\n"
    assert _parse_rows(captured.out)


def test_feature_types_as_a_list(small_csv, tmp_path, capsys):
    out = tmp_path / "rules.json"
    types = ["cat", "cat", "cat", "float", "cat", "cat", "cat", "float"]  # count (an int column) as float
    argv = ["rules", str(small_csv), "--target", "label == 'yes'", "--exclude", "pred", "--min-support", "40",
            "--feature-types", ",".join(types), "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    assert RegionalExplanation.from_json(out).params["feature_types"] == types


@pytest.mark.parametrize("suffix", [".csv.gz", ".csv.bz2", ".csv.xz", ".zip"])
def test_compressed_tables_are_read_strictly(small_csv, tmp_path, suffix):
    import bz2
    import gzip
    import lzma
    import zipfile

    from torch_amore.cli.table import read_table

    def write(path: Path, text: str) -> None:
        if suffix == ".zip":
            with zipfile.ZipFile(path, "w") as archive:
                archive.writestr("data.csv", text)
        else:
            opener = {".csv.gz": gzip.open, ".csv.bz2": bz2.open, ".csv.xz": lzma.open}[suffix]
            with opener(path, "wt") as fh:
                fh.write(text)

    good = tmp_path / f"good{suffix}"
    write(good, small_csv.read_text())
    pd.testing.assert_frame_equal(read_table(good), pd.read_csv(small_csv))
    bad = tmp_path / f"bad{suffix}"
    write(bad, "a,b,y\n1,2,0\n3,4\n")
    with pytest.raises(TableError, match="1 row has fewer fields than the header's 3"):
        read_table(bad)


def test_blank_lines_are_skipped_as_pandas_does(tmp_path):
    from torch_amore.cli.table import read_table

    path = tmp_path / "blank.csv"
    path.write_text('a,b,y\n1,2,0\n   \n\n3,"x, y",1\n')
    pd.testing.assert_frame_equal(read_table(path), pd.read_csv(path))
    assert len(read_table(path)) == 2


def test_empty_column_is_left_out_with_a_one_line_warning(tmp_path, capsys):
    rng = np.random.default_rng(3)
    df = pd.DataFrame({"x": rng.random(200), "empty": np.nan})
    df["y"] = (df["x"] > 0.7).astype(int)
    path = tmp_path / "t.csv"
    df.to_csv(path, index=False)
    assert main(["rules", str(path), "--target", "y == 1\n or y == 2", "--min-support", "10"]) == 0  # two lines
    captured = capsys.readouterr()
    empty, leak = captured.err.splitlines()  # the table's warning, then the search's (y is x > 0.7: x leaks it)
    assert empty == "torch-amore: warning: column 'empty' has no values (all missing); it is left out of the features"
    assert leak.startswith("torch-amore: warning: Feature 'x' may leak the target: rule set #1 (x >= 0.7")
    assert "subgroup y == 1 or y == 2: " in captured.out and "1 feature (excluded: y)" in captured.out
    assert _parse_rows(captured.out)[0][1].startswith("x >= 0.7")


@pytest.mark.parametrize("strategy", ["beam", "paper"])
def test_printed_rules_select_the_rows_of_their_masks(tmp_path, capsys, strategy):
    """Issue 12, acceptance 3 (CLI part): every printed rule, re-parsed from the table's text with the target
    language, selects exactly the rows its rule set's mask selects."""
    from torch_amore.cli.expression import parse_expression

    rng = np.random.default_rng(0)
    n = 2000
    df = pd.DataFrame({"lat": 37.7749 + 1e-3 * rng.normal(size=n), "lon": -122.4194 + 1e-3 * rng.normal(size=n)})
    df["y"] = (((df["lat"] > 37.7752) & (df["lon"] < -122.4190)) ^ (rng.random(n) < 0.05)).astype(int)
    path, out = tmp_path / "geo.csv", tmp_path / "rules.json"
    df.to_csv(path, index=False)
    argv = ["rules", str(path), "--target", "y == 1", "--strategy", strategy, "--min-support", "50", "--all",
            "--json", str(out)]  # fmt: skip
    assert main(argv) == 0
    rows = _parse_rows(capsys.readouterr().out)
    rule_sets = RegionalExplanation.from_json(out).rule_sets
    assert len(rows) == len(rule_sets) > 0
    df = pd.read_csv(path)  # the values the CLI read
    X = df[["lat", "lon"]].to_numpy()
    for (_, text, *_), rs in zip(rows, rule_sets):
        printed = parse_expression(text.replace(" AND ", " and "), df.columns).evaluate(df)
        np.testing.assert_array_equal(printed, rs.mask(X).numpy(), err_msg=text)


def test_integers_beyond_2_53_are_refused_not_rounded(tmp_path, capsys):
    """A CSV integer column that float64 would round (issue 12: printed bounds selecting other rows) exits 2."""
    path = tmp_path / "ids.csv"
    big = 2**62 + np.arange(40)  # neighbouring values collapse to one float64
    pd.DataFrame({"id": big, "x": np.arange(40) % 7, "y": np.arange(40) % 2}).to_csv(path, index=False)
    assert main(["rules", str(path), "--target", "y == 1"]) == 2
    line = _err_line(capsys.readouterr())
    assert "column 'id'" in line and "2**53" in line and "--exclude id" in line
    assert main(["rules", str(path), "--target", "y == 1", "--exclude", "id", "--min-support", "3"]) == 0
