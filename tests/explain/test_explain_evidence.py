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
    with pytest.raises(ValueError, match="does not compute `holdout`, `holdout_rows`"):  # not an unknown keyword
        search_hyperparameters(X, X[:, 0] > 0.5, holdout_rows=[1, 2])


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


@pytest.mark.filterwarnings("ignore:None of the:UserWarning")
def test_explain_holdout_rows_equal_extract_rules_with_them():
    # explicit held-out rows (a mask, or the same rows as positions) through the explainer: the rule sets and held-out
    # numbers of extract_rules on the outputs' subgroup with those rows; the recall is of the subgroup rows searched
    model, X = model_and_data()
    held = torch.zeros(X.shape[0], dtype=torch.bool)
    held[::4] = True
    counted = Counting(model)
    explanation = RegionalRuleExplainer(counted).explain(X, 1, holdout_rows=held, **OPTS)
    assert counted.rows == X.shape[0]
    by_positions = RegionalRuleExplainer(model).explain(X, 1, holdout_rows=np.arange(0, X.shape[0], 4), **OPTS)
    with torch.no_grad():
        subgroup = model(X).argmax(1) == 1
    expected = extract_rules(X, subgroup, holdout_rows=held, **OPTS)
    assert expected and explanation.rule_sets == expected == by_positions.rule_sets
    assert [rs.held_out for rs in explanation.rule_sets] == [rs.held_out for rs in expected]
    assert all(rs.held_out is not None for rs in expected)
    searched = int((subgroup & ~held).sum())
    assert explanation.params["held_out_subgroup"] == int((subgroup & held).sum())
    best = expected[0]
    hits = round(best.confidence * best.support)
    assert explanation.stats(best)["recall"] == pytest.approx(hits / searched)


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"holdout_rows": np.zeros(7, dtype=bool)}, ValueError, "of length 500"),
        ({"holdout_rows": [0, 600]}, ValueError, "indices in [0, 500)"),
        ({"holdout_rows": "0:9"}, TypeError, "got str"),
        ({"holdout_rows": [1, 2], "holdout": 0.3}, ValueError, "not both"),
        ({"holdout_rows": [1, 2], "stream": True}, ValueError, "holdout_rows"),
    ],
)
def test_bad_holdout_rows_are_refused_before_the_model_runs(kwargs, error, words):
    model, X = model_and_data()
    counted = Counting(model)
    with pytest.raises(error) as info:
        RegionalRuleExplainer(counted).explain(X, 1, **kwargs, **OPTS)
    assert words in str(info.value)
    assert counted.rows == 0


@pytest.mark.filterwarnings("ignore:None of the:UserWarning")
def test_a_boolean_series_of_held_out_rows_goes_by_the_dataframe_inputs_index():
    import pandas as pd

    model, X = model_and_data()
    frame = pd.DataFrame(X.numpy(), index=np.arange(X.shape[0])[::-1])
    held = pd.Series(frame.index % 4 == 0, index=frame.index)
    explainer = RegionalRuleExplainer(model)
    in_order = explainer.explain(frame, 1, holdout_rows=held, **OPTS)
    shuffled = explainer.explain(frame, 1, holdout_rows=held.sample(frac=1, random_state=0), **OPTS)
    by_mask = explainer.explain(frame, 1, holdout_rows=held.to_numpy(), **OPTS)
    assert in_order.rule_sets and in_order.rule_sets == shuffled.rule_sets == by_mask.rule_sets
    assert [rs.held_out for rs in in_order.rule_sets] == [rs.held_out for rs in shuffled.rule_sets]
    with pytest.raises(ValueError, match="holdout_rows"):
        explainer.explain(frame, 1, holdout_rows=pd.Series(held.to_numpy(), index=np.arange(1000, 1500)), **OPTS)


def test_with_holdout_rows_lift_and_base_rate_are_of_the_rows_searched():
    model, X = model_and_data()
    with torch.no_grad():
        subgroup = model(X).argmax(1) == 1
    row = torch.arange(len(X))
    held = (subgroup & (row % 2 == 0)) | (row % 10 == 1)  # half the subgroup, a tenth of the others
    explanation = RegionalRuleExplainer(model).explain(X, 1, holdout_rows=held, **OPTS)
    searched = (subgroup & ~held).sum().item() / (~held).sum().item()
    assert abs(searched - subgroup.double().mean().item()) > 0.02  # the two base rates differ here
    assert explanation.params["held_out_rows"] == int(held.sum())
    assert explanation.base_rate == pytest.approx(searched)
    assert explanation.rule_sets
    for rs in explanation.rule_sets:  # the confidence is of the rows searched: so is the rate it is compared with
        mask = rs.mask(X[~held])
        assert rs.confidence == pytest.approx((mask & subgroup[~held]).sum().item() / mask.sum().item())
        assert explanation.stats(rs)["lift"] == pytest.approx(rs.confidence / searched)
    assert f"base rate {searched:.3f} (1: no better than the rows searched)" in str(explanation)


@pytest.mark.parametrize("given", [[0, 3, 6], np.array([True, False, False, True, False, False, True, False])])
def test_a_ranks_shard_of_held_out_rows_is_its_rows_of_the_whole_dataset(monkeypatch, given):
    """The callback's request on one rank of two (rows 1, 3, 5, 7 of 8, the first three explained): ``holdout_rows``
    given as positions or as a mask of the whole dataset becomes the mask of those rows, as a mask ``target`` does."""
    from torch_amore._utils import distributed as D
    from torch_amore.explain.request import ExplainRequest

    monkeypatch.setattr(D, "global_count", lambda n: 2 * n)  # two ranks of four rows each
    monkeypatch.setattr(D, "is_sharded", lambda: True)
    whole = torch.tensor([True, False, False, True, False, False, True, False])
    request = ExplainRequest.make(target=whole, holdout_rows=given).shard([1, 3, 5, 7], 3)
    assert request.target.tolist() == whole[[1, 3, 5]].tolist()
    assert request.holdout_rows.tolist() == [False, True, False]
    with pytest.raises(ValueError, match=r"length 8 \(the rows of the dataset\)"):
        ExplainRequest.make(target=1, holdout_rows=np.ones(6, dtype=bool)).shard([1, 3, 5, 7], 3)


@pytest.mark.parametrize("how", ["holdout", "holdout_rows"])
def test_the_header_says_on_which_rows_the_table_is(how):
    """The table's numbers are of the rows searched: the header says how many, and how many of the subgroup (the
    recall's denominator), beside the rows held out; counted here from the subgroup and the held-out rows."""
    model, X = model_and_data()
    with torch.no_grad():
        subgroup = model(X).argmax(1) == 1
    held = torch.zeros(len(X), dtype=torch.bool)
    held[::4] = True
    kw = dict(holdout=0.3) if how == "holdout" else dict(holdout_rows=held)
    explanation = RegionalRuleExplainer(model).explain(X, 1, **kw, **OPTS)
    best = explanation.rule_sets[0]
    if how == "holdout":  # the searched subgroup from a rule set's own counts: hits over recall
        hits = round(best.support * best.confidence)
        searched_size = round(hits / explanation.stats(best)["recall"])
        n_held = len(X) - round(searched_size / explanation.stats(best)["base_rate"])  # base rate: of the searched
    else:
        searched_size, n_held = int((subgroup & ~held).sum()), int(held.sum())
    words = f"{len(X) - n_held} searched ({searched_size} of the subgroup) and {n_held} held out"
    assert words in str(explanation).splitlines()[0]
    assert f"subgroup: {int(subgroup.sum())} of {len(X)} samples" in str(explanation).splitlines()[0]
