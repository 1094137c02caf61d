"""Feature selection for rule extraction (Algorithm 1 of the paper): :func:`select_features` and
:class:`FeatureSelection`.

Three steps, each a private helper that can be checked on its own:

1. :func:`_impact_matrix` -- the importance matrix J (eqs. ``ijacob`` and ``impact``): for every pair of a baseline
   ``x`` and a test sample ``x~``, the integrated gradients ``j_i`` of the model output along the straight path between
   them (Captum's ``IntegratedGradients`` on the inputs, or ``LayerIntegratedGradients`` on a layer's activations),
   divided by the output shift: ``|j_i / (y - y~)|``. One row per pair, one column per feature; computed in chunks of
   pairs on the model's device, so the working memory does not grow with the pairs or the width of the layer.
2. :func:`_threshold_scan` -- the impact threshold ``j_th`` of eq. ``score_thd``: the smallest threshold at which
   exactly one feature scores ``>= j_th`` in at least ``gamma`` of the rows.
3. :func:`torch_amore.selection.itemsets.longest_frequent_itemset` -- the longest itemset used together in at least
   ``min_frequency`` of the rows binarised at ``j_th`` (ties: the most frequent), by branch and bound within a budget.
   When the budget runs out, :func:`_fallback` makes a documented, deterministic choice instead, and the result and
   one warning say so.

Captum and matplotlib are imported lazily, so ``import torch_amore`` stays light.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
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
        """The selection as plain JSON-safe values (without the importance matrix and the pairs).

        Returns:
            A dict with ``features``, ``names``, ``threshold``, ``support``, ``exact``, ``reason``, ``gamma``,
            ``min_frequency``, ``n_examined``, ``n_rows`` and ``n_features`` (the shape of J) and ``n_skipped``.
        """
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
        """How many features reach coverage ``gamma`` at each threshold (the curve of the paper's Fig. 3a).

        Args:
            thresholds: thresholds to evaluate; default 200 points from 0 to just past the last one that leaves a
                feature.

        Returns:
            ``(thresholds, n_features)``: float64 and int64 tensors of the same length.
        """
        top = _coverage_thresholds(self.importance, self.gamma)
        if thresholds is None:
            thresholds = torch.linspace(0.0, float(top.max()) * 1.05 or 1.0, 200, dtype=torch.float64)
        thresholds = torch.as_tensor(thresholds, dtype=torch.float64)
        n_features = (top.to(torch.float64)[None, :] >= thresholds[:, None]).sum(dim=1)
        return thresholds, n_features

    def plot_threshold_scan(self, *, ax: Axes | None = None) -> Figure:
        """Plot the number of features reaching coverage ``gamma`` against the threshold, with j_th marked.

        Args:
            ax: matplotlib axes to draw on (default: a new figure).

        Returns:
            The matplotlib figure.
        """
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

    Builds the importance matrix J of integrated gradients between baselines and test samples, normalised by the
    output shift (``|j_i / (y - y~)|``), picks the impact threshold j_th so that exactly one feature scores ``>= j_th``
    in at least ``gamma`` of the rows, and searches the rows binarised at j_th for the longest itemset used together
    in at least ``min_frequency`` of them (ties: the most frequent, then the lowest indices) by branch and bound.

    The search has a budget (``max_itemsets``, ``max_bytes``, ``max_seconds``). When it runs out, the selection falls
    back to a deterministic choice (the frequent features ranked by mean impact, cut at the largest drop between
    neighbours, longest prefix still used together in ``min_frequency`` of the rows); ``exact`` is then False,
    ``reason`` says what happened, and one ``UserWarning`` is issued. See ``docs/feature_selection.md``.

    Args:
        model: differentiable model mapping a batch of ``inputs`` to (N,), (N, 1) or (N, C) outputs (a logit, a
            probability, a regression value, or class scores with ``target``). It is used as is: call ``model.eval()``
            first if it has dropout or batch norm. Not needed with ``importance``.
        inputs: (N, ...) float samples: a tensor, numpy array or pandas DataFrame (its column names become feature
            names). Class means and test samples are drawn from them. Cast to the model's dtype and device.
        labels: (N,) class labels: class indices ``0..C-1`` (or booleans). Needed for the default baselines; also used
            to draw class-balanced test samples.
        target: output column to explain when the model returns C > 1 values per sample (class index).
        layer: a submodule of ``model`` or its dotted name (``"encoder.2"``): attribute to its output activations
            instead of the inputs (``LayerIntegratedGradients``; the path runs between the layer activations of the
            baseline and of the sample). The features are then the layer's units, e.g. 1,280 latent features.
        attribute_to_layer_input: with ``layer``, attribute to the layer's input activations instead of its output.
        baselines: ``"class_means"`` (the centre of each class in input space; the default of the paper) or a tensor
            of B baselines shaped like B rows of ``inputs``.
        n_test_per_class: test samples drawn per class (without replacement, all of a smaller class); without labels,
            the total number of test samples.
        n_steps: integration steps of the integrated gradients.
        internal_batch_size: at most this many path points go through the model at once (fewer for wide inputs or
            layers, so that one (path points x features) tensor stays under 64 MiB); baseline/test pairs are
            processed in chunks, so memory does not grow with the number of pairs (beyond J itself).
        gamma: coverage fraction in (0, 1] of eq. ``score_thd``; at least ``min_frequency``.
        min_frequency: c_min, the minimum fraction of rows in (0, 1] in which a frequent itemset must appear.
        max_length: k_max, the most features selected (``None``: no limit).
        max_itemsets: budget of the exact search: itemsets it may examine, one with a (rows x candidate features)
            table over 65,536 cells counting once per 65,536 cells begun, so that it bounds the work (``None``: no
            limit). Deterministic.
        max_bytes: budget of the exact search: bytes of row/feature tables it may keep alive (``None``: no limit).
            Deterministic.
        max_seconds: budget of the exact search in wall-clock seconds (``None``: no limit). A safety net: a result
            stopped by it can depend on the machine's speed; the other budgets normally stop the search first.
        importance: a precomputed (N, D) importance matrix (SHAP, LIME, tree importances...) that replaces the
            integrated gradients -- the way to use non-differentiable models. Signed values count by magnitude.
        feature_names: D names (default: the columns of ``importance`` or ``inputs`` when a DataFrame, else
            ``feature_{i}``).
        seed: seed of the test-sample draw.

    Returns:
        The :class:`FeatureSelection`.

    Raises:
        TypeError: integer or boolean inputs, or a model whose output does not depend differentiably on its inputs
            (use ``importance=``).
        ValueError: bad option values, missing labels, a class without samples, ``layer`` not inside ``model``, or
            no pair with a non-zero output shift.

    Warns:
        UserWarning: once, when the search budget ran out and the fallback chose the features.

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
    gamma = _check_fraction(gamma, "gamma")
    min_frequency = _check_fraction(min_frequency, "min_frequency")
    if gamma < min_frequency:
        raise ValueError(
            f"Expected `gamma` >= `min_frequency` (the paper takes gamma in (c_min / BM, 1]), but got gamma={gamma} "
            f"and min_frequency={min_frequency}."
        )
    if max_length is not None:
        max_length = A.check_int(max_length, "max_length", 1)
    budget = _check_budget(max_itemsets, max_bytes, max_seconds)

    if importance is not None:
        J = _importance_from_matrix(importance)
        frame = importance if hasattr(importance, "columns") else inputs if hasattr(inputs, "columns") else None
        names = _names(feature_names, frame, J.shape[1])
        return _select(J, names, gamma, min_frequency, max_length, budget, pairs=None, n_skipped=0)

    n_test_per_class = A.check_int(n_test_per_class, "n_test_per_class", 1)
    n_steps = A.check_int(n_steps, "n_steps", 1)
    internal_batch_size = A.check_int(internal_batch_size, "internal_batch_size", 1)
    seed = A.check_int(seed, "seed", 0)
    if target is not None:
        target = A.check_int(target, "target", 0)
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


def _check_budget(max_itemsets: Any, max_bytes: Any, max_seconds: Any) -> dict[str, Any]:
    budget: dict[str, Any] = {
        "max_itemsets": None if max_itemsets is None else A.check_int(max_itemsets, "max_itemsets", 1),
        "max_bytes": None if max_bytes is None else A.check_int(max_bytes, "max_bytes", 1),
    }
    if max_seconds is not None:
        if isinstance(max_seconds, bool) or not isinstance(max_seconds, (int, float, np.integer, np.floating)):
            raise TypeError(f"Expected `max_seconds` to be a positive number or None, but got {max_seconds!r}.")
        if not float(max_seconds) > 0:
            raise ValueError(f"Expected `max_seconds` > 0 or None, but got {max_seconds}.")
        max_seconds = float(max_seconds)
    budget["max_seconds"] = max_seconds
    return budget


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
