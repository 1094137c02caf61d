"""Feature selection for rule extraction (Algorithm 1 of the paper): :func:`select_features` and
:class:`FeatureSelection`.

Three steps: the importance matrix J of integrated gradients divided by the output shift
(:mod:`~torch_amore.selection.impact`), the impact threshold j_th (:mod:`~torch_amore.selection.thresholds`), and the
longest itemset used together in ``min_frequency`` of the rows (:mod:`~torch_amore.selection.itemsets`), with a
deterministic fallback when its budget runs out. See ``docs/feature_selection.md``.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.model.forward import resolve_layer
from torch_amore.selection.impact import (
    _baselines,
    _check_differentiable,
    _impact_matrix,
    _importance_from_matrix,
    _outputs,
    _test_rows,
    _to_inputs,
)
from torch_amore.selection.itemsets import longest_frequent_itemset
from torch_amore.selection.thresholds import (
    _coverage_thresholds,
    _min_count,
    _natural_break,
    _row_blocks,
    _threshold_scan,
    _used_columns,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_IG_BYTES = 1 << 26  # at most this many bytes in one (path points x features) tensor of the integrated gradients


@dataclass(frozen=True, eq=False, repr=False)
class FeatureSelection:
    """The frequently important feature set chosen by :func:`select_features`, with what led to it.

    Attributes:
        features: indices of the selected features, ascending; pass the object (or this tuple) as
            ``extract_rules(..., features=...)``.
        names: names of the selected features, in the order of ``features``.
        threshold: the impact threshold j_th (eq. ``score_thd``); a row "uses" feature i when its score is
            ``>= threshold``.
        support: fraction of rows of ``importance`` that use all selected features.
        importance: (N, D) importance matrix J on the CPU: one row per kept baseline/test pair (or per row of the
            matrix passed as ``importance=``), one column per feature.
        gamma: the coverage fraction used for the threshold.
        min_frequency: c_min, the fraction of rows a frequent itemset must be used in.
        exact: True when ``features`` is the longest frequent itemset (Algorithm 1); False when the search budget ran
            out and the documented fallback chose them (see ``reason``).
        reason: how the features were chosen, in words (exact search or which budget stopped it, and the fallback).
        n_examined: itemsets the exact search examined, counted by size as against ``max_itemsets``.
        pairs: (N, 2) int64 tensor: the baseline index and the row of ``inputs`` of the test sample behind each row of
            ``importance``; ``None`` when ``importance`` was given.
        n_skipped: baseline/test pairs left out because the model output did not change between them.

    Example:
        >>> import torch
        >>> J = torch.tensor([[0.9, 0.5, 0.0], [0.8, 0.6, 0.1], [0.7, 0.0, 0.0], [0.9, 0.4, 0.0]])
        >>> sel = select_features(importance=J, gamma=1.0, min_frequency=0.5)
        >>> sel
        FeatureSelection(features=(0, 1), names=('feature_0', 'feature_1'), threshold=0.1, support=0.75)
        >>> len(sel), sel.importance.shape
        (2, torch.Size([4, 3]))
        >>> sel.to_dict()["features"], sel.to_dict()["exact"]
        ([0, 1], True)
    """

    features: tuple[int, ...]
    names: tuple[str, ...]
    threshold: float
    support: float
    importance: torch.Tensor
    gamma: float
    min_frequency: float
    exact: bool
    reason: str
    n_examined: int = 0
    pairs: torch.Tensor | None = None
    n_skipped: int = 0

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        return (
            f"FeatureSelection(features={self.features}, names={self.names}, threshold={self.threshold:.4g}, "
            f"support={self.support:.4g}{'' if self.exact else ', exact=False'})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The selection as JSON-safe values: the fields but the importance matrix (only its shape, ``n_rows`` and
        ``n_features``) and the pairs."""
        return {
            "features": [int(i) for i in self.features],
            "names": [str(n) for n in self.names],
            "threshold": float(self.threshold),
            "support": float(self.support),
            "exact": bool(self.exact),
            "reason": str(self.reason),
            "gamma": float(self.gamma),
            "min_frequency": float(self.min_frequency),
            "n_examined": int(self.n_examined),
            "n_rows": int(self.importance.shape[0]),
            "n_features": int(self.importance.shape[1]),
            "n_skipped": int(self.n_skipped),
        }

    def threshold_scan(self, thresholds: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(thresholds, n_features)``: how many features reach coverage ``gamma`` at each threshold (the paper's
        Fig. 3a); default 200 thresholds from 0 to just past the last one that leaves a feature."""
        top = _coverage_thresholds(self.importance, self.gamma)
        if thresholds is None:
            thresholds = torch.linspace(0.0, float(top.max()) * 1.05 or 1.0, 200, dtype=torch.float64)
        thresholds = torch.as_tensor(thresholds, dtype=torch.float64)
        n_features = (top.to(torch.float64)[None, :] >= thresholds[:, None]).sum(dim=1)
        return thresholds, n_features

    def plot_threshold_scan(self, *, ax: Axes | None = None) -> Figure:
        """The figure of :meth:`threshold_scan`, with j_th marked, on ``ax`` (default: a new figure)."""
        import matplotlib.pyplot as plt

        if ax is None:
            fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")  # no clipped axis labels
        else:
            fig = ax.figure
        thr, n_feat = self.threshold_scan()
        ax.step(thr.numpy(), n_feat.numpy(), where="post", label="features with coverage >= gamma")
        ax.axvline(self.threshold, color="tab:red", linestyle="--", label=f"j_th = {self.threshold:.4g}")
        ax.axhline(1, color="gray", linewidth=0.8)
        ax.set_yscale("symlog", linthresh=1)
        ax.set_ylim(bottom=0)
        ax.set_xlabel("impact threshold")
        ax.set_ylabel(f"# features (coverage >= {self.gamma:g})")
        ax.set_title("Threshold scan")
        ax.legend(frameon=False)
        return fig


def select_features(
    model: nn.Module | None = None,
    inputs: Any = None,
    labels: Any = None,
    *,
    target: int | None = None,
    layer: nn.Module | str | None = None,
    attribute_to_layer_input: bool = False,
    baselines: str | torch.Tensor = "class_means",
    n_test_per_class: int = 100,
    n_steps: int = 50,
    internal_batch_size: int = 4096,
    gamma: float = 0.99,
    min_frequency: float = 0.1,
    max_length: int | None = None,
    max_itemsets: int | None = 10_000,
    max_bytes: int | None = 1 << 28,
    max_seconds: float | None = 60.0,
    importance: Any = None,
    feature_names: Sequence[str] | None = None,
    seed: int = 0,
) -> FeatureSelection:
    """Select the features that are frequently important together (Algorithm 1 of the paper).

    Builds the importance matrix J of integrated gradients between baselines and test samples divided by the output
    shift (``|j_i / (y - y~)|``), picks the impact threshold j_th at which exactly one feature scores ``>= j_th`` in
    at least ``gamma`` of the rows, and searches the rows binarised at j_th for the longest itemset used together in
    at least ``min_frequency`` of them (ties: the most frequent, then the lowest indices). When the search budget
    runs out, a deterministic fallback chooses (``exact=False``, ``reason`` and one ``UserWarning`` say so; see
    ``docs/feature_selection.md``).

    Args:
        model: differentiable model mapping a batch of ``inputs`` to (N,), (N, 1) or (N, C) outputs (with ``target``
            for C > 1), used as is (call ``model.eval()`` first). Not needed with ``importance``.
        inputs: (N, ...) float samples: tensor, numpy array or DataFrame (its columns name the features); cast to the
            model's dtype and device.
        labels: (N,) class indices ``0..C-1`` (or booleans), for the default baselines and class-balanced test
            samples.
        target: output column to explain when the model returns C > 1 values per sample (class index).
        layer: a submodule of ``model`` or its dotted name: attribute to its output activations (its units are then
            the features) with ``LayerIntegratedGradients``.
        attribute_to_layer_input: with ``layer``, attribute to the layer's input activations instead.
        baselines: ``"class_means"`` (the paper's default) or a tensor of B baselines shaped like rows of ``inputs``.
        n_test_per_class: test samples drawn per class (all of a smaller class); without labels, in all.
        n_steps: integration steps of the integrated gradients.
        internal_batch_size: at most this many path points go through the model at once (fewer for wide inputs or
            layers); pairs are processed in chunks, so memory does not grow with their number beyond J itself.
        gamma: coverage fraction in (0, 1] of eq. ``score_thd``; at least ``min_frequency``.
        min_frequency: c_min, the fraction of rows in (0, 1] in which a frequent itemset must appear.
        max_length: k_max, the most features selected (``None``: no limit).
        max_itemsets: budget of the exact search in itemsets examined, a table over 65,536 cells counting once per
            65,536 cells begun (``None``: no limit).
        max_bytes: budget in bytes of row/feature tables kept alive (``None``: no limit).
        max_seconds: budget in wall-clock seconds (``None``: no limit); a safety net whose result can depend on the
            machine's speed.
        importance: a precomputed (N, D) importance matrix (SHAP, LIME, ...) instead of the integrated gradients,
            for non-differentiable models; signed values count by magnitude.
        feature_names: D names (default: the columns of ``importance`` or ``inputs``, else ``feature_{i}``).
        seed: seed of the test-sample draw.

    Raises:
        TypeError: integer or boolean inputs, or a model whose output is not differentiable in its inputs (use
            ``importance=``).
        ValueError: bad option values, missing labels, a class without samples, ``layer`` not inside ``model``, or
            no pair with a non-zero output shift.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> model = nn.Sequential(nn.Linear(4, 1), nn.Sigmoid())
        >>> with torch.no_grad():
        ...     _ = model[0].weight.copy_(torch.tensor([[3.0, 0.0, -2.0, 0.0]]))
        ...     _ = model[0].bias.zero_()
        >>> X = torch.randn(500, 4, generator=torch.Generator().manual_seed(0))
        >>> labels = model(X).squeeze(1) > 0.5
        >>> sel = select_features(model, X, labels, n_test_per_class=50)
        >>> sel.features, sel.names
        ((0, 2), ('feature_0', 'feature_2'))
    """
    o = check_selection_options(
        {
            "gamma": gamma,
            "min_frequency": min_frequency,
            "max_length": max_length,
            "max_itemsets": max_itemsets,
            "max_bytes": max_bytes,
            "max_seconds": max_seconds,
            "n_test_per_class": n_test_per_class,
            "n_steps": n_steps,
            "internal_batch_size": internal_batch_size,
            "seed": seed,
            "target": target,
        }
    )
    gamma, min_frequency, max_length = o["gamma"], o["min_frequency"], o["max_length"]
    budget = {key: o[key] for key in ("max_itemsets", "max_bytes", "max_seconds")}

    if importance is not None:
        J = _importance_from_matrix(importance)
        frame = importance if hasattr(importance, "columns") else inputs if hasattr(inputs, "columns") else None
        names = _names(feature_names, frame, J.shape[1])
        return _select(J, names, gamma, min_frequency, max_length, budget, pairs=None, n_skipped=0)

    n_test_per_class, n_steps, seed, target = o["n_test_per_class"], o["n_steps"], o["seed"], o["target"]
    internal_batch_size = o["internal_batch_size"]
    if model is None or not callable(model):
        raise TypeError(f"Expected `model` to be a callable torch model (or pass `importance=`), but got {model!r}.")
    if isinstance(model, nn.Module):
        V.check_model_device(model)
    V.check_not_meta(inputs, "inputs")
    V.check_not_meta(labels, "labels")
    if layer is not None:
        if not isinstance(model, nn.Module):
            raise TypeError(f"Expected `model` to be a torch.nn.Module with `layer=`, but got {type(model).__name__}.")
        layer, _ = resolve_layer(model, layer)
    X, frame_names = _to_inputs(inputs, model, allow_integer=layer is not None and not isinstance(baselines, str))
    n = X.shape[0]
    y_labels = None if labels is None else V.to_class_labels(labels, n)
    base = _baselines(baselines, X, y_labels)
    test_rows = _test_rows(y_labels, n, n_test_per_class, seed).to(X.device)  # indexed by pairs on the device

    width = _check_differentiable(model, X[:2], layer, attribute_to_layer_input)
    points = max(1, min(internal_batch_size, _IG_BYTES // (max(width, X[0].numel()) * X.element_size())))
    y_test, out_ndim = _outputs(model, X, test_rows, target, internal_batch_size)
    y_base, _ = _outputs(model, base, None, target, internal_batch_size)
    shift = y_test[None, :] - y_base[:, None]  # (B, M): y~ - y for each baseline b and test sample m
    scale = torch.maximum(y_test.abs()[None, :], y_base.abs()[:, None])
    keep = shift.abs() > 4 * torch.finfo(shift.dtype).eps * scale
    if not bool(keep.any()):
        raise ValueError(
            f"All {shift.numel()} baseline/test pairs have a zero output shift: the model output is constant on them, "
            "so no feature importance can be measured."
        )
    pair_b, pair_m = torch.nonzero(keep, as_tuple=True)
    J = _impact_matrix(
        model,
        X,
        base,
        pair_b,
        test_rows[pair_m],
        shift[pair_b, pair_m],
        target=target if out_ndim == 2 else None,
        layer=layer,
        attribute_to_layer_input=attribute_to_layer_input,
        n_steps=n_steps,
        internal_batch_size=points,
    )
    names = _names(feature_names, frame_names if layer is None else None, J.shape[1])
    pairs = torch.stack([pair_b.cpu(), test_rows[pair_m].cpu()], dim=1)
    return _select(J, names, gamma, min_frequency, max_length, budget, pairs=pairs, n_skipped=int((~keep).sum()))


# ----------------------------------------------------------------------------------------------------- the maths


def _fallback(
    J: torch.Tensor, cols: torch.Tensor, used: np.ndarray, min_count: int, max_length: int | None
) -> tuple[list[int], int, int]:
    """The budget fallback: frequent columns ranked by mean impact (then frequency, then index), cut at the largest
    ratio between neighbours (the natural break), and of those the longest prefix used together in ``min_count`` rows.

    Returns the selected columns (original indices, in rank order), the rows that use them all, and the number of
    features above the break."""
    mean = sum(blk[:, cols].to(torch.float64).sum(dim=0) for blk in _row_blocks(J)).numpy() / J.shape[0]
    freq = used.sum(axis=0)
    order = np.lexsort((np.arange(cols.numel()), -freq, -mean))
    n_top = _natural_break(mean[order])
    together = np.ones(used.shape[0], dtype=bool)
    chosen: list[int] = []
    for c in order[:n_top].tolist():
        both = together & used[:, c]
        if int(both.sum()) < min_count or (max_length is not None and len(chosen) >= max_length):
            break
        together, chosen = both, [*chosen, c]
    col_list = cols.tolist()
    return [col_list[c] for c in chosen], int(together.sum()), n_top


def _select(
    J: torch.Tensor,
    names: list[str],
    gamma: float,
    min_frequency: float,
    max_length: int | None,
    budget: dict[str, Any],
    *,
    pairs: torch.Tensor | None,
    n_skipped: int,
) -> FeatureSelection:
    n = J.shape[0]
    k = _min_count(min_frequency, n)
    notes = []
    top = _coverage_thresholds(J, gamma)
    if float(top.max()) <= 0:  # no feature scores > 0 in gamma of the rows
        reach = max(int(blk_count) for blk_count in sum((blk > 0).sum(dim=0) for blk in _row_blocks(J)).tolist())
        if reach < k:
            raise ValueError(
                f"No feature scores above 0 in a fraction gamma={gamma} of the {n} rows (at most {reach} rows), so "
                "no impact threshold can be found: lower `gamma`."
            )
        notes.append(
            f"no feature scores above 0 in gamma={gamma:g} of the rows (e.g. ReLU units, zero for some pairs), so "
            f"gamma was lowered to {reach}/{n}, the largest fraction any feature reaches"
        )
        gamma = reach / n
        top = _coverage_thresholds(J, gamma)
    threshold, _ = _threshold_scan(J, gamma, top)
    cols, used = _used_columns(J, threshold, k)
    if cols.numel() == 0:  # cannot happen when gamma >= min_frequency; kept as a clear error
        raise ValueError(f"No feature is used in a fraction min_frequency={min_frequency} of the rows.")
    found = longest_frequent_itemset(used, k, max_length=max_length, **budget)
    where = f"at least {k} of the {n} rows (min_frequency={min_frequency:g}) at j_th={threshold:.4g}"
    if found.exact:
        best = sorted(cols[list(found.items)].tolist())
        count = found.count
        notes.append(
            f"exact: the longest itemset used together in {where} ({found.n_examined} itemsets examined, "
            f"{cols.numel()} frequent features)"
        )
    else:
        chosen, count, n_top = _fallback(J, cols, used, k, max_length)
        best = sorted(chosen)
        notes.append(
            f"fallback: the exact search stopped at {found.stopped_by}={budget[found.stopped_by]} after "
            f"{found.n_examined} itemsets, counted by size ({cols.numel()} features are used in {where}; the longest "
            "itemset found by "
            f"then had {len(found.items)}). Selected instead: those {cols.numel()} features ranked by mean impact, cut "
            f"at the largest drop between neighbours ({n_top} above it), longest prefix still used together in {where}"
            f" ({len(best)} features)"
        )
    reason = "; ".join(notes)
    if len(notes) > 1 or not found.exact:
        advice = f" Raise `{found.stopped_by}` for the exact answer, or raise `min_frequency` / set `max_length`."
        warnings.warn(f"select_features: {reason}.{'' if found.exact else advice}", UserWarning, stacklevel=3)
    return FeatureSelection(
        features=tuple(best),
        names=tuple(names[i] for i in best),
        threshold=threshold,
        support=count / n,
        importance=J,
        gamma=gamma,
        min_frequency=min_frequency,
        exact=found.exact,
        reason=reason,
        n_examined=found.n_examined,
        pairs=pairs,
        n_skipped=n_skipped,
    )


# ---------------------------------------------------------------------------------------------- input handling


#: The keywords of :func:`select_features` besides its data (``model``, ``inputs``, ``labels``).
SELECTION_KEYWORDS = tuple(inspect.signature(select_features).parameters)[3:]


def check_selection_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword options of :func:`select_features` checked without the data: unknown names and bad numbers are
    errors naming them (for ``select_features={...}`` of the explainer and the callback, checked before any model
    runs); the numbers given come back as Python numbers, the other options as they are.

    Example:
        >>> check_selection_options({"n_steps": 8, "gamma": 0.9})["n_steps"]
        8
        >>> check_selection_options({"n_step": 8})
        Traceback (most recent call last):
        ...
        TypeError: select_features() got an unexpected keyword argument 'n_step' (did you mean 'n_steps'?)
    """
    A.unexpected_keywords(options, SELECTION_KEYWORDS, "select_features")
    o = dict(options)
    defaults = {k: p.default for k, p in inspect.signature(select_features).parameters.items()}
    gamma = _check_fraction(o.get("gamma", defaults["gamma"]), "gamma")
    min_frequency = _check_fraction(o.get("min_frequency", defaults["min_frequency"]), "min_frequency")
    if gamma < min_frequency:
        raise ValueError(
            f"Expected `gamma` >= `min_frequency` (the paper takes gamma in (c_min / BM, 1]), but got gamma={gamma} "
            f"and min_frequency={min_frequency}."
        )
    o.update(gamma=gamma, min_frequency=min_frequency)
    if o.get("max_length") is not None:
        o["max_length"] = A.check_int(o["max_length"], "max_length", 1)
    budget = [o.get(k, defaults[k]) for k in ("max_itemsets", "max_bytes", "max_seconds")]
    o.update(_check_budget(*budget))
    for name, low in (("n_test_per_class", 1), ("n_steps", 1), ("internal_batch_size", 1), ("seed", 0)):
        o[name] = A.check_int(o.get(name, defaults[name]), name, low)
    if o.get("target") is not None:
        o["target"] = A.check_int(o["target"], "target", 0)
    return o


def _check_budget(max_itemsets: Any, max_bytes: Any, max_seconds: Any) -> dict[str, Any]:
    budget = {
        "max_itemsets": None if max_itemsets is None else A.check_int(max_itemsets, "max_itemsets", 1),
        "max_bytes": None if max_bytes is None else A.check_int(max_bytes, "max_bytes", 1),
    }
    if max_seconds is not None:
        if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float, np.integer, np.floating)):
            raise TypeError(f"Expected `max_seconds` to be a positive number or None, but got {max_seconds!r}.")
        if not float(max_seconds) > 0:
            raise ValueError(f"Expected `max_seconds` > 0 or None, but got {max_seconds}.")
    return {**budget, "max_seconds": None if max_seconds is None else float(max_seconds)}


def _check_fraction(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"Expected `{name}` to be a number in (0, 1], but got {value!r}.")
    if not 0.0 < float(value) <= 1.0:
        raise ValueError(f"Expected `{name}` to lie in (0, 1], but got {value}.")
    return float(value)


def _names(feature_names: Sequence[str] | None, frame: Any, n_features: int) -> list[str]:
    frame_names = [str(c) for c in frame.columns] if frame is not None and hasattr(frame, "columns") else frame
    if frame_names is not None and len(frame_names) != n_features:
        frame_names = None
    return A.resolve_names(feature_names, frame_names, n_features)
