"""PCA, NMF and ICA bases: scikit-learn's own transform and inverse_transform are the reference, a literal loop the
check of the formula; each bad input gets its own clear error."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn import decomposition

from torch_amore.concepts import FittedBasis


def activations(nonnegative: bool = False, n: int = 300, d: int = 6) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, d, generator=g, dtype=torch.float64) @ torch.randn(d, d, generator=g, dtype=torch.float64)
    return a.relu() if nonnegative else a


def reference(method: str, k: int, x: np.ndarray):
    """scikit-learn's estimator with the settings FittedBasis documents, fitted on x."""
    if method == "pca":
        est = decomposition.PCA(n_components=k, random_state=0, svd_solver="full")
    elif method == "nmf":
        est = decomposition.NMF(n_components=k, random_state=0, init="nndsvda", max_iter=1000)
    else:
        est = decomposition.FastICA(n_components=k, random_state=0, whiten="unit-variance", max_iter=1000)
    return est.fit(x)


@pytest.mark.parametrize(("method", "atol"), [("pca", 1e-10), ("ica", 1e-10), ("nmf", 1e-5)])
def test_encode_and_decode_are_sklearns_transform_and_inverse(method, atol):
    a = activations(nonnegative=method == "nmf")
    basis = FittedBasis(method, 3).fit(a)
    est = reference(method, 3, a.numpy())
    expected = est.transform(a.numpy())
    np.testing.assert_allclose(basis.encode(a).numpy(), expected, atol=atol)
    np.testing.assert_allclose(basis.decode(torch.from_numpy(expected)).numpy(), est.inverse_transform(expected),
                               atol=1e-10)  # fmt: skip


def test_pca_concepts_by_a_literal_loop():
    a = activations()
    basis = FittedBasis("pca", 2).fit(a)
    c = basis.encode(a)
    mean = [sum(float(a[i, j]) for i in range(len(a))) / len(a) for j in range(a.shape[1])]
    for i in range(0, len(a), 37):
        for k in range(2):
            value = sum((float(a[i, j]) - mean[j]) * float(basis.components[k, j]) for j in range(a.shape[1]))
            assert c[i, k].item() == pytest.approx(value, abs=1e-9)


def test_nmf_encode_is_the_nonnegative_least_squares_fit():
    a = activations(nonnegative=True)
    basis = FittedBasis("nmf", 3).fit(a)
    c = basis.encode(a)
    assert bool((c >= 0).all())
    # optimality (KKT): the gradient of ||a - c H||^2 is >= 0, and 0 where c > 0
    grad = (c @ basis.components - a) @ basis.components.T
    assert float(grad.min()) > -1e-6
    assert float(grad[c > 1e-9].abs().max()) < 1e-6


def test_pca_fvu_is_the_variance_the_components_leave():
    a = activations()
    basis = FittedBasis("pca", 2).fit(a)
    est = reference("pca", 2, a.numpy())
    assert basis.fvu == pytest.approx(1 - est.explained_variance_ratio_.sum(), abs=1e-10)
    assert basis.reconstruction_error == {"fvu": basis.fvu, "mse": basis.mse}
    residual = a - basis.decode(basis.encode(a))
    assert basis.mse == pytest.approx(float((residual**2).mean()), rel=1e-10)


@pytest.mark.parametrize("method", ["pca", "nmf", "ica"])
def test_encode_follows_the_activations_dtype_and_the_fit_repeats(method):
    a = activations(nonnegative=method == "nmf")
    basis = FittedBasis(method, 2, seed=3).fit(a)
    again = FittedBasis(method, 2, seed=3).fit(a)
    assert torch.equal(basis.components, again.components)
    c32 = basis.encode(a.float())
    assert c32.dtype == torch.float32
    np.testing.assert_allclose(c32.numpy(), basis.encode(a).numpy(), atol=1e-4)
    assert basis.names == [f"{method}_0", f"{method}_1"]
    assert (basis.n_units, basis.n_concepts, basis.kind) == (6, 2, method)


def test_given_names_and_options():
    a = activations()
    basis = FittedBasis("ICA", 2, names=["first", "second"], options={"fun": "cube"}).fit(a)
    assert basis.kind == "ica" and basis.names == ["first", "second"]
    est = decomposition.FastICA(n_components=2, random_state=0, whiten="unit-variance", max_iter=1000, fun="cube")
    np.testing.assert_allclose(basis.encode(a).numpy(), est.fit(a.numpy()).transform(a.numpy()), atol=1e-10)
    with pytest.raises(ValueError, match="n_components"):
        FittedBasis("pca", 2, options={"n_components": 3})
    with pytest.raises(ValueError, match="'whiten': the basis encodes by the plain transform"):
        FittedBasis("pca", 2, options={"whiten": True})
    with pytest.raises(ValueError, match="Expected 2 concept `names`"):
        FittedBasis("pca", 2, names=["one"])


def test_unknown_method_says_which_was_meant():
    with pytest.raises(ValueError, match=r"one of \['pca', 'nmf', 'ica'\], but got 'icaa' \(did you mean 'ica'\?\)"):
        FittedBasis("icaa", 2)


def test_too_many_concepts_name_the_argument():
    a = activations()
    with pytest.raises(ValueError, match=r"`n_concepts` <= 6 \(N=300 rows, D=6 units\) for PCA, but got 7"):
        FittedBasis("pca", 7).fit(a)
    with pytest.raises(ValueError, match=r"`n_concepts` <= 4 \(N=4 rows, D=6 units\) for ICA"):
        FittedBasis("ica", 5).fit(a[:4])
    with pytest.raises(ValueError, match=r"`n_concepts` <= 6 \(the layer's units, D=6\) for NMF"):
        FittedBasis("nmf", 7).fit(a.abs())
    with pytest.raises(ValueError, match=r"`n_concepts` <= 5 \(the layer's units\) for PCA, but got 6"):
        FittedBasis("pca", 6).check_width(5)  # the probe's check, before any pass over the data
    with pytest.raises(TypeError, match="n_concepts"):
        FittedBasis("pca", 2.5)


def test_nmf_refuses_negative_activations_with_the_reason():
    with pytest.raises(ValueError, match=r"NMF needs non-negative activations.*ReLU.*'pca'"):
        FittedBasis("nmf", 2).fit(activations())


def test_encode_before_fit_and_bad_inputs():
    basis = FittedBasis("pca", 2)
    with pytest.raises(ValueError, match=r"not fitted yet: call `fit\(activations\)` first"):
        basis.encode(torch.ones(3, 6))
    with pytest.raises(ValueError, match="not fitted yet"):
        basis.decode(torch.ones(3, 2))
    a = activations()
    a[3, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN or infinity"):
        basis.fit(a)
    basis.fit(activations())
    with pytest.raises(ValueError, match="have 6 units, as the concept basis \\(pca\\) reads, but the layer has 5"):
        basis.encode(torch.ones(3, 5))
    assert repr(basis) == "FittedBasis(kind='pca', n_concepts=2)"
