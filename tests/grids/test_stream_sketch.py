"""Quantile and k-means grids of streamed data (torch_amore.grids.stream_sketch): every edge within the documented
resolution of the in-memory edge, and the best fitness, recomputed from masks, within 0.005."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from torch_amore import extract_rules
from torch_amore.grids.stream_sketch import SKETCH_BINS, HistogramSketch
from torch_amore.rules.metrics import fitness_of_counts
from torch_amore.search.extract import prepare
from torch_amore.search.options import SearchOptions

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "search"))
from test_stream import batches_of, mixed_data  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
DIABETES = ROOT.parent / "shared" / "data" / "diabetes_paper_task.npz"


def _tasks():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _tasks
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return _tasks


def latent(n=20_000, f=12):
    return _tasks().latent_like(n, f)


def box():
    task = _tasks().planted_box(5000, 20, name="box_small")
    return torch.from_numpy(task.X), torch.from_numpy(task.target)


def diabetes():
    task = _tasks().diabetes(3)
    return torch.from_numpy(task.X), torch.from_numpy(task.target)


def dead(n=4000):
    """Dead units of a ReLU layer: constant columns (0 and 2.5) beside a mostly-zero one and a uniform one; every
    k-means bound of a constant column falls in one sketch bin."""
    g = torch.Generator().manual_seed(5)
    X = torch.stack([torch.zeros(n), torch.relu(torch.randn(n, generator=g) - 0.5), torch.full((n,), 2.5),
                     torch.rand(n, generator=g)], 1)  # fmt: skip
    return X, (X[:, 3] > 0.6) | (X[:, 1] > 1.2)


DATA = {"mixed": lambda: mixed_data(5000), "latent": latent, "box": box, "diabetes": diabetes, "dead": dead}


def measured_fitness(rule_set, X, target):
    """The fitness of a rule set recomputed from its mask on the data."""
    mask = rule_set.mask(X)
    return fitness_of_counts(int((mask & target).sum()), int(mask.sum()), int(target.sum()))


@pytest.mark.parametrize("bin_strategy", ["quantile", "kmeans"])
@pytest.mark.parametrize("name", list(DATA))
def test_edges_within_resolution(bin_strategy, name):
    if name == "diabetes" and not DIABETES.exists():
        pytest.skip("the shared data folder is not there")
    X, target = DATA[name]()
    options = SearchOptions(bin_strategy=bin_strategy, n_grids=6 if name != "diabetes" else 10)
    mem = prepare(X, target, options).binned
    streamed = prepare(batches_of(X, target, 1000), None, options).binned
    assert streamed.bin_strategy == bin_strategy
    num = [j for j, k in enumerate(mem.kinds) if k != "cat"]
    g = mem.n_grids - 1
    resolution = (mem.value_max - mem.value_min)[num, None] / SKETCH_BINS
    gap = (mem.thresholds[num, :g] - streamed.thresholds[num, :g]).abs()
    assert bool((gap <= resolution).all()), float((gap / resolution).max())
    if bin_strategy == "kmeans":  # the bins holding cluster bounds are read exactly: the in-memory iterations
        assert torch.equal(streamed.thresholds, mem.thresholds)
    cat = [j for j, k in enumerate(mem.kinds) if k == "cat"]
    assert torch.equal(mem.thresholds[cat], streamed.thresholds[cat])


@pytest.mark.parametrize("bin_strategy", ["quantile", "kmeans"])
@pytest.mark.parametrize("strategy", ["paper", "beam"])
@pytest.mark.parametrize("name", ["mixed", "latent", "box", "dead"])
def test_best_fitness_within_0_005(bin_strategy, strategy, name):
    X, target = DATA[name]()
    kw = dict(bin_strategy=bin_strategy, strategy=strategy, n_grids=6, max_length=2)
    best_mem = extract_rules(X, target, **kw)[0]
    best_streamed = extract_rules(batches_of(X, target, 777), **kw)[0]
    got, expected = measured_fitness(best_streamed, X, target), measured_fitness(best_mem, X, target)
    assert got == pytest.approx(best_streamed.fitness, abs=1e-12)  # its reported fitness is that of its mask
    assert abs(got - expected) <= 0.005


@pytest.mark.parametrize("bin_strategy", ["quantile", "kmeans"])
def test_sketch_does_not_depend_on_batches(bin_strategy):
    X, target = latent(3000, 6)
    options = SearchOptions(bin_strategy=bin_strategy)
    a = prepare(batches_of(X, target, 7), None, options).binned.thresholds
    b = prepare(batches_of(X, target, [1000, 3, 400]), None, options).binned.thresholds
    assert torch.equal(a, b)


def test_quantiles_exact_where_bins_hold_one_value():
    """Few distinct values: each bin holds one, so the edges are the in-memory ones exactly."""
    g = torch.Generator().manual_seed(0)
    X = torch.randint(0, 30, (4000, 3), generator=g).double() / 7
    from torch_amore.grids.edges import quantile_edges

    sketch = HistogramSketch(X.amin(0), X.amax(0))
    for part in X.split(333):
        sketch.update(part)
    assert torch.equal(sketch.quantile_edges(8), quantile_edges(X, 8, torch.float64))


@pytest.mark.parametrize("name", ["latent", "box"])
def test_kmeans_beyond_the_budget_is_approximate(name, monkeypatch):
    """With no budget for reading bins, k-means runs on the histogram alone: edges near the in-memory ones (the
    documented bound) and the best fitness, recomputed from masks, within 0.005."""
    import torch_amore.grids.stream_sketch as S

    monkeypatch.setattr(S, "KMEANS_BUDGET", 0)
    X, target = DATA[name]()
    options = SearchOptions(bin_strategy="kmeans", n_grids=6)
    mem = prepare(X, target, options).binned
    streamed = prepare(batches_of(X, target, 1000), None, options).binned
    resolution = (mem.value_max - mem.value_min)[:, None] / SKETCH_BINS
    gap = (mem.thresholds[:, :5] - streamed.thresholds[:, :5]).abs() / resolution
    assert not torch.equal(mem.thresholds, streamed.thresholds)  # the approximation is in use
    assert float(gap.max()) <= S.APPROXIMATE_BINS
    kw = dict(bin_strategy="kmeans", n_grids=6, max_length=2)
    best_mem = extract_rules(X, target, **kw)[0]
    best_streamed = extract_rules(batches_of(X, target, 1000), **kw)[0]
    assert abs(measured_fitness(best_streamed, X, target) - measured_fitness(best_mem, X, target)) <= 0.005
