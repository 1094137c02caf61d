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

import math
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from torch_amore.data import validation as V
from torch_amore.model.forward import resolve_layer
from torch_amore.selection.itemsets import longest_frequent_itemset

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_BLOCK = 1 << 22  # elements of J per temporary block in the threshold scan and the column counts
_IG_BYTES = 1 << 26  # at most this many bytes in one (path points x features) tensor of the integrated gradients
_WAY_OUT = "pass a precomputed `importance=` matrix (e.g. SHAP or LIME values) instead"


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
        max_length = V.check_int(max_length, "max_length", 1)
    budget = _check_budget(max_itemsets, max_bytes, max_seconds)

    if importance is not None:
        J = _importance_from_matrix(importance)
        frame = importance if hasattr(importance, "columns") else inputs if hasattr(inputs, "columns") else None
        names = _names(feature_names, frame, J.shape[1])
        return _select(J, names, gamma, min_frequency, max_length, budget, pairs=None, n_skipped=0)

    n_test_per_class = V.check_int(n_test_per_class, "n_test_per_class", 1)
    n_steps = V.check_int(n_steps, "n_steps", 1)
    internal_batch_size = V.check_int(internal_batch_size, "internal_batch_size", 1)
    seed = V.check_int(seed, "seed", 0)
    if target is not None:
        target = V.check_int(target, "target", 0)
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
    y_labels = None if labels is None else _to_labels(labels, n)
    base = _baselines(baselines, X, y_labels)
    test_rows = _test_rows(y_labels, n, n_test_per_class, seed)

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


