"""The explainer examples run end to end: the README quickstart, the paper's MNIST latent task (quick mode) and the
Tox21 graph-network task (needs the [graph] extra)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = (ROOT / ".." / "shared" / "data").resolve()


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data file {path} not found")
    return path


RULE_ROW = re.compile(r"^\s+1\s+(\d+)\s+([01]\.\d{3})\s+(-?\d\.\d{3})\s+\S", re.M)


def _run(script: str, *args: str, timeout: int = 240) -> str:
    # one intra-op thread: the examples are small, and shared CI runners oversubscribe badly with more
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg"}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "examples" / script), *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _png(path: Path) -> None:
    assert path.exists() and path.stat().st_size > 5_000, path
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow
def test_quickstart_prints_rules_next_to_a_tree_and_saves_a_pixel_map(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    out = _run("quickstart.py", "--out", str(tmp_path / "pixels.png"))
    assert "Regional rules for predicted 7" in out
    amore = re.search(r"AMORE: IF .* THEN predicted 7 .*fitness=(-?[\d.]+)[;)]", out)
    tree = re.search(r"decision tree: IF .* THEN predicted 7 .*fitness=(-?[\d.]+)\)", out)
    assert amore and tree, out
    assert out.count("test digits:") == 2
    # the evidence: a verdict heads the table, the held-out columns, and the best rule set's held-out numbers
    lines = out.splitlines()
    head = lines.index(next(line for line in lines if line.startswith("Regional rules for predicted 7")))
    assert re.fullmatch(r"  verdict: \d+ of \d+ rule sets beat the search on shuffled targets at 0\.05, 19 "
                        r"permutations; \d+ of \d+ rule sets hold on the held-out rows at 0\.05 \(Holm-adjusted\)",
                        lines[head + 1])  # fmt: skip
    assert "held-out confidence [95% CI]" in lines[head + 2] and "p(perm)" in lines[head + 2]
    assert re.search(r"AMORE: IF .*held out: confidence=[\d.]+ \(95% CI [\d.]+-[\d.]+\), p=\S+; search-aware p=", out)
    # the random subgroup: nothing beats the shuffled searches or holds on the held-out rows, and the warning says so
    assert re.search(r"a random subgroup: 0 of (\d+) rule sets beat the search .*; 0 of \1 rule sets hold", out), out
    assert "not distinguishable from what the search finds in noise" in out
    assert re.search(r"Verification by intervention .*\n.*sufficiency.*\n\s+1  \d\.\d{3} \[", out)
    _png(tmp_path / "pixels.png")
    report = tmp_path / "quickstart_report.html"  # beside the pixel map; the demo says where
    assert f"wrote the HTML report to {report}" in out and report.read_text().count("<img ") >= 3
    assert '<th class="verified">sufficiency</th>' in report.read_text()
    assert '<table id="evidence"' in report.read_text() and '<p id="verdict"><b>verdict: ' in report.read_text()


@pytest.mark.slow
def test_mnist_latent_quick(tmp_path):
    shared_file("mnist-t10k-images-idx3-ubyte.gz")
    pytest.importorskip("matplotlib")
    out = _run("mnist_latent.py", "--data", str(SHARED_DATA), "--out", str(tmp_path), "--quick")
    assert "Regional rules for predicted 7" in out and "input of fc2" in out
    rows = RULE_ROW.findall(out)
    assert len(rows) == 2, out  # the best rule set on the training part, then on the held-out part
    support, confidence, fitness = rows[1]
    assert int(support) > 0 and float(confidence) > 0.5
    assert re.search(r"z_\d+ .* AND .*z_\d+", out)  # max_length=2 rules on latent units
    _png(tmp_path / "mnist_rule_means.png")
    _png(tmp_path / "mnist_rule_pixels.png")


def test_mnist_idx_reader_matches_the_file_header():
    import gzip

    import numpy as np

    spec = importlib.util.spec_from_file_location("mnist_latent_example", ROOT / "examples" / "mnist_latent.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    read_idx = module.read_idx
    images = read_idx(shared_file("mnist-t10k-images-idx3-ubyte.gz"))
    labels = read_idx(shared_file("mnist-t10k-labels-idx1-ubyte.gz"))
    assert images.shape == (10000, 28, 28) and labels.shape == (10000,)
    with gzip.open(SHARED_DATA / "mnist-t10k-labels-idx1-ubyte.gz") as fh:
        raw = fh.read()
    assert int.from_bytes(raw[:4], "big") == 2049
    assert labels.tolist() == list(raw[8:]) and set(np.unique(labels).tolist()) == set(range(10))


@pytest.mark.slow
def test_tox21_gnn_rules_on_descriptors():
    pytest.importorskip("torch_geometric")
    pytest.importorskip("rdkit")
    shared_file("tox21.csv")
    out = _run("tox21_gnn.py", "--data", str(SHARED_DATA), "--quick")
    assert "Regional rules for predicted active" in out and "threshold" in out
    rows = RULE_ROW.findall(out)
    assert len(rows) == 2, out
    assert int(rows[0][0]) >= 300  # min_support=300 on the training part
    assert "decision tree (max_depth=2" in out
