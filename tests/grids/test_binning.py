"""Grids: uniform, quantile and k-means edges against independent references; codes agree with the edges."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.preprocessing import KBinsDiscretizer

from torch_amore.grids import edges
from torch_amore.grids.binning import bin_features
from torch_amore.grids.edges import grid_edges, kmeans_edges, nan_min_max


@pytest.fixture
def data():
    g = torch.Generator().manual_seed(0)
    X = torch.cat(
        [
            torch.randn(500, 2, generator=g, dtype=torch.float64),
            torch.rand(500, 1, generator=g, dtype=torch.float64) ** 3,
        ],
        1,
    )
    X[::11, 1] = float("nan")
    return X


def test_uniform_edges(data):
    e = grid_edges(data, 5, "uniform").numpy()
    for f in range(3):
        col = data[:, f].numpy()
        col = col[~np.isnan(col)]
        assert np.allclose(e[f], np.linspace(col.min(), col.max(), 6), atol=1e-12)


def test_quantile_edges_match_numpy(data):
    e = grid_edges(data, 4, "quantile").numpy()
    for f in range(3):
        col = data[:, f].numpy()
        assert np.allclose(e[f], np.nanquantile(col, np.linspace(0, 1, 5)), atol=1e-12)


def lloyd_reference(col: np.ndarray, k: int, max_iter: int = 1000) -> np.ndarray:
    """Plain 1-D Lloyd iterations from the uniform-grid midpoints until the assignment stops changing (at most
    ``max_iter`` centre updates)."""
    lo, hi = col.min(), col.max()
    centres = lo + (hi - lo) * (np.arange(k) + 0.5) / k
    assign = None
    for _ in range(max_iter):
        new = np.abs(col[:, None] - centres[None, :]).argmin(1)
        if assign is not None and (new == assign).all():
            break
        assign = new
        centres = np.array([col[assign == j].mean() if (assign == j).any() else centres[j] for j in range(k)])
        centres.sort()
    mids = (centres[1:] + centres[:-1]) / 2
    return np.concatenate([[lo], mids, [hi]])


def test_kmeans_edges_match_lloyd_reference(data):
    e = grid_edges(data, 4, "kmeans").numpy()
    for f in range(3):
        col = data[:, f].numpy()
        col = col[~np.isnan(col)]
        assert np.allclose(e[f], lloyd_reference(col, 4), atol=1e-9)
        # scikit-learn's KBinsDiscretizer stops at a looser tolerance: close, not equal
        ref = KBinsDiscretizer(n_bins=4, encode="ordinal", strategy="kmeans", subsample=None)
        ref = ref.fit(col.reshape(-1, 1)).bin_edges_[0]
        assert np.allclose(e[f], ref, atol=0.05 * (col.max() - col.min()))


@pytest.fixture(scope="module")
def slow_column():
    """A skewed column on which Lloyd's centres creep for many iterations before they settle."""
    g = torch.Generator().manual_seed(3)
    return torch.randn(4000, generator=g).double()[:, None]  # about 76 Lloyd updates at 10 grids


@pytest.fixture(params=["host", "torch"])
def lloyd_path(request, monkeypatch):
    """The Lloyd loop of few CPU columns (numpy, column by column) or of many (batched torch operations)."""
    if request.param == "torch":
        monkeypatch.setattr(edges, "_HOST_LLOYD_COLUMNS", 0)
    return request.param


def test_kmeans_edges_run_exactly_max_iter_lloyd_updates(slow_column, lloyd_path):
    col = slow_column[:, 0].numpy()
    converged = lloyd_reference(col, 10)
    for max_iter in (1, 3, 5, 17, 33, 50):  # between and on the iterations where convergence is checked
        e = kmeans_edges(slow_column, nan_min_max(slow_column), 10, max_iter)
        assert np.allclose(e[0].numpy(), lloyd_reference(col, 10, max_iter), rtol=0, atol=1e-9)
    assert not np.allclose(lloyd_reference(col, 10, 50), converged, rtol=0, atol=1e-6)  # still moving at 50
    assert np.allclose(grid_edges(slow_column, 10, "kmeans")[0].numpy(), converged, rtol=0, atol=1e-9)


