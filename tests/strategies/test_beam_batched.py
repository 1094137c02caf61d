"""The beam's batched, sync-free machinery: dense best intervals, host syncs of a search, the expansion's fetch."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import torch_amore as ta
from torch_amore.strategies import beam
from torch_amore.strategies.beam import BeamSearch
from torch_amore.strategies.best_interval import best_intervals, best_intervals_dense

SYNC_OPS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim",
            "aten::unique_consecutive")  # fmt: skip


def brute_best(a: list[int], b: list[int], kappa: float, min_support: int, cat: bool, positive: bool):
    """Literal search: the best value of sum(a - kappa * b) over proper intervals (single grids when ``cat``) with
    support >= min_support, or None."""
    n, total, best = len(a), sum(b), None
    for i in range(n):
        for j in range(i, i + 1 if cat else n):
            s = sum(b[i : j + 1])
            if s < min_support or s == total:  # too small, or every sample: no condition at all
                continue
            v = 1000 * sum(a[i : j + 1]) - round(1000 * kappa) * s
            if (v > 0 or not positive) and (best is None or v > best):
                best = v
    return best


@pytest.mark.parametrize("positive", [True, False])
def test_dense_best_intervals_match_brute_force_and_the_compacting_call(positive):
    g = torch.Generator().manual_seed(2)
    n_rows, width = 12, 9
    tot = torch.randint(0, 9, (n_rows, width), generator=g)
    tot[3, 4:] = 0  # empty grids at the end
    tgt = (tot * torch.rand(n_rows, width, generator=g)).round().long()
    n_bins = torch.full((n_rows,), width)
    n_bins[5] = 6
    tot[5, 6:], tgt[5, 6:] = 0, 0
    is_cat = torch.zeros(n_rows, dtype=torch.bool)
    is_cat[[2, 7]] = True
    kappas = (0.2, 0.5, 0.9)
    dense = best_intervals_dense(tot, tgt, n_bins, is_cat, 7, kappas, positive=positive, max_count=100, any_cat=True)
    checked = 0
    for r in range(n_rows):
        a, b = tgt[r, : int(n_bins[r])].tolist(), tot[r, : int(n_bins[r])].tolist()
        for q, kp in enumerate(kappas):
            expect = brute_best(a, b, kp, 7, bool(is_cat[r]), positive)
            assert bool(dense.valid[r, q]) == (expect is not None), (r, kp)
            if expect is None:
                continue
            lo, hi = int(dense.g_low[r, q]), int(dense.g_high[r, q])
            hits, support = sum(a[lo : hi + 1]), sum(b[lo : hi + 1])
            assert 1000 * hits - round(1000 * kp) * support == expect
            assert (int(dense.hits[r, q]), int(dense.support[r, q])) == (hits, support)
            checked += 1
    assert checked > 10
    compact = best_intervals(tot, tgt, n_bins, is_cat, 7, kappas, positive=positive)  # reads max and is_cat itself
    rows, ks = torch.nonzero(dense.valid, as_tuple=True)
    assert torch.equal(compact.feature, rows) and torch.equal(compact.kappa, ks)
    for name in ("g_low", "g_high", "hits", "support"):
        assert torch.equal(getattr(compact, name), getattr(dense, name)[rows, ks])


def test_dense_best_intervals_in_cpu_blocks_equal_each_row_alone(monkeypatch):
    """Rows taken in blocks (a CPU caps the block at ``_CPU_BLOCK`` elements whatever the budget) give what each row
    gives alone."""
    from torch_amore.strategies import best_interval

    g = torch.Generator().manual_seed(5)
    n_rows, width, kappas = 40, 30, (0.1, 0.5)
    tot = torch.randint(0, 20, (n_rows, width), generator=g)
    tgt = (tot * torch.rand(n_rows, width, generator=g)).round().long()
    n_bins, is_cat = torch.full((n_rows,), width), torch.zeros(n_rows, dtype=torch.bool)
    is_cat[::7] = True
    monkeypatch.setattr(best_interval, "_CPU_BLOCK", 3 * (width + 1) * 6)  # blocks of 6 rows
    blocked = best_intervals_dense(tot, tgt, n_bins, is_cat, 25, kappas, positive=False, max_count=600, any_cat=True)
    for r in range(n_rows):
        alone = best_intervals_dense(
            tot[r : r + 1], tgt[r : r + 1], n_bins[r : r + 1], is_cat[r : r + 1], 25, kappas, positive=False,
            max_count=600, any_cat=True,
        )  # fmt: skip
        for name in ("g_low", "g_high", "hits", "support", "valid"):
            assert torch.equal(getattr(blocked, name)[r], getattr(alone, name)[0]), (r, name)


def test_dense_best_intervals_without_host_syncs():
    tot = torch.randint(0, 9, (40, 33))
    tgt = tot // 2
    n_bins, is_cat = torch.full((40,), 33), torch.zeros(40, dtype=torch.bool)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        best_intervals_dense(tot, tgt, n_bins, is_cat, 5, max_count=400, any_cat=False)
    assert not [e.name for e in prof.events() if e.name in SYNC_OPS]


@pytest.fixture
def planted():
    g = torch.Generator().manual_seed(4)
    X = torch.rand(3000, 6, generator=g, dtype=torch.float64)
    target = ((X[:, 1] > 0.4) & (X[:, 4] < 0.7)) ^ (torch.rand(3000, generator=g) < 0.05)
    return X, target


def _search(X, target, n_fine=128):
    from torch_amore.search.extract import prepare
    from torch_amore.search.options import SearchOptions

    ex = prepare(X, target, SearchOptions(n_grids=10))
    return BeamSearch(ex.fine(n_fine), ex.target, ex.n_total_target, beam_width=4)


def test_beam_run_host_syncs_are_few_and_per_length(planted, monkeypatch):
    """One ``nonzero`` per length but the last (the nodes' samples); ``tolist`` reads: one per length for the
    expansion, one per refinement check, one for the idle-condition counts."""
    X, target = planted
    search = _search(X, target)
    search.run(max_length=3, min_support=60)  # warm up (caches)
    reads = []
    real = torch.Tensor.tolist

    def counted(self):
        reads.append(self.numel())
        return real(self)

    monkeypatch.setattr(torch.Tensor, "tolist", counted)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        states = search.run(max_length=3, min_support=60)
    syncs = [e.name for e in prof.events() if e.name in SYNC_OPS]
    assert states and max(len(s.conds) for s in states) == 3
    assert syncs == ["aten::nonzero"] * 2
    assert len(reads) <= 3 + 2 + 1  # expansions, refinements (one check each here: two rounds), idle conditions


def test_expansion_fetching_one_candidate_at_a_time_gives_the_same_rules(planted, monkeypatch):
    """When a node runs out of fetched candidates its whole ordering is read: fetching one per node and objective
    (the fallback taken almost every time) finds exactly the rule sets of the default fetch."""
    X, target = planted
    kw = dict(max_length=3, min_support=60)
    whole = ta.extract_rules(X, target, **kw)
    monkeypatch.setattr(beam, "fetch_length", lambda width, n_kappas: 1)
    assert ta.extract_rules(X, target, **kw) == whole


def test_beam_states_hold_exact_counts(planted):
    X, target = planted
    search = _search(X, target)
    codes = search.fine.codes.long()
    states = search.run(max_length=3, min_support=60)
    for st in states:
        mask = torch.ones(len(X), dtype=torch.bool)
        for j, lo, hi in st.conds:
            mask &= (codes[:, j] >= lo) & (codes[:, j] <= hi)
        assert (st.hits, st.support) == (int((mask & target).sum()), int(mask.sum()))
        assert st.support >= 60


def test_host_thresholds_equal_the_device_bisection():
    """Thresholds computed on the host (no sync) are the device bisection's, bit for bit, on awkward scales."""
    from torch_amore.grids.binning import bin_features
    from torch_amore.grids.fine_grid import fine_binning, host_grid_start

    g = torch.Generator().manual_seed(0)
    X = torch.randn(3000, 4, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1e-3, 1e4, 1e-200])
    X = X + torch.tensor([0.0, 5.0, -3e6, 1e-190])
    X[::13, 1] = float("nan")
    fine = fine_binning(X, bin_features(X, [0, 1, 2, 3], ["float"] * 4, n_grids=4), 256)
    for f in range(4):
        device = fine.threshold(torch.full((255,), f), torch.arange(1, 256)).tolist()
        host = [host_grid_start(fine.lo_host[f], fine.hi_host[f], fine.scale_host[f], k, 256) for k in range(1, 256)]
        assert host == device
        codes = fine.codes[:, f].long()
        ok = ~torch.isnan(X[:, f])
        reached = (X[ok, f][:, None] >= torch.tensor(host, dtype=torch.float64)[None, :]).sum(1)
        assert torch.equal(reached, codes[ok])


def test_fine_binning_host_lists_equal_its_tensors():
    """``is_cat_host``/``n_bins_host``/``lo_host``... are the tensors' values (with a categorical feature)."""
    from torch_amore.grids.binning import bin_features
    from torch_amore.grids.fine_grid import fine_binning

    g = torch.Generator().manual_seed(1)
    X = torch.rand(500, 3, generator=g, dtype=torch.float64)
    X[:, 1] = torch.randint(0, 4, (500,), generator=g).double()
    fine = fine_binning(X, bin_features(X, [0, 1, 2], ["float", "cat", "float"], n_grids=5), 256)
    assert fine.is_cat_host == fine.is_cat.tolist() == [False, True, False]
    assert fine.n_bins_host == fine.n_bins.tolist() == [256, 4, 256]
    assert fine.lo_host == fine.lo.tolist() and fine.hi_host == fine.hi.tolist()
    assert fine.scale_host == fine.scale.tolist()
    assert fine.interval_bounds(1, 2, 2) == (2.0, 3.0)  # a category: between its value and the next
