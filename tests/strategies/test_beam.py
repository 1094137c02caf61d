"""The beam strategy: fitness-optimal intervals, exact fine grids, never worse than the paper strategy or a tree."""

from __future__ import annotations

import hypothesis.strategies as st
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from sklearn.tree import DecisionTreeClassifier

import torch_amore as ta
from torch_amore.grids.binning import bin_features
from torch_amore.grids.fine_grid import fine_binning
from torch_amore.strategies.best_interval import best_intervals


def brute_force_best(a: list[int], b: list[int], kappa: float, min_support: int):
    """O(G^2) search over all proper intervals: maximise sum(a - kappa * b) with sum(b) >= min_support."""
    best = None
    n = len(a)
    for i in range(n):
        for j in range(i, n):
            if i == 0 and j == n - 1:
                continue
            s = sum(b[i : j + 1])
            if s < min_support or s == sum(b):  # too small, or every sample: no condition at all
                continue
            v = sum(a[i : j + 1]) - kappa * s
            if v > 1e-12 and (best is None or v > best + 1e-9):
                best = v
    return best


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(0, 20)), min_size=2, max_size=10),
    st.integers(1, 60),
    st.sampled_from([0.5, 0.7, 0.9]),
)
def test_best_intervals_match_brute_force(grids, min_support, kappa):
    tot = torch.tensor([[max(x, y) for x, y in grids]])
    tgt = torch.tensor([[min(x, y) for x, y in grids]])
    b = best_intervals(tot, tgt, torch.tensor([len(grids)]), torch.tensor([False]), min_support, kappas=(kappa,))
    expect = brute_force_best(tgt[0].tolist(), tot[0].tolist(), kappa, min_support)
    if expect is None:
        assert len(b.feature) == 0
    else:
        assert len(b.feature) == 1
        lo, hi = int(b.g_low[0]), int(b.g_high[0])
        value = int(tgt[0, lo : hi + 1].sum()) - kappa * int(tot[0, lo : hi + 1].sum())
        assert value == pytest.approx(expect)
        assert (int(b.hits[0]), int(b.support[0])) == (int(tgt[0, lo : hi + 1].sum()), int(tot[0, lo : hi + 1].sum()))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fine_grid_thresholds_agree_with_codes(dtype):
    g = torch.Generator().manual_seed(0)
    X = (torch.randn(3000, 3, generator=g, dtype=torch.float64) * torch.tensor([1.0, 1e-3, 1e4])).to(dtype)
    X[::13, 1] = float("nan")
    base = bin_features(X, [0, 1, 2], ["float"] * 3, n_grids=4)
    fine = fine_binning(X, base, n_fine=256)
    codes = fine.codes.long()
    Xd = X.double()
    for f in range(3):
        thr = fine.threshold(torch.full((255,), f), torch.arange(1, 256))
        ok = ~torch.isnan(Xd[:, f])
        reached = (Xd[ok, f][:, None] >= thr[None, :]).sum(1)
        assert torch.equal(reached, codes[ok, f])
        assert (codes[~ok, f] == fine.nan_code).all()


@pytest.mark.parametrize("chunk", [None, 700])  # one chunk; several, the last one shorter
def test_fine_codes_of_numeric_and_categorical_columns_with_missing_values(monkeypatch, chunk):
    from torch_amore.grids import fine_grid

    if chunk is not None:
        monkeypatch.setattr(fine_grid, "_FINE_CHUNK", chunk)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(1000, 3, generator=g)
    X[:, 1] = torch.randint(0, 4, (1000,), generator=g).float() * 2.5  # a categorical column
    X[::7, 1] = float("nan")
    X[::11, 0] = float("nan")
    base = bin_features(X, [0, 1, 2], ["float", "cat", "float"], n_grids=5)
    fine = fine_binning(X, base, n_fine=64)
    codes = fine.codes.long()
    missing = torch.isnan(X)
    assert (codes[missing] == fine.nan_code).all() and fine.nan_code == 64
    # categorical: the base binning's categories; numeric: floor((x - min) * 64 / (max - min)) clamped to 0..63
    assert torch.equal(codes[~missing[:, 1], 1], base.codes[~missing[:, 1], 1].long())
    for f in (0, 2):
        x = X[~missing[:, f], f].double()
        lo, hi = x.min(), x.max()
        expect = torch.floor((x - lo) * (64 / (hi - lo))).clamp(0, 63).long()
        assert torch.equal(codes[~missing[:, f], f], expect)


