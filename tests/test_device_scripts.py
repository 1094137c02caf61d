"""The device tests (tests/test_cuda.py) and the GPU benchmark (benchmarks/bench_gpu.py) run end to end on the CPU.

Without a GPU, tests/test_cuda.py is skipped in the normal suite; these tests run it with ``--device cpu``
and the benchmark's ``--device cpu --quick`` grid, each in a subprocess, so that CI knows their code runs.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the skips a CPU run may show: the cases that need a GPU (16-bit mixed precision, CUDA's sync count) or two (DDP)
GPU_ONLY = ("16-mixed needs a GPU", "DDP on GPUs needs two CUDA devices", "counted by CUDA's sync debug mode")
#: and the graph case where the optional ``graph`` extra is not installed (the README's set-up installs ``.[test]``)
NOT_INSTALLED = tuple(
    f"could not import '{module}'" for module in ("torch_geometric",) if importlib.util.find_spec(module) is None
)


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "TORCH_AMORE_TEST_DEVICE"}
    return {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]), "PYTHONWARNINGS": "ignore"}


def test_the_cuda_module_runs_on_the_cpu():
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/test_cuda.py", "--device", "cpu", "-q", "-x", "-rs",
         "-p", "no:cacheprovider"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env(),
    )  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    passed = re.search(r"(\d+) passed", out)
    assert passed and int(passed[1]) >= 30, out[-3000:]
    skipped = [line for line in out.splitlines() if line.startswith("SKIPPED")]
    allowed = GPU_ONLY + NOT_INSTALLED  # only the cases that need GPUs or a missing optional extra
    assert all(any(why in line for why in allowed) for line in skipped), skipped


def test_the_gpu_benchmark_runs_on_the_cpu():
    run = subprocess.run(
        [sys.executable, "benchmarks/bench_gpu.py", "--device", "cpu", "--quick"],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env=_env(),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    engine = re.compile(r"\| 2,000 \| 8 \| 2 \| (paper|beam) ")  # the rows of the search (LightGBM's: if installed)
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines() if engine.match(line)]
    assert [(r[3].strip(), r[4].strip()) for r in rows] == [
        (s, w) for s in ("paper", "beam") for w in ("cpu", "cpu-1", "cpu-all")
    ], run.stdout
    for r in rows:
        cells = [c.strip() for c in r]
        assert float(cells[5]) > 0 and int(cells[7]) > 0 and int(cells[9]) > 0, r  # seconds, syncs (proxy), bincounts
        stage_sum = sum(float(c) for c in cells[10:16])
        assert stage_sum > 0, r
        assert cells[-1] == "yes", r  # every place found the rules of the all-threads CPU call
