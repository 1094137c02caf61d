"""Distributed extraction: two gloo processes on shards give the rules of one process on the concatenated data."""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo_ranks import spawn_ranks

import torch_amore as ta
from torch_amore._utils import distributed as D
from torch_amore.grids import exact_edges as E
from torch_amore.grids.edges import grid_edges, kmeans_edges, nan_min_max, quantile_edges
from torch_amore.integrations.metric_classes import RuleSetMetrics

STRATEGIES = ("uniform", "quantile", "kmeans")
TYPES = ["float", "int", "cat", "float", "float", "cat"]


def mixed_data(n: int = 700, seed: int = 0, dtype: torch.dtype = torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """Floats, integers, a 0/1 column, missing values, ties and signed zeros, and a 3-valued category."""
    g = torch.Generator().manual_seed(seed)
    X = torch.empty(n, 6, dtype=torch.float64)
    X[:, 0] = torch.rand(n, generator=g)
    X[:, 1] = torch.randint(0, 10, (n,), generator=g).double()
    X[:, 2] = (torch.rand(n, generator=g) < 0.4).double()
    X[:, 3] = torch.randn(n, generator=g) * 3
    X[torch.rand(n, generator=g) < 0.1, 3] = float("nan")
    X[:, 4] = torch.round(torch.randn(n, generator=g) * 4) / 10  # ties; -0.0 and 0.0
    X[X[:, 4] == 0, 4] = torch.where(torch.rand(int((X[:, 4] == 0).sum()), generator=g) < 0.5, -0.0, 0.0).double()
    X[:, 5] = torch.tensor([2.0, 5.0, 7.0]).double()[torch.randint(0, 3, (n,), generator=g)]
    noise = torch.rand(n, generator=g) < 0.05
    target = (((X[:, 0] > 0.55) & (X[:, 2] == 1)) | ((X[:, 1] >= 8) & (X[:, 5] == 7))) ^ noise
    return X.to(dtype), target


def shard_rows(X: torch.Tensor, kind: str) -> list[torch.Tensor]:
    """Row indices of rank 0 and rank 1: uneven shards with different distributions (not a random split)."""
    n = X.shape[0]
    idx = torch.arange(n)
    if kind == "empty":  # rank 1 holds nothing
        return [idx, idx[:0]]
    low = (X[:, 0] < 0.35) | (X[:, 5] == 7)  # rank 0 sees most of category 7 and few targets of the first box
    return [idx[low], idx[~low]]


def run_cases() -> dict[str, dict]:
    """name -> (data kwargs, shard kind, extract_rules kwargs, whether the beam's exact polish is switched off)."""
    cases = {}
    for bins in STRATEGIES:
        cases[f"{bins}-typed-paper"] = dict(
            data={}, shard="skewed", kw=dict(bin_strategy=bins, feature_types=TYPES, strategy="paper")
        )
    cases["quantile-inferred-paper"] = dict(
        data={}, shard="skewed", kw=dict(bin_strategy="quantile", strategy="paper", top_k=4)
    )
    cases["kmeans-float32-paper"] = dict(
        data={"dtype": torch.float32}, shard="skewed", kw=dict(bin_strategy="kmeans", strategy="paper")
    )
    cases["uniform-empty-shard-paper"] = dict(
        data={"seed": 1}, shard="empty", kw=dict(bin_strategy="uniform", strategy="paper")
    )
    # the beam strategy's grid search alone (polish off on both sides), and with its final polish on observed values
    for bins in ("uniform", "kmeans"):
        cases[f"{bins}-typed-beam"] = dict(
            data={}, shard="skewed", kw=dict(bin_strategy=bins, feature_types=TYPES, strategy="beam"), no_polish=True
        )
    cases["uniform-beam-polish"] = dict(
        data={}, shard="skewed", kw=dict(bin_strategy="uniform", feature_types=TYPES, strategy="beam")
    )
    return cases


@contextlib.contextmanager
def polish_off(off: bool):
    """Switch off the beam strategy's final exact polish (if this version of the search has one)."""
    from torch_amore.search.extractor import Extractor

    original = getattr(Extractor, "polish", None)
    if off and original is not None:
        Extractor.polish = lambda self, rule_set, *args, **kwargs: rule_set
    try:
        yield
    finally:
        if original is not None:
            Extractor.polish = original


COMMON = dict(max_length=2, min_support=0.04, n_grids=8, top_k=3)


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        out: dict = {"sharded": D.is_sharded(), "world": D.world_size(), "rank": D.rank(), "rules": {}, "edges": {}}
        for name, case in run_cases().items():
            X, target = mixed_data(**case["data"])
            rows = shard_rows(X, case["shard"])[rank]
            with polish_off(case.get("no_polish", False)):
                rule_sets = ta.extract_rules(X[rows], target[rows], **{**COMMON, **case["kw"]})
            out["rules"][name] = [rs.to_dict() for rs in rule_sets]
        X, target = mixed_data()
        rows = shard_rows(X, "skewed")[rank]
        for strategy in STRATEGIES:
            out["edges"][strategy] = grid_edges(X[rows], 7, strategy)
        out["unique"] = D.all_gather_unique(X[rows, 5])
        out["n"] = D.global_count(rows.numel())
        out["min"], out["max"] = D.all_reduce_min(X[rows, 0].min()), D.all_reduce_max(X[rows, 0].max())
        out["min_max"] = D.all_reduce_min_max(X[rows, :1].amin(0), X[rows, :1].amax(0))  # one collective
        with D.local_only():
            out["local_n"] = D.global_count(rows.numel())
        # torchmetrics syncs the count states over the process group in compute()
        best = ta.RuleSet.from_dict(out["rules"]["uniform-typed-paper"][0])
        metrics = RuleSetMetrics(best)
        for chunk in torch.split(rows, 50):
            metrics.update(X[chunk], target[chunk])
        out["metrics"] = {k: float(v) for k, v in metrics.compute().items()}
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def run_ranks(world: int, tmp_path: Path, timeout: float = 120.0) -> list[dict]:
    """Run :func:`_worker` in ``world`` spawned processes; fail (not hang) if they do not finish in time."""
    return spawn_ranks(_worker, world, tmp_path, timeout)


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    return run_ranks(2, tmp_path_factory.mktemp("ddp"))


def single_process(name: str) -> list[dict]:
    case = run_cases()[name]
    X, target = mixed_data(**case["data"])
    whole = torch.cat(shard_rows(X, case["shard"]))  # the concatenation of the shards (a permutation of the data)
    with polish_off(case.get("no_polish", False)):
        return [rs.to_dict() for rs in ta.extract_rules(X[whole], target[whole], **{**COMMON, **case["kw"]})]


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in run_cases() if not n.endswith("polish")])
def test_two_gloo_ranks_give_the_single_process_rules(ranks, name):
    assert [r["sharded"] for r in ranks] == [True, True]
    assert [(r["world"], r["rank"]) for r in ranks] == [(2, 0), (2, 1)]
    expected = single_process(name)
    assert expected
    assert ranks[0]["rules"][name] == expected
    assert ranks[1]["rules"][name] == expected
    # and the statistics describe the whole data, not a shard
    case = run_cases()[name]
    X, target = mixed_data(**case["data"])
    for rs in map(ta.RuleSet.from_dict, expected[:5]):
        mask = rs.mask(X)
        assert rs.support == int(mask.sum())
        assert math.isclose(rs.fitness, (2 * int((mask & target).sum()) - int(mask.sum())) / int(target.sum()))