def tree_best_fitness(X: np.ndarray, target: np.ndarray, depth: int, leaf: int) -> float:
    tree = DecisionTreeClassifier(max_depth=depth, min_samples_leaf=leaf, random_state=0).fit(X, target)
    paths = tree.decision_path(X).toarray().astype(bool)[:, 1:]
    return float(((2 * (paths & target[:, None]).sum(0) - paths.sum(0)) / target.sum()).max())


def test_beam_finds_planted_box_and_beats_paper_and_tree(box_data):
    X, target = box_data
    kw = dict(max_length=2, min_support=100, n_grids=10)
    beam = ta.extract_rules(X, target, strategy="beam", **kw)
    paper = ta.extract_rules(X, target, strategy="paper", **kw)
    best = beam[0]
    assert sorted(best.features) == [0, 2] and best.fitness > 0.85
    assert best.fitness >= paper[0].fitness
    assert best.fitness >= tree_best_fitness(X.numpy(), target.numpy(), 2, 100) - 1e-9
    for rs in beam:
        mask = rs.mask(X)
        hits = int((mask & target).sum())
        assert rs.support == int(mask.sum()) >= 100 and len(rs) <= 2
        assert rs.confidence == pytest.approx(hits / rs.support)
        assert rs.fitness == pytest.approx((2 * hits - rs.support) / int(target.sum()))


def test_beam_finds_the_exact_best_interval_on_one_feature():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(400, generator=g, dtype=torch.float64)
    target = ((x > 0.31) & (x < 0.62)) ^ (torch.rand(400, generator=g) < 0.1)
    best = ta.extract_rules(x[:, None], target, max_length=1, min_support=20)[0]
    # brute force over every pair of cut points between sorted values
    v, order = torch.sort(x)
    w = (2 * target[order].to(torch.long) - 1).tolist()
    best_value = max(sum(w[i:j]) for i in range(400) for j in range(i + 20, 401) if not (i == 0 and j == 400))
    assert round(best.fitness * int(target.sum())) == best_value
    assert best.fitness == pytest.approx(
        (2 * int((best.mask(x[:, None]) & target).sum()) - best.support) / int(target.sum())
    )


def test_min_confidence_is_respected(box_data):
    X, target = box_data
    rule_sets = ta.extract_rules(X, target, max_length=2, min_support=50, min_confidence=0.97)
    assert rule_sets and all(rs.confidence >= 0.97 for rs in rule_sets)
    with pytest.raises(ValueError, match="min_confidence"):
        ta.extract_rules(X, target, min_confidence=1.5)
    with pytest.raises(ValueError, match="strategy"):
        ta.extract_rules(X, target, strategy="greedy")


def test_beam_is_deterministic_across_dtypes(box_data):
    X, target = box_data
    X32 = X.float()
    a = ta.extract_rules(X32, target, max_length=2, min_support=80)
    b = ta.extract_rules(X32.double(), target, max_length=2, min_support=80)
    assert a == b


def test_group_grid_counts_match_per_group_grid_counts():
    from torch_amore.grids.ratios import grid_counts, group_grid_counts

    g = torch.Generator().manual_seed(3)
    codes = torch.randint(0, 7, (500, 4), generator=g, dtype=torch.int16)
    codes[::11, 2] = 6  # the missing code of 6 grids
    rows = torch.randint(0, 500, (900,), generator=g)
    groups = torch.randint(0, 3, (900,), generator=g)
    out = group_grid_counts(codes.T.contiguous(), rows, groups, 3, 6)
    for k in range(3):
        assert torch.equal(out[k], grid_counts(codes, rows[groups == k], 6))


def test_refined_beam_rule_sets_are_coordinatewise_optimal_on_the_fine_grid(box_data):
    """After refinement no single condition of the best beam rule set can be re-cut on the fine grid to a higher
    fitness: brute force over every interval of every condition, given the other conditions' samples."""
    from torch_amore.search.extract import prepare
    from torch_amore.search.options import SearchOptions
    from torch_amore.strategies.beam import BeamSearch

    X, target = box_data
    ex = prepare(X, target, SearchOptions(n_grids=10))
    fine = ex.fine(128)
    states = BeamSearch(fine, ex.target, ex.n_total_target, beam_width=3).run(max_length=2, min_support=100)
    best = max(states, key=lambda s: (2 * s.hits - s.support, s.conds))
    codes = fine.codes.long()
    assert len(best.conds) == 2
    for k, (j, lo, hi) in enumerate(best.conds):
        others = torch.ones(len(X), dtype=torch.bool)
        for m, (jm, lom, him) in enumerate(best.conds):
            if m != k:
                others &= (codes[:, jm] >= lom) & (codes[:, jm] <= him)
        c, t = codes[others, j], target[others]
        tot = torch.bincount(c, minlength=129)[:128].tolist()
        tgt = torch.bincount(c[t], minlength=129)[:128].tolist()
        best_value = max(
            2 * sum(tgt[a : b + 1]) - sum(tot[a : b + 1])
            for a in range(128)
            for b in range(a, 128)
            if sum(tot) > sum(tot[a : b + 1]) >= 100  # a proper condition: it leaves some sample out
        )
        assert 2 * best.hits - best.support >= best_value
        inside = others & (codes[:, j] >= lo) & (codes[:, j] <= hi)
        assert (best.support, best.hits) == (int(inside.sum()), int((inside & target).sum()))


