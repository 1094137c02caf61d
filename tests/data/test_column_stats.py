"""The fixed costs before the search: per-column facts in one fused pass, categories by a batched sort, codes in few
chunks, and `prepare` in a bounded number of host syncs and tensor ops."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sync_count import count_syncs

import torch_amore.data.column_stats as CS
import torch_amore.grids.edges as B
from torch_amore._utils import distributed as D
from torch_amore.data.column_stats import column_stats, original_units
from torch_amore.grids.binning import bin_features
from torch_amore.grids.edges import codes_from_thresholds, nan_min_max
from torch_amore.search.extract import prepare
from torch_amore.search.options import SearchOptions


def _columns(n: int = 600, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Columns of every kind: float, int, binary, big integers, -0.0, missing values, an all-missing column."""
    g = torch.Generator().manual_seed(0)
    cols = [
        torch.randn(n, generator=g, dtype=torch.float64),  # float
        torch.randint(-5, 9, (n,), generator=g).double(),  # int
        torch.randint(0, 2, (n,), generator=g).double(),  # binary
        torch.randint(0, 3, (n,), generator=g).double(),  # {0, 1, 2}
        torch.randint(0, 2, (n,), generator=g).double() + 1,  # {1, 2}
        torch.full((n,), 2.0**54) + 2 * torch.randint(0, 4, (n,), generator=g).double(),  # whole, but beyond 2**53
        torch.where(torch.rand(n, generator=g) < 0.5, -0.0, 1.0),  # {-0.0, 1}: binary
        torch.full((n,), math.nan),  # all missing
        torch.randint(0, 4, (n,), generator=g).double() * 0.5,  # halves
    ]
    X = torch.stack(cols, 1)
    X[::7, 0] = math.nan
    X[3::5, 2] = math.nan
    return X.to(dtype)


def _reference(X: np.ndarray) -> dict[str, list]:
    """A literal per-column computation in numpy (float64)."""
    out: dict[str, list] = {"lo": [], "hi": [], "is_int": [], "kinds": []}
    for col in X.T.astype(np.float64):
        v = col[~np.isnan(col)]
        lo, hi = (v.min(), v.max()) if v.size else (math.nan, math.nan)
        is_int = bool(v.size) and bool(np.all(v == np.round(v))) and bool(np.all(np.abs(v) <= 2.0**53))
        binary = is_int and set(v.tolist()) == {0.0, 1.0}
        out["lo"].append(lo)
        out["hi"].append(hi)
        out["is_int"].append(is_int)
        out["kinds"].append("cat" if binary else ("int" if is_int else "float"))
    return out


