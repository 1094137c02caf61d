"""RegionalRuleExplainer: regional rules for what a trained ``nn.Module`` predicts, on its inputs or any layer.

The explainer runs the model over the data (batched, on the model's device, under ``torch.no_grad`` and in eval mode),
defines the target subgroup from its outputs (a class, a probability threshold, a value range, a callable or a given
mask), and extracts AMORE rules on one of three feature spaces:

* the model's inputs, flattened (``layer=None``, tabular models);
* the activations of a layer, flattened to (N, D), captured with a forward hook (latent rules, as in the paper's
  MNIST and MRI tasks; ``layer_input=True`` takes the input of that layer instead of its output);
* a separate (N, F) matrix of interpretable features aligned with the inputs (``features=``, as the paper's RDKit
  descriptors for a graph network).

Hooks are always removed and every submodule's train/eval mode restored, also when an error is raised.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

from torch_amore import _validation as V
from torch_amore import distributed as D
from torch_amore._forward import BatchKey, Forward, as_labels, n_rows, resolve_layer, run_model
from torch_amore._subgroups import check_target, subgroup, subgroup_mask
from torch_amore.explanation import RegionalExplanation
from torch_amore.search import extract_rules

#: What ``target`` accepts: a class index, a boolean mask, a callable on the outputs, or a ``(low, high)`` range.
TargetType = int | torch.Tensor | np.ndarray | Sequence[bool] | Callable[[torch.Tensor], Any] | tuple[float, float]


def _target_param(target: Any, desc: str) -> Any:
    """JSON-safe form of the target: a class index, [low, high] (None: open), or the subgroup's description."""
    if isinstance(target, (int, np.integer)):
        return int(target)
    if isinstance(target, tuple) and len(target) == 2 and not callable(target):
        return [None if v is None or abs(float(v)) == float("inf") else float(v) for v in target]
    return desc


