"""Division by a Python number (grids.exact_edges.divide) against Python's correctly rounded float division."""

from __future__ import annotations

import torch

from torch_amore.grids.exact_edges import divide


def test_divide_is_correctly_rounded() -> None:
    reciprocal_differs = 0
    for k in range(1, 60):
        a = torch.arange(k + 1, dtype=torch.float64)
        expected = torch.tensor([i / k for i in range(k + 1)], dtype=torch.float64)
        assert torch.equal(divide(a, k), expected), k
        assert torch.equal(a / torch.full((), k, dtype=a.dtype), expected), k  # the route of other devices
        reciprocal_differs += not torch.equal(a * (1.0 / k), expected)
    # the device route it replaces (multiplying by the reciprocal) does differ in places, so the check has teeth
    assert reciprocal_differs > 0


def test_quantile_edge_on_an_observed_value() -> None:
    """The 3/5 quantile of 0..5 is the observed 3.0 exactly: the value stays in the upper grid (``x >= edge``)."""
    from torch_amore.grids.edges import quantile_edges, uniform_edges

    X = torch.arange(6, dtype=torch.float64)[:, None] * 0.1
    edges = quantile_edges(X, 5, torch.float64)
    assert edges[0].tolist() == [v * 0.1 for v in range(6)]
    assert uniform_edges(X.amin(0), X.amax(0), 5)[0, 3].item() == 0.0 + 0.5 * (3 / 5)
