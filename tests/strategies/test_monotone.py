"""Allowing one more condition never gives a worse best rule set: for the strategies that search (beam, exact), the
best fitness at ``max_length = l + 1`` is at least the best at ``l``, the other options equal."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import shared_file
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_amore as ta
from torch_amore.strategies.exact_cost import estimate_cost


def best_fitness(X, target, **options) -> float:
    found = ta.extract_rules(X, target, **options)
    return found[0].fitness if found else -np.inf


@st.composite
def data(draw):
    n = draw(st.integers(40, 400))
    n_feat = draw(st.integers(2, 5))
    g = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["uniform", "skewed", "levels"]))
    X = g.random((n, n_feat))
    if kind == "skewed":  # heavy tails: equal-width fine grids are coarse where most values are
        X = np.exp(6 * X) * g.random((n, n_feat))
    elif kind == "levels":
        X = np.round(X * 4) / 4
    cut = draw(st.floats(0.2, 0.8))
    score = X[:, 0] / X[:, 0].max() + draw(st.floats(-1, 1)) * X[:, 1] / X[:, 1].max()
    target = (score > np.quantile(score, cut)) ^ (g.random(n) < draw(st.sampled_from([0.0, 0.1, 0.3])))
    if not target.any():
        target[0] = True
    min_support = draw(st.integers(1, n // 2))
    return torch.from_numpy(X), torch.from_numpy(target), min_support


@settings(max_examples=30, deadline=None)
@given(
    d=data(),
    strategy=st.sampled_from(["beam", "exact"]),
    n_grids=st.sampled_from([3, 6, 10]),
    bin_strategy=st.sampled_from(["uniform", "quantile", "kmeans"]),
    min_gain=st.sampled_from([0.001, 0.0]),
    min_confidence=st.sampled_from([None, 0.7]),
)
def test_best_fitness_never_drops_with_one_more_condition(d, strategy, n_grids, bin_strategy, min_gain,
                                                          min_confidence):  # fmt: skip
    X, target, min_support = d
    common = dict(min_support=min_support, n_grids=n_grids, bin_strategy=bin_strategy, strategy=strategy,
                  min_gain=min_gain, min_confidence=min_confidence)  # fmt: skip
    best = [best_fitness(X, target, max_length=length, **common) for length in (1, 2, 3)]
    assert best[1] >= best[0] - 1e-12
    assert best[2] >= best[1] - 1e-12


# ---------------------------------------------------------------------------------------- the MNIST latent layer


def _latent() -> tuple[torch.Tensor, torch.Tensor]:
    """A CNN's 128-d latent layer on MNIST test images and "the CNN predicts 7": examples/mnist_latent.py's SmallCNN
    trained (seeded) for one epoch on 2,000 images, its latent features (fc2's inputs) on 4,000 others."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    try:
        from mnist_latent import SmallCNN, read_idx, train
    finally:
        sys.path.pop(0)
    images = read_idx(shared_file("mnist-t10k-images-idx3-ubyte.gz"))
    labels = read_idx(shared_file("mnist-t10k-labels-idx1-ubyte.gz"))
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    y = torch.from_numpy(labels.astype(np.int64))
    torch.manual_seed(0)
    model = SmallCNN()
    train(model, x[:2000], y[:2000], epochs=1, seed=0)
    latent: list[torch.Tensor] = []
    handle = model.fc2.register_forward_hook(lambda m, inp, out: latent.append(inp[0]))
    with torch.no_grad():
        pred = model(x[2000:6000]).argmax(1)
    handle.remove()
    return latent[0], pred == 7


def test_mnist_latent_layer_is_monotone_in_max_length():
    Z, target = _latent()
    n_target = int(target.sum())
    for share in (1.3, 1.6):
        common = dict(min_support=int(share * n_target), n_grids=6, bin_strategy="kmeans")
        best = [best_fitness(Z, target, max_length=length, **common) for length in (1, 2, 3)]
        assert best[0] <= best[1] + 1e-12 <= best[2] + 2e-12, (share, best)


def test_exact_stopped_at_its_budget_keeps_the_best_pair():
    g = np.random.default_rng(5)
    X = g.random((3000, 6))
    target = torch.from_numpy((X[:, 0] > 0.5) & (X[:, 3] < 0.6) ^ (g.random(3000) < 0.1))
    X = torch.from_numpy(X)
    common = dict(min_support=100, n_grids=8, bin_strategy="quantile", strategy="exact", top_k=2)
    pair = ta.extract_rules(X, target, max_length=2, **common)[0]
    budget = estimate_cost(3000, 6, 8, 3) + 1  # accepted up front, no work left for the triples
    with pytest.warns(RuntimeWarning, match="exact_budget"):
        stopped = ta.extract_rules(X, target, max_length=3, exact_budget=budget, **common)
    assert stopped[0].fitness >= pair.fitness - 1e-12
    assert stopped[0].optimum is None  # not proven optimal at length 3
