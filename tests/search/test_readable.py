"""Rules built from grid intervals (torch_amore.search.readable) select the grids' rows, read short, and cost one host
sync; drop_same_mask (torch_amore.rules.masks) keeps what the literal pairwise comparison keeps; the whole finish of a
search
stays within its sync budget."""

from __future__ import annotations

import math

import pytest
import torch
from sync_count import count_syncs

import torch_amore
from torch_amore.grids.binning import bin_features
from torch_amore.grids.fine_grid import fine_binning
from torch_amore.rules.cuts import format_bound
from torch_amore.rules.masks import drop_same_mask, rule_masks
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.search import readable
from torch_amore.search.readable import ReadableRules


def _data(n: int = 500) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    X[:, 1] = torch.randint(0, 7, (n,), generator=g).double()
    X[:, 2] = torch.randint(0, 3, (n,), generator=g).double()
    X[torch.rand(n, generator=g) < 0.1, 3] = math.nan
    return X


KINDS = ["float", "int", "cat", "float"]


@pytest.mark.parametrize("scattered, read", [(None, None), (1, None), (1, 3), (2, 4)])
@pytest.mark.parametrize("fine", [False, True])
def test_rules_select_the_rows_of_their_grids(fine, scattered, read, monkeypatch):
    X = _data()
    if scattered:  # the observed neighbours of the cuts scattered ``scattered`` features at a time
        monkeypatch.setattr(readable, "_SCATTER_VALUES", scattered * len(X))
    if read:  # and X's values read ``read`` columns at a time first
        monkeypatch.setattr(readable, "_READ_ROWS", 1)
        monkeypatch.setattr(readable, "_READ_VALUES", read * len(X))
    binned = bin_features(X, [0, 1, 2, 3], KINDS, n_grids=6)
    if fine:
        binned = fine_binning(X, binned, 64)
    n = binned.n_grids
    codes = binned.codes.long()
    conds = [(0, 1, 3), (0, 0, 2), (0, 4, n - 1), (1, 2, 4), (1, 30, n - 1), (2, 1, 1), (3, 2, n - 2), (3, 0, 8)]
    conds = [(j, lo, min(hi, n - 1)) for j, lo, hi in conds if bool(((codes[:, j] >= lo) & (codes[:, j] <= hi)).any())]
    assert len(conds) >= 6  # searches only return intervals holding samples
    rules = ReadableRules(X, ["a", "b", "c", "d"], [1.0] * 4, [0.0] * 4).rules(binned, conds)
    for (j, lo, hi), rule in zip(conds, rules):
        grid_rows = (codes[:, j] >= lo) & (codes[:, j] <= hi) & ~torch.isnan(X[:, j])
        assert torch.equal(rule.mask(X), grid_rows), str(rule)
        if rule.value is None:  # open where the grid interval is open
            assert (rule.low == -math.inf) == (lo == 0) and (rule.high == math.inf) == (hi == n - 1)
    assert rules[4].value == float(binned.categories[2, 1])
    assert all(len(format_bound(r.low)) <= 6 for r in rules if r.value is None and r.low > -math.inf)


@pytest.mark.parametrize("read", [False, True])
def test_rules_of_integer_data_select_the_rows_of_their_grids(read, monkeypatch):
    """An integer X (its values converted to the grid's dtype as they are read), its columns scattered one at a time,
    read one at a time or two at a time first."""
    X = torch.randint(-5, 40, (400, 3), generator=torch.Generator().manual_seed(1))
    monkeypatch.setattr(readable, "_SCATTER_VALUES", len(X))
    if read:
        monkeypatch.setattr(readable, "_READ_ROWS", 1)
        monkeypatch.setattr(readable, "_READ_VALUES", 2 * len(X))
    binned = bin_features(X.double(), [0, 1, 2], ["int"] * 3, n_grids=5)
    codes = binned.codes.long()
    conds = [(j, lo, hi) for j in range(3) for lo, hi in ((1, 2), (0, 3), (2, 4))]
    rules = ReadableRules(X, ["a", "b", "c"], [1.0] * 3, [0.0] * 3).rules(binned, conds)
    for (j, lo, hi), rule in zip(conds, rules):
        assert torch.equal(rule.mask(X), (codes[:, j] >= lo) & (codes[:, j] <= hi)), str(rule)


