"""Concept bases on a chosen device: fitted there or on the CPU, they encode and decode on the activations' device
and give the CPU's numbers. The device is ``--device`` (``pytest tests/concepts --device cuda``), else
``$TORCH_AMORE_TEST_DEVICE``, else ``cuda`` when present; without one these tests are skipped (``--device cpu`` runs
them on the CPU)."""

from __future__ import annotations

import os

import pytest
import torch
from concept_models import planted_features

from torch_amore.concepts import Directions, FittedBasis, SparseAutoencoderBasis


@pytest.fixture
def device(request: pytest.FixtureRequest):
    name = request.config.getoption("--device", default=None) or os.environ.get("TORCH_AMORE_TEST_DEVICE")
    if name is None and not torch.cuda.is_available():
        pytest.skip("no CUDA device: run with --device cpu to run these tests on the CPU")
    dev = torch.device(name or "cuda")
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"--device {dev} asked for, but torch sees no CUDA device")
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 numbers compared with the CPU's
    yield dev
    torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("method", ["pca", "nmf", "ica"])
def test_fitted_bases_encode_on_the_device_as_on_the_cpu(device, method):
    a, _, _ = planted_features(n=500, d=16, k=8, seed=0)
    a = a.abs() if method == "nmf" else a
    basis = FittedBasis(method, 4).fit(a.to(device))  # scikit-learn fits on the CPU
    c = basis.encode(a.to(device))
    assert c.device.type == device.type and c.dtype == torch.float32
    assert torch.allclose(c.cpu(), basis.encode(a), atol=1e-4)
    assert basis.decode(c).device.type == device.type


def test_directions_and_interventions_on_the_device(device):
    a, _, _ = planted_features(n=100, d=8, k=4, seed=1)
    basis = Directions(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)), torch.ones(8))
    c = basis.encode(a.to(device))
    assert c.device.type == device.type and torch.allclose(c.cpu(), basis.encode(a), atol=1e-5)
    moved = basis.intervene(a.to(device), c + 1)
    assert torch.allclose(basis.encode(moved).cpu(), basis.encode(a) + 1, atol=1e-4)


def test_the_sparse_autoencoder_trains_on_the_device(device):
    a, features, _ = planted_features(n=2000, d=32, k=16, seed=2)
    sae = SparseAutoencoderBasis(32, top_k=3, steps=600).fit(a.to(device))
    assert sae.W_dec.device.type == device.type and sae.encode(a.to(device)).device.type == device.type
    assert sae.fvu < 0.1
    best = (torch.nn.functional.normalize(features, dim=1) @ sae.W_dec.cpu().T).max(1).values
    assert float(best.min()) >= 0.9
    again = SparseAutoencoderBasis(32, top_k=3, steps=600).fit(a.to(device))
    assert torch.allclose(again.W_dec, sae.W_dec, atol=1e-4)  # seeded (exact on the CPU; close on a GPU)
