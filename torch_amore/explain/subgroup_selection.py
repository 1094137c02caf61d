"""Feature selection for an explained subgroup: :func:`~torch_amore.selection.selection.select_features` with the
classes and defaults that the explainer and the Lightning callback both give it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from torch_amore.concepts.basis import ConceptBasis
from torch_amore.explain.concept_space import ConceptModel
from torch_amore.selection.selection import FeatureSelection, select_features


def select_for_subgroup(
    model: nn.Module,
    inputs: torch.Tensor,
    target: Any,
    outputs: torch.Tensor,
    labels: torch.Tensor | None,
    mask: torch.Tensor,
    options: bool | dict,
    *,
    layer: nn.Module | None,
    layer_input: bool,
    names: Sequence[str],
    basis: ConceptBasis | None = None,
) -> FeatureSelection:
    """:func:`select_features` on the explained ``inputs``, the classes the labels of a class-index ``target`` (else
    the subgroup ``mask``); ``options`` (a dict) override the defaults. With a concept ``basis`` the gradients are
    taken through it (:class:`~torch_amore.explain.concept_space.ConceptModel`).

    Example:
        >>> model = nn.Sequential(nn.Linear(3, 2))
        >>> x = torch.rand(64, 3, generator=torch.Generator().manual_seed(0))
        >>> mask = x[:, 0] > 0.5
        >>> picked = select_for_subgroup(
        ...     model, x, 1, model(x), None, mask, {"n_steps": 4}, layer=None, layer_input=False, names=["a", "b", "c"]
        ... )
        >>> set(picked.features) <= {0, 1, 2}
        True
    """
    is_class = isinstance(target, (int, np.integer))
    multi = outputs.ndim == 2 and outputs.shape[1] > 1
    classes = labels if is_class and labels is not None and labels.ndim == 1 else mask.long().cpu()
    opts = dict(options) if isinstance(options, dict) else {}
    if multi and not is_class and opts.get("target") is None:  # the labels are the subgroup; the output is unnamed
        raise ValueError(
            f"Expected select_features={{'target': k}} with a {type(target).__name__} `target` on a model of "
            f"{outputs.shape[1]} outputs: the integrated gradients attribute one output (class k), which a class-index "
            "`target` names and a mask or a callable does not."
        )
    if basis is not None and layer is not None:
        model = ConceptModel(model, layer, basis, layer_input=layer_input)
        layer, layer_input = model.concepts, False
    opts.setdefault("target", int(target) if is_class and multi else None)
    opts.setdefault("layer", layer)
    opts.setdefault("attribute_to_layer_input", layer_input)
    opts.setdefault("feature_names", list(names))
    return select_features(model, inputs, classes, **opts)