def _impact_matrix(
    model: Any,
    samples: torch.Tensor,
    base: torch.Tensor,
    pair_b: torch.Tensor,
    pair_x: torch.Tensor,
    shift: torch.Tensor,
    *,
    target: int | None,
    layer: nn.Module | None,
    attribute_to_layer_input: bool,
    n_steps: int,
    internal_batch_size: int,
) -> torch.Tensor:
    """Rows ``|j / (y~ - y)|`` for the pairs (base[pair_b], samples[pair_x]); ``shift`` holds ``y~ - y`` per pair.

    Pairs go through Captum in chunks of ``internal_batch_size // n_steps``, their samples gathered per chunk, and
    each chunk's rows are written into the preallocated (P, D) result: the working memory is bounded by the chunk.

    Captum integrates from ``baselines`` to ``inputs``, so with inputs = test sample and baselines = baseline,
    ``sum_i j_i ~= y~ - y``; the paper's orientation (from x~ to x) flips the signs of both ``j_i`` and the shift and
    leaves the ratio unchanged.
    """
    from captum.attr import IntegratedGradients, LayerIntegratedGradients

    if layer is None:
        ig, extra = IntegratedGradients(model), {}
    else:
        ig, extra = LayerIntegratedGradients(model, layer), {"attribute_to_layer_input": attribute_to_layer_input}
    chunk = max(1, internal_batch_size // n_steps)
    n_pairs = pair_b.numel()
    J = None
    for start in range(0, n_pairs, chunk):
        b, m = pair_b[start : start + chunk], pair_x[start : start + chunk]
        attr = ig.attribute(
            samples[m],
            baselines=base[b],
            target=target,
            n_steps=n_steps,
            internal_batch_size=internal_batch_size,
            **extra,
        )
        if isinstance(attr, (tuple, list)):
            raise ValueError(
                f"Expected `layer` to produce a single tensor, but its "
                f"{'inputs' if attribute_to_layer_input else 'output'} hold {len(attr)} tensors."
            )
        attr = attr.detach().reshape(b.numel(), -1)
        if J is None:
            J = torch.empty(n_pairs, attr.shape[1], dtype=attr.dtype)
        rows = (attr / shift[start : start + chunk, None].to(attr.dtype)).abs()
        if not bool(torch.isfinite(rows).all()):
            raise ValueError(
                "The integrated gradients hold NaN or inf: check that the model is finite along the paths."
            )
        J[start : start + chunk] = rows.cpu()
    return J


def _coverage_thresholds(J: torch.Tensor, gamma: float) -> torch.Tensor:
    """Per feature, the highest threshold at which it still scores ``>= thr`` in at least ``gamma * N`` rows.

    ``count_i(thr) >= gamma * N`` <=> ``count_i(thr) >= k`` with ``k = ceil(gamma * N)`` <=> ``thr <= `` the k-th
    largest value of column i.
    """
    n, d = J.shape
    k = min(n, _min_count(gamma, n))
    step = max(1, _BLOCK // n)  # column blocks bound the buffers of topk
    out = torch.empty(d, dtype=J.dtype)
    for s in range(0, d, step):
        out[s : s + step] = _kth_smallest(J[:, s : s + step], n - k + 1)
    return out


def _kth_smallest(block: torch.Tensor, kth: int) -> torch.Tensor:
    """Per column, the ``kth`` smallest value (1-based): ``torch.topk`` from the nearer end (much faster than
    ``torch.kthvalue`` along the rows when ``kth`` is near 1 or N, as for gamma = 0.99)."""
    n = block.shape[0]
    if kth <= n - kth + 1:
        return torch.topk(block, kth, dim=0, largest=False).values[-1]
    return torch.topk(block, n - kth + 1, dim=0, largest=True).values[-1]


def _row_blocks(J: torch.Tensor) -> Iterator[torch.Tensor]:
    """Views of at most ``_BLOCK`` elements of J, in row order (temporary masks stay small)."""
    step = max(1, _BLOCK // max(1, J.shape[1]))
    for s in range(0, J.shape[0], step):
        yield J[s : s + step]


def _threshold_scan(J: torch.Tensor, gamma: float, top: torch.Tensor | None = None) -> tuple[float, int]:
    """The impact threshold j_th of eq. ``score_thd`` and the number of features reaching coverage at it.

    With ``t_i`` the coverage threshold of feature i (:func:`_coverage_thresholds`), the number of features reaching
    coverage at ``thr`` is ``#{i: t_i >= thr}``, non-increasing in ``thr``; it is exactly one for
    ``t_(2) < thr <= t_(1)`` (first and second largest ``t``). The binarisation ``J >= thr`` only changes at values
    of J, so the smallest such threshold is the smallest entry of J above ``t_(2)``: that is what a fine stepwise scan
    from below stops at. When the top two tie (``t_(1) == t_(2)``) no threshold leaves exactly one feature: the count
    drops from >= 2 straight to 0. Then j_th = ``t_(1)``, the highest threshold any feature still reaches, every tied
    feature counts, and a warning says so.
    """
    top = _coverage_thresholds(J, gamma) if top is None else top
    first = float(top.max())
    if first <= 0:
        raise ValueError(
            f"No feature scores above 0 in a fraction gamma={gamma} of the {J.shape[0]} rows, so no impact threshold "
            "can be found: lower `gamma`."
        )
    if top.numel() == 1:
        return float(J.min()), 1
    second = float(torch.topk(top, 2).values[1])
    if second < first:
        return min(float(blk[blk > second].min()) for blk in _row_blocks(J) if bool((blk > second).any())), 1
    tied = torch.nonzero(top == first).flatten().tolist()
    warnings.warn(
        f"No impact threshold leaves exactly one feature with coverage >= gamma={gamma}: features {tied[:10]} tie at "
        f"{first:.4g}. Using j_th = {first:.4g}, at which all {len(tied)} reach it.",
        stacklevel=3,
    )
    return first, len(tied)


def _min_count(min_frequency: float, n: int) -> int:
    """The fewest rows (>= 1) that make a fraction ``min_frequency`` of ``n``: ``count >= min_frequency * n`` (the
    product rounded to 9 decimals first, so that 0.3 * 10 means 3 rows)."""
    return max(1, math.ceil(round(min_frequency * n, 9)))


def _used_columns(J: torch.Tensor, threshold: float, min_count: int) -> tuple[torch.Tensor, np.ndarray]:
    """The columns used (``J >= threshold``) in at least ``min_count`` rows, and the boolean (N, C) matrix of their use.

    Columns used in fewer rows cannot be in a frequent itemset; the matrix is built by row blocks, so no float copy of
    J is made."""
    counts = sum((blk >= threshold).sum(dim=0) for blk in _row_blocks(J))
    cols = torch.nonzero(counts >= min_count).flatten()
    used = torch.cat([blk[:, cols] >= threshold for blk in _row_blocks(J)]) if cols.numel() else None
    return cols, np.zeros((J.shape[0], 0), dtype=bool) if used is None else used.numpy()


def _natural_break(values: np.ndarray) -> int:
    """How many of the descending positive ``values`` lie before the largest ratio between neighbours."""
    if values.size < 2:
        return int(values.size)
    logs = np.log(values)
    return int(np.argmax(logs[:-1] - logs[1:])) + 1  # first largest drop: deterministic


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
        "max_itemsets": None if max_itemsets is None else V.check_int(max_itemsets, "max_itemsets", 1),
        "max_bytes": None if max_bytes is None else V.check_int(max_bytes, "max_bytes", 1),
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


def _importance_from_matrix(importance: Any) -> torch.Tensor:
    if hasattr(importance, "to_numpy"):
        importance = importance.to_numpy(dtype=np.float64)
    if isinstance(importance, np.ndarray):
        if not (np.issubdtype(importance.dtype, np.number) or importance.dtype == bool):
            raise TypeError(f"Expected `importance` to have a numeric dtype, but got {importance.dtype}.")
        importance = torch.from_numpy(np.ascontiguousarray(importance))
    if not isinstance(importance, torch.Tensor):
        raise TypeError(
            "Expected `importance` to be an (N, D) tensor, numpy array or DataFrame, but got "
            f"{type(importance).__name__}."
        )
    if importance.ndim != 2 or importance.shape[0] == 0 or importance.shape[1] == 0:
        raise ValueError(
            f"Expected `importance` to have shape (N, D) with N, D >= 1, but got {tuple(importance.shape)}."
        )
    J = importance.detach().cpu()
    J = (J if J.is_floating_point() else J.to(torch.float64)).abs()
    if not bool(torch.isfinite(J).all()):
        raise ValueError("Expected `importance` to hold finite values, but it holds NaN or inf.")
    return J


def _names(feature_names: Sequence[str] | None, frame: Any, n_features: int) -> list[str]:
    frame_names = [str(c) for c in frame.columns] if frame is not None and hasattr(frame, "columns") else frame
    if frame_names is not None and len(frame_names) != n_features:
        frame_names = None
    return V.resolve_names(feature_names, frame_names, n_features)


def _model_dtype_device(model: Any) -> tuple[torch.dtype | None, torch.device | None]:
    if isinstance(model, nn.Module):
        for p in model.parameters():
            if p.is_floating_point():
                return p.dtype, p.device
    return None, None


def _to_inputs(inputs: Any, model: Any, *, allow_integer: bool) -> tuple[torch.Tensor, list[str] | None]:
    inputs, names = _inputs_tensor(inputs)
    if inputs.ndim < 2 or inputs.shape[0] == 0:
        raise ValueError(f"Expected `inputs` to have shape (N, ...) with N >= 1, but got {tuple(inputs.shape)}.")
    dtype, device = _model_dtype_device(model)
    if not inputs.is_floating_point():
        if not allow_integer:
            raise TypeError(
                f"Expected floating-point `inputs`, but got {inputs.dtype}: integer inputs cannot be differentiated. "
                "Cast them to float if they are numeric features, attribute to an embedding with `layer=` and "
                f"explicit `baselines`, or {_WAY_OUT}."
            )
    else:
        if not bool(torch.isfinite(inputs).all()):
            raise ValueError("Expected `inputs` to hold finite values, but they hold NaN or inf.")
        if dtype is not None:
            inputs = inputs.to(dtype)
    if device is not None:
        inputs = inputs.to(device)
    return inputs, names


def _inputs_tensor(inputs: Any) -> tuple[torch.Tensor, list[str] | None]:
    """A DataFrame, numpy array or tensor as a tensor, with the DataFrame's column names (else ``None``)."""
    names = None
    if hasattr(inputs, "columns") and hasattr(inputs, "to_numpy"):
        names = [str(c) for c in inputs.columns]
        try:
            inputs = inputs.to_numpy(dtype=np.float64)
        except (TypeError, ValueError) as err:
            raise TypeError("Expected `inputs` to hold numeric columns only; one-hot encode categories first.") from err
    if isinstance(inputs, np.ndarray):
        if not (np.issubdtype(inputs.dtype, np.number) or inputs.dtype == bool):
            raise TypeError(f"Expected `inputs` to have a numeric dtype, but got {inputs.dtype}.")
        inputs = torch.from_numpy(np.ascontiguousarray(inputs))
    if not isinstance(inputs, torch.Tensor):
        raise TypeError(
            f"Expected `inputs` to be a torch.Tensor, numpy array or DataFrame, but got {type(inputs).__name__}."
        )
    return inputs, names


def _to_labels(labels: Any, n: int) -> torch.Tensor:
    labels = _labels_tensor(labels)
    labels = labels.detach().cpu().reshape(-1) if labels.ndim == 2 and 1 in labels.shape else labels.detach().cpu()
    if labels.ndim != 1 or labels.shape[0] != n:
        raise ValueError(f"Expected `labels` to have shape ({n},) (one per row of inputs), got {tuple(labels.shape)}.")
    if labels.is_floating_point():
        if not bool((labels == labels.round()).all()):
            raise TypeError("Expected `labels` to hold integer class indices, but they hold fractional values.")
    labels = labels.to(torch.int64)
    if bool((labels < 0).any()):
        raise ValueError(f"Expected `labels` to be class indices >= 0, but got {int(labels.min())}.")
    counts = torch.bincount(labels, minlength=2)
    empty = torch.nonzero(counts == 0).flatten().tolist()
    if empty:
        raise ValueError(
            f"Expected every class 0..{counts.numel() - 1} to have samples, but class(es) {empty[:10]} have none "
            "(labels must be class indices 0..C-1)."
        )
    return labels


def _labels_tensor(labels: Any) -> torch.Tensor:
    """A Series, list, tuple, numpy array or tensor of class indices as a tensor."""
    if hasattr(labels, "to_numpy"):
        labels = labels.to_numpy()
    if isinstance(labels, (list, tuple)):
        labels = np.asarray(labels)
    if isinstance(labels, np.ndarray):
        if not (np.issubdtype(labels.dtype, np.number) or labels.dtype == bool):
            raise TypeError(f"Expected `labels` to hold class indices, but got dtype {labels.dtype}.")
        labels = torch.from_numpy(np.ascontiguousarray(labels))
    if not isinstance(labels, torch.Tensor):
        raise TypeError(
            f"Expected `labels` to be an (N,) tensor or array of class indices, got {type(labels).__name__}."
        )
    return labels


def _baselines(baselines: Any, X: torch.Tensor, labels: torch.Tensor | None) -> torch.Tensor:
    if isinstance(baselines, str):
        if baselines != "class_means":
            raise ValueError(f"Expected `baselines` to be 'class_means' or a tensor, but got {baselines!r}.")
        if labels is None:
            raise ValueError("Expected `labels` for baselines='class_means' (the class centres), but got None.")
        lab = labels.to(X.device)
        return torch.stack([X[lab == c].mean(dim=0) for c in range(int(labels.max()) + 1)])
    if isinstance(baselines, np.ndarray):
        baselines = torch.from_numpy(np.ascontiguousarray(baselines))
    if not isinstance(baselines, torch.Tensor):
        raise TypeError(f"Expected `baselines` to be 'class_means' or a tensor, but got {type(baselines).__name__}.")
    if tuple(baselines.shape) == tuple(X.shape[1:]):
        baselines = baselines[None]
    if tuple(baselines.shape[1:]) != tuple(X.shape[1:]) or baselines.shape[0] == 0:
        raise ValueError(
            f"Expected `baselines` of shape (B, {', '.join(map(str, X.shape[1:]))}), but got {tuple(baselines.shape)}."
        )
    return baselines.to(X.device, X.dtype)


def _test_rows(labels: torch.Tensor | None, n: int, per_class: int, seed: int) -> torch.Tensor:
    """A seeded, class-balanced draw: ``per_class`` rows of each class without replacement (all of smaller ones)."""
    g = torch.Generator().manual_seed(seed)
    groups = (
        [torch.arange(n)]
        if labels is None
        else [torch.nonzero(labels == c).flatten() for c in range(int(labels.max()) + 1)]
    )
    picks = [rows[torch.randperm(rows.numel(), generator=g)[:per_class]].sort().values for rows in groups]
    return torch.cat(picks)


def _check_differentiable(model: Any, x: torch.Tensor, layer: nn.Module | None, to_layer_input: bool) -> int:
    """Run two samples and check that the output carries a gradient w.r.t. the inputs (or the layer activations).

    Returns the number of values per sample of the attributed tensor (inputs or layer activations)."""
    handle = None
    seen: list[int] = []

    def width(t: Any) -> int:
        return t[0].numel() if torch.is_tensor(t) and t.ndim > 0 and t.shape[0] == x.shape[0] else 0

    if layer is None:
        x = x.detach().clone().requires_grad_(True)
    elif to_layer_input:

        def pre_hook(module: nn.Module, args: tuple) -> tuple:
            seen.append(max((width(a) for a in args), default=0))
            return tuple(
                a.detach().requires_grad_(True) if torch.is_tensor(a) and a.is_floating_point() else a for a in args
            )

        handle = layer.register_forward_pre_hook(pre_hook)
    else:

        def hook(module: nn.Module, args: tuple, out: Any) -> Any:
            seen.append(width(out))
            return out.detach().requires_grad_(True) if torch.is_tensor(out) and out.is_floating_point() else out

        handle = layer.register_forward_hook(hook)
    try:
        with torch.enable_grad():
            out = model(x)
    finally:
        if handle is not None:
            handle.remove()
    if layer is not None and not seen:
        raise ValueError("Expected `layer` to run in model's forward pass, but it was never called.")
    if not torch.is_tensor(out) or not out.requires_grad:
        where = "the inputs" if layer is None else "the layer activations"
        raise TypeError(
            f"The model output is not differentiable with respect to {where} (does the forward run under "
            f"torch.no_grad(), detach, or cast to integers?); integrated gradients need gradients: {_WAY_OUT}."
        )
    return max([x[0].numel(), *seen])


@torch.no_grad()
def _outputs(
    model: Any, x: torch.Tensor, rows: torch.Tensor | None, target: int | None, batch: int
) -> tuple[torch.Tensor, int]:
    """The explained model output for ``x[rows]`` (all rows if None): column ``target`` of (N, C) outputs; and the
    number of output dimensions."""
    parts, ndim = [], 1
    n = x.shape[0] if rows is None else rows.numel()
    for start in range(0, n, batch):
        out = model(x[start : start + batch] if rows is None else x[rows[start : start + batch]])
        if not torch.is_tensor(out) or out.ndim > 2 or out.ndim == 0:
            shape = tuple(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise ValueError(f"Expected the model to return (N,), (N, 1) or (N, C) outputs, but got {shape}.")
        ndim = out.ndim
        out = out.reshape(out.shape[0], -1)
        if out.shape[1] > 1 and target is None:
            raise ValueError(
                f"The model returns {out.shape[1]} outputs per sample: pass `target` (the class index to explain)."
            )
        col = 0 if target is None else target
        if col >= out.shape[1]:
            raise ValueError(f"Expected `target` in [0, {out.shape[1] - 1}], but got {target}.")
        parts.append(out[:, col])
    return torch.cat(parts), ndim
