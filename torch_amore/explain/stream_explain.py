"""Streamed explanations (:func:`explain_streamed`): the features and the subgroup of each batch computed in one
forward pass (:class:`ModelBatches`) and the rules found on their codes (:mod:`torch_amore.search.stream`), so no
(N, D) matrix is ever made. ``stream="auto"`` streams when that matrix would exceed :data:`STREAM_MEMORY_SHARE` of the
available memory (:func:`should_stream`).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, RandomSampler

from torch_amore._utils import distributed as D
from torch_amore.data import memory as M
from torch_amore.explain.concept_space import encode_concepts, fit_on_batches
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import _data_options, target_param
from torch_amore.explain.units import with_units
from torch_amore.model.forward import check_finite_outputs, model_device
from torch_amore.model.subgroups import looks_like_probs, subgroup_mask
from torch_amore.rules.caveats import base_rate_reason, useless_reason

__all__ = [
    "STREAM_MEMORY_SHARE",
    "check_stream",
    "check_streamable",
    "explain_streamed",
    "should_stream",
    "unsupported",
    "ModelBatches",
]

#: ``stream="auto"`` streams when the (N, D) float matrix would take more than this share of the available memory.
STREAM_MEMORY_SHARE = 0.5

_said: set[str] = set()  # what "auto" has said already (once per process)


def check_stream(stream: Any) -> bool | str:
    """``stream`` checked: ``True``, ``False`` or ``"auto"``."""
    if stream is True or stream is False or (isinstance(stream, str) and stream == "auto"):
        return stream
    raise ValueError(f"Expected `stream` to be True, False or 'auto', but got {stream!r}.")


def unsupported(request: Any) -> str:
    """What of an :class:`~torch_amore.explain.request.ExplainRequest` a streamed explanation cannot do ('' when it
    can do all).

    Example:
        >>> from torch_amore.explain.request import ExplainRequest
        >>> unsupported(ExplainRequest.make(target=1, threshold="roc"))
        "threshold='roc' (it needs all outputs at once)"
    """
    r = request
    if r.matrix is not None:
        return "a separate `features` matrix"
    if r.select:
        return "select_features=True"
    if r.local is not None:
        return "local rules (explain_local)"
    if r.threshold == "roc":
        return "threshold='roc' (it needs all outputs at once)"
    if isinstance(r.target, (torch.Tensor, np.ndarray, list)) or hasattr(r.target, "iloc"):  # iloc: a pandas Series
        return "a mask `target` (pass a class index, a callable on the outputs or a (low, high) range)"
    if r.labels is not None:
        return "`labels` (they are read from the batches, see `label_key`)"
    if r.options.wants_evidence or r.holdout_rows is not None:
        return (
            "`holdout`, `holdout_rows`, `permutations` or `stability` (they need every row's target at once; a "
            "streamed search reads its rows in passes)"
        )
    return ""


def check_streamable(stream: bool | str, request: Any) -> str:
    """:func:`unsupported` of ``request``: a ``ValueError`` with ``stream=True`` when it names something (before any
    data are read: the callback checks it at construction).

    Example:
        >>> from torch_amore.explain.request import ExplainRequest
        >>> check_streamable("auto", ExplainRequest.make(target=1, threshold="roc"))
        "threshold='roc' (it needs all outputs at once)"
        >>> check_streamable(True, ExplainRequest.make(target=1, threshold="roc"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: Expected no threshold='roc' (it needs all outputs at once) with stream=True; pass stream=False ...
    """
    why = unsupported(request)
    if stream is True and why:
        raise ValueError(f"Expected no {why} with stream=True; pass stream=False (the in-memory path) for it.")
    return why


def should_stream(stream: bool | str, explainer: Any, source: Any, request: Any) -> bool:
    """Whether an explanation of ``request`` on ``source`` streams: ``stream`` itself, or for ``"auto"`` whether the
    ``source.n`` rows, of the width of the features on a first batch, exceed :data:`STREAM_MEMORY_SHARE` of the
    available memory on any rank (said once); never for what :func:`unsupported` names or an unknown ``source.n``."""
    why = check_streamable(stream, request)
    if stream != "auto":
        return stream is True
    n, device = source.n, model_device(explainer.model)
    if why or n is None:
        return bool(D.any_rank(False))
    free, _ = M.available_memory(device)
    width = itemsize = 0
    if free is not None:
        width, itemsize = ModelBatches(explainer, source, request).probe()
    need = n * width * itemsize
    big = free is not None and need > STREAM_MEMORY_SHARE * free
    if big and f"{n}x{width}" not in _said:
        _said.add(f"{n}x{width}")
        warnings.warn(
            f"stream='auto': the ({n}, {width}) matrix of features ({need / 2**30:.2f} GiB) would exceed "
            f"{STREAM_MEMORY_SHARE:.0%} of the available {device.type} memory ({free / 2**30:.2f} GiB), so "
            f"{source.finds} on the streamed batches' grid codes (stream=False forces the in-memory path).",
            UserWarning,
            stacklevel=3,
        )
    return bool(D.any_rank(big))


class ModelBatches:
    """A source of ``(X_batch, subgroup_batch)``: each call runs the explainer's model over the batches of ``source``.
    ``outputs="auto"`` is decided on the first batch and kept; :attr:`desc` and :attr:`threshold` describe the subgroup.
    """

    def __init__(self, explainer: Any, source: Any, request: Any) -> None:
        self.explainer, self.source, self.request = explainer, source, request
        self.kind = request.outputs
        self.desc, self.threshold = "target", None
        self.source_kind = "layer" if explainer.layer is not None else "inputs"
        self.raw = False  # True: the layer's activations, not their concepts

    def first_activations(self) -> torch.Tensor:
        """The layer's (1, D) flattened activations of the first sample (before any concept encoding)."""
        with closing(self.activations(first_only=True)) as batches:
            for X in batches:
                return X[:1]
        raise ValueError(self.source.empty)

    def activations(self, first_only: bool = False) -> Iterator[torch.Tensor]:
        """The layer's flattened activations, batch by batch (to fit a concept basis on the first rows)."""
        self.raw = True
        try:
            for X, _ in self._run(first_only):
                yield X
        finally:
            self.raw = False

    def probe(self) -> tuple[int, int]:
        """(width, bytes per value) of the features, from the model run on the first batch (no subgroup made)."""
        for X, _ in self._run(first_only=True):
            return X.shape[1], X.element_size()
        raise ValueError(self.source.empty)

    def __call__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self._run()

    def _run(self, first_only: bool = False) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        ex = self.explainer
        steps = self.source.steps(ex.layer, ex.layer_name, ex.layer_input, first_only=first_only)
        with closing(steps):
            for step in steps:
                rows = step.outputs.shape[0]
                if not first_only and self.source.checks_finite:  # the probe only measures the width
                    check_finite_outputs(step.outputs, batch_start=step.start)
                X = self._features(step.activations, step.inputs, rows)
                if first_only:  # the features' width or a concept basis: the target is not asked
                    yield X, None
                    return
                yield X, self._subgroup(step.outputs, step.labels, rows).to(X.device)

    def _features(self, activations: torch.Tensor | None, inp: Any, rows: int) -> torch.Tensor:
        basis = getattr(self.explainer, "concepts", None)
        if activations is not None:  # concepts once the basis is fitted (before: the probe measures the layer)
            encode = basis is not None and basis.fitted and not self.raw
            return encode_concepts(basis, activations) if encode else activations
        if not isinstance(inp, torch.Tensor):
            raise TypeError(
                "Expected tensor model inputs to build rules on them, but the batches hold "
                f"{type(inp).__name__}; pass `layer=`."
            )
        return inp.detach().reshape(rows, -1)

    def _subgroup(self, out: torch.Tensor, lab: Any, rows: int) -> torch.Tensor:
        target = self.request.target
        if self.kind == "auto" and isinstance(target, (int, np.integer)):
            scores = out if out.ndim == 2 else out.reshape(rows, -1)
            self.kind = "probs" if looks_like_probs(scores) else "logits"  # fixed from the first batch on
        labels = None if lab is None else torch.as_tensor(lab).reshape(rows, -1).squeeze(1).detach().cpu()
        mask, self.threshold, self.desc = subgroup_mask(out, target, self.request.threshold, labels, self.kind)
        return mask


def explain_streamed(explainer: Any, source: Any, request: Any) -> RegionalExplanation:
    """``RegionalRuleExplainer.explain_batches`` on streamed batches: the rules found on their codes in passes over
    ``source``."""
    from torch_amore.search.stream import prepare_stream, search_stream  # loaded when a call streams

    inputs = source.inputs
    if isinstance(inputs, DataLoader) and isinstance(inputs.sampler, RandomSampler):
        raise ValueError(
            "Expected `inputs` in the same order on every pass of a streamed explanation, but the DataLoader "
            "shuffles; pass DataLoader(..., shuffle=False)."
        )
    batches = ModelBatches(explainer, source, request)
    names = request.feature_names or explainer.feature_names
    if explainer.concepts is not None:  # fitted on the first rows, once; then every batch is encoded
        explainer.concepts = fit_on_batches(
            explainer.concepts, batches.activations(), progress=request.options.progress
        )
        names = request.feature_names or explainer.concepts.names
    options = request.options
    if request.scaler is not None:  # the width is needed first: the probe's
        options = with_units(options, request.scaler, batches.probe()[0], batches.source_kind)
    extractor = prepare_stream(
        batches,
        options,
        features=request.indices,
        feature_names=names,
        target_name=request.target_name or "target",
        name_prefix="z" if batches.source_kind == "layer" else "feature",
        counted=request.counted,
    )
    extractor.target_name = target_name = request.target_name or batches.desc
    rule_sets, min_count = search_stream(extractor)
    mask = extractor.target
    n, size = extractor.plan.n_rows, D.global_count(int(mask.sum()))
    message = useless_reason(rule_sets, n, size, min_count=min_count, local=False)
    for reason in (message, base_rate_reason(rule_sets, n, size)):  # joined by explain's one warning
        if reason:
            warnings.warn(reason, UserWarning, stacklevel=3)
    facts = {
        "min_support_count": min_count,
        "source": batches.source_kind,
        "target_name": target_name,
        "n_samples": mask.shape[0],
        "subgroup_size": int(mask.sum()),
        "target": target_param(request.target, target_name),
        "stream": True,
    }
    return RegionalExplanation(
        rule_sets=rule_sets,
        subgroup=mask,
        threshold=batches.threshold,
        features=list(extractor.binned.columns),
        feature_names=extractor.names,
        params=explainer._params(request, options, facts),
        message=message,
        explainer=explainer,
        data_options=_data_options(request, mask.shape[0]),
        concepts=explainer.concepts,
    )
