"""The paper's protocol: grid search with a confidence lower bound (shared binning), sequential covering."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch

import torch_amore.search.extract as search_mod
import torch_amore.search.extractor as extractor_mod
from torch_amore import (
    DecisionList,
    Rule,
    RuleSet,
    SearchOptions,
    rule_metrics,
    search_hyperparameters,
    sequential_covering,
)
from torch_amore.rules.serialization import FieldError
from torch_amore.search.extract import prepare


def _toy(n: int = 3000, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    X[:, 3] = (X[:, 3] > 0.5).double()  # a binary feature
    noise = torch.rand(n, generator=g) < 0.03
    target = ((X[:, 0] > 0.75) & (X[:, 1] < 0.6)) | ((X[:, 2] < 0.15) & (X[:, 3] == 1)) | noise
    return X, target


def _pick(rule_sets, bound):
    """The selection rule, written independently: best fitness among confidence >= bound, else best fitness."""
    ok = [r for r in rule_sets if r is not None and r.confidence >= bound]
    pool = ok or [r for r in rule_sets if r is not None]
    best = None
    for r in pool:
        if best is None or r.fitness > best.fitness:
            best = r
    return best


def test_sweep_bins_and_counts_once_per_strategy_and_grid(monkeypatch):
    X, target = _toy()
    calls = {"bin": 0, "root": 0}
    real_bin, real_counts = search_mod.encode_features, extractor_mod.grid_and_target_counts

    def counting_bin(*args, **kwargs):
        calls["bin"] += 1
        return real_bin(*args, **kwargs)

    def counting_counts(*args, **kwargs):  # the all-samples and target histograms: computed at the root only
        calls["root"] += 1
        return real_counts(*args, **kwargs)

    monkeypatch.setattr(search_mod, "encode_features", counting_bin)
    monkeypatch.setattr(extractor_mod, "grid_and_target_counts", counting_counts)
    result = search_hyperparameters(
        X,
        target,
        bin_strategies=("uniform", "quantile"),
        n_grids=[4, 8],
        min_supports=[20, 50, 100, 200, 400],
        max_length=2,
    )
    assert len(result.records) == 2 * 2 * 5
    assert calls["bin"] == 4
    assert calls["root"] == 4


@pytest.mark.parametrize("bound", [0.0, 0.8, 1.0])
def test_selection_within_and_across_settings(bound):
    X, target = _toy(seed=1)
    strategies, grids, supports = ["uniform", "kmeans"], [3, 6], [30, 300]
    result = search_hyperparameters(
        X,
        target,
        bin_strategies=strategies,
        n_grids=grids,
        min_supports=supports,
        max_length=2,
        top_k=2,
        confidence_lower_bound=bound,
        min_gain=0,  # the rule tree's own rule sets, compared with extractor.run below
    )
    picks = []
    for (bs, ng, sm), (_, row) in zip(itertools.product(strategies, grids, supports), result.records.iterrows()):
        assert (row["bin_strategy"], row["n_grids"], row["min_support"]) == (bs, ng, sm)
        extractor = prepare(X, target, SearchOptions(n_grids=ng, bin_strategy=bs))
        candidates = extractor.run(max_length=2, min_support=sm, top_k=2)
        expected = _pick(candidates, bound)
        assert row["n_rule_sets"] == len(candidates)
        assert row["rule_set"] == expected
        # the recorded metrics are the rule set's own, recomputed from its mask
        m = rule_metrics(expected.mask(X), target)
        assert (row["support"], row["confidence"], row["fitness"]) == pytest.approx(tuple(m), abs=1e-12)
        assert row["meets_bound"] == (m.confidence >= bound)
        picks.append(((bs, ng, sm), expected))
    best = _pick([p for _, p in picks], bound)
    assert result.best == best
    first = next(s for s, p in picks if p == best)
    assert result.setting == dict(zip(["bin_strategy", "n_grids", "min_support"], first))
    # best_by: per min_support, the pick over the other hyperparameters
    per = result.best_by("min_support")
    assert list(per["min_support"]) == supports
    for sm, (_, row) in zip(supports, per.iterrows()):
        assert row["rule_set"] == _pick([p for s, p in picks if s[2] == sm], bound)


def test_bound_prefers_confident_rule_sets_over_fitter_ones():
    X, target = _toy(seed=2)
    loose = search_hyperparameters(
        X, target, bin_strategies="uniform", n_grids=5, min_supports=50, confidence_lower_bound=0.0
    )
    strict = search_hyperparameters(
        X, target, bin_strategies="uniform", n_grids=5, min_supports=50, confidence_lower_bound=0.97
    )
    assert loose.best.fitness >= strict.best.fitness
    if strict.records["meets_bound"].iloc[0]:
        assert strict.best.confidence >= 0.97


def test_fractional_min_supports_and_dataframe_names():
    pd = pytest.importorskip("pandas")
    X, target = _toy(seed=3)
    frame = pd.DataFrame(X.numpy(), columns=["a", "b", "c", "flag"])
    result = search_hyperparameters(
        frame, target.numpy(), bin_strategies="uniform", n_grids=[5], min_supports=[0.01, 0.1], max_length=1
    )
    assert list(result.records["min_support"]) == [30, 300]
    assert all(r.name in {"a", "b", "c", "flag"} for r in result.best.rules)


def test_bad_arguments_fail_before_binning(monkeypatch):
    X, target = _toy(n=200)

    def boom(*args, **kwargs):
        raise AssertionError("binning ran before the arguments were checked")

    monkeypatch.setattr(search_mod, "encode_features", boom)
    with pytest.raises(ValueError, match="bin_strategy"):
        search_hyperparameters(X, target, bin_strategies=["uniform", "median"])
    with pytest.raises(ValueError, match="n_grids"):
        search_hyperparameters(X, target, n_grids=[1, 5])
    with pytest.raises(ValueError, match="min_support"):
        search_hyperparameters(X, target, min_supports=[10, 500])
    with pytest.raises(ValueError, match="confidence_lower_bound"):
        search_hyperparameters(X, target, confidence_lower_bound=1.5)
    with pytest.raises(ValueError, match="min_supports"):
        search_hyperparameters(X, target, min_supports=[])
    with pytest.raises(ValueError, match="min_confidence"):
        sequential_covering(X, target, min_confidence=-0.1)
    with pytest.raises(TypeError, match=r"^sequential_covering\(\) got an unexpected keyword argument 'scale'$"):
        sequential_covering(X, target, scale=[1.0, 2.0])
    # an option each setting replaces would be ignored: it is refused, pointing to the grid's argument
    with pytest.raises(TypeError, match="`min_support`.*`min_supports=`"):
        search_hyperparameters(X, target, min_support=150)
    with pytest.raises(TypeError, match="`bin_strategy`.*`bin_strategies=`"):
        search_hyperparameters(X, target, bin_strategy="quantile")


def test_the_settings_replace_the_options_min_support():
    # documented: the options' min_support is replaced by each setting's, so it is not checked against the rows
    X, target = _toy(n=200)
    kw = dict(bin_strategies="uniform", n_grids=[5], min_supports=[20], max_length=1)
    given = search_hyperparameters(X, target, options=SearchOptions(strategy="paper", min_support=5000), **kw)
    plain = search_hyperparameters(X, target, **kw)
    assert given.setting == plain.setting == {"bin_strategy": "uniform", "n_grids": 5, "min_support": 20}
    assert given.best == plain.best


# ------------------------------------------------------------------------------------------- sequential covering
@pytest.mark.parametrize("grid", [False, True])
def test_sequential_covering_entries_are_disjoint_and_coverage_adds_up(grid):
    X, target = _toy(seed=4)
    kwargs = dict(min_support=[40, 120], n_grids=[5, 10]) if grid else dict(min_support=40, n_grids=10)
    dl = sequential_covering(X, target, max_length=2, min_confidence=0.8, **kwargs)
    assert len(dl) >= 2
    T = int(target.sum())
    covered = torch.zeros(len(target), dtype=torch.bool)
    new_masks = []
    for rs in dl:
        m = rs.mask(X)
        new = m & ~covered
        remaining_target = int((target & ~covered).sum())
        s, h = int(new.sum()), int((new & target).sum())
        assert rs.support == s
        assert rs.confidence == pytest.approx(h / s)
        assert rs.fitness == pytest.approx((2 * h - s) / remaining_target)
        assert rs.confidence >= 0.8
        new_masks.append(new)
        covered |= m
    for a, b in itertools.combinations(new_masks, 2):
        assert not bool((a & b).any())
    assert sum(int(m.sum()) for m in new_masks) == int(covered.sum()) == dl.support
    assert dl.covered_target == int((covered & target).sum())
    assert dl.coverage == pytest.approx(int((covered & target).sum()) / T)
    weights = [int(m.sum()) for m in new_masks]
    assert dl.confidence == pytest.approx(sum(w * r.confidence for w, r in zip(weights, dl)) / sum(weights))
    h_all, s_all = int((covered & target).sum()), int(covered.sum())
    assert dl.fitness == pytest.approx((2 * h_all - s_all) / T)  # the union's fitness, not an average of the entries'
    assert torch.equal(dl.mask(X), covered)
    assert tuple(dl.evaluate(X, target)) == pytest.approx(tuple(rule_metrics(covered, target)))
    assign = dl.assign(X)
    for i, new in enumerate(new_masks):
        assert bool((assign[new] == i).all())
    assert bool((assign[~covered] == -1).all())


def test_sequential_covering_stops_for_the_documented_reasons():
    X, target = _toy(seed=5)
    dl = sequential_covering(X, target, max_length=2, min_support=40, n_grids=10, min_confidence=0.8)
    covered = dl.mask(X)
    rest_target = target & ~covered
    if int(rest_target.sum()) >= 40 and int(rest_target.sum()) < int((~covered).sum()):
        rows = ~covered
        extractor = prepare(X[rows], target[rows], SearchOptions(n_grids=10))
        candidates = extractor.run(max_length=2, min_support=40, top_k=3)
        assert all(r.confidence < 0.8 for r in candidates)  # no further entry could qualify
    one = sequential_covering(X, target, max_length=2, min_support=40, n_grids=10, max_rules=1)
    assert len(one) == 1 and one[0] == dl[0]
    none = sequential_covering(X, target, max_length=1, min_support=40, n_grids=10, min_confidence=1.0)
    assert all(r.confidence == 1.0 for r in none)


def test_sequential_covering_passes_the_feature_arguments_on():
    X, target = _toy(seed=5)
    names, scale, offset = ["a", "b", "c", "d"], [10.0, 1.0, 2.0, 1.0], [5.0, 0.0, 0.0, 0.0]
    dl = sequential_covering(X, target, max_length=2, min_support=40, n_grids=10, features=[0, 1],
                             feature_names=names, feature_scale=scale, feature_offset=offset)  # fmt: skip
    assert len(dl) >= 1
    for rs in dl:
        assert {r.feature for r in rs.rules} <= {0, 1}
        assert all(r.name == names[r.feature] and (r.scale, r.offset) == (scale[r.feature], offset[r.feature])
                   for r in rs.rules)  # fmt: skip
    # the list's coverage and confidence, recounted from its masks
    covered, t = dl.mask(X).tolist(), target.tolist()
    hits = sum(1 for m, y in zip(covered, t) if m and y)
    assert dl.coverage == hits / sum(t) and dl.confidence == hits / sum(covered)


def test_decision_list_text_and_json_round_trip():
    X, target = _toy(seed=6)
    dl = sequential_covering(X, target, max_length=2, min_support=60, n_grids=8, target_name="positive")
    text = str(dl)
    lines = text.splitlines()
    assert lines[0].startswith("IF ") and all(line.startswith("ELSE IF ") for line in lines[1 : len(dl)])
    assert lines[len(dl)] == "ELSE not positive"
    assert f"coverage={dl.coverage:.3f}" in lines[-1]
    back = DecisionList.from_dict(json.loads(json.dumps(dl.to_dict())))
    assert back == dl
    assert torch.equal(back.mask(X), dl.mask(X))
    empty = DecisionList((), n_samples=10, n_target=3)
    assert "empty" in str(empty) and empty.coverage == 0.0
    assert isinstance(dl[0], RuleSet)
    assert np.isfinite(dl.fitness)


def test_decision_list_fitness_is_that_of_the_union_on_its_build_data():
    X, target = _toy(seed=7)
    dl = sequential_covering(X, target, max_length=2, min_support=40, n_grids=10, min_confidence=0.8)
    assert len(dl) >= 2
    # recount by hand, in plain Python, from each entry's own mask
    masks = [rs.mask(X).tolist() for rs in dl]
    t = target.tolist()
    covered = [any(m[i] for m in masks) for i in range(len(t))]
    hits = sum(1 for c, y in zip(covered, t) if c and y)
    support = sum(covered)
    assert dl.fitness == pytest.approx((2 * hits - support) / sum(t))
    assert dl.fitness == pytest.approx(dl.evaluate(X, target).fitness)
    assert f"fitness={(2 * hits - support) / sum(t):.3f}" in str(dl).splitlines()[-1]
    # the docstring's list: 2 + 1 target rows of 3 covered, no other row -> (2 * 3 - 3) / 3 = 1
    X1 = torch.tensor([[0.1], [0.5], [0.7], [0.9]])
    t1 = torch.tensor([False, True, True, True])
    first = RuleSet.from_rules([Rule(0, "x", low=0.65)], X1, t1)
    second = RuleSet.from_rules([Rule(0, "x", low=0.4)], X1[:2], t1[:2])
    small = DecisionList((first, second), n_samples=4, n_target=3)
    assert small.fitness == 1.0 == small.evaluate(X1, t1).fitness


def test_decision_list_from_dict_checks_its_counts_against_each_other():
    X1 = torch.tensor([[0.1], [0.3], [0.5], [0.7], [0.9]])
    t1 = torch.tensor([False, False, True, False, True])
    only = RuleSet.from_rules([Rule(0, "x", low=0.4)], X1, t1)  # covers 3 rows, 2 of them target
    good = DecisionList((only,), n_samples=5, n_target=2).to_dict()
    assert DecisionList.from_dict(good).coverage == 1.0
    with pytest.raises(FieldError, match=r"Invalid `n_target`: the entries cover 2 target samples, but n_target is 1"):
        DecisionList.from_dict({**good, "n_target": 1})
    with pytest.raises(FieldError, match=r"Invalid `n_samples`: the entries cover 3 samples, 1 of them not target"):
        DecisionList.from_dict({**good, "n_samples": 2})  # fewer samples than the entries cover
    with pytest.raises(FieldError, match=r"Invalid `n_samples`: .* leaves 0 non-target samples"):
        DecisionList.from_dict({**good, "n_samples": 2, "n_target": 2})  # room for the target rows only
    assert DecisionList.from_dict({**good, "n_samples": 3}).n_samples == 3  # exactly what the entries cover


def test_local_search_returns_rules_containing_the_sample():
    X, target = _toy(seed=7)
    x = X[int(torch.nonzero(target)[0])]
    result = search_hyperparameters(
        X, target, bin_strategies="uniform", n_grids=[4, 8], min_supports=[30, 90], max_length=2, local_x=x
    )
    for rs in result.records["rule_set"]:
        if rs is not None:
            assert bool(rs.mask(x[None, :])[0])
    # same as the extractor's local run, selected independently
    ext = prepare(X, target, SearchOptions(n_grids=8))
    candidates = ext.run(max_length=2, min_support=90, top_k=3, local_codes=ext.binned.encode_sample(x))
    assert result.records["rule_set"].iloc[3] == _pick(candidates, 0.8)
    with pytest.raises(ValueError, match="local_x"):
        search_hyperparameters(X, target, local_x=torch.zeros(3))


def test_beam_strategy_in_the_grid_search_is_at_least_the_paper_strategy():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(1500, 3, generator=g, dtype=torch.float64)
    target = (X[:, 0] > 0.4) & (X[:, 1] < 0.7)
    kw = dict(bin_strategies="uniform", n_grids=[4, 8], min_supports=[50, 200], max_length=2)
    paper = search_hyperparameters(X, target, **kw)
    beam = search_hyperparameters(X, target, strategy="beam", **kw)
    assert beam.best.fitness >= paper.best.fitness
    m = rule_metrics(beam.best.mask(X), target)
    assert (m.support, m.confidence, m.fitness) == pytest.approx(
        (beam.best.support, beam.best.confidence, beam.best.fitness)
    )
    with pytest.raises(ValueError, match="strategy"):
        search_hyperparameters(X, target, strategy="greedy", **kw)