class RegionalRuleExplainer:
    """Regional IF-THEN rules for what a trained model predicts, on its inputs, a layer, or separate features.

    Args:
        model: a trained ``nn.Module``. It runs in eval mode under ``torch.no_grad``; its modes are restored after.
        layer: a submodule (or its dotted name, e.g. ``"encoder.fc1"``) whose activations, flattened to (N, D),
            are the features of the rules; ``None`` uses the model inputs, flattened.
        feature_names: names of the D features (default ``z_{i}`` for a layer, ``feature_{i}`` for inputs).
        layer_input: use the layer's (first) input instead of its output, e.g. the input of the last linear layer.

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
    ) -> None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected `model` to be a torch.nn.Module, but got {type(model).__name__}.")
        if isinstance(feature_names, str):
            raise TypeError("Expected `feature_names` to be a sequence of strings, but got a single string.")
        self.model = model
        self.layer, self.layer_name = resolve_layer(model, layer)
        self.layer_input = bool(layer_input)
        self.feature_names = None if feature_names is None else [str(n) for n in feature_names]

    def __repr__(self) -> str:
        layer = "None" if self.layer_name is None else repr(self.layer_name)
        return f"{type(self).__name__}(model={type(self.model).__name__}, layer={layer})"

    # ---------------------------------------------------------------------------------------------------------------
    def _forward(
        self,
        inputs: Any,
        *,
        use_layer: bool = True,
        forward_kwargs: dict | None = None,
        **options: Any,
    ) -> Forward:
        """Run the model over ``inputs``; collect outputs, layer activations (if ``use_layer``) and labels."""
        layer = self.layer if use_layer else None
        return run_model(
            self.model, inputs, layer=layer, layer_name=self.layer_name, layer_input=self.layer_input,
            forward_kwargs=forward_kwargs, **options,
        )  # fmt: skip

    # ---------------------------------------------------------------------------------------------------------------
    def explain(
        self,
        inputs: Any,
        target: TargetType,
        *,
        labels: Any = None,
        threshold: float | str | None = None,
        features: Any = None,
        feature_names: Sequence[str] | None = None,
        select_features: bool | dict = False,
        max_length: int = 2,
        min_support: int | float = 0.05,
        n_grids: int = 10,
        bin_strategy: str = "uniform",
        top_k: int = 3,
        batch_size: int = 256,
        progress: bool = True,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        target_name: str | None = None,
        **forward_kwargs: Any,
    ) -> RegionalExplanation:
        """Rules describing the subgroup ``target`` of the model's predictions on ``inputs``.

        Args:
            inputs: a tensor (N, ...), a tuple of tensors (several positional model inputs), a ``Dataset`` or a
                ``DataLoader`` (use ``shuffle=False`` so that rows stay aligned with ``labels``/``features``).
            target: the subgroup:

                * a class index ``c``: ``argmax(output) == c`` for several outputs; for a single (binary) output,
                  probability of class ``c`` > ``threshold`` (outputs in [0, 1] are probabilities, others logits);
                * a boolean mask (N,);
                * a callable on the model outputs (N, ...) returning a boolean mask;
                * ``(low, high)``: a single regression output in ``[low, high)`` (``None`` leaves a side open).
            labels: true labels (N,), needed by ``threshold="roc"``; by default taken from the batches.
            threshold: probability threshold for a class-index target (default 0.5 for one output, argmax for
                several); ``"roc"`` picks the threshold maximizing TPR - FPR against ``labels`` (as in the paper).
            features: either a separate (N, F) matrix (tensor, array or DataFrame) of interpretable features aligned
                with ``inputs`` (rules are then built on it), or a sequence of feature indices / a
                ``FeatureSelection`` restricting the search to those features.
            feature_names: names of the features (overrides the explainer's).
            select_features: run :func:`torch_amore.select_features` (integrated gradients + FP-Growth, with the
                labels as classes for a class target, else the subgroup vs. the rest) first and search the selected
                features only; a dict passes options to it (e.g. ``{"min_frequency": 0.2}``).
            max_length, min_support, n_grids, bin_strategy, top_k: the rule search options of
                :func:`torch_amore.extract_rules`.
            batch_size: samples per forward pass for tensor and Dataset inputs.
            progress: show progress bars for the forward pass and the rule tree.
            input_key: which element of each batch is the model input: an index or key, a sequence of them
                (several positional inputs) or a callable ``batch -> input``. Default: a tensor batch itself, the
                first element of a tuple batch, any other object (e.g. a graph batch) as a whole.
            label_key: which element of each batch holds the labels (index, key, attribute name or callable).
                Default: the second element of tuple batches.
            target_name: name of the subgroup in the printed rules (default e.g. ``"predicted 7"``).
            **forward_kwargs: extra keyword arguments for every ``model(...)`` call.

        Returns:
            A :class:`RegionalExplanation` with the rule sets (best fitness first) and what they were extracted on.
        """
        return self._explain(
            inputs, target, labels=labels, threshold=threshold, features=features, feature_names=feature_names,
            select_features=select_features, max_length=max_length, min_support=min_support, n_grids=n_grids,
            bin_strategy=bin_strategy, top_k=top_k, batch_size=batch_size, progress=progress, input_key=input_key,
            label_key=label_key, target_name=target_name, local=None, forward_kwargs=forward_kwargs,
        )  # fmt: skip

    def explain_local(
        self,
        x: Any,
        inputs: Any,
        target: TargetType,
        *,
        labels: Any = None,
        threshold: float | str | None = None,
        features: Any = None,
        feature_names: Sequence[str] | None = None,
        select_features: bool | dict = False,
        max_length: int = 2,
        min_support: int | float = 0.05,
        n_grids: int = 10,
        bin_strategy: str = "uniform",
        top_k: int = 3,
        batch_size: int = 256,
        progress: bool = True,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        target_name: str | None = None,
        **forward_kwargs: Any,
    ) -> RegionalExplanation:
        """Local rules: rule sets for the subgroup whose every interval contains the sample ``x``.

        ``x`` is an int (a row of ``inputs``), one model input (with or without its batch dimension; it is run
        through the model and layer), or — with a separate ``features`` matrix — its row of features. Other arguments
        as in :meth:`explain`. When ``x`` is an outlier of the subgroup no interval containing it raises the
        subgroup's share, and the result is empty with an explanatory ``message`` (a ``UserWarning`` is issued).
        """
        if x is None:
            raise ValueError("Expected a sample `x` for local rules, but got None.")
        return self._explain(
            inputs, target, labels=labels, threshold=threshold, features=features, feature_names=feature_names,
            select_features=select_features, max_length=max_length, min_support=min_support, n_grids=n_grids,
            bin_strategy=bin_strategy, top_k=top_k, batch_size=batch_size, progress=progress, input_key=input_key,
            label_key=label_key, target_name=target_name, local=x, forward_kwargs=forward_kwargs,
        )  # fmt: skip

    def features_matrix(
        self,
        inputs: Any,
        *,
        batch_size: int = 256,
        progress: bool = False,
        input_key: BatchKey = None,
        **forward_kwargs: Any,
    ) -> torch.Tensor:
        """The (N, D) matrix rules of this explainer apply to: the layer's flattened activations (or the flattened
        inputs without a layer) for new data, e.g. to compute ``rule_set.mask(...)`` on a test split."""
        fwd = self._forward(
            inputs, batch_size=batch_size, progress=progress, input_key=input_key,
            collect_inputs=self.layer is None, forward_kwargs=forward_kwargs,
        )  # fmt: skip
        return fwd.activations if self.layer is not None else fwd.flat_inputs

    def attribute(self, inputs: torch.Tensor, rules: Any, **kwargs: Any) -> torch.Tensor:
        """Pixel (input) attribution maps of the latent unit of each rule, shape (n_rules, N, *inputs.shape[1:]).

        ``rules`` is a rule set (e.g. ``explanation.best``), rules or unit indices on this explainer's layer; keyword
        arguments go to :meth:`torch_amore.RuleAttribution.attribute` (``baselines``, ``n_steps``, ``batch_size``,
        ``internal_batch_size``). Uses Captum's ``NeuronIntegratedGradients``.
        """
        from torch_amore.attribution import RuleAttribution

        return RuleAttribution.from_explainer(self).attribute(inputs, rules, **kwargs)

    # ---------------------------------------------------------------------------------------------------------------
    def _features_and_names(
        self, fwd: Forward, matrix: torch.Tensor | None, matrix_names: list[str] | None, feature_names: Any
    ) -> tuple[torch.Tensor, list[str], str]:
        if matrix is not None:
            X, source = matrix, "features"
        elif self.layer is not None:
            X, source = fwd.activations, "layer"
        else:
            X, source = fwd.flat_inputs, "inputs"
        names = feature_names if feature_names is not None else self.feature_names
        if names is None:
            names = matrix_names
        if names is None:
            prefix = "z" if source == "layer" else "feature"
            names = [f"{prefix}_{i}" for i in range(X.shape[1])]
        names = V.resolve_names(names, None, X.shape[1])
        return X, names, source

    def _local_vector(self, x: Any, X: torch.Tensor, fwd: Forward, source: str, forward_kwargs: dict) -> torch.Tensor:
        if isinstance(x, (int, np.integer)) and not isinstance(x, bool):
            if not -X.shape[0] <= int(x) < X.shape[0]:
                raise ValueError(f"Expected an index `x` in [0, {X.shape[0]}), but got {x}.")
            return X[int(x)]
        if source != "layer":  # raw inputs or a features matrix: x is a row of X
            vec = x if isinstance(x, torch.Tensor) else torch.as_tensor(np.asarray(x, dtype=np.float64))
            if vec.numel() != X.shape[1]:
                raise ValueError(
                    f"Expected `x` to be one sample with {X.shape[1]} features (or an index), but got shape "
                    f"{tuple(vec.shape)}."
                )
            return vec.reshape(-1)
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"Expected `x` to be a tensor (one model input) or an index, but got {type(x).__name__}.")
        shape = fwd.input_shape
        if shape is not None and tuple(x.shape) == shape:
            x = x.unsqueeze(0)
        elif shape is not None and tuple(x.shape) != (1, *shape):
            raise ValueError(f"Expected `x` to have the shape of one model input {shape}, but got {tuple(x.shape)}.")
        return self._forward(x, progress=False, forward_kwargs=forward_kwargs).activations[0]

    def _select(
        self, fwd: Forward, mask: torch.Tensor, labels: torch.Tensor | None, target: Any, names: list[str], options: Any
    ) -> Any:
        """Run :func:`torch_amore.select_features` on the collected inputs (classes: the labels for a class target,
        else the subgroup)."""
        from torch_amore.selection import select_features

        if fwd.flat_inputs is None or fwd.input_shape is None:
            raise TypeError("Expected tensor model inputs for `select_features=True`, but the batches hold none.")
        inputs = fwd.flat_inputs.reshape(-1, *fwd.input_shape)
        is_class = isinstance(target, (int, np.integer))
        multi = fwd.outputs.ndim == 2 and fwd.outputs.shape[1] > 1
        classes = labels if is_class and labels is not None and labels.ndim == 1 else mask.long().cpu()
        opts = dict(options) if isinstance(options, dict) else {}
        opts.setdefault("target", int(target) if is_class and multi else None)
        opts.setdefault("layer", self.layer)
        opts.setdefault("attribute_to_layer_input", self.layer_input)
        opts.setdefault("feature_names", names)
        return select_features(self.model, inputs, classes, **opts)

    def _explain(
        self,
        inputs: Any,
        target: Any,
        *,
        labels: Any,
        threshold: Any,
        features: Any,
        feature_names: Any,
        select_features: Any,
        max_length: int,
        min_support: Any,
        n_grids: int,
        bin_strategy: str,
        top_k: int,
        batch_size: int,
        progress: bool,
        input_key: BatchKey,
        label_key: BatchKey,
        target_name: str | None,
        local: Any,
        forward_kwargs: dict,
    ) -> RegionalExplanation:
        # --- cheap checks first
        if (
            isinstance(target, torch.Tensor)
            and target.ndim == 0
            and not target.is_floating_point()
            and (target.dtype != torch.bool)
        ):
            target = int(target)  # a class index given as a 0-dim tensor
        V.check_int(max_length, "max_length", 1)
        V.check_int(top_k, "top_k", 1)
        V.check_int(n_grids, "n_grids", 2)
        V.check_int(batch_size, "batch_size", 1)
        V.check_bin_strategy(bin_strategy)
        check_target(target, threshold)
        if isinstance(feature_names, str):
            raise TypeError("Expected `feature_names` to be a sequence of strings, but got a single string.")
        matrix, matrix_names, indices = None, None, None
        if features is not None:
            if (
                hasattr(features, "features")
                and not isinstance(features, (torch.Tensor, np.ndarray))
                and not hasattr(features, "columns")
            ):
                indices = features  # a FeatureSelection
            elif (
                hasattr(features, "columns")
                or getattr(features, "ndim", 1) == 2
                or (isinstance(features, (list, tuple)) and features and isinstance(features[0], (list, tuple)))
            ):
                if isinstance(features, (list, tuple)):
                    features = np.asarray(features, dtype=np.float64)
                matrix, matrix_names = V.to_tensor_2d(features, "features")
            else:
                indices = features
        if select_features and (matrix is not None or indices is not None):
            raise ValueError(
                "Expected either `select_features=True` or `features=`, not both: feature selection works on the "
                "model's inputs or layer, and a separate features matrix has no gradients."
            )
        n_known = n_rows(inputs)
        if n_known is not None:
            if n_known == 0:
                raise ValueError("Expected `inputs` to hold at least one sample, but it is empty.")
            V.resolve_min_support(min_support, D.global_count(n_known))  # all ranks of a DDP run
            if matrix is not None and matrix.shape[0] != n_known:
                raise ValueError(
                    f"Expected `features` to have one row per sample of `inputs` ({n_known}), but got "
                    f"{matrix.shape[0]} rows."
                )
        label_t = None if labels is None else as_labels(labels, n_known)
        if threshold == "roc" and labels is None and label_key is None and isinstance(inputs, (torch.Tensor, tuple)):
            raise ValueError("Expected `labels` for threshold='roc' (the ROC curve needs true labels), but got None.")
        if (
            isinstance(inputs, DataLoader)
            and isinstance(inputs.sampler, RandomSampler)
            and (matrix is not None or labels is not None)
        ):
            raise ValueError(
                "Expected a DataLoader with shuffle=False: its order must match the rows of `features`/`labels`."
            )
        # --- forward pass
        fwd = self._forward(
            inputs, batch_size=batch_size, progress=progress, input_key=input_key, label_key=label_key,
            collect_inputs=(matrix is None and self.layer is None) or bool(select_features), use_layer=matrix is None,
            forward_kwargs=forward_kwargs,
        )  # fmt: skip
        n = fwd.outputs.shape[0]
        if matrix is not None and matrix.shape[0] != n:
            raise ValueError(
                f"Expected `features` to have one row per sample of `inputs` ({n}), but got {matrix.shape[0]} rows."
            )
        if label_t is not None and label_t.shape[0] != n:
            raise ValueError(
                f"Expected `labels` to have one entry per sample of `inputs` ({n}), got {label_t.shape[0]}."
            )
        if label_t is None:
            label_t = fwd.labels
        mask, thr_used, desc = subgroup(fwd.outputs, target, threshold, label_t)
        X, names, source = self._features_and_names(fwd, matrix, matrix_names, feature_names)
        mask = mask.to(X.device)
        # --- feature selection
        selection = None
        if select_features:
            selection = self._select(fwd, mask, label_t, target, names, select_features)
            indices = selection
        local_x = None if local is None else self._local_vector(local, X, fwd, source, forward_kwargs)
        min_s = V.resolve_min_support(min_support, D.global_count(n))
        rule_sets = extract_rules(
            X, mask, max_length=max_length, min_support=min_s, n_grids=n_grids, bin_strategy=bin_strategy,
            top_k=top_k, features=indices, feature_names=names, local_x=local_x,
            target_name=target_name or desc, progress=progress,
        )  # fmt: skip
        searched = V.resolve_features(indices, X.shape[1])
        params = {
            "max_length": int(max_length),
            "min_support": min_support,
            "min_support_count": int(min_s),
            "n_grids": int(n_grids),
            "bin_strategy": bin_strategy,
            "top_k": int(top_k),
            "source": source,
            "layer": self.layer_name,
            "layer_input": self.layer_input,
            "target": _target_param(target, desc),
            "target_name": target_name or desc,
            "threshold": threshold if isinstance(threshold, str) or threshold is None else float(threshold),
            "select_features": bool(select_features),
            "n_samples": int(n),
            "subgroup_size": int(mask.sum()),
            "local": local is not None,
        }
        message = ""
        if local is not None and not rule_sets:
            message = (
                "No local rules: the sample is an outlier of the subgroup — no interval containing it raises the "
                "subgroup's share above its base rate with enough support (try a smaller min_support)."
            )
            warnings.warn(message, UserWarning, stacklevel=3)
        reuse_target = target if not isinstance(target, (torch.Tensor, np.ndarray, list)) else None
        return RegionalExplanation(
            rule_sets=rule_sets,
            subgroup=mask,
            threshold=thr_used,
            features=searched,
            feature_names=names,
            params=params,
            features_matrix=X,
            sample=None if local_x is None else local_x.detach().reshape(-1),
            message=message,
            selection=selection,
            explainer=self,
            data_options={
                "target": reuse_target,
                "input_key": input_key,
                "label_key": label_key,
                "batch_size": batch_size,
                "forward_kwargs": dict(forward_kwargs),
            },
        )

    def _evaluate(
        self,
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
        forward_kwargs: dict,
    ) -> list:
        """Metrics of ``explanation``'s rule sets on new data, through the same model/layer path and threshold."""
        source = explanation.params.get("source")
        matrix = None
        if source == "features":
            if features is None:
                raise ValueError(
                    "Expected the new data's `features` matrix: these rules were built on separate features."
                )
            matrix, _ = V.to_tensor_2d(features, "features")
        fwd = self._forward(
            inputs, batch_size=batch_size, progress=progress, input_key=input_key, label_key=label_key,
            collect_inputs=source == "inputs", use_layer=source == "layer", forward_kwargs=forward_kwargs,
        )  # fmt: skip
        n = fwd.outputs.shape[0]
        label_t = fwd.labels if labels is None else as_labels(labels, n)
        threshold = explanation.threshold if isinstance(target, (int, np.integer)) else None
        mask, _, _ = subgroup_mask(fwd.outputs, target, threshold, label_t)
        X = matrix if matrix is not None else (fwd.activations if source == "layer" else fwd.flat_inputs)
        if X.shape[0] != n:
            raise ValueError(f"Expected `features` to have one row per sample of `inputs` ({n}), got {X.shape[0]}.")
        if mask.shape[0] != n:
            raise ValueError(f"Expected `target` to have one entry per sample of `inputs` ({n}), got {mask.shape[0]}.")
        mask = mask.to(X.device)
        return [rs.evaluate(X, mask) for rs in explanation.rule_sets]