@pytest.mark.slow
def test_beam_polish_matches_single_process(ranks):
    """The polish reduces only cell counts, minima and maxima, so it agrees across ranks too."""
    assert ranks[0]["rules"]["uniform-beam-polish"] == single_process("uniform-beam-polish")


@pytest.mark.slow
def test_two_gloo_ranks_give_bit_identical_grid_edges(ranks):
    X, _ = mixed_data()
    rows = shard_rows(X, "skewed")
    whole = X[torch.cat(rows)]
    for strategy in STRATEGIES:
        expected = grid_edges(whole, 7, strategy)
        for r in ranks:
            got = r["edges"][strategy]
            assert torch.equal(got.isnan(), expected.isnan()), strategy
            assert torch.equal(got.nan_to_num(0.0), expected.nan_to_num(0.0)), strategy


@pytest.mark.slow
def test_two_gloo_ranks_reduce_counts_extremes_and_categories(ranks):
    X, target = mixed_data()
    for r in ranks:
        assert r["unique"].tolist() == [2.0, 5.0, 7.0]
        assert r["n"] == X.shape[0]
        assert float(r["min"]) == float(X[:, 0].min()) and float(r["max"]) == float(X[:, 0].max())
        assert [float(v) for v in r["min_max"]] == [float(r["min"]), float(r["max"])]
    rows = shard_rows(X, "skewed")
    assert [r["local_n"] for r in ranks] == [int(rows[0].numel()), int(rows[1].numel())]


