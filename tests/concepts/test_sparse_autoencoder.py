"""The sparse autoencoder basis: planted features recovered (issue 43, criterion 2), the training repeats exactly on
the CPU, and encode/decode/the reconstruction error are what the documented formulas give, recomputed by hand."""

from __future__ import annotations

import math

import pytest
import torch
from concept_models import planted_features

from torch_amore.concepts import SparseAutoencoderBasis


@pytest.fixture(scope="module")
def planted():
    a, features, coefficients = planted_features(n=3000, d=64, k=32, active=3, noise=0.01, seed=0)
    sae = SparseAutoencoderBasis(64, top_k=3, steps=1000, seed=0).fit(a)
    return a, features, coefficients, sae


def cosine(u: torch.Tensor, v: torch.Tensor) -> float:
    dot = sum(float(x) * float(y) for x, y in zip(u, v))
    return dot / math.sqrt(sum(float(x) ** 2 for x in u) * sum(float(y) ** 2 for y in v))


def test_every_planted_feature_has_a_learned_feature_with_cosine_at_least_0_9(planted):
    a, features, _, sae = planted
    best = [max(cosine(f, w) for w in sae.W_dec) for f in features]
    assert min(best) >= 0.9, sorted(best)[:3]


def test_the_feature_of_a_planted_one_fires_where_it_is_planted(planted):
    a, features, coefficients, sae = planted
    c = sae.encode(a)
    for k in (0, 7, 31):
        match = int((sae.W_dec @ features[k]).argmax())
        fired, planted_here = c[:, match] > 0, coefficients[:, k] > 0
        assert float((fired == planted_here).float().mean()) >= 0.95


def test_reconstruction_error_is_reported(planted):
    a, _, _, sae = planted
    residual = a.double() - sae.decode(sae.encode(a)).double()
    total = ((a.double() - a.double().mean(0)) ** 2).sum()
    assert sae.fvu == pytest.approx(float((residual**2).sum() / total), rel=1e-9)
    assert sae.mse == pytest.approx(float((residual**2).mean()), rel=1e-9)
    assert sae.fvu < 0.05
    assert set(sae.reconstruction_error) == {"fvu", "mse", "dead_fraction"}
    assert 0 <= sae.dead_fraction < 1


def test_encode_and_decode_by_a_literal_loop(planted):
    a, _, _, sae = planted
    c = sae.encode(a[:5])
    d, k = sae.W_enc.shape
    for i in range(5):
        pre = [max(0.0, sum((float(a[i, j]) - float(sae.center[j])) * float(sae.W_enc[j, q]) for j in range(d))
                   + float(sae.b_enc[q])) for q in range(k)]  # fmt: skip
        kept = sorted(range(k), key=lambda q: -pre[q])[: sae.top_k]
        for q in range(k):
            assert c[i, q].item() == pytest.approx(pre[q] if q in kept else 0.0, abs=1e-4)
        back = [sum(float(c[i, q]) * float(sae.W_dec[q, j]) for q in range(k)) + float(sae.b_dec[j]) for j in range(d)]
        assert sae.decode(c[i : i + 1])[0].tolist() == pytest.approx(back, abs=1e-4)
    assert torch.allclose(sae.W_dec.norm(dim=1), torch.ones(k), atol=1e-5)


def test_training_repeats_exactly_on_the_cpu():
    a, _, _ = planted_features(n=500, d=16, k=8, seed=1)
    first = SparseAutoencoderBasis(16, top_k=2, steps=60, dead_after=20, seed=5).fit(a)
    second = SparseAutoencoderBasis(16, top_k=2, steps=60, dead_after=20, seed=5).fit(a)
    other = SparseAutoencoderBasis(16, top_k=2, steps=60, dead_after=20, seed=6).fit(a)
    for name in ("W_enc", "b_enc", "W_dec", "b_dec"):
        assert torch.equal(getattr(first, name), getattr(second, name))
    assert not torch.equal(first.W_dec, other.W_dec)
    assert first.fvu == second.fvu


def test_progress_and_dtypes():
    a, _, _ = planted_features(n=200, d=8, k=4, seed=2)
    sae = SparseAutoencoderBasis(8, steps=5)
    sae.fit(a.double(), progress=True)
    assert sae.W_dec.dtype == torch.float64
    assert sae.encode(a).dtype == torch.float32  # the activations' dtype
    assert sae.names == [f"sae_{k}" for k in range(8)] and sae.top_k == 1  # max(1, 8 // 8)


def test_bad_settings_and_inputs():
    with pytest.raises(ValueError, match=r"`top_k` <= `n_concepts` \(4\), but got 5"):
        SparseAutoencoderBasis(4, top_k=5)
    with pytest.raises(ValueError, match="`lr` to be a positive number"):
        SparseAutoencoderBasis(4, lr=0)
    with pytest.raises(ValueError, match="`steps` to be an integer >= 1"):
        SparseAutoencoderBasis(4, steps=0)
    sae = SparseAutoencoderBasis(4, steps=3)
    with pytest.raises(ValueError, match=r"not trained yet: call `fit\(activations\)` first"):
        sae.encode(torch.ones(2, 3))
    with pytest.raises(ValueError, match="NaN or infinity"):
        sae.fit(torch.tensor([[1.0, float("inf")]]))
    sae.fit(torch.rand(10, 3, generator=torch.Generator().manual_seed(0)))
    with pytest.raises(ValueError, match="have 3 units"):
        sae.encode(torch.ones(2, 4))
