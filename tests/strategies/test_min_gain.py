"""``min_gain``: every condition of a returned rule set earns its place (its removal lowers the fitness by at least
``min_gain``, measured on the data searched), checked against a literal recomputation from masks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import torch_amore as ta
from torch_amore.rules.pruning import prune_rule_sets
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet


def literal(rules, X: torch.Tensor, target: torch.Tensor) -> tuple[int, int, float, float]:
    """(support, hits, confidence, fitness) of the conjunction of ``rules``, by a plain loop over the rows."""
    Xn, tn = X.double().numpy(), target.numpy()
    support = hits = 0
    for i in range(Xn.shape[0]):
        ok = True
        for r in rules:
            x = Xn[i, r.feature]
            if np.isnan(x) or (r.value is not None and x != r.value) or (r.value is None and not r.low <= x < r.high):
                ok = False
                break
        if ok:
            support += 1
            hits += bool(tn[i])
    n_target = int(tn.sum())
    confidence = hits / support if support else 0.0
    return support, hits, confidence, (2 * hits - support) / n_target


def assert_every_condition_earns(rule_sets, X, target, min_gain, min_confidence=None):
    for rs in rule_sets:
        support, _, confidence, fitness = literal(rs.rules, X, target)
        assert rs.support == support
        assert rs.fitness == pytest.approx(fitness, abs=1e-12)
        assert rs.confidence == pytest.approx(confidence, abs=1e-12)
        for k in range(len(rs.rules)) if len(rs.rules) >= 2 else []:
            _, _, sub_conf, sub_fit = literal(rs.rules[:k] + rs.rules[k + 1 :], X, target)
            earns = fitness - sub_fit >= min_gain - 1e-12
            needed = min_confidence is not None and sub_conf < min_confidence
            assert earns or needed, f"{rs}: condition {rs.rules[k]} adds {fitness - sub_fit:.6f} < {min_gain}"


def planted(n: int = 20_000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """x0 >= 0.5 is the target (10 % label noise, about 10,000 target rows); x1 < 0.8 everywhere but on 4
    non-target rows with x0 >= 0.5, where it is 0.95: the condition x1 < 0.9 removes those 4 rows and adds
    4 / 10,000 = 0.0004 fitness, less than the default min_gain."""
    g = np.random.default_rng(seed)
    X = np.column_stack([g.random(n), 0.8 * g.random(n), g.random(n)])
    target = (X[:, 0] >= 0.5) ^ (g.random(n) < 0.1)
    marginal = np.flatnonzero((X[:, 0] >= 0.5) & ~target)[:4]
    X[marginal, 1] = 0.95
    return torch.from_numpy(X), torch.from_numpy(target)


@pytest.mark.parametrize("strategy", ["exact", "beam"])
def test_a_planted_marginal_condition_is_dropped_at_the_default_and_kept_at_zero(strategy):
    X, target = planted()
    common = dict(max_length=2, min_support=100, n_grids=10, strategy=strategy, top_k=1)
    kept = ta.extract_rules(X, target, min_gain=0, **common)[0]
    assert sorted(kept.features) == [0, 1]  # the search finds the marginal condition
    alone = tuple(r for r in kept.rules if r.feature == 0)
    gain = literal(kept.rules, X, target)[3] - literal(alone, X, target)[3]
    assert 0 < gain < 0.001  # as planted: 4 non-target rows of about 10,000 target rows
    best = ta.extract_rules(X, target, **common)[0]  # min_gain=0.001 by default
    assert best.features == (0,)
    support, _, confidence, fitness = literal(best.rules, X, target)
    assert (best.support, best.confidence, best.fitness) == (support, pytest.approx(confidence), pytest.approx(fitness))
    assert best.fitness >= kept.fitness - 0.001 * (len(kept.rules) - 1) - 1e-12
    assert_every_condition_earns(ta.extract_rules(X, target, **common), X, target, 0.001)


def test_the_issue_case_four_rows_of_1167():
    # a rule set as the issue shows it: the second condition removes 4 rows of 1,167 (3 outside the subgroup, 1
    # inside) for a gain of 2 / T; with T = 50,000 that is 0.00004
    n, t = 60_000, 50_000
    X = torch.zeros(n, 2, dtype=torch.float64)
    target = torch.zeros(n, dtype=torch.bool)
    target[:t] = True
    X[:1167, 0] = 1.0  # a: 1,167 rows (860 target, 307 not)
    target[:1167] = False
    target[:860] = True
    X[:1167, 1] = 1.0
    X[t:, 1] = 1.0  # b alone: also 10,000 rows outside the subgroup
    X[[0, 900, 901, 902], 1] = 0.0  # beside a, b drops 1 target row and 3 others
    a, b = Rule(0, "a", low=0.5), Rule(1, "b", low=0.5)
    whole = RuleSet.from_rules((a, b), X, target)
    assert whole.support == 1163
    assert whole.fitness - RuleSet.from_rules((a,), X, target).fitness == pytest.approx(2 / int(target.sum()))
    n_target = int(target.sum())
    pruned = prune_rule_sets([whole], X, target, n_target, min_gain=0.001)[0]
    assert pruned.rules == (a,) and pruned.support == 1167
    assert prune_rule_sets([whole], X, target, n_target, min_gain=0)[0] is whole
    assert prune_rule_sets([whole], X, target, n_target, min_gain=2 / n_target * 0.99)[0] == whole


def test_a_condition_needed_for_min_confidence_earns_its_place():
    X = torch.tensor([[1.0, 1.0]] * 6 + [[1.0, 0.0]] * 2 + [[0.0, 1.0]] * 4 + [[0.0, 0.0]], dtype=torch.float64)
    target = torch.tensor([True] * 6 + [False] * 6 + [True])  # b alone: 10 rows, 6 target
    a, b = Rule(0, "a", low=0.5), Rule(1, "b", low=0.5)
    whole = RuleSet.from_rules((a, b), X, target)  # 6 rows, all target; a alone: 8 rows, 6 target
    n_target = int(target.sum())
    gain = whole.fitness - RuleSet.from_rules((a,), X, target).fitness  # 2 / 7
    assert prune_rule_sets([whole], X, target, n_target, min_gain=gain + 0.01)[0].rules == (a,)
    kept = prune_rule_sets([whole], X, target, n_target, min_gain=gain + 0.01, min_confidence=0.9)[0]
    assert kept.rules == (a, b)


def test_the_least_useful_condition_goes_first_and_pruning_repeats():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(4000, 3, generator=g, dtype=torch.float64)
    target = X[:, 0] > 0.6
    rules = (Rule(0, "a", low=0.6), Rule(1, "b", low=0.001), Rule(2, "c", high=0.9995))  # b and c: tiny
    whole = RuleSet.from_rules(rules, X, target)
    pruned = prune_rule_sets([whole], X, target, int(target.sum()), min_gain=0.001)[0]
    assert pruned.rules == rules[:1]
    support, _, confidence, fitness = literal(pruned.rules, X, target)
    assert (pruned.support, pruned.confidence, pruned.fitness) == (support, confidence, pytest.approx(fitness))


@st.composite
def small_data(draw):
    n = draw(st.integers(60, 160))
    seed = draw(st.integers(0, 2**31 - 1))
    g = np.random.default_rng(seed)
    n_feat = draw(st.integers(2, 4))
    X = g.random((n, n_feat))
    levels = draw(st.sampled_from([0, 3, 8]))
    if levels:
        X[:, 0] = np.round(X[:, 0] * levels) / levels
    a, b = draw(st.floats(0.2, 0.8)), draw(st.floats(0.2, 0.8))
    target = ((X[:, 0] > a) & (X[:, 1] < b)) ^ (g.random(n) < draw(st.sampled_from([0.0, 0.05, 0.2])))
    if target.sum() == 0:
        target[0] = True
    min_support = draw(st.integers(3, max(3, n // 4)))
    return torch.from_numpy(X), torch.from_numpy(target), min_support


@settings(max_examples=25, deadline=None)
@given(
    data=small_data(),
    strategy=st.sampled_from(["beam", "exact", "paper"]),
    min_gain=st.sampled_from([0.001, 0.02, 0.1]),
    min_confidence=st.sampled_from([None, 0.6]),
)
def test_every_condition_of_every_rule_set_earns_min_gain(data, strategy, min_gain, min_confidence):
    X, target, min_support = data
    found = ta.extract_rules(X, target, max_length=3, min_support=min_support, n_grids=5, top_k=3, strategy=strategy,
                             min_gain=min_gain, min_confidence=min_confidence)  # fmt: skip
    assert_every_condition_earns(found, X, target, min_gain, min_confidence)
    assert [frozenset(rs.rules) for rs in found] == list(dict.fromkeys(frozenset(rs.rules) for rs in found))


def test_min_gain_is_validated_and_round_trips():
    with pytest.raises(ValueError, match="min_gain"):
        ta.SearchOptions(min_gain=-0.1)
    with pytest.raises(TypeError, match="min_gain"):
        ta.SearchOptions(min_gain="0.1")
    assert ta.SearchOptions().min_gain == 0.001
    old = ta.SearchOptions(max_length=3).to_dict()
    del old["min_gain"]  # a file written before min_gain existed
    assert ta.SearchOptions.from_dict(old) == ta.SearchOptions(max_length=3)
    assert ta.SearchOptions.from_dict(ta.SearchOptions(min_gain=0.05).to_dict()).min_gain == 0.05


def test_search_hyperparameters_prunes_as_extract_rules_does():
    X, target = planted(6000, seed=1)
    options = ta.SearchOptions(strategy="beam")
    result = ta.search_hyperparameters(
        X, target, bin_strategies="uniform", n_grids=10, min_supports=100, confidence_lower_bound=0.0, options=options
    )
    direct = ta.extract_rules(X, target, strategy="beam", n_grids=10, min_support=100)
    assert result.best == direct[0]
    assert_every_condition_earns([result.best], X, target, 0.001)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_masks_and_counts_of_pruning_are_those_of_the_rules(dtype):
    """The rules' masks of the pruning pass (each feature's column read once, intervals and categories compared apart,
    rows in any order) are :meth:`Rule.mask`'s, and the packed words' set bits count the rows of each conjunction."""
    from torch_amore.rules.pruning import _bit_counts, _packed, _rule_table

    g = torch.Generator().manual_seed(5)
    X = torch.randn(1000, 4, generator=g).to(dtype)
    X[:, 2] = torch.randint(0, 3, (1000,), generator=g).to(dtype)
    X[::7, 0] = float("nan")
    rules = [Rule(2, "c", value=1.0, kind="cat"), Rule(0, "a", low=-0.3, high=0.71), Rule(3, "d", high=0.1),
             Rule(0, "a", low=0.2), Rule(2, "c", value=0.0, kind="cat"), Rule(1, "b", low=-1.0 / 3)]  # fmt: skip
    want = torch.stack([r.mask(X) for r in rules])
    for part in (rules, rules[1:2] + rules[3:4], rules[4:5], [rules[3], rules[1]]):  # mixed, intervals, a category
        assert torch.equal(_rule_table(part, X), torch.stack([r.mask(X) for r in part]))
    words = _packed(want)
    for a, b in [(0, 1), (1, 3), (2, 5), (4, 4)]:
        assert int(_bit_counts(words[a] & words[b])) == int((want[a] & want[b]).sum())
