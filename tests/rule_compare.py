"""Comparing rule lists computed along different float paths (batch sizes, threads, BLAS kernels).

Activations computed in batches of different sizes may differ in the last bit, and the paper strategy's grid edges
are arithmetic on the data's minimum and maximum, so bounds may differ by a few ulps between two correct runs. Rule
lists are compared structurally: the same features, kinds and categories, the same counts (the subgroup's name is
not compared, as in ``RuleSet.__eq__``), and bounds equal to a relative tolerance. Activations are compared to
a tolerance fit for float32 sums (:func:`assert_activations_close`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from torch_amore import RuleSet


def _close(a: float, b: float, rel: float) -> bool:
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=rel, abs_tol=rel)


def assert_rule_sets_close(got: Sequence[RuleSet], expected: Sequence[RuleSet], rel: float = 1e-5) -> None:
    """Assert that two rule lists agree: same order, features, kinds, values and support; bounds to ``rel``."""
    assert len(got) == len(expected), f"{len(got)} rule sets, expected {len(expected)}"
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.support == e.support, f"rule set {i}: {g} vs {e}"
        assert _close(g.confidence, e.confidence, 1e-9) and _close(g.fitness, e.fitness, 1e-9), f"rule set {i}"
        assert len(g.rules) == len(e.rules), f"rule set {i}: {g} vs {e}"
        for r, s in zip(g.rules, e.rules):
            assert (r.feature, r.name, r.kind, r.value) == (s.feature, s.name, s.kind, s.value), f"{r} vs {s}"
            assert _close(r.low, s.low, rel) and _close(r.high, s.high, rel), f"rule set {i}: {r} vs {s}"


def assert_activations_close(got: torch.Tensor, expected: torch.Tensor, rtol: float = 1e-5) -> None:
    """Assert that activations computed along two float paths agree: to ``rtol`` relative, and to ``rtol / 10`` of
    the largest magnitude absolute (a ReLU output near zero is the difference of larger terms, so it differs from one
    batch size to another by ulps of those terms, not of itself)."""
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(got, expected, rtol=rtol, atol=rtol / 10 * max(1.0, scale))
