"""examples/diabetes.py: the paper's Task 1 (diabetes) reproduction."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from torch_amore import extract_rules

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "diabetes.py"
DATA = (ROOT / ".." / "shared" / "data").resolve()
CSV = DATA / "diabetes_prediction_dataset.csv"
NPZ = DATA / "diabetes_paper_task.npz"

needs_data = pytest.mark.skipif(not (CSV.exists() and NPZ.exists()), reason="shared diabetes data not available")


def _module():
    spec = importlib.util.spec_from_file_location("diabetes_example", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(*args: str, timeout: int = 300) -> str:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _metrics(line: str) -> tuple[int, float, float]:
    m = re.search(r"support=(\d+), confidence=([\d.]+), fitness=(-?[\d.]+)", line)
    assert m, line
    return int(m.group(1)), float(m.group(2)), float(m.group(3))


@needs_data
@pytest.mark.slow
def test_paper_task_prints_the_papers_numbers():
    out = _run("--paper-task", "--data", str(DATA))
    lines = out.splitlines()
    amore = next(line for line in lines if "HbA1c_level >= 6.7 THEN" in line)  # the paper's edge 6.643, snapped
    assert _metrics(amore) == (2736, 0.993, 0.202)  # the paper's AMORE column
    dt_line = lines[lines.index(next(line for line in lines if line.startswith("DT classifier"))) + 1]
    support, conf, fit = _metrics(dt_line)
    assert "HbA1c_level" in dt_line and " AND " not in dt_line
    assert (support, conf) == (14501, 0.515)  # the paper's DT column
    assert abs(fit - 0.033) <= 0.002  # paper: 0.033 (its model flagged 6 more samples in that region)
    split = next(line for line in lines if "as scikit-learn states the split" in line)
    assert re.search(r"HbA1c_level > 6\.3(49|50)", split)
    assert "criterion=gini" in split and "class_weight=None" in split


@needs_data
def test_preprocessing_reproduces_the_paper_task_input():
    mod = _module()
    frame, y = mod.load_csv(CSV)
    X_tr, X_te, y_tr, y_te, lo, span = mod.split_and_scale(frame, y)
    d = np.load(NPZ)
    assert list(frame.columns) == [str(n) for n in d["feature_names"]]
    np.testing.assert_allclose(X_tr, d["X"], atol=1e-12)
    np.testing.assert_allclose(X_te, d["X_test"], atol=1e-12)
    assert np.array_equal(y_tr, d["y"]) and np.array_equal(y_te, d["y_test"])
    np.testing.assert_allclose(lo, d["raw_min"])
    np.testing.assert_allclose(lo + span * (d["raw_max"] > d["raw_min"]), d["raw_max"])


def test_roc_threshold_maximises_tpr_minus_fpr():
    from sklearn.metrics import roc_curve

    mod = _module()
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(500, generator=g) < 0.3).long()
    prob = (0.35 * y + 0.65 * torch.rand(500, generator=g)).double()
    thr = mod.roc_threshold(prob, y)
    fpr, tpr, thresholds = roc_curve(y.numpy(), prob.numpy())
    best = float(np.max(tpr - fpr))
    pred = prob.numpy() >= thr
    got = pred[y.numpy() == 1].mean() - pred[y.numpy() == 0].mean()
    assert got == pytest.approx(best)


def test_logistic_regression_balances_classes():
    mod = _module()
    g = torch.Generator().manual_seed(1)
    X = torch.rand(2000, 3, generator=g, dtype=torch.float64)
    y = (X[:, 0] + 0.2 * torch.rand(2000, generator=g, dtype=torch.float64) > 1.0).long()  # ~10 % positives
    model = mod.train_model(X, y, max_iter=100)
    with torch.no_grad():
        prob = torch.sigmoid(model(X))
    # optimality of the bias under the weighted loss: pos_weight * sum_pos (1 - p) = sum_neg p, with
    # pos_weight = negatives / positives (an unweighted fit would instead give sum_pos (1 - p) = sum_neg p)
    pos_weight = float((y == 0).sum() / (y == 1).sum())
    lhs = pos_weight * float((1 - prob[y == 1]).sum())
    rhs = float(prob[y == 0].sum())
    assert lhs == pytest.approx(rhs, rel=1e-3)
    assert float((1 - prob[y == 1]).sum()) < 0.5 * rhs  # far from the unweighted balance
    assert model.linear.weight[0, 0] > 0


@needs_data
@pytest.mark.slow
def test_quick_csv_run_writes_figure_and_tables(tmp_path):
    out = _run("--data", str(CSV), "--quick", "--out", str(tmp_path))
    assert "AMORE vs decision tree" in out and "Local rules for three test samples" in out
    amore_line = next(line for line in out.splitlines() if line.strip().startswith("AMORE ") and "support=" in line)
    assert "HbA1c_level" in amore_line or "blood_glucose_level" in amore_line  # raw units, named features
    for name in ("diabetes_compare_dt.png", "diabetes_amore_rule.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    import pandas as pd

    amore = pd.read_csv(tmp_path / "diabetes_amore_records.csv")
    dt = pd.read_csv(tmp_path / "diabetes_dt_records.csv")
    assert len(amore) == 1 * 2 * 3  # uniform x n_grids (5, 7) x 3 min_supports
    assert len(dt) == 2 * 3 * 2  # criteria x min_samples_leaf x class_weights
    assert set(dt["min_samples_leaf"]) == set(amore["min_support"])
    # a chosen local rule set below the bound says that none reached it (select_best fell back to the best fitness)
    lines = out.splitlines()
    local = [i for i, line in enumerate(lines) if line.strip().startswith("local ")]
    assert len(local) == 3
    for i in local:
        below = float(re.search(r" confidence=([\d.]+) ", lines[i]).group(1)) < 0.8
        assert ("below confidence 0.8: none of its" in lines[i + 1]) == below, lines[i : i + 2]


def _local_data(seed: int = 0):
    """x0 >= 0.8: all in the target (a local rule there reaches confidence 1); 0.4 <= x0 < 0.8: half, above the base
    rate (about 0.44) but no interval around a sample there reaches 0.8; x0 < 0.4: a tenth. The test probabilities put
    the sample nearest 0.908 in the pure region and those nearest 0.591 and 0.424 in the half."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(3000, 2, generator=g, dtype=torch.float64)
    u = torch.rand(3000, generator=g, dtype=torch.float64)
    target = (X[:, 0] >= 0.8) | ((X[:, 0] >= 0.4) & (u < 0.5)) | (u < 0.1)
    X_test = torch.tensor([[0.9, 0.5], [0.6, 0.5], [0.5, 0.3]], dtype=torch.float64)
    prob_test = torch.tensor([0.908, 0.591, 0.424], dtype=torch.float64)
    return X, target, X_test, prob_test


def test_local_rules_below_the_bound_say_so(capsys):
    mod = _module()
    X, target, X_test, prob_test = _local_data()
    unit = dict(names=["x0", "x1"], types=["float", "float"], scale=[1.0, 1.0], offset=[0.0, 0.0])
    chosen = mod.local_rules(X, target, X_test, prob_test, n_grids=5, min_support=100, max_length=1, **unit)
    out = capsys.readouterr().out
    blocks = out.split("  test sample ")[1:]
    assert len(blocks) == len(chosen) == 3
    for (i, _, best), block in zip(chosen, blocks):
        found = extract_rules(X, target, max_length=1, min_support=100, n_grids=5, bin_strategy="uniform",
                              local_x=X_test[i], feature_names=["x0", "x1"])  # fmt: skip
        reached = [rs for rs in found if rs.confidence >= 0.8]
        expected = max(reached or found, key=lambda rs: rs.fitness)
        assert best.rules == expected.rules
        note = f"(below confidence 0.8: none of its {len(found)} rule sets reaches it, so this is the highest fitness"
        assert (note in block) == (not reached), block
    assert "below confidence" not in blocks[0] and all("below confidence" in b for b in blocks[1:])