def test_refinement_in_batches_gives_the_same_rules(box_data, monkeypatch):
    import torch_amore.strategies.beam as beam

    X, target = box_data
    kw = dict(max_length=3, min_support=60, n_grids=8)
    whole = ta.extract_rules(X, target, **kw)
    monkeypatch.setattr(beam, "_REFINE_BUDGET", 3 * X.shape[0])  # one state per batch
    assert ta.extract_rules(X, target, **kw) == whole


@pytest.mark.parametrize("pure,chunked", [(True, False), (False, False), (False, True)])
def test_no_returned_beam_rule_set_has_an_idle_condition(box_data, pure, chunked, monkeypatch):
    """A condition that neither raises fitness nor confidence is dropped: for every beam rule set (empty ratios),
    removing any one condition lowers its fitness or its confidence (recomputed from masks). ``chunked``: the
    sub-rule sets are masked one at a time."""
    import torch_amore.strategies.beam as beam

    if chunked:
        monkeypatch.setattr(beam, "_MASK_BYTES", 1)
    X, target = box_data
    if pure:  # one pure condition: no second condition can help
        target = X[:, 1] > 0.8
    rule_sets = ta.extract_rules(X, target, max_length=3, min_support=40, n_grids=6)
    n_target = int(target.sum())

    def metrics(rules):
        mask = torch.ones(len(X), dtype=torch.bool)
        for r in rules:
            mask &= r.mask(X)
        hits, support = int((mask & target).sum()), int(mask.sum())
        return (2 * hits - support) / n_target, hits / support

    checked = 0
    for rs in rule_sets:
        if rs.ratios or len(rs) < 2:
            continue
        fit, conf = metrics(rs.rules)
        assert fit == pytest.approx(rs.fitness) and conf == pytest.approx(rs.confidence)
        for k in range(len(rs)):
            sub_fit, sub_conf = metrics(rs.rules[:k] + rs.rules[k + 1 :])
            assert sub_fit < fit - 1e-12 or sub_conf < conf - 1e-12, (str(rs), k)
        checked += 1
    assert pure or checked > 0
    if pure:
        assert str(rule_sets[0]).startswith("IF feature_1 >= 0.8") and len(rule_sets[0]) == 1


def test_masked_counts_without_weights_agree(monkeypatch):
    """Both counts from one bincount over ``2 * bin + is_target``: the weighted path and the spare-bin path (for CUDA
    under deterministic algorithms) count exactly what a literal count of each state's samples does."""
    from torch_amore.strategies import refine as beam

    g = torch.Generator().manual_seed(1)
    idx = (
        torch.randint(0, 30, (3, 200), generator=g, dtype=torch.int32)
        + torch.arange(3, dtype=torch.int32)[:, None] * 30
    )
    inside = torch.rand(3, 200, generator=g) < 0.6
    target = torch.rand(200, generator=g) < 0.3
    coded = (2 * idx + target.to(torch.int32)).view(-1)
    weighted = beam._masked_counts(coded, inside.view(-1), 90, torch.empty(600))
    monkeypatch.setattr(torch.Tensor, "is_cuda", property(lambda self: True))
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    spare = beam._masked_counts(coded, inside.view(-1), 90, torch.empty(600))
    expect_tot = torch.stack([torch.bincount(idx[s][inside[s]] - 30 * s, minlength=30) for s in range(3)]).view(-1)
    expect_tgt = torch.stack(
        [torch.bincount(idx[s][inside[s] & target] - 30 * s, minlength=30) for s in range(3)]
    ).view(-1)
    assert int(expect_tgt.sum()) > 0
    for both in (weighted, spare):
        tot, tgt = both.view(90, 2).sum(1), both.view(90, 2)[:, 1]
        assert torch.equal(tot, expect_tot) and torch.equal(tgt, expect_tgt)


