"""Issue 43, criterion 2, end to end through the explainer: ``concepts="sae"`` on a layer built as a sparse
combination of K planted features recovers them, the rules name the planted feature the head reads, the printout
reports the autoencoder's reconstruction error, and the fit repeats exactly on the CPU.

The model: inputs are sparse non-negative codes ``x`` (N, K) (three planted features active per row, magnitudes in
[0.5, 1.5), seeded: :func:`concept_models.planted_features`); the explained layer is ``h = x @ P`` (a ``Linear(K, D)``
without bias whose weight is ``P^T``; P holds the K planted unit directions as rows); the head reads planted feature
``J`` only, through the pseudo-inverse: logit ``4 * (h @ pinv(P)[:, J] - 1)``, so class 1 iff ``x_J > 1``.

The autoencoder runs with the explainer's defaults for ``concepts="sae", n_concepts=2K`` (top_k = 2K // 8 = 4, 2000
steps, seed 0). An overcomplete dictionary is what SAE users train; with ``n_concepts=K`` the default top_k is
K // 8 = 2, fewer than the 3 features active per row, and the fit misses some planted features (cosine about 0.54
for the worst), so that setting does not satisfy the criterion by construction of the default, not by a fault of the
training.
"""

from __future__ import annotations

import math
import re

import pytest
import torch
from concept_models import planted_features
from torch import nn

from torch_amore import RegionalExplanation, RegionalRuleExplainer

K, D, J, N = 16, 32, 5, 3000
FAST = dict(max_length=2, min_support=0.05, progress=False)


def planted_model() -> tuple[nn.Sequential, torch.Tensor, torch.Tensor]:
    """The model, the planted features P (K, D) and the codes X (N, K) (see the module docstring)."""
    _, P, X = planted_features(n=N, d=D, k=K, active=3, noise=0.0, seed=0)
    model = nn.Sequential(nn.Linear(K, D, bias=False), nn.Linear(D, 1))
    with torch.no_grad():
        model[0].weight.copy_(P.T)
        model[1].weight.copy_(4 * torch.linalg.pinv(P)[:, J].reshape(1, D))
        model[1].bias.fill_(-4.0)
    return model, P, X


def explain() -> tuple[RegionalRuleExplainer, RegionalExplanation]:
    model, _, X = planted_model()
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts="sae", n_concepts=2 * K)
    return explainer, explainer.explain(X, 1, **FAST)


@pytest.fixture(scope="module")
def planted():
    model, P, X = planted_model()
    explainer, explanation = explain()
    with torch.no_grad():
        a = model[0](X)
    return model, P, X, a, explainer, explanation


def cosine(u: torch.Tensor, v: torch.Tensor) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(u, v))
    return dot / math.sqrt(sum(float(x) ** 2 for x in u) * sum(float(y) ** 2 for y in v))


def literal_encode(sae, a: torch.Tensor) -> list[list[float]]:
    """``c = topk(relu((a - center) @ W_enc + b_enc))`` from the fitted weights, one row and one sum at a time."""
    center, b_enc, W_enc = sae.center.tolist(), sae.b_enc.tolist(), sae.W_enc.T.tolist()  # W_enc.T: (K, D)
    out = []
    for row in a.tolist():
        centred = [v - m for v, m in zip(row, center)]
        pre = [max(0.0, sum(x * w for x, w in zip(centred, column)) + b) for column, b in zip(W_enc, b_enc)]
        kept = set(sorted(range(len(pre)), key=lambda q: -pre[q])[: sae.top_k])
        out.append([v if q in kept else 0.0 for q, v in enumerate(pre)])
    return out


def matches(P: torch.Tensor, sae) -> list[tuple[int, float]]:
    """For each planted feature, the learned feature (decoder row) of largest |cosine| and that cosine."""
    out = []
    for f in P:
        cosines = [abs(cosine(f, w)) for w in sae.W_dec]
        best = max(range(len(cosines)), key=cosines.__getitem__)
        out.append((best, cosines[best]))
    return out


def test_every_planted_feature_has_a_learned_feature_with_cosine_at_least_0_9(planted):
    _, P, _, _, explainer, explanation = planted
    sae = explanation.concepts
    assert sae is explainer.concepts and sae.kind == "sae" and sae.n_concepts == 2 * K and sae.top_k == 4
    assert tuple(sae.W_dec.shape) == (2 * K, D)
    found = matches(P, sae)
    assert min(c for _, c in found) >= 0.9, sorted(c for _, c in found)[:3]
    assert len({m for m, _ in found}) == K  # K distinct learned features


def test_the_rules_name_the_planted_feature_the_head_reads(planted):
    model, P, X, a, _, explanation = planted
    sae = explanation.concepts
    read = matches(P, sae)[J][0]
    with torch.no_grad():
        target = torch.sigmoid(model(X)[:, 0]) > 0.5
    assert torch.equal(explanation.subgroup, target) and torch.equal(target, X[:, J] > 1)
    best = explanation.best
    assert {rule.feature for rule in best.rules} == {read}
    assert {rule.name for rule in best.rules} == {f"sae_{read}"}
    assert best.fitness >= 0.9
    # the stored support and confidence, from concept activations recomputed by the formula (low <= c < high)
    C = literal_encode(sae, a)
    assert torch.allclose(torch.tensor(C, dtype=torch.float32), explanation.features_matrix, atol=1e-5)
    covered = [all(r.low <= row[r.feature] < r.high for r in best.rules) for row in C]
    hits = sum(c and bool(t) for c, t in zip(covered, target))
    assert best.support == sum(covered)
    assert best.confidence == pytest.approx(hits / sum(covered), abs=1e-12)
    assert best.fitness == pytest.approx((2 * hits - sum(covered)) / int(target.sum()), abs=1e-12)


def test_the_reconstruction_error_is_printed_and_equals_a_recomputed_fvu(planted):
    _, _, _, a, _, explanation = planted
    sae = explanation.concepts
    C = torch.tensor(literal_encode(sae, a), dtype=torch.float64)
    residual = a.double() - (C @ sae.W_dec.double() + sae.b_dec.double())
    fvu = float((residual**2).sum() / ((a.double() - a.double().mean(0)) ** 2).sum())
    assert sae.reconstruction_error["fvu"] == pytest.approx(fvu, rel=1e-3)
    assert explanation.params["concepts"]["reconstruction_error"]["fvu"] == sae.reconstruction_error["fvu"]
    printed = re.search(r"concepts: sae, K=32, reconstruction error \(FVU\) ([0-9.e+-]+)", str(explanation))
    assert printed is not None, str(explanation)
    assert printed.group(1) == f"{sae.reconstruction_error['fvu']:.3g}"
    assert float(printed.group(1)) == pytest.approx(fvu, rel=5e-3)  # three significant digits
    assert fvu < 0.01


def test_the_fit_repeats_exactly_on_the_cpu(planted):
    _, _, _, a, explainer, explanation = planted
    again, repeated = explain()
    assert torch.equal(again.concepts.encode(a), explainer.concepts.encode(a))
    for name in ("W_enc", "b_enc", "W_dec", "b_dec", "center"):
        assert torch.equal(getattr(again.concepts, name), getattr(explainer.concepts, name))
    assert again.concepts.fvu == explainer.concepts.fvu
    assert [str(rs) for rs in repeated.rule_sets] == [str(rs) for rs in explanation.rule_sets]
