"""Bad concept input is refused before the full pass over the data (issue 43, criterion 5), and errors name the
argument the user passed (``concept_names``, not the basis's ``names``)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_amore import RegionalRuleExplainer
from torch_amore.concepts import Directions, EncoderDecoder, FittedBasis

D = 6
FAST = dict(max_length=1, min_support=0.05, progress=False)


class Counting(nn.Module):
    """``Linear(4, D)``, then ReLU, then a logit; counts the samples it runs on."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, D), nn.ReLU(), nn.Linear(D, 1))
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.net(x)


def inputs(n: int = 400) -> torch.Tensor:
    return torch.randn(n, 4, generator=torch.Generator().manual_seed(1))


def negative_first_sample(model: Counting, X: torch.Tensor) -> bool:
    """Whether the Linear layer's activations of the first sample hold a negative value, one unit at a time."""
    weight, bias = model.net[0].weight.detach(), model.net[0].bias.detach()
    return any(float(bias[j] + sum(weight[j, i] * X[0, i] for i in range(4))) < 0 for j in range(D))


@pytest.mark.parametrize("stream", [False, True])
def test_nmf_on_negative_activations_is_refused_on_the_first_batch(stream):
    model, X = Counting(), inputs()
    assert negative_first_sample(model, X)  # the premise: the Linear layer's output is negative somewhere
    explainer = RegionalRuleExplainer(model, layer="net.0", concepts="nmf", n_concepts=2)
    kw = dict(stream=True, batch_size=100) if stream else {}
    with pytest.raises(ValueError, match="NMF needs non-negative activations, but the layer's smallest activation"):
        explainer.explain(X, 1, **kw, **FAST)
    assert model.rows == kw.get("batch_size", 256) < len(X)  # the probe's first batch, no pass over the 400 rows
    assert not explainer.concepts.fitted


def test_nmf_refuses_with_the_message_of_the_fit():
    a = torch.tensor([[0.5, -2.0, 1.0], [1.0, 1.0, 1.0]])
    with pytest.raises(ValueError) as at_fit:
        FittedBasis("nmf", 2).fit(a)
    with pytest.raises(ValueError) as on_sample:
        FittedBasis("nmf", 2).check_sample(a[:1])
    assert str(on_sample.value) == str(at_fit.value)
    FittedBasis("nmf", 2).check_sample(a[1:])  # non-negative: accepted
    FittedBasis("pca", 2).check_sample(a[:1])  # other methods take negative values
    with pytest.raises(ValueError, match="finite activations to fit PCA"):
        FittedBasis("pca", 2).check_sample(torch.tensor([[float("nan"), 1.0]]))


def test_nmf_on_a_relu_layer_passes_the_probe():
    model, X = Counting(), inputs()
    with torch.no_grad():  # about half the rows predicted 1
        model.net[2].bias -= model.net(X)[:, 0].median()
    explainer = RegionalRuleExplainer(model, layer="net.1", concepts="nmf", n_concepts=2)
    explanation = explainer.explain(X, 1, **FAST)
    assert explainer.concepts.fitted and explanation.feature_names == ["nmf_0", "nmf_1"]
    with torch.no_grad():
        relu = model.net[1](model.net[0](X))
    assert bool((relu >= 0).all())  # the premise: a ReLU's output


@pytest.mark.parametrize(
    ("concepts", "names", "match"),
    [
        (Directions(torch.eye(D)[:, :2]), ["a", "b"], "Expected no `concept_names` with `concepts` given as a Concept"),
        (Directions(torch.eye(D)[:, :2]).to_dict(), ["a", "b"], "no `concept_names` with `concepts` given as a saved"),
        (torch.eye(D)[:, :2], ["a"], "Expected 2 concept `concept_names`, one per concept, but got 1"),
        ("pca", ["a"], "Expected 3 concept `concept_names`, one per concept, but got 1"),
        ({"encode": abs, "names": ["x"]}, ["a"], "in the dict's 'names' or as `concept_names`"),
        (torch.eye(D), "abc", "Expected `concept_names` to be a sequence of strings"),
    ],
)
def test_name_errors_name_concept_names(concepts, names, match):
    model = Counting()
    n_concepts = 3 if concepts == "pca" else None
    with pytest.raises((ValueError, TypeError), match=match) as info:
        RegionalRuleExplainer(model, layer="net.0", concepts=concepts, n_concepts=n_concepts, concept_names=names)
    assert "`names`" not in str(info.value)


def test_an_encoders_names_are_checked_on_the_first_batch_as_concept_names():
    model = Counting()
    basis = {"encode": lambda a: a[:, :3], "decode": lambda c: torch.cat([c, torch.zeros(c.shape[0], D - 3)], 1)}
    explainer = RegionalRuleExplainer(model, layer="net.0", concepts=basis, concept_names=["a", "b"])
    with pytest.raises(ValueError, match="Expected 3 concept `concept_names`, one per concept, but got 2"):
        explainer.explain(inputs(), 1, **FAST)
    assert model.rows == 256 < len(inputs())  # the first batch (of the default batch_size), no full pass
    assert isinstance(explainer.concepts, EncoderDecoder)