@pytest.mark.slow
def test_rule_metrics_sync_over_gloo_ranks(ranks):
    X, target = mixed_data()
    best = ta.RuleSet.from_dict(ranks[0]["rules"]["uniform-typed-paper"][0])
    mask = best.mask(X)
    covered, hits, n_target = int(mask.sum()), int((mask & target).sum()), int(target.sum())
    for r in ranks:
        m = r["metrics"]
        assert m["support"] == covered
        assert math.isclose(m["confidence"], hits / covered)
        assert math.isclose(m["fitness"], (2 * hits - covered) / n_target)


# --- single process: the helpers are no-ops, and the exact schemes agree with the one-process code --------------


def test_helpers_are_no_ops_without_a_process_group():
    assert not D.is_sharded() and D.world_size() == 1 and D.rank() == 0
    t = torch.tensor([3, 1])
    assert D.all_reduce_sum(t) is t and D.all_reduce_min(t) is t and D.all_reduce_max(t) is t
    assert all(a is t for a in D.all_reduce_min_max(t, t))
    assert D.global_count(7) == 7
    assert D.all_ranks(True) is True and D.any_rank(False) is False
    assert D.broadcast_object({"a": 1}) == {"a": 1}
    assert D.all_gather_unique(torch.tensor([3.0, float("nan"), 1.0, 3.0])).tolist() == [1.0, 3.0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n_grids", [2, 5, 10, 33])
def test_selection_quantiles_equal_sorted_quantiles(dtype, n_grids):
    X, _ = mixed_data(n=501, seed=n_grids, dtype=dtype)
    X[:, 2] = float("nan")  # an all-missing column
    expected = quantile_edges(X, n_grids, torch.float64)
    got = E.sharded_quantile_edges(X, n_grids)  # the distributed selection, on one process
    assert torch.equal(got.isnan(), expected.isnan())
    assert torch.equal(got.nan_to_num(0.0), expected.nan_to_num(0.0))


def test_order_statistics_against_sorting():
    g = torch.Generator().manual_seed(3)
    x = torch.cat([torch.randn(300, 4, generator=g, dtype=torch.float64), torch.full((5, 4), 0.0)])
    x[::11, 1] = float("nan")
    keys = E._to_keys(x + 0.0).masked_fill(torch.isnan(x), E._KEY_MISSING)
    keys = torch.sort(keys, dim=0).values.t().contiguous()
    valid = (~torch.isnan(x)).sum(0)
    ranks = torch.stack([torch.tensor([0, 7, 150, int(v) - 1]) for v in valid])
    got = E._from_keys(E.order_statistics(keys, ranks, valid), torch.float64)
    for f in range(4):
        col = torch.sort(x[:, f][~torch.isnan(x[:, f])]).values
        assert got[f].tolist() == col[ranks[f]].tolist()


def test_fixed_point_sums_do_not_depend_on_the_order():
    g = torch.Generator().manual_seed(5)
    x = torch.randn(4000, 3, generator=g, dtype=torch.float64) * torch.tensor([1e-3, 1.0, 1e6], dtype=torch.float64)
    e = E.fixed_point_exponents(x.amin(0), x.amax(0))
    perm = torch.randperm(4000, generator=g)
    a = E.from_fixed_point(E.to_fixed_point(x, e).sum(1), e)
    b = E.from_fixed_point(E.to_fixed_point(x[perm], e).sum(1), e)
    parts = E.to_fixed_point(x[:1234], e).sum(1) + E.to_fixed_point(x[1234:], e).sum(1)
    assert torch.equal(a, b) and torch.equal(a, E.from_fixed_point(parts, e))
    exact = [math.fsum(x[:, f].tolist()) for f in range(3)]
    # each value is rounded to 2**(e - 52): the sum is off by at most n * 2**(e - 53)
    for f in range(3):
        assert abs(float(a[f]) - exact[f]) <= 4000 * 2.0 ** (int(e[f]) - 53)


def test_kmeans_edges_do_not_depend_on_the_row_order():
    X, _ = mixed_data(n=3000, seed=4)
    perm = torch.randperm(3000, generator=torch.Generator().manual_seed(0))
    a, b = kmeans_edges(X, nan_min_max(X), 9), kmeans_edges(X[perm], nan_min_max(X), 9)
    assert torch.equal(a.nan_to_num(0.0), b.nan_to_num(0.0))


def test_local_only_restores_the_previous_mode():
    with D.local_only():
        with D.local_only():
            assert not D.is_sharded()
        assert getattr(D._STATE, "disabled", False)
    assert not getattr(D._STATE, "disabled", False)
