"""strategy="exact": the best rule sets on the grid, checked against a literal brute force over every box of grids."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from grid_brute import brute_force
from grid_brute import mixed_data as _data

import torch_amore as ta
from torch_amore.grids.binning import bin_features
from torch_amore.strategies import exact as exact_module
from torch_amore.strategies.exact import exact_search
from torch_amore.strategies.exact_cost import estimate_cost


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("min_support", [1, 20, 60])
def test_exact_equals_brute_force(seed, max_length, min_support):
    X, target, kinds = _data(seed)
    n_grids = 5 if max_length == 3 else 6
    b = bin_features(X, [0, 1, 2, 3], kinds, n_grids=n_grids, bin_strategy="quantile")
    want = brute_force(b, target, max_length, min_support, top_k=6)
    got = exact_search(b, target, max_length=max_length, min_support=min_support, top_k=6, budget=10**12)
    assert got.complete
    assert want  # the data always has some rule set
    assert got.boxes == want


def test_extract_rules_exact_metrics_and_optimum():
    X, target, kinds = _data(3, n=400)
    rule_sets = ta.extract_rules(X, target, strategy="exact", max_length=2, min_support=30, n_grids=6,
                                 feature_types=kinds, top_k=4)  # fmt: skip
    assert len(rule_sets) == 4
    for rs in rule_sets:  # metrics recomputed from the rules' masks
        again = ta.RuleSet.from_rules(rs.rules, X, target)
        assert again.support == rs.support
        assert again.fitness == pytest.approx(rs.fitness, abs=1e-12)
    assert [rs.fitness for rs in rule_sets] == sorted((rs.fitness for rs in rule_sets), reverse=True)


@pytest.mark.parametrize("probe", [64, 1, 8])  # 1, 8: the rows enumerated before the bounds (see _PROBE) are many
@pytest.mark.parametrize("max_length", [2, 3])
def test_pruning_never_changes_the_answer(monkeypatch, max_length, probe):
    monkeypatch.setattr(exact_module, "_PROBE", probe)
    g = torch.Generator().manual_seed(7)
    X = torch.randn(900, 7, generator=g, dtype=torch.float64)
    X[:, 5] = torch.randint(0, 4, (900,), generator=g).double()
    target = ((X[:, 0] > 0.2) & (X[:, 3] < 0.8) & (X[:, 5] != 2)) ^ (torch.rand(900, generator=g) < 0.2)
    kinds = ["float"] * 5 + ["cat", "float"]
    b = bin_features(X, list(range(7)), kinds, n_grids=10 if max_length == 2 else 6, bin_strategy="quantile")
    kw = dict(max_length=max_length, min_support=40, top_k=5, budget=10**12)
    pruned = exact_search(b, target, **kw)
    monkeypatch.setattr(exact_module, "_PRUNE", False)
    full = exact_search(b, target, **kw)
    assert pruned.complete and full.complete
    assert len(pruned.boxes) == 5
    assert pruned.boxes == full.boxes


def _profile_counts(n_features: int, n_grids: int) -> tuple[int, int, int]:
    """(top-level aten ops, host syncs (item / _local_scalar_dense), nonzero calls) of one exact search."""
    from torch.profiler import ProfilerActivity, profile

    g = torch.Generator().manual_seed(0)
    X = torch.rand(2000, n_features, generator=g, dtype=torch.float64)
    target = (X[:, 1] > 0.6) & (X[:, -1] < 0.5)
    b = bin_features(X, list(range(n_features)), ["float"] * n_features, n_grids=n_grids, bin_strategy="quantile")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        exact_search(b, target, max_length=2, min_support=50, top_k=3, budget=10**12)
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    top = sum(1 for e in events if e.cpu_parent is None)
    syncs = sum(1 for e in events if e.name in ("aten::item", "aten::_local_scalar_dense"))
    nonzero = sum(1 for e in events if e.name == "aten::nonzero")
    return top, syncs, nonzero


def test_pair_search_is_batched():
    """max_length=2: no Python loop over pairs or cuts, a handful of host syncs (one chunk of pairs here)."""
    small, wide, fine = _profile_counts(20, 12), _profile_counts(40, 12), _profile_counts(40, 24)
    for _, syncs, nonzero in (small, wide, fine):
        assert syncs <= 16
        assert nonzero <= 10
    # 20 -> 40 features: 590 more pairs; the ops grow only by the histogram's per-feature slices (a few ops for
    # each of 20 more features, for all samples and for the target's)
    assert wide[0] - small[0] <= 30 * 20
    assert fine[0] <= wide[0] * 1.2  # twice the cuts: the same ops


def _ddp_worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        X, target, kinds = _data(5, n=500)
        rows = torch.nonzero((X[:, 0] < 0.3) == (rank == 0), as_tuple=True)[0]  # skewed, uneven shards
        out = {}
        for length in (2, 3):
            found = ta.extract_rules(X[rows], target[rows], strategy="exact", max_length=length, min_support=25,
                                     n_grids=5, bin_strategy="quantile", feature_types=kinds, top_k=4)  # fmt: skip
            out[length] = [rs.to_dict() for rs in found]
        torch.save(out, f"{out_dir}/rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_two_gloo_ranks_give_the_single_process_optimum(tmp_path):
    import os

    import torch.multiprocessing as mp

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.start_processes(_ddp_worker, args=(2, str(tmp_path / "init"), str(tmp_path)), nprocs=2, start_method="spawn")
    X, target, kinds = _data(5, n=500)
    order = torch.cat([torch.nonzero(X[:, 0] < 0.3, as_tuple=True)[0], torch.nonzero(X[:, 0] >= 0.3, as_tuple=True)[0]])
    for length in (2, 3):
        single = ta.extract_rules(X[order], target[order], strategy="exact", max_length=length, min_support=25,
                                  n_grids=5, bin_strategy="quantile", feature_types=kinds, top_k=4)  # fmt: skip
        assert len(single) == 4
        for rank in (0, 1):
            got = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)[length]
            assert got == [rs.to_dict() for rs in single]


def test_refused_up_front_with_its_cost_and_how_to_narrow_it():
    X = torch.randn(3000, 300, dtype=torch.float64)
    with pytest.raises(ValueError, match=r"would take about .* `exact_budget`=1\.00e\+06\. Narrow it: fewer features"):
        ta.extract_rules(X, X[:, 0] > 1, strategy="exact", exact_budget=10**6)
    with pytest.raises(ValueError, match="max_length"):  # five features: 4 is not capped (3 features would be)
        ta.extract_rules(X[:, :5], X[:, 0] > 1, strategy="exact", max_length=4)
    with pytest.raises(ValueError, match="exact_budget"):
        ta.SearchOptions(exact_budget=0)
    with pytest.raises(ValueError, match="local_x"):
        ta.extract_rules(X[:, :3], X[:, 0] > 1, strategy="exact", local_x=X[0, :3])


def test_budget_stops_the_branch_and_bound_and_says_so():
    X, target, kinds = _data(1)
    b = bin_features(X, [0, 1, 2, 3], kinds, n_grids=5, bin_strategy="quantile")
    up_front = estimate_cost(X.shape[0], 4, b.n_bins_max, 3)
    with pytest.warns(RuntimeWarning, match="stopped at `exact_budget`"):
        got = exact_search(b, target, max_length=3, min_support=5, top_k=1, budget=up_front + 1)
    assert not got.complete
    best = brute_force(b, target, 3, 5, top_k=1)[0]
    found = 2 * got.boxes[0][0] - got.boxes[0][1]
    assert max(found, got.bound) >= 2 * best[0] - best[1]  # the bound covers what was not explored


@pytest.mark.parametrize("min_support", [60, 240])
def test_default_strategy_reaches_the_exact_optimum_of_a_finer_grid(min_support):
    """Issue 19's criterion on a small latent-like layer: two one-sided conditions, weak alone, make the best rule."""
    g = torch.Generator().manual_seed(11)
    X = torch.randn(3000, 24, generator=g, dtype=torch.float64)
    X[:, :12] = X[:, :12].clamp(min=0)  # ReLU units
    target = ((X[:, 3] > 0.4) & (X[:, 17] < -0.2)) ^ (torch.rand(3000, generator=g) < 0.1)
    target |= X[:, 20] > 2.2  # a narrow pure spike that a ratio- or single-fitness-ranked start favours
    best = ta.extract_rules(X, target, max_length=2, min_support=min_support)[0]
    optimum = ta.extract_rules(X, target, max_length=2, min_support=min_support, strategy="exact", n_grids=32,
                               bin_strategy="quantile", top_k=1)[0]  # fmt: skip
    assert optimum.optimum == optimum.fitness
    assert best.fitness >= optimum.fitness - 0.005
    assert ta.RuleSet.from_rules(best.rules, X, target).fitness == pytest.approx(best.fitness, abs=1e-12)


