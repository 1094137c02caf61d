"""Input (pixel) attribution maps for rules on latent units: each rule's unit attributed to the input with Captum's
``NeuronIntegratedGradients``, in batches (drawn by :func:`torch_amore.report.plot.plot_rule_attributions`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from torch_amore.concepts.basis import ConceptBasis
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.explain.concept_space import concept_selector
from torch_amore.model.forward import eval_mode, resolve_layer
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet

#: Which latent units to attribute: a rule set, rules, or flat unit indices.
UnitsType = RuleSet | Rule | int | Sequence[Rule | int]


def rule_units(rules: UnitsType) -> list[int]:
    """The flat latent-unit index of every rule (in rule order); ints pass through.

    Example:
        >>> rule_units(RuleSet.from_dict({"rules": [{"feature": 44, "name": "z_44", "low": 6.2}, {"feature": 114,
        ...     "name": "z_114", "high": 3.1}], "support": 0, "confidence": 0.0, "fitness": 0.0}))
        [44, 114]
    """
    if isinstance(rules, RuleSet):
        rules = rules.rules
    if isinstance(rules, (Rule, int)) and not isinstance(rules, bool):
        rules = [rules]
    if isinstance(rules, (str, bytes)) or not isinstance(rules, Sequence):
        raise TypeError(f"Expected `rules` to be a RuleSet, Rule(s) or unit indices, but got {type(rules).__name__}.")
    units = []
    for r in rules:
        if isinstance(r, Rule):
            units.append(int(r.feature))
        elif isinstance(r, int) and not isinstance(r, bool) and r >= 0:
            units.append(int(r))
        else:
            raise TypeError(f"Expected rules or non-negative unit indices in `rules`, but got {r!r}.")
    if not units:
        raise ValueError("Expected at least one rule or unit in `rules`, but got none.")
    return units


def _unit_selector(unit: int):
    def select(activation: Any) -> torch.Tensor:
        if isinstance(activation, (tuple, list)):
            activation = activation[0]
        flat = activation.reshape(activation.shape[0], -1)
        if unit >= flat.shape[1]:
            raise ValueError(f"Expected unit indices below {flat.shape[1]} (the layer's flat size), but got {unit}.")
        return flat[:, unit]

    return select


class RuleAttribution:
    """Attribute the latent unit of each rule to the model's input features (pixels).

    Args:
        model: the trained model.
        layer: the submodule (or its dotted name) whose flattened activations the rules are on.
        layer_input: the rules are on the layer's input rather than its output.
        multiply_by_inputs: Captum's option; ``True`` gives integrated gradients ``(x - baseline) * avg. gradient``
            (attributions sum to the unit's change), ``False`` the average gradient alone.
        concepts: a fitted :class:`~torch_amore.concepts.ConceptBasis` of the layer: the rules' features are then
            concepts, and each rule's concept activation ``encode(a)[:, k]`` is attributed.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Flatten(), nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 1))
        >>> with torch.no_grad():
        ...     _ = model[1].weight.copy_(torch.tensor([[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 2.0]]))
        ...     _ = model[1].bias.zero_()
        >>> images = torch.ones(3, 1, 2, 2)
        >>> maps = RuleAttribution(model, model[1]).attribute(images, [0, 1])
        >>> maps.shape  # (units, samples, *image shape)
        torch.Size([2, 3, 1, 2, 2])
        >>> maps[0, 0, 0]  # unit 0 = pixel (0, 0) + pixel (0, 1)
        tensor([[1., 1.],
                [0., 0.]])
    """

    def __init__(
        self,
        model: nn.Module,
        layer: nn.Module | str,
        *,
        layer_input: bool = False,
        multiply_by_inputs: bool = True,
        concepts: ConceptBasis | None = None,
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected `model` to be a torch.nn.Module, but got {type(model).__name__}.")
        if layer is None:
            raise ValueError("Expected a `layer` whose units the rules are on, but got None.")
        self.model = model
        self.layer, self.layer_name = resolve_layer(model, layer)
        self.layer_input = A.check_flag(layer_input, "layer_input")
        self.multiply_by_inputs = A.check_flag(multiply_by_inputs, "multiply_by_inputs")
        if concepts is not None and not isinstance(concepts, ConceptBasis):
            raise TypeError(f"Expected `concepts` to be a ConceptBasis or None, but got {type(concepts).__name__}.")
        if concepts is not None and not concepts.fitted:
            raise ValueError("Expected a fitted concept basis for pixel maps: explain once first, or fit it.")
        self.concepts = concepts

    @classmethod
    def from_explainer(cls, explainer: Any, **kwargs: Any) -> RuleAttribution:
        """The attribution for the model and layer of a :class:`~torch_amore.RegionalRuleExplainer`."""
        if getattr(explainer, "layer", None) is None:
            raise ValueError("Expected an explainer with a `layer`: pixel maps explain rules on latent units.")
        concepts = getattr(explainer, "concepts", None)
        return cls(explainer.model, explainer.layer, layer_input=explainer.layer_input, concepts=concepts, **kwargs)

    def attribute(
        self,
        inputs: torch.Tensor,
        rules: UnitsType,
        *,
        baselines: torch.Tensor | float | None = None,
        n_steps: int = 50,
        batch_size: int = 64,
        internal_batch_size: int | None = None,
        additional_forward_args: Any = None,
    ) -> torch.Tensor:
        """Attribution maps of each rule's unit for each input.

        Args:
            inputs: (N, ...) model inputs, e.g. images (N, C, H, W).
            rules: a :class:`~torch_amore.RuleSet`, rules, or flat unit indices of the layer.
            baselines: the integration start (default zeros: a black image); a scalar or a tensor broadcastable to
                one input batch.
            n_steps: integration steps.
            batch_size: inputs per Captum call; ``internal_batch_size``: path points per forward pass inside Captum
                (default ``batch_size * n_steps`` at once).
            additional_forward_args: passed to the model after the input.

        Returns:
            A tensor (n_rules, N, *inputs.shape[1:]) of signed attributions (on the inputs' device).
        """
        from captum.attr import NeuronIntegratedGradients

        if not isinstance(inputs, torch.Tensor):
            raise TypeError(f"Expected `inputs` to be a tensor of model inputs, but got {type(inputs).__name__}.")
        if inputs.ndim < 2 or inputs.shape[0] == 0:
            raise ValueError(f"Expected `inputs` of shape (N, ...) with N >= 1, but got shape {tuple(inputs.shape)}.")
        if not inputs.is_floating_point():
            raise TypeError(f"Expected floating-point `inputs` (gradients flow to them), but got {inputs.dtype}.")
        V.check_not_meta((inputs, baselines, additional_forward_args), "inputs")
        V.check_model_device(self.model)  # a torch.nn.Module: checked by the constructor
        units = rule_units(rules)
        n_steps = A.check_int(n_steps, "n_steps", 1)
        batch_size = A.check_int(batch_size, "batch_size", 1)
        device = next((p.device for p in self.model.parameters()), inputs.device)
        method = NeuronIntegratedGradients(self.model, self.layer, multiply_by_inputs=self.multiply_by_inputs)
        out = torch.zeros((len(units), *inputs.shape), dtype=inputs.dtype, device=inputs.device)
        with eval_mode(self.model):
            for start in range(0, inputs.shape[0], batch_size):
                chunk = inputs[start : start + batch_size].to(device)
                base = baselines
                if isinstance(base, torch.Tensor) and base.ndim == inputs.ndim and base.shape[0] == inputs.shape[0]:
                    base = base[start : start + batch_size]
                if isinstance(base, torch.Tensor):
                    base = base.to(device)
                for i, unit in enumerate(units):
                    selector = _unit_selector(unit) if self.concepts is None else concept_selector(self.concepts, unit)
                    attr = method.attribute(
                        chunk,
                        selector,
                        baselines=base,
                        additional_forward_args=additional_forward_args,
                        n_steps=n_steps,
                        internal_batch_size=internal_batch_size,
                        attribute_to_neuron_input=self.layer_input,
                    )
                    out[i, start : start + chunk.shape[0]] = attr.detach().to(out.device, out.dtype)
        return out
