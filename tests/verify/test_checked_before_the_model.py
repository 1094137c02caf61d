"""What verify refuses before the model runs (a model that counts its calls): a loader out of dataset order, a concept
basis without ``decode``, a ``level`` that is not a number, an empty list of rule sets; and what it accepts (numpy
levels, an ordered loader, with the tensor's numbers)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torch_amore import RegionalRuleExplainer
from torch_amore.concepts import ConceptBasis


class ReadsUnitZero(nn.Module):
    """``net``: Linear(8, 8) as the identity, ReLU, a head predicting 1 exactly when unit 0 > 0.5; counts its calls."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
        with torch.no_grad():
            self.net[0].weight.copy_(torch.eye(8))
            self.net[0].bias.zero_()
            self.net[2].weight.zero_()
            self.net[2].weight[1, 0] = 1.0
            self.net[2].bias.copy_(torch.tensor([0.0, -0.5]))
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.net(x)


@pytest.fixture
def case() -> tuple[ReadsUnitZero, torch.Tensor, object]:
    g = torch.Generator().manual_seed(0)
    model = ReadsUnitZero()
    explanation = RegionalRuleExplainer(model, layer="net.1").explain(
        torch.rand(1000, 8, generator=g), 1, min_support=50, progress=False
    )
    model.calls = 0
    return model, torch.rand(300, 8, generator=g), explanation


def test_a_loader_out_of_dataset_order_is_refused_and_an_ordered_one_gives_the_tensor_numbers(case) -> None:
    model, X, explanation = case
    shuffled = DataLoader(TensorDataset(X), batch_size=64, shuffle=True)
    reversed_rows = DataLoader(TensorDataset(X), batch_size=64, sampler=list(range(299, -1, -1)))
    for loader, used in ((shuffled, "RandomSampler"), (reversed_rows, "list")):
        with pytest.raises(
            ValueError, match=rf"yields the rows in order \(shuffle=False, no sampler\), but it uses a {used}"
        ):
            explanation.verify(loader, rule_sets=3, n_controls=3)
    assert model.calls == 0
    by_tensor = explanation.verify(X, rule_sets=3, n_controls=3)
    by_loader = explanation.verify(DataLoader(TensorDataset(X), batch_size=64), rule_sets=3, n_controls=3)
    assert by_loader.rows == by_tensor.rows
    for a, b in zip(by_loader.rows, by_tensor.rows):
        assert torch.equal(a.details["flipped"], b.details["flipped"])
    unread = [r for r in by_tensor.rows if 0 not in r.units]
    assert unread  # the head reads unit 0 only: moving any other unit moves no decision
    assert all(r.sufficiency.hits == r.necessity.hits == 0 for r in unread)


class EncodeOnly(ConceptBasis):
    """A basis that encodes (the first four units) but cannot set concepts: no ``decode``, no ``intervene``."""

    @property
    def n_concepts(self) -> int:
        return 4

    def encode(self, activations: torch.Tensor) -> torch.Tensor:
        return activations.reshape(activations.shape[0], -1)[:, :4] * 2


@pytest.mark.parametrize("concepts", [{"encode": lambda a: a[:, :4] * 2}, EncodeOnly()], ids=["dict", "subclass"])
def test_a_basis_without_decode_is_refused_before_the_model_runs(concepts) -> None:
    model = ReadsUnitZero()
    X = torch.rand(856, 8, generator=torch.Generator().manual_seed(1))
    explanation = RegionalRuleExplainer(model, layer="net.1", concepts=concepts).explain(X, 1, progress=False)
    model.calls = 0
    with pytest.raises(ValueError, match="Expected a `decode` callable for interventions in concept space"):
        explanation.verify(X, n_controls=0)
    assert model.calls == 0


def test_level_takes_numpy_numbers_and_refuses_other_types_and_empty_rule_sets(case) -> None:
    model, X, explanation = case
    refused = [
        (dict(level="0.9"), TypeError, r"`level` to be a number in \(0, 1\) such as 0.95, but got '0.9'"),
        (dict(level=torch.tensor(0.9)), TypeError, "`level` to be a number"),
        (dict(level=True), TypeError, "`level` to be a number"),
        (dict(level=np.float64(1.5)), ValueError, r"`level` to be a number in \(0, 1\)"),
        (dict(rule_sets=[]), ValueError, "Expected rule sets to verify, but `rule_sets` is empty"),
    ]
    for kwargs, error, text in refused:
        with pytest.raises(error, match=text):
            explanation.verify(X, **kwargs)
    assert model.calls == 0
    for level in (np.float32(0.9), np.float64(0.9), 0.9):
        result = explanation.verify(X, rule_sets=1, n_controls=0, level=level)
        assert result.level == 0.9 and "90% intervals" in str(result)
