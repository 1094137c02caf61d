"""RuleAttribution: Captum NeuronIntegratedGradients of each rule's latent unit, batched."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_amore import RegionalRuleExplainer, Rule, RuleAttribution, RuleSet


def _linear_model(seed: int = 0) -> nn.Sequential:
    """Images (1, 3, 3) -> Linear(9, 4) without bias -> ReLU -> Linear(4, 2): each latent unit is linear in pixels."""
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(9, 4, bias=False), nn.ReLU(), nn.Linear(4, 2))
    with torch.no_grad():
        model[1].weight.abs_()  # positive weights and inputs: the ReLU is the identity on the path
    return model


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def test_linear_units_match_the_closed_form_in_batches():
    model = _linear_model()
    g = torch.Generator().manual_seed(1)
    images = torch.rand(10, 1, 3, 3, generator=g)
    rules = RuleSet((Rule(2, "z_2", low=0.5), Rule(0, "z_0", high=1.0)), 5, 0.9, 0.3)
    maps = RuleAttribution(model, model[1]).attribute(images, rules, batch_size=3, n_steps=8)
    assert maps.shape == (2, 10, 1, 3, 3)
    W = model[1].weight.detach()
    for i, unit in enumerate([2, 0]):  # rule order
        expected = images.reshape(10, 9) * W[unit]  # IG of a linear unit from a zero baseline: x * w
        assert torch.allclose(maps[i].reshape(10, 9), expected, atol=1e-5)
    # the same units on the input of the last linear layer (ReLU output = Linear output here)
    via_input = RuleAttribution(model, "3", layer_input=True).attribute(images, [2, 0], n_steps=8)
    assert torch.allclose(via_input, maps, atol=1e-5)
    # a non-zero baseline: (x - b) * w
    base = torch.full((1, 1, 3, 3), 0.1)
    shifted = RuleAttribution(model, model[1]).attribute(images, [2], baselines=base, n_steps=8)
    assert torch.allclose(shifted[0].reshape(10, 9), (images.reshape(10, 9) - 0.1) * W[2], atol=1e-5)


def test_completeness_on_a_conv_net_and_modes_restored():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 16), nn.Tanh(), nn.Dropout(0.3),
        nn.Linear(16, 3),
    )  # fmt: skip
    model.train()
    images = torch.rand(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))
    explainer = RegionalRuleExplainer(model, "4")
    maps = explainer.attribute(images, [3, 11], n_steps=200, batch_size=4, internal_batch_size=128)
    model.eval()
    with torch.no_grad():
        z = model[:5](images)
        z0 = model[:5](torch.zeros_like(images))
    model.train()
    for i, unit in enumerate([3, 11]):  # attributions sum to the unit's change from the baseline
        total = maps[i].reshape(6, -1).sum(1)
        assert torch.allclose(total, z[:, unit] - z0[:, unit], atol=2e-3)
    assert model.training and all(m.training for m in model.modules())
    assert _hooks(model) == 0


def test_attribution_errors():
    model = _linear_model()
    with pytest.raises(ValueError, match="layer"):
        RegionalRuleExplainer(model).attribute(torch.rand(2, 1, 3, 3), [0])
    with pytest.raises(ValueError, match="layer"):
        RuleAttribution(model, None)
    att = RuleAttribution(model, model[1])
    with pytest.raises(TypeError, match="floating"):
        att.attribute(torch.ones(2, 1, 3, 3, dtype=torch.long), [0])
    with pytest.raises(ValueError, match="below 4"):
        att.attribute(torch.rand(2, 1, 3, 3), [7])
    with pytest.raises(ValueError, match="at least one"):
        att.attribute(torch.rand(2, 1, 3, 3), [])
    with pytest.raises(TypeError, match="RuleSet"):
        att.attribute(torch.rand(2, 1, 3, 3), "z_0")
    assert _hooks(model) == 0