def test_with_min_gain_the_top_k_are_the_best_rule_sets_whose_conditions_earn_their_place():
    """The pruning of ``min_gain`` collapses some of the top_k into shorter rule sets: the search goes deeper until
    the rule sets it did not see rank below those kept, so the top_k of a smaller top_k are the first of a larger
    one's (a top 2 missed the 0.25 of the top 3), and every condition of each earns its place (recounted)."""
    rng = np.random.default_rng(12)
    rng.integers(15, 50), rng.integers(2, 4), rng.integers(2, 5)  # the draws of the case found by review
    X = torch.tensor(rng.normal(size=(36, 2)))
    t = torch.tensor(rng.random(36) < 0.4)
    lists = [
        ta.extract_rules(X, t, strategy="exact", max_length=2, min_support=1, n_grids=4, top_k=k) for k in (1, 2, 3, 4)
    ]
    values = [[rs.fitness for rs in found] for found in lists]
    for shorter, longer in zip(values, values[1:]):
        assert longer[: len(shorter)] == shorter
    assert values[1] == [0.3125, 0.25]
    n_target = int(t.sum())
    for rs in lists[-1]:
        mask = rs.mask(X)
        value = 2 * int((mask & t).sum()) - int(mask.sum())
        for k in range(len(rs.rules)):
            rest = [r for i, r in enumerate(rs.rules) if i != k]
            sub = torch.ones(len(X), dtype=torch.bool) if not rest else torch.stack([r.mask(X) for r in rest]).all(0)
            assert (value - (2 * int((sub & t).sum()) - int(sub.sum()))) / n_target >= 0.001
