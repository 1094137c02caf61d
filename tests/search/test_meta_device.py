"""Tensors on the 'meta' device (shapes only, no values) are refused up front with a ValueError naming the argument
and the device, before any forward pass or search (issue 28), instead of failing inside torch."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import torch_amore as ta

META = "'meta'"


class Counting(nn.Module):
    """A small classifier that counts its forward calls."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 2))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.net(x)


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 4, generator=g)
    return X, X[:, 0] > 0


OPTS = dict(max_length=2, n_grids=4, min_support=20, progress=False)


def test_the_working_case_runs(data):
    X, mask = data
    model = Counting()
    assert ta.RegionalRuleExplainer(model).explain(X, mask, **OPTS).rule_sets and model.calls > 0


@pytest.mark.parametrize("verb", ["explain", "explain_local", "features_matrix"])
def test_a_model_on_meta_is_refused_naming_its_parameter(data, verb):
    X, mask = data
    model = Counting().to("meta")
    explainer = ta.RegionalRuleExplainer(model, "net.1")
    call = {
        "explain": lambda: explainer.explain(X, mask, **OPTS),
        "explain_local": lambda: explainer.explain_local(0, X, mask, **OPTS),
        "features_matrix": lambda: explainer.features_matrix(X),
    }[verb]
    with pytest.raises(ValueError, match=META) as info:
        call()
    assert "`model`" in str(info.value) and "net.0.weight" in str(info.value)
    assert model.calls == 0


def test_a_meta_buffer_is_refused_too(data):
    X, mask = data
    model = Counting()
    model.register_buffer("scale", torch.ones(4, device="meta"))
    with pytest.raises(ValueError, match="buffer `scale`"):
        ta.RegionalRuleExplainer(model).explain(X, mask, **OPTS)
    assert model.calls == 0


@pytest.mark.parametrize(
    "argument", ["inputs", "inputs-tuple", "loader", "target", "labels", "x", "features", "forward_kwargs"]
)
def test_meta_tensors_given_to_the_explainer_are_refused_before_any_forward(data, argument):
    X, mask = data
    meta = X.to("meta")
    model = Counting()
    explainer = ta.RegionalRuleExplainer(model)
    calls = {
        "inputs": lambda: explainer.explain(meta, mask, **OPTS),
        "inputs-tuple": lambda: explainer.explain((meta,), mask, **OPTS),
        "loader": lambda: explainer.explain(DataLoader(TensorDataset(meta), batch_size=50), 1, **OPTS),
        "target": lambda: explainer.explain(X, mask.to("meta"), **OPTS),
        "labels": lambda: explainer.explain(X, 1, labels=mask.long().to("meta"), threshold="roc", **OPTS),
        "x": lambda: explainer.explain_local(meta[0], X, mask, **OPTS),
        "features": lambda: explainer.explain(X, mask, features=meta, **OPTS),
        "forward_kwargs": lambda: ta.RegionalRuleExplainer(_WithKwarg()).explain(
            X, 1, forward_kwargs={"shift": torch.zeros(2, device="meta")}, **OPTS
        ),
    }
    with pytest.raises(ValueError, match=META) as info:
        calls[argument]()
    name = {"inputs-tuple": "inputs", "loader": "inputs"}.get(argument, argument)
    assert f"`{name}`" in str(info.value)
    assert model.calls == 0


class _WithKwarg(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + shift


def test_extract_rules_and_rule_sets_refuse_meta(data):
    X, mask = data
    with pytest.raises(ValueError, match=META):
        ta.extract_rules(X.to("meta"), mask, **OPTS)
    with pytest.raises(ValueError, match=META):
        ta.extract_rules(X, mask.to("meta"), **OPTS)
    rule = ta.Rule(0, "x", low=0.0)
    with pytest.raises(ValueError, match=META):
        ta.RuleSet.from_rules([rule], X.to("meta"), mask)
    rs = ta.RuleSet.from_rules([rule], X, mask)
    assert rs.support == int((X[:, 0] >= 0).sum())  # the same rule on real data: its count
    with pytest.raises(ValueError, match=META):
        rs.evaluate(X, mask.to("meta"))
    with pytest.raises(ValueError, match=META):
        rs.mask(X.to("meta"))


def test_feature_selection_and_attribution_refuse_meta(data):
    pytest.importorskip("captum")
    X, mask = data
    with pytest.raises(ValueError, match=META):
        ta.select_features(Counting().to("meta"), X, mask.long())
    with pytest.raises(ValueError, match=META):
        ta.select_features(Counting(), X.to("meta"), mask.long())
    model = Counting().to("meta")
    with pytest.raises(ValueError, match=META):
        ta.RegionalRuleExplainer(model, "net.1").attribute(X, [0])
    with pytest.raises(ValueError, match=META):
        ta.RegionalRuleExplainer(Counting(), "net.1").attribute(X.to("meta"), [0])
