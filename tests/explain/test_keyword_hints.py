"""A misspelled keyword of the RegionalRuleExplainer constructor names the closest keyword."""

from __future__ import annotations

import inspect

import pytest
from torch import nn

from torch_amore import RegionalRuleExplainer


def test_misspelled_constructor_keyword_suggests_the_closest() -> None:
    model = nn.Sequential(nn.Linear(3, 2))
    with pytest.raises(TypeError) as info:
        RegionalRuleExplainer(model, feature_name=["a", "b", "c"])
    assert str(info.value) == (
        "RegionalRuleExplainer() got an unexpected keyword argument 'feature_name' (did you mean 'feature_names'?)"
    )
    explainer = RegionalRuleExplainer(model, feature_names=["a", "b", "c"])  # the suggestion works
    assert explainer.feature_names == ["a", "b", "c"]


def test_unknown_keyword_without_a_close_one() -> None:
    with pytest.raises(TypeError, match=r"^RegionalRuleExplainer\(\) got an unexpected keyword argument 'zzz'$"):
        RegionalRuleExplainer(nn.Linear(3, 2), zzz=1)


def test_every_suggestion_is_a_keyword_of_the_constructor() -> None:
    named = {p for p in inspect.signature(RegionalRuleExplainer).parameters if p not in ("model", "unknown")}
    assert named == {"layer", "feature_names", "layer_input", "concepts", "n_concepts", "concept_names"}
    for keyword in named:
        with pytest.raises(TypeError, match=rf"did you mean '{keyword}'\?"):
            RegionalRuleExplainer(nn.Linear(3, 2), **{keyword + "x": None})