def test_kmeans_host_loop_and_sparse_convergence_checks_change_nothing(slow_column, monkeypatch):
    """The numpy loop of few columns, and the torch loop asking whether it converged every few iterations, give the
    centres of the torch loop asking after every iteration, bit for bit (the same float64 operations)."""
    g = torch.Generator().manual_seed(5)
    X = torch.cat([slow_column, slow_column.flip(0) ** 2, torch.zeros_like(slow_column),
                   torch.rand(len(slow_column), 2, generator=g, dtype=torch.float64) ** 4], 1)  # fmt: skip
    X[::7, 1] = float("nan")
    X[:, 4] = float("nan")  # a column without values
    iters = (1, 2, 3, 9, 16, 40, 300)
    host = {m: kmeans_edges(X, nan_min_max(X), 10, m) for m in iters}
    monkeypatch.setattr(edges, "_HOST_LLOYD_COLUMNS", 0)
    sparse = {m: kmeans_edges(X, nan_min_max(X), 10, m) for m in iters}
    monkeypatch.setattr(edges, "_check_convergence", lambda iteration: True)  # ask after every iteration
    for m in iters:
        every = kmeans_edges(X, nan_min_max(X), 10, m)
        assert torch.equal(every.nan_to_num(-7.0), sparse[m].nan_to_num(-7.0)), m
        assert torch.equal(every.nan_to_num(-7.0), host[m].nan_to_num(-7.0)), m
    assert not torch.equal(host[3], host[300])  # the iterations move the centres


def test_codes_follow_the_interval_convention(data):
    b = bin_features(data, [0, 1, 2], ["float"] * 3, n_grids=6, bin_strategy="quantile")
    codes = b.codes.long().numpy()
    thr = b.thresholds.numpy()
    for f in range(3):
        col = data[:, f].numpy()
        nan = np.isnan(col)
        assert (codes[nan, f] == b.nan_code).all()
        expect = (col[~nan, None] >= thr[f][None, :]).sum(1)
        assert (codes[~nan, f] == expect).all()


def test_categorical_codes():
    X = torch.tensor([[3.0], [1.0], [7.0], [3.0], [float("nan")]])
    b = bin_features(X, [0], ["cat"], n_grids=2)
    assert b.codes[:, 0].tolist() == [1, 0, 2, 1, b.nan_code]
    assert b.categories[0, :3].tolist() == [1.0, 3.0, 7.0]
    assert b.encode_sample(torch.tensor([7.0])) == [2]
    assert b.encode_sample(torch.tensor([5.0])) == [-1]  # unseen category


def test_both_code_layouts_hold_each_values_grid(data):
    """Row-major ``codes`` and column-major ``column_major()`` both give each value's grid, counted literally; a fine
    binning stores the column-major codes (``codes`` a view of them) and hands them out without a copy."""
    from torch_amore.grids.fine_grid import fine_binning

    b = bin_features(data, [0, 1, 2], ["float"] * 3, n_grids=6)
    assert b.codes_t is None  # a plain binning stores one layout only
    thr, x = b.thresholds.numpy(), data.numpy()
    expected = np.array([[b.nan_code if np.isnan(v) else int((v >= thr[f]).sum()) for v in x[:, f]] for f in range(3)])
    np.testing.assert_array_equal(b.codes.numpy().T, expected)
    np.testing.assert_array_equal(b.column_major().numpy(), expected)
    assert b.column_major().is_contiguous() and b.column_major() is b.codes_t  # made once, then kept

    fine = fine_binning(data, b, 256)
    stored = fine.codes_t
    assert fine.column_major() is stored and fine.codes.data_ptr() == stored.data_ptr()
    lo, hi = np.nanmin(x, 0), np.nanmax(x, 0)
    grid = np.clip(np.floor((x - lo) * (256 / (hi - lo))), 0, 255)
    np.testing.assert_array_equal(stored.numpy(), np.where(np.isnan(x), fine.nan_code, grid).T)
    np.testing.assert_array_equal(fine.codes.numpy(), stored.numpy().T)
