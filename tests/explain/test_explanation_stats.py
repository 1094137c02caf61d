"""RegionalExplanation.stats: the numbers of this explanation's own rule sets against its base rate; a rule set of
another explanation (the same conditions on another subgroup) is refused, as verify refuses it."""

from __future__ import annotations

import pytest
import torch

from torch_amore import RegionalExplanation, Rule, RuleSet

RULES = [[Rule(0, "a", low=0.6)], [Rule(1, "b", low=0.4)], [Rule(0, "a", low=0.2), Rule(1, "b", high=0.9)]]
# the rows each rule set covers, by hand (low inclusive, high exclusive)
COVERED = [lambda X: X[:, 0] >= 0.6, lambda X: X[:, 1] >= 0.4, lambda X: (X[:, 0] >= 0.2) & (X[:, 1] < 0.9)]


def _explanation(X: torch.Tensor, subgroup: torch.Tensor) -> RegionalExplanation:
    rule_sets = [RuleSet.from_rules(r, X, subgroup, target_name="predicted 1") for r in RULES]
    params = {"n_samples": len(X), "subgroup_size": int(subgroup.sum())}
    return RegionalExplanation(rule_sets, subgroup, 0.5, [0, 1], ["a", "b"], params, features_matrix=X)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    X = torch.rand(300, 2, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return X, X[:, 0] > 0.5, X[:, 1] > 0.3  # the rows, this explanation's subgroup, another's


def test_stats_measures_own_rule_sets_against_this_subgroup_and_refuses_another_explanations(data):
    X, mine, theirs = data
    explanation, other = _explanation(X, mine), _explanation(X, theirs)
    for rs in other.rule_sets:  # the same conditions, measured on another subgroup
        assert rs not in explanation.rule_sets
        with pytest.raises(ValueError, match=r"Expected a rule set of this explanation, but 'IF .*' is not one of its"):
            explanation.stats(rs)
    read_back = RegionalExplanation.from_dict(explanation.to_dict()).rule_sets  # equal copies, as verify accepts
    base = mine.sum().item() / len(X)
    for rs, copy, rows in zip(explanation.rule_sets, read_back, COVERED, strict=True):
        covered = rows(X)
        hits = (covered & mine).sum().item()
        for given in (rs, copy):
            stats = explanation.stats(given)
            assert stats["support"] == covered.sum().item()
            assert stats["base_rate"] == pytest.approx(base)
            assert stats["lift"] == pytest.approx(hits / covered.sum().item() / base)
            assert stats["recall"] == pytest.approx(hits / mine.sum().item())


@pytest.mark.parametrize("value", [0, "a >= 0.6", None])
def test_stats_of_anything_but_a_rule_set_is_a_type_error_naming_rule_set(data, value):
    X, mine, _ = data
    with pytest.raises(TypeError, match="Expected `rule_set` to be a RuleSet of this explanation"):
        _explanation(X, mine).stats(value)