def _same(a: list[float], b: list[float]) -> bool:
    return all((x == y) or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_column_stats_match_a_literal_computation(dtype):
    X = _columns(dtype=dtype)
    if dtype == torch.float16:
        X = X[:, [0, 1, 2, 3, 4, 6, 7, 8]]  # 2**54 is beyond float16
    ref = _reference(X.double().numpy())
    facts = column_stats(X).fetch()
    assert _same(facts.lo, ref["lo"]) and _same(facts.hi, ref["hi"])
    assert facts.is_int == ref["is_int"]
    assert facts.kinds() == ref["kinds"]
    assert not any(facts.has_inf) and not any(facts.overflow)
    lo, hi = nan_min_max(X)
    assert _same(lo.tolist(), ref["lo"]) and _same(hi.tolist(), ref["hi"])
    assert lo.dtype == torch.float64


def test_many_chunks_give_the_same_facts(monkeypatch):
    """Rows split into many chunks (one row or more each) reduce to the facts of one chunk."""
    X = _columns(n=300)
    whole = column_stats(X).fetch()
    monkeypatch.setattr(CS, "_FACTS_CHUNK", 7)  # one row per chunk
    chunked = column_stats(X).fetch()
    assert _same(chunked.lo, whole.lo) and _same(chunked.hi, whole.hi) and chunked.is_int == whole.is_int


@pytest.mark.parametrize("shape", [(10, 3), (11, 3), (7, 64), (5, 200), (0, 4), (3, 1)])
@pytest.mark.parametrize("op", [torch.amin, torch.amax])
def test_column_reduce_equals_the_plain_reduction(shape, op):
    """The wide view gives the plain per-column reduction, also when the rows do not fill the view evenly."""
    g = torch.Generator().manual_seed(shape[0] * 1000 + shape[1])
    x = torch.randn(shape, generator=g)
    if shape[0] == 0:
        with pytest.raises((IndexError, RuntimeError)):
            op(x, 0)  # no rows: torch refuses; so does the wide view
        with pytest.raises((IndexError, RuntimeError)):
            CS.column_reduce(x, op)
        return
    assert torch.equal(CS.column_reduce(x, op), op(x, 0))
    assert torch.equal(CS.column_reduce(x.t().contiguous().t(), op), op(x, 0))  # not contiguous: the plain one


def test_infinite_values_and_overflowing_ranges_are_flagged():
    X = torch.zeros(10, 4, dtype=torch.float64)
    X[:, 0] = torch.arange(10.0)
    X[3, 1], X[5, 2] = math.inf, -math.inf
    X[:, 3] = torch.tensor([-1.7e308, 1.7e308] * 5, dtype=torch.float64)
    facts = column_stats(X).fetch()
    assert facts.has_inf == [False, True, True, False]
    assert facts.overflow == [False, True, True, True]
    assert facts.is_int[1:3] == [False, False]  # +-inf is no integer
    assert facts.spread[0] == 9.0


def test_original_units_snap_and_drive_the_inferred_types():
    g = torch.Generator().manual_seed(1)
    raw = torch.randint(0, 2, (200, 3), generator=g).double()
    raw[:, 2] = raw[:, 2] * 3 + 2  # {2, 5}
    scale, offset = [0.1, 3.0, 7.0], [0.3, -1.0, 0.0]
    X = (raw - torch.tensor(offset, dtype=torch.float64)) / torch.tensor(scale, dtype=torch.float64)
    back = original_units(X, torch.tensor(scale, dtype=torch.float64), torch.tensor(offset, dtype=torch.float64))
    assert torch.equal(back, raw)  # within 1e-6 of the integers: snapped exactly
    facts = column_stats(X, units=(scale, offset)).fetch()
    assert facts.units.kinds() == ["cat", "cat", "int"]
    assert facts.kinds() != facts.units.kinds()  # in X's own units the columns are not 0/1


def test_unique_columns_match_torch_unique():
    X = _columns()
    X[:, 3] = torch.arange(600.0) % 37  # 37 distinct values
    table, count = D.unique_columns(X, 40)
    assert table.shape == (X.shape[1], 40)
    for j in range(X.shape[1]):
        col = X[:, j]
        expect = torch.unique(col[~torch.isnan(col)])
        assert count[j] == expect.numel()  # exact, also beyond the cap (column 0)
        m = min(expect.numel(), 40)
        assert torch.equal(table[j, :m], expect[:m]) and bool(table[j, m:].isnan().all())
    small, exact = D.unique_columns(X[:, 3:4], 5)  # beyond the cap: the 5 smallest, and the exact count
    assert small.tolist() == [[0.0, 1.0, 2.0, 3.0, 4.0]] and exact.tolist() == [37]
    empty, none = D.unique_columns(X[:0], 5)
    assert empty.shape == (X.shape[1], 0) and none.tolist() == [0] * X.shape[1]


def test_categorical_tables_equal_one_unique_per_feature():
    X = _columns()[:, [0, 1, 2, 3, 4, 6, 8]]
    X[:, 0] = torch.round(X[:, 0] * 2)
    kinds = ["cat"] * 7
    b = bin_features(X, list(range(7)), kinds, n_grids=4)
    for j in range(7):
        col = X[:, j]
        values = torch.unique(col[~torch.isnan(col)])
        m = values.numel()
        assert int(b.n_bins[j]) == m
        assert torch.equal(b.categories[j, :m], values) and bool(b.categories[j, m:].isnan().all())
        assert torch.equal(b.thresholds[j, : m - 1], values[1:]) and bool((b.thresholds[j, m - 1 :] == math.inf).all())
        expect = torch.searchsorted(values, col.nan_to_num(0.0), right=True) - 1
        expect[torch.isnan(col)] = b.nan_code
        assert torch.equal(b.codes[:, j].long(), expect)


def test_float32_codes_equal_float64_comparisons(monkeypatch):
    """float32 values compared with thresholds rounded up to float32 count exactly the float64 thresholds reached,
    also for thresholds a hair above or below a float32 value."""
    g = torch.Generator().manual_seed(2)
    X = torch.randn(400, 3, generator=g)
    X[::9, 1] = math.nan
    picks = X[torch.randint(0, 400, (20,), generator=g), 0].double()
    eps = torch.tensor([-1e-12, 0.0, 1e-12, 1e-40])
    thr = (picks[:, None] + eps[None, :] * picks.abs().clamp(min=1.0)[:, None]).reshape(-1)
    thr = torch.sort(thr).values.nan_to_num(0.0)
    thresholds = torch.stack([thr, thr, torch.linspace(-2, 2, thr.numel(), dtype=torch.float64)])
    for n_thr in (0, 1, 10, thresholds.shape[1]):  # one pass per threshold, then a binary search (more than 64)
        t = thresholds[:, :n_thr].contiguous()
        expect = (X.double()[:, :, None] >= t[None, :, :]).sum(2)
        expect[torch.isnan(X)] = 999
        for chunk in (B._CODE_CHUNK, 7, 1):  # one chunk; chunks of two rows; of one row
            monkeypatch.setattr(B, "_CODE_CHUNK", chunk)
            out = torch.empty(X.shape, dtype=torch.int16)
            codes_from_thresholds(X, t, out, 999)
            assert torch.equal(out.long(), expect)


def _count(fn) -> tuple[int, int]:
    """(host syncs, top-level aten ops) of ``fn()`` (:func:`sync_count.count_syncs`: synchronising aten ops plus
    ``Tensor.tolist`` calls)."""
    with count_syncs() as syncs:
        fn()
    return syncs.aten + syncs.tolist, syncs.ops


def _task(n_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(3000, n_features, generator=g)
    X[:, 1] = (X[:, 1] > 0.5).float()  # binary: inferred 'cat'
    X[:, 2] = torch.randint(0, 7, (3000,), generator=g).float()  # int
    X[::13, 3] = math.nan
    return X, X[:, 0] > 0.7


@pytest.mark.parametrize("extra", [{}, {"feature_types": "cat2"}, {"bin_strategy": "quantile"}])
def test_prepare_syncs_and_ops_do_not_grow_with_features(extra):
    """Validation, type inference and binning: a few syncs and at most 200 ops, however many features.

    Syncs: the target's count, the column facts, the categories of non-binary 'cat' features (one fetch for all)
    and the extractor's subgroup size."""
    counts = {}
    for n_features in (8, 120):
        X, target = _task(n_features)
        kw = dict(extra)
        if kw.get("feature_types") == "cat2":
            kw["feature_types"] = ["float", "cat", "cat"] + ["float"] * (n_features - 3)
        options = SearchOptions.resolve(None, max_length=3, min_support=100, **kw)
        counts[n_features] = _count(lambda: prepare(X, target, options))  # noqa: B023
    (s_small, ops_small), (s_wide, ops_wide) = counts[8], counts[120]
    assert s_small == s_wide <= (4 if "feature_types" in extra else 3)
    assert ops_wide <= ops_small <= 200  # narrow data takes a few more (column reductions over a wide view)
