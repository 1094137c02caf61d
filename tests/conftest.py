"""Shared, seeded toy data and paths for the test suite."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import settings

# Property tests draw the same examples on every run (CI must not go red on a draw that no one can replay); set
# HYPOTHESIS_PROFILE=explore to draw new ones, e.g. when hunting for bugs.
settings.register_profile("deterministic", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--device``: where tests/test_cuda.py runs (default: ``TORCH_AMORE_TEST_DEVICE``, else ``cuda`` when
    available, else its tests are skipped); ``--device cpu`` runs them on the CPU."""
    parser.addoption(
        "--device",
        default=None,
        help="device for tests/test_cuda.py (cuda, cuda:1, cpu); default: $TORCH_AMORE_TEST_DEVICE, else cuda",
    )


SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def shared_file(name: str) -> Path:
    """A file of ../shared/data; the test is skipped when the shared data are not beside the repo."""
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"shared data file {path} not found")
    return path


@pytest.fixture(scope="session")
def diabetes_task() -> dict:
    """The paper's diabetes rule-extraction input (../shared/data/diabetes_paper_task.npz)."""
    with np.load(shared_file("diabetes_paper_task.npz")) as d:
        return {k: d[k] for k in d.files}


@pytest.fixture
def box_data() -> tuple[torch.Tensor, torch.Tensor]:
    """2,000 x 4 uniform features; the target is a planted box on features 0 and 2 (plus 2% label noise)."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(2000, 4, generator=g, dtype=torch.float64)
    target = (X[:, 0] > 0.6) & (X[:, 2] < 0.5)
    flip = torch.rand(2000, generator=g) < 0.02
    return X, target ^ flip
