"""torchmetrics rule metrics: streaming updates, merged states of simulated processes, and the functional maths."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from torch_amore import Rule, RuleConfidence, RuleFitness, RuleSet, RuleSetMetrics, RuleSupport

METRICS = (RuleSupport, RuleConfidence, RuleFitness)


def rule_set() -> RuleSet:
    return RuleSet(
        (Rule(0, "a", low=0.3, high=0.8), Rule(2, "c", value=1.0, kind="cat")), support=0, confidence=0.0, fitness=0.0
    )


def data(n: int = 1000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 3, generator=g)
    X[:, 2] = (X[:, 2] > 0.5).float()
    X[torch.rand(n, generator=g) < 0.05, 0] = float("nan")
    target = (X[:, 0] > 0.5) ^ (torch.rand(n, generator=g) < 0.2)
    return X, target


def reference(X: torch.Tensor, target: torch.Tensor) -> dict[str, float]:
    """Support, confidence and fitness counted with numpy from the rule definitions."""
    x, t = X.numpy().astype(np.float64), target.numpy()
    mask = (x[:, 0] >= 0.3) & (x[:, 0] < 0.8) & (x[:, 2] == 1.0)  # NaN compares False
    covered, hits, n_t = int(mask.sum()), int((mask & t).sum()), int(t.sum())
    return {
        "support": covered,
        "confidence": hits / covered if covered else 0.0,
        "fitness": (2 * hits - covered) / n_t if n_t else 0.0,
    }


def name_of(cls) -> str:
    return {RuleSupport: "support", RuleConfidence: "confidence", RuleFitness: "fitness"}[cls]


@pytest.mark.parametrize("cls", METRICS)
def test_streaming_equals_the_whole(cls):
    X, target = data()
    metric = cls(rule_set())
    for xb, tb in zip(torch.split(X, 77), torch.split(target, 77)):
        metric.update(xb, tb)
    assert math.isclose(float(metric.compute()), reference(X, target)[name_of(cls)], rel_tol=1e-12)


@pytest.mark.parametrize("cls", METRICS)
def test_states_of_two_simulated_processes_sum(cls):
    """torchmetrics' pattern: two copies updated on halves, states merged as dist_reduce_fx='sum' would."""
    X, target = data(seed=1)
    half = 413
    a, b = cls(rule_set()), cls(rule_set())
    a.update(X[:half], target[:half])
    b.update(X[half:], target[half:])
    assert all(fx is not None and fx.__name__ in ("dim_zero_sum", "sum") for fx in a._reductions.values())
    a.merge_state(b)  # adds b's states into a's with the declared reductions
    assert math.isclose(float(a.compute()), reference(X, target)[name_of(cls)], rel_tol=1e-12)
    # the same by hand: every state is a count and sums
    c, d = cls(rule_set()), cls(rule_set())
    c.update(X[:half], target[:half])
    d.update(X[half:], target[half:])
    for state in ("covered", "hits", "n_target"):
        setattr(c, state, getattr(c, state) + getattr(d, state))
    assert float(c.compute()) == float(a.compute())


def test_collection_updates_once_and_returns_all_three():
    X, target = data(seed=2)
    metrics = RuleSetMetrics(rule_set(), prefix="val/")
    for xb, tb in zip(torch.split(X, 100), torch.split(target, 100)):
        metrics.update(xb, tb)
    out = {k: float(v) for k, v in metrics.compute().items()}
    ref = reference(X, target)
    assert set(out) == {"val/support", "val/confidence", "val/fitness"}
    for key, value in ref.items():
        assert math.isclose(out[f"val/{key}"], value, rel_tol=1e-12)
    assert len(metrics.compute_groups) == 1  # one rule evaluation per batch


def test_forward_returns_the_batch_value_and_accumulates():
    X, target = data(n=200, seed=3)
    metric = RuleFitness(rule_set())
    batch_value = metric(X[:100], target[:100])
    assert math.isclose(float(batch_value), reference(X[:100], target[:100])["fitness"], rel_tol=1e-12)
    metric(X[100:], target[100:])
    assert math.isclose(float(metric.compute()), reference(X, target)["fitness"], rel_tol=1e-12)


def test_reset_and_empty_values():
    metric = RuleConfidence(rule_set())
    X = torch.tensor([[0.9, 0.0, 1.0]])  # outside the rule
    metric.update(X, torch.tensor([True]))
    assert float(metric.compute()) == 0.0  # no sample under the rule
    metric.reset()
    assert int(metric.covered) == 0 and int(metric.n_target) == 0


def test_accepts_numpy_arrays():
    X, target = data(n=300, seed=4)
    metric = RuleSupport(rule_set())
    metric.update(X.numpy(), target.numpy())
    assert int(metric.compute()) == reference(X, target)["support"]


def test_bad_arguments():
    with pytest.raises(TypeError, match="rule_set"):
        RuleFitness([Rule(0, "a", low=0.5)])
    metric = RuleFitness(rule_set())
    X, target = data(n=10)
    with pytest.raises(ValueError, match="one entry per row"):
        metric.update(X, target[:5])
    with pytest.raises(TypeError, match="boolean"):
        metric.update(X, torch.arange(10))
