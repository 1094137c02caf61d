"""The validated arguments of one :meth:`RegionalRuleExplainer.explain` call, checked before the model runs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.typing import BatchKey
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.data.held_rows import aligned_holdout_rows, resolve_holdout_rows
from torch_amore.explain.concept_space import encode_concepts
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.model.batches import check_batch_key, check_row_order, is_graph
from torch_amore.model.forward import Forward, ModelArgs
from torch_amore.model.source import BatchSource, ModelInputs
from torch_amore.model.subgroups import check_outputs, check_target
from torch_amore.search.options import SearchOptions
from torch_amore.selection.selection import check_selection_options


@dataclass(frozen=True)
class ExplainRequest:
    """What one ``explain``/``explain_local`` call asks for, with every argument checked."""

    target: Any
    threshold: float | str | None
    outputs: str
    labels: Any
    matrix: torch.Tensor | None  # a separate (N, F) features matrix
    matrix_names: list[str] | None
    indices: Any  # feature indices or a FeatureSelection restricting the search
    select: bool | dict
    scaler: Any
    options: SearchOptions
    feature_names: list[str] | None
    batch_size: int
    input_key: BatchKey
    label_key: BatchKey
    target_name: str | None
    model_args: ModelArgs
    local: Any
    counted: tuple[int, int | None] | None = None  # (rows, min_support count) resolved on the data's rows
    holdout_rows: Any = None  # rows held out of the search: as given, then (on_rows) an (N,) boolean mask
    matrix_index: Any = None  # the index of a DataFrame ``features``, matched against a DataFrame's inputs

    @classmethod
    def make(
        cls,
        *,
        target: Any,
        threshold: Any = None,
        outputs: str = "auto",
        labels: Any = None,
        features: Any = None,
        feature_names: Any = None,
        select_features: Any = False,
        scaler: Any = None,
        options: Any = None,
        search_options: Mapping[str, Any] | None = None,
        batch_size: int = 256,
        input_key: BatchKey = None,
        label_key: BatchKey = None,
        target_name: str | None = None,
        additional_forward_args: Any = None,
        forward_kwargs: Any = None,
        local: Any = None,
        holdout_rows: Any = None,
    ) -> ExplainRequest:
        """The request of the arguments of :meth:`RegionalRuleExplainer.explain`, each checked (those that need the
        data by :meth:`on_rows`).

        Example:
            >>> request = ExplainRequest.make(target=1, search_options={"max_length": 2})
            >>> request.target, request.options.max_length, request.batch_size
            (1, 2, 256)
        """
        opts = SearchOptions.resolve(options, **(search_options or {}))  # an unknown keyword is a TypeError here
        V.check_not_meta(target, "target")
        V.check_not_meta(labels, "labels")
        V.check_not_meta(local, "x")
        V.check_not_meta(holdout_rows, "holdout_rows")
        if holdout_rows is not None and opts.holdout is not None:
            raise ValueError("Expected either `holdout` (a fraction) or `holdout_rows` (the rows), not both.")
        if V.is_frame(features):  # pandas objects by their index: rows aligned once, here or in aligned_to
            target = V.align_rows(target, features, "target", "features")
            labels = V.align_rows(labels, features, "labels", "features")
            holdout_rows = aligned_holdout_rows(holdout_rows, features, "features")
        target = _class_index(target)
        check_target(target, threshold)
        feature_names = A.name_list(feature_names)
        check_batch_key(input_key, "input_key")
        check_batch_key(label_key, "label_key")
        if local is not None and not _is_sample(local):
            raise TypeError(
                "Expected the sample of local rules `x` to be a row index, a tensor or array (one model input, or a "
                f"row of the features), or a graph, but got {type(local).__name__}."
            )
        if not isinstance(select_features, (bool, dict)):
            raise TypeError(f"Expected `select_features` to be a bool or a dict of options, got {select_features!r}.")
        if isinstance(select_features, dict):  # its options checked before the model runs
            check_selection_options(select_features)
            taken = [k for k in ("layer", "attribute_to_layer_input", "feature_names") if k in select_features]
            if taken:  # the explainer's own: the selection is of the features the rules are on
                raise ValueError(
                    f"Expected `select_features` options without {taken}: the explainer sets them (its `layer`, "
                    "`layer_input` and the rules' feature names), so that the features selected are those the rules "
                    "are on; give them to the explainer instead."
                )
        if target_name is not None and not isinstance(target_name, str):
            raise TypeError(f"Expected `target_name` to be a string or None, but got {target_name!r}.")
        matrix, matrix_names, indices = _split_features(features)
        if select_features and features is not None:
            raise ValueError(
                "Expected either `select_features=True` or `features=`, not both: feature selection works on the "
                "model's inputs or layer, and a separate features matrix has no gradients."
            )
        return cls(
            target=target,
            threshold=threshold,
            outputs=check_outputs(outputs),
            labels=labels,
            matrix=matrix,
            matrix_names=matrix_names,
            indices=indices,
            select=select_features,
            scaler=scaler,
            options=opts,
            feature_names=feature_names,
            batch_size=A.check_int(batch_size, "batch_size", 1),
            input_key=input_key,
            label_key=label_key,
            target_name=target_name,
            model_args=ModelArgs.make(additional_forward_args, forward_kwargs),
            local=local,
            holdout_rows=holdout_rows,
            matrix_index=features.index if V.is_frame(features) else None,
        )

    def aligned_to(self, inputs: Any) -> ExplainRequest:
        """The request with a pandas mask ``target`` and ``labels`` in the row order of a DataFrame ``inputs`` (unless
        :meth:`make` aligned them with a DataFrame ``features``, whose index must then be that of ``inputs``)."""
        if not V.is_frame(inputs):
            return self
        if self.matrix_index is not None:
            if not self.matrix_index.equals(inputs.index):  # used by position, its rows would be other samples'
                raise ValueError(
                    "Expected `features` (a DataFrame) to be indexed like the DataFrame `inputs`, row for row, but "
                    f"its index differs ({V.show_index(self.matrix_index)} against {V.show_index(inputs.index)}); "
                    "pass `features.loc[inputs.index]`, or `features.to_numpy()` to pair the rows by position."
                )
            return self
        if self.matrix_names is not None:
            return self
        target = V.align_rows(self.target, inputs, "target", "inputs")
        labels = V.align_rows(self.labels, inputs, "labels", "inputs")
        held = aligned_holdout_rows(self.holdout_rows, inputs, "inputs")
        return replace(self, target=target, labels=labels, holdout_rows=held)

    def on_rows(self, source: BatchSource) -> ExplainRequest:
        """The request checked on the source's ``source.n`` rows before the model runs: the ``min_support`` count
        (:attr:`counted`), the rows of ``features`` and ``labels``, ``threshold="roc"``'s labels, the loader's order."""
        n, inputs = source.n, source.inputs
        counted = None
        if n is not None:  # a bad count fails before the model runs (over all ranks of a DDP run)
            given = self.options.min_support is not None
            counted = (n, self.options.given_support_count(D.global_count(n)) if given else None)
        if n is not None and self.matrix is not None and self.matrix.shape[0] != n:
            raise ValueError(
                f"Expected `features` to have one row per sample of `inputs` ({n}), got {self.matrix.shape[0]} rows."
            )
        labels = None if self.labels is None else V.to_labels(self.labels, n)
        in_batches = not isinstance(inputs, (torch.Tensor, tuple))
        keys = [k for k, v in (("input_key", self.input_key), ("label_key", self.label_key)) if v is not None]
        if keys and not in_batches:  # a tensor (or a tuple of them) is the model input itself: no key picks from it
            raise ValueError(
                f"Expected `{keys[0]}` only with a Dataset or DataLoader, whose batches hold the model input and "
                f"labels, but `inputs` is a {type(inputs).__name__}, the model input itself; drop `{keys[0]}`"
                + (" and pass the labels as `labels=`." if "label_key" in keys else ".")
            )
        if self.threshold == "roc" and labels is None and not in_batches:
            raise ValueError("Expected `labels` for threshold='roc' (the ROC curve needs true labels), but got None.")
        aligned = self.aligned_with_rows(n)
        if aligned:
            check_row_order(inputs, aligned)
        dropped = ", the loader dropping its last partial batch (drop_last=True)"
        dropped = dropped if n and getattr(inputs, "drop_last", False) else ""
        m = len(self.target) if _is_mask(self.target) and getattr(self.target, "ndim", 1) == 1 else n
        if n is not None and m != n:  # before the model runs; the forward pass checks it again on the rows it saw
            raise ValueError(f"Expected `target` to have one entry per sample of `inputs` ({n}{dropped}), but got {m}.")
        held = self.holdout_rows
        if held is not None and n is not None:  # checked before the model runs
            held = resolve_holdout_rows(held, n, "`inputs`" + dropped)
        return replace(self, labels=labels, counted=counted, holdout_rows=held)

    def shard(self, rows: list[int] | None, n: int | None) -> ExplainRequest:
        """The request on one rank's ``rows`` (its indices of the whole dataset), of which the first ``n`` are
        explained: a mask ``target``, ``features`` and ``holdout_rows`` (a mask or positions) are of the whole dataset;
        ``rows=None``: the data are not sharded.

        Example:
            >>> request = ExplainRequest.make(target=torch.tensor([True, False, True, False]))
            >>> request.shard([0, 1, 2, 3], 2).target  # one process: its rows are all rows; two of them explained
            tensor([ True, False])
        """
        if rows is None or n is None:
            return self
        target = _rows_of(self.target, rows, n, "target") if _is_mask(self.target) else self.target
        matrix = None if self.matrix is None else _rows_of(self.matrix, rows, n, "features")
        held = self.holdout_rows
        if held is not None:  # a mask of the whole dataset's rows (all ranks), then these rows of it
            held = _rows_of(
                resolve_holdout_rows(held, D.global_count(len(rows)), "the dataset"), rows, n, "holdout_rows"
            )
        return replace(self, target=target, matrix=matrix, holdout_rows=held)

    def check_dataset_rows(self, n_rows: int) -> None:
        """A mask ``target``, ``features`` and ``holdout_rows`` checked against a dataset of ``n_rows`` rows, before
        any model runs (the callback's DataLoader, when it is made), with the messages of :meth:`shard`.

        Example:
            >>> ExplainRequest.make(target=torch.tensor([True, False])).check_dataset_rows(3)
            Traceback (most recent call last):
            ...
            ValueError: Expected `target` to have one row per row of the explained dataset (3), but got 2.
        """
        if _is_mask(self.target):
            _check_dataset_rows(self.target, n_rows, "target")
        if self.matrix is not None:
            _check_dataset_rows(self.matrix, n_rows, "features")
        if self.holdout_rows is not None:
            resolve_holdout_rows(self.holdout_rows, n_rows, "the dataset")

    def aligned_with_rows(self, n: int | None) -> str:
        """What must stay aligned with the rows of the data ('' when nothing does)."""
        what = []
        if self.matrix is not None:
            what.append("`features`")
        if self.labels is not None:
            what.append("`labels`")
        if _is_mask(self.target):
            what.append("the mask `target`")
        if self.holdout_rows is not None:
            what.append("`holdout_rows`")
        if self.model_args.has_per_sample(n):
            what.append("the per-sample model arguments")
        return " and ".join(what)


def _is_mask(target: Any) -> bool:
    return isinstance(target, (torch.Tensor, np.ndarray, list))


def _check_dataset_rows(values: Any, n_rows: int, name: str) -> None:
    """Per-sample ``values`` have a row per row of the explained dataset, ``n_rows`` rows (all ranks)."""
    size = values.shape[0] if hasattr(values, "shape") else len(values)
    if n_rows != size:
        raise ValueError(
            f"Expected `{name}` to have one row per row of the explained dataset ({n_rows}), but got {size}."
        )


def _rows_of(values: Any, rows: list[int], n: int, name: str) -> Any:
    """The first ``n`` of ``rows`` of per-sample ``values`` with a row per row of the whole dataset (all ranks)."""
    _check_dataset_rows(values, D.global_count(len(rows)), name)
    index = rows[:n]
    if hasattr(values, "iloc"):
        return values.iloc[index]
    if isinstance(values, torch.Tensor):
        return values[torch.as_tensor(index, dtype=torch.long)]
    return np.asarray(values)[index]


def _class_index(target: Any) -> Any:
    """A class index given as a 0-dim integer tensor or array becomes an int."""
    if isinstance(target, (torch.Tensor, np.ndarray)) and target.ndim == 0:
        is_int = (
            not (target.is_floating_point() or target.dtype == torch.bool)
            if isinstance(target, torch.Tensor)
            else np.issubdtype(target.dtype, np.integer)
        )
        if is_int:
            return int(target)
    return target


def _split_features(features: Any) -> tuple[torch.Tensor | None, list[str] | None, Any]:
    """(separate features matrix, its column names, feature indices): ``features`` is one or the other."""
    if features is None:
        return None, None, None
    if (
        hasattr(features, "features")
        and not isinstance(features, (torch.Tensor, np.ndarray))
        and not hasattr(features, "columns")
    ):
        return None, None, features  # a FeatureSelection
    nested = isinstance(features, (list, tuple)) and features and isinstance(features[0], (list, tuple))
    if hasattr(features, "columns") or getattr(features, "ndim", 1) == 2 or nested:
        if isinstance(features, (list, tuple)):
            features = np.asarray(features, dtype=np.float64)
        matrix, names = V.to_tensor_2d(features, "features")
        return matrix, names, None
    negative = [f for f in A.whole_indices(features) if f < 0]  # checked before the model runs (the range after it)
    if negative:
        raise ValueError(f"Expected `features` to hold feature indices >= 0 (positions), but got {negative[:5]}.")
    return None, None, features


def resolve_names(
    given: Sequence[str] | None, fallback: Sequence[Sequence[str] | None], n_features: int, prefix: str
) -> list[str]:
    """``given`` names, else the first available fallback, else ``{prefix}_{i}``; checked against ``n_features``."""
    names = given
    for candidate in fallback:
        if names is None:
            names = candidate
    if names is None:
        names = [f"{prefix}_{i}" for i in range(n_features)]
    return A.resolve_names(names, None, n_features)


def target_param(target: Any, desc: str) -> Any:
    """JSON-safe form of a target for an explanation's parameters: a class index, ``[low, high]`` (``None``: open), or
    the subgroup's description.

    Example:
        >>> target_param(3, "predicted 3"), target_param((0.5, None), "in [0.5, inf)"), target_param(abs, "abs")
        (3, [0.5, None], 'abs')
    """
    if isinstance(target, (int, np.integer)):
        return int(target)
    if isinstance(target, tuple) and len(target) == 2:
        return [None if v is None or abs(float(v)) == float("inf") else float(v) for v in target]
    return desc


def _one_sample(x: Any, input_shape: tuple[int, ...] | None) -> Any:
    """One model input as a batch of one: a graph as a list of one graph, a tensor with a batch dimension."""
    if is_graph(x):
        return [x]
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"Expected `x` to be a tensor (one model input), a graph or an index, got {type(x).__name__}.")
    if input_shape is not None and tuple(x.shape) == input_shape:
        return x.unsqueeze(0)
    if input_shape is not None and tuple(x.shape) != (1, *input_shape):
        raise ValueError(f"Expected `x` to have the shape of one model input {input_shape}, but got {tuple(x.shape)}.")
    return x


def local_vector(explainer: Any, request: ExplainRequest, X: torch.Tensor, fwd: Forward, source: str) -> torch.Tensor:
    """The feature vector (D,) of the sample of local rules in the feature space ``X`` of kind ``source``: a row of
    ``X``, the sample itself, or the sample run through ``explainer``'s model and layer."""
    x = request.local
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
    if request.model_args.has_per_sample(X.shape[0]):
        raise ValueError("Expected `x` as an index of `inputs` when model arguments are given per sample.")
    one = ModelInputs.make(
        explainer.model, _one_sample(x, fwd.input_shape), input_key=request.input_key, model_args=request.model_args
    )
    a = one.collect(explainer.layer, explainer.layer_name, explainer.layer_input).activations
    return (a if explainer.concepts is None else encode_concepts(explainer.concepts, a))[0]


def _data_options(request: ExplainRequest, n: int) -> dict[str, Any]:
    """What :meth:`RegionalExplanation.evaluate` reuses on new data."""
    target = request.target if not isinstance(request.target, (torch.Tensor, np.ndarray, list)) else None
    return {
        "target": target,
        "input_key": request.input_key,
        "label_key": request.label_key,
        "batch_size": request.batch_size,
        "model_args": request.model_args,
        "per_sample_args": request.model_args.has_per_sample(n),
    }


def _evaluation_args(explanation: RegionalExplanation, args: Any, kwargs: dict | None) -> ModelArgs:
    """The model arguments for new data: the given ones, else those of ``explain`` unless they were per sample."""
    if args is not None or kwargs is not None:
        return ModelArgs.make(args, kwargs)
    opts = explanation.data_options
    if opts.get("per_sample_args"):
        raise ValueError(
            "Expected `additional_forward_args`/`forward_kwargs` for the new data: explain had per-sample model "
            "arguments, which do not fit other samples."
        )
    return opts.get("model_args") or ModelArgs()


def _is_sample(x: Any) -> bool:
    """Whether ``x`` can be the sample of local rules: a row index, a tensor, an array or a sequence of numbers, or a
    graph."""
    if isinstance(x, (int, np.integer)):
        return not isinstance(x, bool)
    return isinstance(x, (torch.Tensor, np.ndarray, list, tuple)) or is_graph(x)
