"""An explanation's rule sets measured on new data through the explainer's model, subgroup and threshold."""

from __future__ import annotations

from typing import Any

import numpy as np

from torch_amore._utils.typing import BatchKey
from torch_amore.data import validation as V
from torch_amore.explain.concept_space import encode_concepts
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import _evaluation_args
from torch_amore.model.source import BatchSource, ModelInputs
from torch_amore.model.subgroups import subgroup_mask

__all__ = ["evaluate_on", "evaluate_with_model"]


def evaluate_with_model(
    explainer: Any,
    explanation: RegionalExplanation,
    inputs: Any,
    target: Any,
    *,
    labels: Any,
    features: Any,
    batch_size: int,
    progress: bool,
    input_key: BatchKey,
    label_key: BatchKey,
    model_args: tuple[Any, dict | None],
) -> list:
    """:meth:`RegionalExplanation.evaluate <torch_amore.RegionalExplanation.evaluate>` with the ``explainer`` that
    made it; ``model_args``: the new data's ``(additional_forward_args, forward_kwargs)``."""
    frame = features if V.is_frame(features) else inputs
    which = "features" if frame is features else "inputs"
    target = V.align_rows(target, frame, "target", which)
    labels = V.align_rows(labels, frame, "labels", which)
    V.check_model_device(explainer.model)
    on = ModelInputs.make(
        explainer.model,
        inputs,
        batch_size=batch_size,
        progress=progress,
        input_key=input_key,
        label_key=label_key,
        model_args=_evaluation_args(explanation, *model_args),
    )
    return evaluate_on(explainer, explanation, on, target, labels=labels, features=features)


def evaluate_on(
    explainer: Any, explanation: RegionalExplanation, on: BatchSource, target: Any, *, labels: Any, features: Any
) -> list:
    """Metrics of ``explanation``'s rule sets on the batches of ``on`` for the subgroup ``target`` (with the
    explanation's threshold); ``features``: the new data's matrix when the rules are on separate features."""
    source = explanation.params.get("source")
    matrix = None
    if source == "features":
        if features is None:
            raise ValueError("Expected the new data's `features` matrix: these rules were built on separate features.")
        matrix, _ = V.to_tensor_2d(features, "features")
    layer = explainer.layer if source == "layer" else None
    fwd = on.collect(
        layer,
        explainer.layer_name,
        explainer.layer_input,
        collect_inputs=source == "inputs",
        require_inputs=source == "inputs",
    )
    n = fwd.outputs.shape[0]
    label_t = fwd.labels if labels is None else V.to_labels(labels, n)
    threshold = explanation.threshold if isinstance(target, (int, np.integer)) else None
    kind = explanation.params.get("outputs", "auto")
    mask, _, _ = subgroup_mask(fwd.outputs, target, threshold, label_t, kind)
    X = matrix if matrix is not None else (fwd.activations if source == "layer" else fwd.flat_inputs)
    if source == "layer" and explanation.concepts is not None:
        X = encode_concepts(explanation.concepts, X)
    if X.shape[0] != n:
        raise ValueError(f"Expected `features` to have one row per sample of `inputs` ({n}), got {X.shape[0]}.")
    if mask.shape[0] != n:
        raise ValueError(f"Expected `target` to have one entry per sample of `inputs` ({n}), got {mask.shape[0]}.")
    mask = mask.to(X.device)
    return [rs.evaluate(X, mask) for rs in explanation.rule_sets]