def test_best_intervals_in_feature_blocks_agree_with_one_pass(monkeypatch):
    from torch_amore.strategies import best_interval as beam

    g = torch.Generator().manual_seed(0)
    tot = torch.randint(0, 20, (50, 64), generator=g)
    tgt = (tot * torch.rand(50, 64, generator=g)).long()
    n_bins, is_cat = torch.full((50,), 64), torch.zeros(50, dtype=torch.bool)
    whole = beam.best_intervals(tot, tgt, n_bins, is_cat, 30)
    monkeypatch.setattr(beam, "_BEST_BUDGET", 8 * 65 * len(beam.KAPPAS))  # blocks of 8 features
    blocks = beam.best_intervals(tot, tgt, n_bins, is_cat, 30)
    for field in ("feature", "g_low", "g_high", "hits", "support", "kappa"):
        assert torch.equal(getattr(whole, field), getattr(blocks, field))
    # each row's counts are the sums over its interval
    cum_t = torch.cat([torch.zeros(50, 1, dtype=torch.long), tgt.cumsum(1)], 1)
    assert torch.equal(whole.hits, cum_t[whole.feature, whole.g_high + 1] - cum_t[whole.feature, whole.g_low])


def test_best_intervals_of_a_block_of_few_grids_on_its_own_grids():
    """A block of one-hot columns (few grids each) has its best intervals computed on its own grids: the same valid
    intervals, counts and validity as on the widest feature's grids."""
    from torch_amore.strategies.beam import BeamSearch
    from torch_amore.strategies.node_counts import narrow_block

    g = torch.Generator().manual_seed(5)
    n = 3000
    hot = torch.nn.functional.one_hot(torch.randint(0, 40, (n,), generator=g), 40).double()
    X = torch.cat([torch.rand(n, 2, generator=g, dtype=torch.float64), hot, torch.rand(n, 1, generator=g)], 1)
    target = (X[:, 0] > 0.5) | (hot[:, :8].sum(1) > 0)
    kinds = ["float", "float"] + ["cat"] * 40 + ["float"]
    fine = fine_binning(X, bin_features(X, list(range(43)), kinds), 256)
    search = BeamSearch(fine, target, int(target.sum()))
    assert search.narrow == (2, 42, 2)
    nodes = [(), ((0, 10, 200),), ((2, 1, 1),)]
    both = search._node_counts(nodes)
    k = len(nodes)
    tgt = both[k:].reshape(k * 43, -1)
    tot = both[:k].reshape(k * 43, -1) + tgt
    every = torch.arange(43).repeat(k)
    split = search._dense_every(tot, tgt, every, k, 30, search.kappas)
    whole = search._dense(tot, tgt, every, 30, search.kappas)
    assert torch.equal(split.valid, whole.valid) and split.valid.any()
    for field in ("g_low", "g_high", "hits", "support"):
        assert torch.equal(getattr(split, field)[split.valid], getattr(whole, field)[whole.valid])
    assert narrow_block(fine.n_bins_host[:30]) is None  # 28 one-hot columns: fewer than NARROW_BLOCK


@pytest.mark.parametrize("hot_limit", [None, 0])
def test_node_counts_of_a_block_of_few_grids_are_those_of_the_plain_pass(monkeypatch, hot_limit):
    """The one-hot block's node counts, from the masks' product with its one-hot codes (or, where those would be too
    large, from its own bincount pass), are the counts of one pass over every feature's full grids, missing values
    included."""
    from torch_amore.grids.ratios import group_grid_counts
    from torch_amore.strategies import beam, node_counts

    if hot_limit is not None:
        monkeypatch.setattr(node_counts, "NARROW_HOT", hot_limit)
    g = torch.Generator().manual_seed(7)
    n = 2500
    hot = torch.nn.functional.one_hot(torch.randint(0, 36, (n,), generator=g), 36).double()
    hot[torch.rand(n, 36, generator=g) < 0.02] = float("nan")  # missing values in the block
    X = torch.cat([torch.rand(n, 2, generator=g, dtype=torch.float64), hot, torch.rand(n, 1, generator=g)], 1)
    target = (X[:, 0] > 0.4) | (hot[:, :6].nan_to_num().sum(1) > 0)
    kinds = ["float", "float"] + ["cat"] * 36 + ["float"]
    fine = fine_binning(X, bin_features(X, list(range(39)), kinds), 256)
    search = beam.BeamSearch(fine, target, int(target.sum()))
    assert search.narrow == (2, 38, 2)
    assert (search._narrow_hot() is None) == (hot_limit == 0)
    for nodes in ([()], [(), ((0, 10, 200),), ((2, 1, 1),), ((1, 0, 90), (5, 0, 0))]):
        rows, groups = search._node_rows(nodes)
        k = len(nodes)
        plain = group_grid_counts(search.codes_t, rows, groups + k * target[rows].long(), 2 * k, search.width)
        assert torch.equal(search._node_counts(nodes), plain)
