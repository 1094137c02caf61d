"""RegionalRuleExplainer: regional rules for what a trained ``nn.Module`` predicts, on its inputs, the activations
of a layer (or concepts of them, ``concepts=``), or a separate matrix of interpretable features. Hooks are always
removed and every submodule's train/eval mode restored, also when an error is raised.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from torch_amore._utils import distributed as D
from torch_amore._utils.one_warning import OneWarning
from torch_amore._utils.typing import BatchKey
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.data.held_rows import resolve_holdout_rows
from torch_amore.explain.attribution import RuleAttribution
from torch_amore.explain.concept_space import check_concepts, concept_params, encode_concepts, fit_once, resolve_basis
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.explain.request import ExplainRequest, _data_options, local_vector, resolve_names, target_param
from torch_amore.explain.stream_explain import check_stream, explain_streamed, should_stream
from torch_amore.explain.subgroup_selection import select_for_subgroup
from torch_amore.explain.units import with_units
from torch_amore.model.forward import Forward, ModelArgs, eval_mode, resolve_layer
from torch_amore.model.source import BatchSource, ModelInputs
from torch_amore.model.subgroups import subgroup_mask
from torch_amore.rules.caveats import useless_reason
from torch_amore.search.extract import extract_planned
from torch_amore.search.options import SearchOptions
from torch_amore.search.significance import NoHeldOutSplit

#: What ``target`` accepts: a class index, a boolean mask, a callable on the outputs, or a ``(low, high)`` range.
TargetType = int | torch.Tensor | np.ndarray | Sequence[bool] | Callable[[torch.Tensor], Any] | tuple[float, float]


class RegionalRuleExplainer:
    """Regional IF-THEN rules for what a trained model predicts, on its inputs, a layer, or separate features.

    Args:
        model: a trained ``nn.Module``. It runs in eval mode under ``torch.no_grad``; its modes are restored after.
        layer: a submodule (or its dotted name, e.g. ``"encoder.fc1"``) whose activations, flattened to (N, D),
            are the features of the rules; ``None`` uses the model inputs, flattened.
        feature_names: names of the D features (default ``z_{i}`` for a layer, ``feature_{i}`` for inputs).
        layer_input: use the layer's (first) input instead of its output, e.g. the input of the last linear layer.
        concepts: rules over concepts of the layer instead of its units (needs ``layer``): a
            :class:`~torch_amore.concepts.ConceptBasis`, a (D, K) matrix of directions, a ``(W, center)`` pair, or
            the name of a basis fitted once on the first explained activations (``"pca"``, ...; kept on
            :attr:`concepts`). ``features=`` indices, ``select_features`` and local rules then refer to concepts.
        n_concepts: K of a fitted basis (only with a method name).
        concept_names: the K concept names (default: the basis's, ``concept_{k}``). Any other keyword is a
            ``TypeError`` naming the closest one.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> _ = torch.manual_seed(0)
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3))  # class 2 iff both hidden units < 1
        >>> with torch.no_grad():
        ...     _ = model[0].weight.copy_(2 * torch.eye(2)), model[0].bias.zero_()
        ...     _ = model[2].weight.copy_(torch.tensor([[1.0, 0], [0, 1], [0, 0]]))
        ...     _ = model[2].bias.copy_(torch.tensor([0.0, 0.0, 1.0]))
        >>> X = torch.rand(1000, 2)
        >>> explainer = RegionalRuleExplainer(model, layer=model[1])
        >>> explanation = explainer.explain(X, 2, min_support=100, progress=False)
        >>> print(explanation.best.format(precision=1))
        IF z_0 < 1 AND z_1 < 1 THEN predicted 2  (support=248, confidence=1.000, fitness=1.000)
    """

    def __init__(
        self,
        model: nn.Module,
        layer: nn.Module | str | None = None,
        *,
        feature_names: Sequence[str] | None = None,
        layer_input: bool = False,
        concepts: Any = None,
        n_concepts: int | None = None,
        concept_names: Sequence[str] | None = None,
        **unknown: Any,
    ) -> None:
        known = ("layer", "feature_names", "layer_input", "concepts", "n_concepts", "concept_names")
        A.unexpected_keywords(unknown, known, type(self).__name__)
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected `model` to be a torch.nn.Module, but got {type(model).__name__}.")
        if isinstance(feature_names, str):
            raise TypeError("Expected `feature_names` to be a sequence of strings, but got a single string.")
        self.model = model
        self.layer, self.layer_name = resolve_layer(model, layer)
        self.layer_input = A.check_flag(layer_input, "layer_input")
        self.feature_names = None if feature_names is None else [str(n) for n in feature_names]
        #: The concept basis of the rules (``None``: rules on units); a fitted one once the first call fitted it.
        self.concepts = resolve_basis(
            concepts, n_concepts, concept_names, layer=self.layer, feature_names=feature_names
        )

    def __repr__(self) -> str:
        layer = "None" if self.layer_name is None else repr(self.layer_name)
        concepts = "" if self.concepts is None else f", concepts={self.concepts!r}"
        return f"{type(self).__name__}(model={type(self.model).__name__}, layer={layer}{concepts})"

    def explain(
        self,
        inputs: Any,
        target: TargetType,
        *,
        labels: Any = None,
        threshold: float | str | None = None,
        outputs: str = "auto",
        features: Any = None,
        feature_names: Sequence[str] | None = None,
        select_features: bool | dict = False,
        scaler: Any = None,
        options: SearchOptions | dict | None = None,
        batch_size: int = 256,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        target_name: str | None = None,
        additional_forward_args: Any = None,
        forward_kwargs: dict[str, Any] | None = None,
        stream: bool | str = "auto",
        local: Any = None,
        holdout_rows: Any = None,
        **search_options: Any,
    ) -> RegionalExplanation:
        """Rules describing the subgroup ``target`` of the model's predictions on ``inputs``.

        Args:
            inputs: a tensor or numpy array (N, ...), a tuple of them (several positional model inputs), a pandas
                DataFrame, a ``Dataset``, a ``DataLoader`` (in dataset order when rows must align with other
                arguments), or a list or ``Batch`` of torch_geometric graphs.
            target: the subgroup:

                * a class index ``c``: ``argmax(output) == c`` for several outputs; for a single (binary) output,
                  probability of class ``c`` > ``threshold``;
                * a boolean mask (N,);
                * a callable on the model outputs (N, ...) returning a boolean mask;
                * ``(low, high)``: a single regression output in ``[low, high)`` (``None`` leaves a side open). This
                  is not Captum's output index: for an output index use a callable.
            labels: true labels (N,), needed by ``threshold="roc"``; by default taken from the batches.
            threshold: probability threshold for a class-index target (default 0.5 for one output, argmax for
                several); ``"roc"`` picks the threshold maximizing TPR - FPR against ``labels`` (as in the paper).
            outputs: what the model returns, for thresholds: ``"logits"`` (sigmoid / softmax), ``"probs"``, or
                ``"auto"`` (default): probabilities when all outputs lie in [0, 1] (summing to 1 for several).
            features: a separate (N, F) matrix of interpretable features aligned with ``inputs`` (the rules are built
                on it), or feature indices / a ``FeatureSelection`` restricting the search to those features.
            feature_names: names of the features (overrides the explainer's).
            select_features: search only the features :func:`torch_amore.select_features` selects on the inputs or
                the layer (a dict passes options to it, e.g. ``{"min_frequency": 0.2}``).
            scaler: a fitted scikit-learn scaler (``StandardScaler``, ``MinMaxScaler``, ...) of the features the rules
                are built on: rules print in its original units (instead of ``feature_scale``/``feature_offset``).
            options: a :class:`torch_amore.SearchOptions` (or a dict of its fields); keyword arguments override it.
            batch_size: samples per forward pass for tensor, Dataset and graph-list inputs.
            input_key: which element of each batch of a Dataset or DataLoader is the model input: an index or key,
                a sequence of them or a callable ``batch -> input`` (default: a tensor batch itself, else the first
                element of a tuple batch, else the whole batch); refused with tensor inputs, the model input itself.
            label_key: where each batch of a Dataset or DataLoader holds the labels (default: the second element of
                tuple batches); refused with tensor inputs, whose labels go in ``labels``.
            target_name: name of the subgroup in the printed rules (default e.g. ``"predicted 7"``).
            additional_forward_args: extra positional model arguments after the inputs (as in Captum); a tensor or
                array with one row per sample is split along with the batches, anything else is passed whole.
            forward_kwargs: extra keyword arguments for every ``model(...)`` call, split per sample the same way.
            stream: ``True`` runs the model batch by batch on every pass over ``inputs`` and finds the rules on the
                grid codes of the activations (no (N, D) matrix is kept; ``features_matrix`` is ``None``); ``False``
                collects the activations first; ``"auto"`` (default) streams, and says so once, when the (N, D)
                matrix would exceed half the available memory (RAM, or the CUDA device's). Streaming takes a class
                index, a callable or a range ``target``, not a mask, ``features``, ``select_features``, ``"roc"``
                or ``local``.
            local: a sample for local rules (:meth:`explain_local`): only rule sets whose every interval contains it
                are returned. ``None`` (default): global rules.
            holdout_rows: rows of ``inputs`` held out of the search (a boolean (N,) mask or row positions; a boolean
                pandas Series by its index when ``inputs`` or ``features`` is a DataFrame): every rule set gets its
                numbers there, ``held_out`` (as ``holdout=`` does for a seeded fraction; docs/trust.md). Checked
                before the model runs; not with ``holdout`` or streaming. Under DDP, each rank's own rows.
            **search_options: any field of :class:`torch_amore.SearchOptions` (documented there); an unknown name
                is a ``TypeError``.

        Returns:
            A :class:`RegionalExplanation` with the rule sets (best fitness first); a ``UserWarning``, also in its
            ``message``, gives the reasons to read them with care.
        """
        request = ExplainRequest.make(
            target=target,
            threshold=threshold,
            outputs=outputs,
            labels=labels,
            features=features,
            feature_names=feature_names,
            select_features=select_features,
            scaler=scaler,
            options=options,
            search_options=search_options,
            batch_size=batch_size,
            input_key=input_key,
            label_key=label_key,
            target_name=target_name,
            additional_forward_args=additional_forward_args,
            forward_kwargs=forward_kwargs,
            local=local,
            holdout_rows=holdout_rows,
        )
        stream = check_stream(stream)
        # every reason to warn, in one UserWarning; not the leak caveat: rules are meant to match the model's decision
        with OneWarning(stacklevel=2, leave_out=("leak",)) as warned:
            V.check_model_device(self.model)
            request = request.aligned_to(inputs)  # a pandas mask target and labels in a DataFrame's row order
            source = ModelInputs.make(  # the one conversion of the inputs
                self.model,
                inputs,
                batch_size=request.batch_size,
                input_key=request.input_key,
                label_key=request.label_key,
                model_args=request.model_args,
                progress=request.options.progress,
            )
            explanation = self.explain_batches(source, request, stream=stream)
        explanation.message = warned.text
        return explanation

    def explain_local(self, x: Any, inputs: Any, target: TargetType, **kwargs: Any) -> RegionalExplanation:
        """Local rules (``explain(inputs, target, local=x, **kwargs)``): rule sets whose every interval contains the
        sample ``x``: an int (a row of ``inputs``), one model input or graph, or (on a ``features`` matrix or the
        inputs) its row of features. For an outlier of the subgroup the result is empty and its ``message`` says why.

        Example:
            >>> import torch
            >>> from torch_amore import RegionalRuleExplainer
            >>> model = torch.nn.Sequential(torch.nn.Linear(2, 2))
            >>> with torch.no_grad():
            ...     _ = model[0].weight.copy_(torch.tensor([[-1.0, 0.0], [1.0, 0.0]]))
            ...     _ = model[0].bias.zero_()
            >>> X = torch.linspace(-1, 1, 400).reshape(200, 2)
            >>> explanation = RegionalRuleExplainer(model).explain_local(150, X, 1, max_length=1)
            >>> all(rule.contains(float(X[150, rule.feature])) for rule in explanation.best.rules)
            True
        """
        if x is None:
            raise ValueError("Expected a sample `x` for local rules, but got None.")
        if "local" in kwargs:
            raise TypeError("Expected the sample of local rules as `x` only, but got a `local` keyword as well.")
        return self.explain(inputs, target, local=x, **kwargs)

    def features_matrix(
        self,
        inputs: Any,
        *,
        batch_size: int = 256,
        progress: bool = False,
        input_key: BatchKey = None,
        additional_forward_args: Any = None,
        forward_kwargs: dict[str, Any] | None = None,
    ) -> torch.Tensor:
        """The (N, D) matrix the rules of this explainer apply to (the layer's flattened activations, their concepts,
        or the flattened inputs), e.g. for ``rule_set.mask(...)`` on a test split."""
        V.check_model_device(self.model)
        source = ModelInputs.make(
            self.model,
            inputs,
            batch_size=batch_size,
            progress=progress,
            input_key=input_key,
            model_args=ModelArgs.make(additional_forward_args, forward_kwargs),
        )
        fwd = source.collect(self.layer, self.layer_name, self.layer_input, collect_inputs=self.layer is None)
        if self.layer is None:
            return fwd.flat_inputs
        if self.concepts is None:
            return fwd.activations
        self.concepts = fit_once(self.concepts, fwd.activations, progress=progress)
        return encode_concepts(self.concepts, fwd.activations)

    def attribute(self, inputs: torch.Tensor, rules: Any, **kwargs: Any) -> torch.Tensor:
        """Pixel (input) attribution maps of the latent unit (or concept) of each rule, shape
        ``(n_rules, N, *inputs.shape[1:])``: ``rules`` is a rule set, rules or unit indices on this explainer's layer;
        keyword arguments go to :meth:`torch_amore.RuleAttribution.attribute`.
        """
        return RuleAttribution.from_explainer(self).attribute(inputs, rules, **kwargs)

    # --- the steps of one explanation -----------------------------------------------------------------------------

    def explain_batches(
        self, source: BatchSource, request: ExplainRequest, *, stream: bool | str = False, empty: str = "raise"
    ) -> RegionalExplanation:
        """The explanation of ``request`` on the model's batches from ``source``, in memory or streamed: the one
        pipeline of :meth:`explain` and the Lightning callback. ``empty="keep"`` returns an explanation without rule
        sets (its ``message`` says why) where the subgroup holds no row or every row, or too few rows for the held-out
        split (:class:`~torch_amore.search.significance.NoHeldOutSplit`), instead of raising.

        Example:
            >>> from torch_amore.model.source import ModelInputs
            >>> model = torch.nn.Sequential(torch.nn.Linear(2, 1))
            >>> X = torch.rand(200, 2, generator=torch.Generator().manual_seed(0))
            >>> request = ExplainRequest.make(target=lambda out: out[:, 0] > out[:, 0].median())
            >>> explanation = RegionalRuleExplainer(model).explain_batches(ModelInputs.make(model, X), request)
            >>> len(explanation.features), explanation.params["source"]
            (2, 'inputs')
        """
        if empty not in ("raise", "keep"):
            raise ValueError(f"Expected `empty` to be 'raise' or 'keep', but got {empty!r}.")
        request = request.on_rows(source)
        if self.concepts is not None:
            check_concepts(self, source, request)
        self._check_width(source, request)
        if stream is not False and should_stream(stream, self, source, request):
            return explain_streamed(self, source, request)
        fwd, labels = self._run(source, request)
        mask, threshold, desc = subgroup_mask(fwd.outputs, request.target, request.threshold, labels, request.outputs)
        n_local, size_local = fwd.outputs.shape[0], int(mask.sum())
        n, size = D.global_count(n_local), D.global_count(size_local)
        if not 0 < size < n and empty == "raise":
            raise ValueError(
                f"Expected the subgroup ({desc}) to hold some but not all samples, but it holds {size} of {n}; "
                "rules need samples inside and outside it."
            )
        X, names, source_kind = self._feature_space(fwd, request, getattr(source, "column_names", None))
        mask = mask.to(X.device)
        selection, local_x, options, facts_held = None, None, request.options, {}
        target_name = request.target_name or desc
        if 0 < size < n:
            selection = self._select(fwd, mask, labels, request, names) if request.select else None
            local_x = None if request.local is None else local_vector(self, request, X, fwd, source_kind)
            if request.holdout_rows is not None:  # a mask already, unless the rows' count was unknown before the run
                held = resolve_holdout_rows(request.holdout_rows, n_local).to(mask.device)
                facts_held = {  # this process's rows held out, and its subgroup rows among them
                    "held_out_rows": int(held.sum()),
                    "held_out_subgroup": int((held & mask).sum()),
                }
            options = with_units(options, request.scaler, X.shape[1], source_kind)
            features = selection if selection is not None else request.indices
            try:
                rule_sets, plan, min_count, _ = extract_planned(
                    X,
                    mask,
                    options,
                    features=features,
                    feature_names=names,
                    local_x=local_x,
                    target_name=target_name,
                    counted=request.counted,
                    holdout_rows=None if request.holdout_rows is None else held,
                )
            except NoHeldOutSplit as error:  # kept as a subgroup of no row is (the callback early in training)
                if empty == "raise":
                    raise
                rule_sets, columns = [], A.resolve_features(request.indices, X.shape[1])
                min_count = options.support_count(n, size)
                message = f"No rule sets: {error}"
                warnings.warn(message, UserWarning, stacklevel=1)
            else:
                columns = list(plan.columns)
                message = useless_reason(rule_sets, n, size, min_count=min_count, local=request.local is not None)
        else:
            rule_sets, columns = [], A.resolve_features(request.indices, X.shape[1])
            min_count = options.support_count(n, size)
            message = f"The subgroup ({desc}) holds {size} of {n} rows: rules need rows inside and outside it."
            warnings.warn(message, UserWarning, stacklevel=1)
        facts = {
            "min_support_count": min_count,
            "source": source_kind,
            "target_name": target_name,
            "n_samples": n_local,
            "subgroup_size": size_local,  # this process's rows (a DDP shard)
            "target": target_param(request.target, desc),
            "input_shape": None if fwd.input_shape is None else list(fwd.input_shape),
            **facts_held,
        }
        return RegionalExplanation(
            rule_sets=rule_sets,
            subgroup=mask,
            threshold=threshold,
            features=columns,
            feature_names=names,
            params=self._params(request, options, facts),
            features_matrix=X,
            sample=None if local_x is None else local_x.detach().reshape(-1),
            message=message,
            selection=selection,
            explainer=self,
            data_options=_data_options(request, fwd.outputs.shape[0]),
            concepts=self.concepts,
        )

    def _params(self, request: ExplainRequest, options: SearchOptions, facts: dict[str, Any]) -> dict[str, Any]:
        """The explanation's parameters: every search option, how the subgroup was defined, and data facts."""
        thr = request.threshold
        concepts = {} if self.concepts is None else {"concepts": concept_params(self.concepts)}
        return {
            **options.to_dict(),
            **concepts,
            **facts,
            "layer": self.layer_name,
            "layer_input": self.layer_input,
            "threshold": thr if isinstance(thr, str) or thr is None else float(thr),
            "outputs": request.outputs,
            "select_features": dict(request.select) if isinstance(request.select, dict) else bool(request.select),
            "local": request.local is not None,
        }

    def _run(self, source: BatchSource, request: ExplainRequest) -> tuple[Forward, torch.Tensor | None]:
        """The forward pass of an explanation and its labels (the request's, else the batches')."""
        on_inputs = request.matrix is None and self.layer is None
        layer = self.layer if request.matrix is None else None
        fwd = source.collect(
            layer,
            self.layer_name,
            self.layer_input,
            collect_inputs=on_inputs or bool(request.select),
            require_inputs=on_inputs,
        )
        n, labels = fwd.outputs.shape[0], request.labels
        if request.matrix is not None and request.matrix.shape[0] != n:
            raise ValueError(
                f"Expected `features` to have one row per sample of `inputs` ({n}), but got "
                f"{request.matrix.shape[0]} rows."
            )
        if labels is not None and labels.shape[0] != n:
            raise ValueError(f"Expected `labels` to have one entry per sample of `inputs` ({n}), got {len(labels)}.")
        return fwd, fwd.labels if labels is None else labels

    def _check_width(self, source: BatchSource, request: ExplainRequest) -> None:
        """``features`` indices and feature names against the rules' width where it is known before the model runs (a
        separate features matrix; tensor inputs, flattened, when the rules are on them), with the messages of
        :meth:`_feature_space` and the search."""
        inputs = getattr(source, "inputs", None)
        if request.matrix is not None:
            width, kind = request.matrix.shape[1], "features"
        elif self.layer is None and isinstance(inputs, (torch.Tensor, np.ndarray)) and inputs.ndim >= 2:
            width, kind = int(np.prod(inputs.shape[1:])), "inputs"
        else:
            return
        self._names(request, kind, width, getattr(source, "column_names", None))
        if request.indices is not None:
            A.resolve_features(request.indices, width)

    def _feature_space(
        self, fwd: Forward, request: ExplainRequest, column_names: list[str] | None
    ) -> tuple[torch.Tensor, list[str], str]:
        """The (N, D) matrix the rules are built on, its feature names and its kind (features, layer or inputs)."""
        if request.matrix is not None:
            X, source = request.matrix, "features"
        elif self.concepts is not None:
            self.concepts = fit_once(self.concepts, fwd.activations, progress=request.options.progress)
            X, source = encode_concepts(self.concepts, fwd.activations), "layer"
        elif self.layer is not None:
            X, source = fwd.activations, "layer"
        else:
            X, source = fwd.flat_inputs, "inputs"
        return X, self._names(request, source, X.shape[1], column_names), source

    def _names(self, request: ExplainRequest, kind: str, width: int, column_names: list[str] | None) -> list[str]:
        """The names of the ``width`` features of ``kind`` (features, layer or inputs): the request's, else the
        explainer's, the features matrix's, the concepts' or the frame's columns, else ``z_i`` / ``feature_i``;
        checked against ``width``."""
        if kind == "features":
            fallback = [self.feature_names, request.matrix_names]
        elif kind == "inputs":
            fallback = [self.feature_names, column_names]
        else:
            fallback = [self.concepts.names] if self.concepts is not None else [self.feature_names]
        return resolve_names(request.feature_names, fallback, width, "z" if kind == "layer" else "feature")

    def _select(
        self, fwd: Forward, mask: torch.Tensor, labels: torch.Tensor | None, request: ExplainRequest, names: list[str]
    ) -> Any:
        """:func:`torch_amore.select_features` on the collected inputs."""
        if fwd.flat_inputs is None or fwd.input_shape is None:
            raise TypeError(
                "Expected tensor model inputs for `select_features=True` (integrated gradients interpolate the "
                f"inputs), but the batches hold {fwd.input_type}; select features beforehand on a tensor view of the "
                "data, or pass a separate `features=` matrix."
            )
        with eval_mode(self.model):  # the forward pass's mode (a Lightning module trains between explanations)
            return select_for_subgroup(
                self.model,
                fwd.inputs,
                request.target,
                fwd.outputs,
                labels,
                mask,
                request.select,
                layer=self.layer,
                layer_input=self.layer_input,
                names=names,
                basis=self.concepts,
            )
