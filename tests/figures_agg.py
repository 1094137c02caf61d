"""matplotlib with the Agg backend, and an autouse fixture that closes every figure after each test: import
``close_figures`` into a test module of figures (``from figures_agg import close_figures``)."""

from __future__ import annotations

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")
