"""The evidence options through the explainer (the permuted target is the subgroup of the model's outputs: the model
runs once) and where they are refused: streamed explanations and search_hyperparameters."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from torch_amore import RegionalRuleExplainer, extract_rules, search_hyperparameters

OPTS = {"max_length": 2, "min_support": 30}


def model_and_data() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
    X = torch.randn(500, 4, generator=torch.Generator().manual_seed(1))
    return model, X


class Counting(nn.Module):
    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner, self.rows = inner, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.inner(x)


@pytest.mark.filterwarnings("ignore:None of the:UserWarning")
def test_explain_permutations_equal_extract_rules_on_the_outputs_and_run_the_model_once():
    model, X = model_and_data()
    counted = Counting(model)
    explanation = RegionalRuleExplainer(counted).explain(X, 1, permutations=4, holdout=0.3, **OPTS)
    assert counted.rows == X.shape[0]  # one forward pass over the inputs, whatever the permutations
    with torch.no_grad():
        subgroup = model(X).argmax(1) == 1
    assert torch.equal(explanation.subgroup, subgroup)
    expected = extract_rules(X, subgroup, permutations=4, holdout=0.3, **OPTS)
    assert expected and explanation.rule_sets == expected
    assert [rs.p_value for rs in explanation.rule_sets] == [rs.p_value for rs in expected]
    assert [rs.held_out for rs in explanation.rule_sets] == [rs.held_out for rs in expected]
    assert all(not math.isnan(rs.p_value) for rs in expected)


def test_streamed_explanations_refuse_the_evidence():
    model, X = model_and_data()
    with pytest.raises(ValueError, match="need every row.s target at once"):
        RegionalRuleExplainer(model).explain(X, 1, stream=True, permutations=3, **OPTS)


def test_search_hyperparameters_refuses_the_evidence():
    X = torch.from_numpy(np.random.default_rng(0).uniform(size=(300, 3)))
    with pytest.raises(ValueError, match="search_hyperparameters does not compute"):
        search_hyperparameters(X, X[:, 0] > 0.5, permutations=9)


def test_with_holdout_the_min_support_count_is_that_of_the_rows_searched():
    model, X = model_and_data()
    explanation = RegionalRuleExplainer(model).explain(X, 1, holdout=0.3, max_length=2, min_support=0.1)
    size = int(explanation.subgroup.sum())
    n_held = round(0.3 * size) + round(0.3 * (X.shape[0] - size))  # stratified: 30 % of each side
    searched = X.shape[0] - n_held
    assert explanation.params["min_support_count"] == math.ceil(0.1 * searched) < math.ceil(0.1 * X.shape[0])
    assert explanation.rule_sets and all(rs.support >= math.ceil(0.1 * searched) for rs in explanation.rule_sets)


def test_with_holdout_a_useless_result_is_said_once_in_the_one_warning():
    model, X = model_and_data()
    with pytest.warns(UserWarning) as caught:
        RegionalRuleExplainer(model).explain(X, 1, holdout=0.3, max_length=1, min_support=0.9)
    texts = [str(w.message) for w in caught if "useless" in str(w.message)]
    assert len(texts) == 1 and texts[0].count("Rule sets may be useless") == 1
