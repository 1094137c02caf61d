"""``prune_rule_sets_batches``: pruning rows that come in batches gives the rule sets of ``prune_rule_sets`` on the
concatenated rows, whatever the batch sizes, each pruned rule set measured as its masks on all rows say."""

from __future__ import annotations

import math

import pytest
import torch
from batch_sources import batches_of

from torch_amore._utils import distributed as D
from torch_amore.rules import Rule, RuleSet, prune_rule_sets, prune_rule_sets_batches


def nan_data(n: int = 3000, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Six float32 columns, NaN in columns 0 and 3, column 5 a category 0..3; the target a box on columns 0 and 1 with
    10 % label noise (NaN in column 0: never target)."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 6, generator=g)
    X[:, 5] = torch.randint(0, 4, (n,), generator=g).float()
    X[torch.rand(n, generator=g) < 0.1, 0] = math.nan
    X[torch.rand(n, generator=g) < 0.2, 3] = math.nan
    target = ((X[:, 0] >= 0.4) & (X[:, 1] < 0.7)) ^ (torch.rand(n, generator=g) < 0.1)
    return X, target


def rule_sets_on(X: torch.Tensor, target: torch.Tensor, seed: int = 1) -> list[RuleSet]:
    """Planted rule sets (the box with marginal or NaN-heavy conditions beside it) and random ones of 1 to 4
    conditions, each measured on (X, target)."""
    a, b = Rule(0, "a", low=0.4), Rule(1, "b", high=0.7)
    tiny_c, tiny_e = Rule(2, "c", high=0.999), Rule(4, "e", low=0.002)
    d, f = Rule(3, "d", low=0.1), Rule(5, "f", value=2.0, kind="cat")
    planted = [(a, b), (a, b, tiny_c), (a, tiny_e), (tiny_e, a, tiny_c, b), (b, d), (a, f), (a,), (d, a, b)]
    g = torch.Generator().manual_seed(seed)
    drawn = []
    for _ in range(30):
        k = int(torch.randint(1, 5, (1,), generator=g))
        feats = torch.randperm(6, generator=g)[:k].tolist()
        rules = []
        for j in feats:
            if j == 5:
                rules.append(Rule(5, "f", value=float(torch.randint(0, 4, (1,), generator=g)), kind="cat"))
            else:
                low, high = sorted(torch.rand(2, generator=g).tolist())
                rules.append(Rule(j, "abcdef"[j], low=low * 0.5, high=0.5 + high * 0.5))
        drawn.append(tuple(rules))
    return [RuleSet.from_rules(rules, X, target) for rules in planted + drawn]


def assert_measured(rule_sets: list[RuleSet], X: torch.Tensor, target: torch.Tensor) -> None:
    """Support, confidence and fitness of each rule set as its mask on all rows counts them."""
    n_target = int(target.sum())
    for rs in rule_sets:
        mask = rs.mask(X)
        support, hits = int(mask.sum()), int((mask & target).sum())
        assert rs.support == support
        assert rs.confidence == pytest.approx(hits / support if support else 0.0, abs=1e-12)
        assert rs.fitness == pytest.approx((2 * hits - support) / n_target, abs=1e-12)


@pytest.mark.parametrize("sizes", [1, 7, 4096, [3, 0, 50, 1, 128, 17, 400]])
@pytest.mark.parametrize("min_confidence", [None, 0.7])
@pytest.mark.parametrize("small_chunks", [False, True])
def test_batches_prune_as_the_concatenated_rows(sizes, min_confidence, small_chunks, monkeypatch):
    """small_chunks: a chunk of 192 rows, so that large batches are cut and small ones fill several chunks."""
    X, target = nan_data()
    rule_sets = rule_sets_on(X, target)
    n_target = int(target.sum())
    expected = prune_rule_sets(rule_sets, X, target, n_target, min_gain=0.01, min_confidence=min_confidence)
    if small_chunks:
        n_rules = len({r for rs in rule_sets if len(rs.rules) >= 2 for r in rs.rules})
        monkeypatch.setattr("torch_amore.rules.pruning._MASK_BYTES", 16 * (n_rules + 2) * 192)
    got = prune_rule_sets_batches(rule_sets, batches_of(X, target, sizes), n_target, min_gain=0.01,
                                  min_confidence=min_confidence)  # fmt: skip
    assert got == expected
    assert [str(rs) for rs in got] == [str(rs) for rs in expected]
    assert_measured(got, X, target)
    long = [(before, after) for before, after in zip(rule_sets, got) if len(before.rules) >= 2]
    dropped = [after for before, after in long if len(after.rules) < len(before.rules)]
    kept = [after for before, after in long if after.rules == before.rules]
    assert dropped and kept  # some conditions go, some earn their place
    assert all(set(after.rules) <= set(before.rules) for before, after in zip(rule_sets, got))


def test_the_planted_marginal_conditions_go_and_the_box_stays():
    X, target = nan_data(seed=2)
    rule_sets = rule_sets_on(X, target)
    got = prune_rule_sets_batches(rule_sets, batches_of(X, target, 100), int(target.sum()), min_gain=0.01)
    assert [rs.features for rs in got[:4]] == [(0, 1), (0, 1), (0,), (0, 1)]
    assert got[6] is rule_sets[6]  # one condition: as it is


def test_one_sum_over_ranks_per_round_whatever_the_number_of_batches(monkeypatch):
    """The counts are summed over ranks once per pruning round, never once per batch (ranks may hold different
    numbers of batches); the rows are read once."""
    X, target = nan_data(600, seed=3)
    rule_sets = rule_sets_on(X, target)
    sums, passes = [], []
    original = D.all_reduce_sum

    def counted(t):
        sums.append(t.shape)
        return original(t)

    def batches():
        passes.append(1)
        return batches_of(X, target, 1)()

    monkeypatch.setattr(D, "all_reduce_sum", counted)
    got = prune_rule_sets_batches(rule_sets, batches, int(target.sum()), min_gain=0.01)
    assert passes == [1]
    assert 1 <= len(sums) <= 4  # rounds: at most the longest rule set's length
    assert got == prune_rule_sets(rule_sets, X, target, int(target.sum()), min_gain=0.01)


def test_no_pass_without_a_rule_set_to_prune():
    X, target = nan_data(100)
    short = [RuleSet.from_rules((Rule(0, "a", low=0.4),), X, target)]

    def batches():
        raise AssertionError("the rows were read")

    assert prune_rule_sets_batches(short, batches, int(target.sum()), min_gain=0.01) == short
    whole = rule_sets_on(X, target)
    assert prune_rule_sets_batches(whole, batches, int(target.sum()), min_gain=0) == whole