def test_rules_cost_one_sync_for_all_conditions():
    X = _data()
    binned = bin_features(X, [0, 1, 2, 3], KINDS, n_grids=6)
    readable = ReadableRules(X, ["a", "b", "c", "d"], [1.0] * 4, [0.0] * 4)
    conds = [(j, lo, hi) for j in (0, 1, 3) for lo in range(3) for hi in range(lo, 6)] + [(2, 0, 0), (2, 2, 2)]
    with count_syncs() as syncs:
        readable.rules(binned, conds)
    assert syncs.aten == 0 and syncs.tolist == 1


def test_local_rules_keep_their_grids_values_inside():
    X = _data()
    binned = bin_features(X, [0, 1, 2, 3], KINDS, n_grids=6)
    rule = ReadableRules(X, ["a", "b", "c", "d"], [1.0] * 4, [0.0] * 4).rules(binned, [(0, 2, 3)], local=True)[0]
    low, high = binned.interval_bounds(0, 2, 3)
    inside = torch.linspace(low, math.nextafter(high, -math.inf), 101, dtype=torch.float64)
    assert bool(((inside >= rule.low) & (inside < rule.high)).all())  # any value of those grids, seen or not


def _literal_drop(rule_sets: list[RuleSet], X: torch.Tensor) -> list[RuleSet]:
    kept, groups = [], {}
    for rs in rule_sets:
        same = groups.setdefault((frozenset(rs.features), rs.support, rs.confidence), [])
        if any(torch.equal(rs.mask(X), o.mask(X)) for o in same):
            continue
        same.append(rs)
        kept.append(rs)
    return kept


def test_drop_same_mask_equals_the_pairwise_comparison():
    X = torch.arange(20, dtype=torch.float64)[:, None].repeat(1, 2) / 2
    t = X[:, 0] >= 3

    def rs(*rules):
        m = RuleSet(rules, 1, 1.0, 0.0).mask(X)
        h, n = int((m & t).sum()), int(m.sum())
        return RuleSet(rules, n, h / max(n, 1), 0.0)

    a = [Rule(0, "x", low=v) for v in (3.0, 2.8, 3.2, 2.6, 5.0)]  # 2.6 < 2.8 < 3.0: distinct rows on the halves
    b = [Rule(1, "y", high=v) for v in (8.0, 7.9, 8.4)]
    sets = [rs(a[0]), rs(a[1]), rs(a[2]), rs(a[3]), rs(a[4]), rs(a[0], b[0]), rs(a[1], b[1]), rs(a[2], b[2]), rs(b[0])]
    want = _literal_drop(sets, X)
    assert len(want) < len(sets)  # the case has duplicates
    with count_syncs() as syncs:
        got = drop_same_mask(sets, X)
    assert [id(r) for r in got] == [id(r) for r in want]
    assert syncs.aten == 0 and syncs.tolist <= 1


def test_rule_masks_equal_rule_by_rule_masks():
    X = _data()
    X[5, 0] = math.inf
    rules = [Rule(0, "a", low=0.3), Rule(0, "a", high=0.6), Rule(0, "a"), Rule(1, "b", low=2.0, high=5.0, kind="int"),
             Rule(2, "c", value=1.0, kind="cat"), Rule(3, "d", low=-math.inf, high=0.4)]  # fmt: skip
    assert torch.equal(rule_masks(rules, X), torch.stack([r.mask(X) for r in rules]))


@pytest.mark.slow
def test_the_finish_of_a_search_stays_within_its_sync_budget(diabetes_task):
    """Snapping, rule construction, polish and dedupe of the default strategy at max_length=3: at most 8 syncs."""
    X, t = torch.from_numpy(diabetes_task["X"]), torch.from_numpy(diabetes_task["target"])
    finish = ("torch_amore.search.readable", "torch_amore.strategies.polish", "torch_amore.rules.masks")
    torch_amore.extract_rules(X, t, max_length=3, min_support=500)  # warm-up
    with count_syncs() as syncs:
        torch_amore.extract_rules(X, t, max_length=3, min_support=500)
    assert 1 <= sum(syncs.tolist_by_module[m] for m in finish) <= 8
