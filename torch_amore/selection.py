"""Feature selection for rule extraction (Algorithm 1 of the paper): :func:`select_features` and
:class:`FeatureSelection`.

Three steps, each a private helper that can be checked on its own:

1. :func:`_impact_matrix` -- the importance matrix J (eqs. ``ijacob`` and ``impact``): for every pair of a baseline
   ``x`` and a test sample ``x~``, the integrated gradients ``j_i`` of the model output along the straight path between
   them (Captum's ``IntegratedGradients`` on the inputs, or ``LayerIntegratedGradients`` on a layer's activations),
   divided by the output shift: ``|j_i / (y - y~)|``. One row per pair, one column per feature.
2. :func:`_threshold_scan` -- the impact threshold ``j_th`` of eq. ``score_thd``: the smallest threshold at which
   exactly one feature scores ``>= j_th`` in at least ``gamma`` of the rows.
3. :func:`_frequent_itemsets` -- FP-Growth (mlxtend) on the rows binarised at ``j_th``; the longest frequent itemset
   wins, ties going to the more frequent one.

Captum, mlxtend/pandas and matplotlib are imported lazily, so ``import torch_amore`` stays light.
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

from torch_amore import _validation as V

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_BLOCK = 1 << 22  # elements of J per temporary block in the threshold scan and the column counts
_DENSE_CELLS = 1 << 22  # boolean frames with more cells go to mlxtend as a sparse DataFrame
_ITEMSET_WARN = 1e9  # warn when FP-Growth may have to enumerate more candidate itemsets than this
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
        itemsets: every frequent itemset found by FP-Growth: a DataFrame with columns ``support`` (fraction of
            rows), ``itemsets`` (frozenset of feature indices), ``length`` and ``names`` (tuple of names), longest
            first, then most frequent.
        gamma: the coverage fraction used for the threshold.
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
    """

    features: tuple[int, ...]
    names: tuple[str, ...]
    threshold: float
    support: float
    importance: torch.Tensor
    itemsets: pd.DataFrame
    gamma: float
    pairs: torch.Tensor | None = None
    n_skipped: int = 0

    def __len__(self) -> int:
        return len(self.features)

    def __repr__(self) -> str:
        return (
            f"FeatureSelection(features={self.features}, names={self.names}, threshold={self.threshold:.4g}, "
            f"support={self.support:.4g})"
        )

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
    layer: nn.Module | None = None,
    attribute_to_layer_input: bool = False,
    baselines: str | torch.Tensor = "class_means",
    n_test_per_class: int = 100,
    n_steps: int = 50,
    internal_batch_size: int = 4096,
    gamma: float = 0.99,
    min_frequency: float = 0.1,
    max_length: int | None = None,
    importance: Any = None,
    feature_names: Sequence[str] | None = None,
    seed: int = 0,
) -> FeatureSelection:
    """Select the features that are frequently important together (Algorithm 1 of the paper).

    Builds the importance matrix J of integrated gradients between baselines and test samples, normalised by the
    output shift (``|j_i / (y - y~)|``), picks the impact threshold j_th so that exactly one feature scores ``>= j_th``
    in at least ``gamma`` of the rows, and runs FP-Growth on the rows binarised at j_th. The longest frequent itemset
    is returned (ties: the most frequent, then the lowest indices).

    Args:
        model: differentiable model mapping a batch of ``inputs`` to (N,), (N, 1) or (N, C) outputs (a logit, a
            probability, a regression value, or class scores with ``target``). It is used as is: call ``eval()``
            first if it has dropout or batch norm. Not needed with ``importance``.
        inputs: (N, ...) float samples: a tensor, numpy array or pandas DataFrame (its column names become feature
            names). Class means and test samples are drawn from them. Cast to the model's dtype and device.
        labels: (N,) class labels: class indices ``0..C-1`` (or booleans). Needed for the default baselines; also used
            to draw class-balanced test samples.
        target: output column to explain when the model returns C > 1 values per sample (class index).
        layer: a submodule of ``model``: attribute to its output activations instead of the inputs
            (``LayerIntegratedGradients``; the path runs between the layer activations of the baseline and of the
            sample). The features are then the layer's units, e.g. 1,280 latent features.
        attribute_to_layer_input: with ``layer``, attribute to the layer's input activations instead of its output.
        baselines: ``"class_means"`` (the centre of each class in input space; the default of the paper) or a tensor
            of B baselines shaped like B rows of ``inputs``.
        n_test_per_class: test samples drawn per class (without replacement, all of a smaller class); without labels,
            the total number of test samples.
        n_steps: integration steps of the integrated gradients.
        internal_batch_size: at most this many path points go through the model at once; baseline/test pairs are
            processed in chunks of ``max(1, internal_batch_size // n_steps)``, so memory does not grow with the
            number of pairs (beyond J itself).
        gamma: coverage fraction in (0, 1] of eq. ``score_thd``; at least ``min_frequency``.
        min_frequency: c_min, the minimum fraction of rows in (0, 1] in which a frequent itemset must appear.
        max_length: k_max, the longest itemset FP-Growth builds (``None``: no limit).
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

    if importance is not None:
        J = _importance_from_matrix(importance)
        frame = importance if hasattr(importance, "columns") else inputs if hasattr(inputs, "columns") else None
        names = _names(feature_names, frame, J.shape[1])
        return _select(J, names, gamma, min_frequency, max_length, pairs=None, n_skipped=0)

    n_test_per_class = V.check_int(n_test_per_class, "n_test_per_class", 1)
    n_steps = V.check_int(n_steps, "n_steps", 1)
    internal_batch_size = V.check_int(internal_batch_size, "internal_batch_size", 1)
    seed = V.check_int(seed, "seed", 0)
    if target is not None:
        target = V.check_int(target, "target", 0)
    if model is None or not callable(model):
        raise TypeError(f"Expected `model` to be a callable torch model (or pass `importance=`), but got {model!r}.")
    if layer is not None:
        if not isinstance(layer, nn.Module):
            raise TypeError(f"Expected `layer` to be a torch.nn.Module, but got {type(layer).__name__}.")
        if not isinstance(model, nn.Module) or not any(m is layer for m in model.modules()):
            raise ValueError(
                f"Expected `layer` to be a submodule of `model`, but {layer.__class__.__name__} is not among "
                "model.modules()."
            )
    X, frame_names = _to_inputs(inputs, model, allow_integer=layer is not None and not isinstance(baselines, str))
    n = X.shape[0]
    y_labels = None if labels is None else _to_labels(labels, n)
    base = _baselines(baselines, X, y_labels)
    test_rows = _test_rows(y_labels, n, n_test_per_class, seed)

    _check_differentiable(model, X[:2], layer, attribute_to_layer_input)
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
        internal_batch_size=internal_batch_size,
    )
    names = _names(feature_names, frame_names if layer is None else None, J.shape[1])
    pairs = torch.stack([pair_b.cpu(), test_rows[pair_m].cpu()], dim=1)
    return _select(J, names, gamma, min_frequency, max_length, pairs=pairs, n_skipped=int((~keep).sum()))


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
    k = min(n, max(1, math.ceil(gamma * n)))
    step = max(1, _BLOCK // n)  # column blocks bound the sort buffers of kthvalue
    out = torch.empty(d, dtype=J.dtype)
    for s in range(0, d, step):
        out[s : s + step] = torch.kthvalue(J[:, s : s + step], n - k + 1, dim=0).values
    return out


def _row_blocks(J: torch.Tensor) -> Iterator[torch.Tensor]:
    """Views of at most ``_BLOCK`` elements of J, in row order (temporary masks stay small)."""
    step = max(1, _BLOCK // max(1, J.shape[1]))
    for s in range(0, J.shape[0], step):
        yield J[s : s + step]


def _threshold_scan(J: torch.Tensor, gamma: float) -> tuple[float, int]:
    """The impact threshold j_th of eq. ``score_thd`` and the number of features reaching coverage at it.

    With ``t_i`` the coverage threshold of feature i (:func:`_coverage_thresholds`), the number of features reaching
    coverage at ``thr`` is ``#{i: t_i >= thr}``, non-increasing in ``thr``; it is exactly one for
    ``t_(2) < thr <= t_(1)`` (first and second largest ``t``). The binarisation ``J >= thr`` only changes at values
    of J, so the smallest such threshold is the smallest entry of J above ``t_(2)``: that is what a fine stepwise scan
    from below stops at. When the top two tie (``t_(1) == t_(2)``) no threshold leaves exactly one feature: the count
    drops from >= 2 straight to 0. Then j_th = ``t_(1)``, the highest threshold any feature still reaches, every tied
    feature counts, and a warning says so.
    """
    top = _coverage_thresholds(J, gamma)
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


def _frequent_itemsets(
    used: torch.Tensor, min_frequency: float, max_length: int | None, *, sparse: bool | None = None
) -> pd.DataFrame:
    """FP-Growth (mlxtend) on the boolean (N, D) matrix ``used``; itemsets hold column indices of ``used``.

    Columns used in fewer than ``min_frequency * N`` rows cannot be in a frequent itemset and are dropped before the
    DataFrame is built; a frame with more than ``_DENSE_CELLS`` cells is passed sparse (``sparse=None``: decide by
    size). Rows: longest itemset first, then highest support, then lowest indices.
    """
    import pandas as pd
    from mlxtend.frequent_patterns import fpgrowth

    n = used.shape[0]
    counts = used.sum(dim=0)
    cols = torch.nonzero(counts >= min_frequency * n).flatten()
    used_np = used[:, cols].numpy()
    # every frequent itemset is a subset of some row: bound their number by the subsets of each row (up to max_length)
    per_row, n_rows = torch.unique(torch.from_numpy(used_np).sum(dim=1), return_counts=True)
    bound = 0
    for r, c in zip(per_row.tolist(), n_rows.tolist()):
        longest = min(r, 64) if max_length is None else min(max_length, r, 64)
        bound += c * sum(math.comb(r, k) for k in range(1, longest + 1))
    if bound > _ITEMSET_WARN:
        warnings.warn(
            f"Rows use up to {max(per_row.tolist())} of the {cols.numel()} frequent features, so FP-Growth may "
            f"enumerate more than {_ITEMSET_WARN:.0e} itemsets and take very long (importance is spread over many "
            "features at j_th, or there are few rows). Set `max_length`, raise `min_frequency`, or lower `gamma`.",
            stacklevel=4,
        )
    if sparse is None:
        sparse = used_np.size > _DENSE_CELLS
    if cols.numel() == 0:
        frame = pd.DataFrame(columns=["support", "itemsets"])
    else:
        if sparse:
            from scipy.sparse import csr_matrix

            df = pd.DataFrame.sparse.from_spmatrix(csr_matrix(used_np), columns=range(cols.numel()))
        else:
            df = pd.DataFrame(used_np, columns=range(cols.numel()))
        frame = fpgrowth(df, min_support=min_frequency, use_colnames=True, max_len=max_length)
    col_list = cols.tolist()
    itemsets = [frozenset(col_list[c] for c in s) for s in frame["itemsets"]]
    support = frame["support"].to_numpy(dtype=np.float64)
    order = sorted(range(len(itemsets)), key=lambda r: (-len(itemsets[r]), -support[r], sorted(itemsets[r])))
    return pd.DataFrame(
        {
            "support": support[np.asarray(order, dtype=np.int64)],
            "itemsets": [itemsets[r] for r in order],
            "length": np.array([len(itemsets[r]) for r in order], dtype=np.int64),
        }
    )


def _select(
    J: torch.Tensor,
    names: list[str],
    gamma: float,
    min_frequency: float,
    max_length: int | None,
    *,
    pairs: torch.Tensor | None,
    n_skipped: int,
) -> FeatureSelection:
    threshold, _ = _threshold_scan(J, gamma)
    counts = sum((blk >= threshold).sum(dim=0) for blk in _row_blocks(J))
    cols = torch.nonzero(counts >= min_frequency * J.shape[0]).flatten()  # the only columns FP-Growth can use
    itemsets = _frequent_itemsets(J[:, cols] >= threshold, min_frequency, max_length)
    col_list = cols.tolist()
    itemsets["itemsets"] = [frozenset(col_list[c] for c in s) for s in itemsets["itemsets"]]
    if len(itemsets) == 0:  # cannot happen when gamma >= min_frequency; kept as a clear error
        raise ValueError(f"FP-Growth found no itemset used in a fraction min_frequency={min_frequency} of the rows.")
    itemsets["names"] = [tuple(names[i] for i in sorted(s)) for s in itemsets["itemsets"]]
    best = tuple(sorted(itemsets["itemsets"][0]))
    return FeatureSelection(
        features=best,
        names=tuple(names[i] for i in best),
        threshold=threshold,
        support=float(itemsets["support"][0]),
        importance=J,
        itemsets=itemsets,
        gamma=gamma,
        pairs=pairs,
        n_skipped=n_skipped,
    )


# ---------------------------------------------------------------------------------------------- input handling


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


def _to_labels(labels: Any, n: int) -> torch.Tensor:
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


def _check_differentiable(model: Any, x: torch.Tensor, layer: nn.Module | None, to_layer_input: bool) -> None:
    """Run two samples and check that the output carries a gradient w.r.t. the inputs (or the layer activations)."""
    handle = None
    seen = []
    if layer is None:
        x = x.detach().clone().requires_grad_(True)
    elif to_layer_input:

        def pre_hook(module: nn.Module, args: tuple) -> tuple:
            seen.append(True)
            return tuple(
                a.detach().requires_grad_(True) if torch.is_tensor(a) and a.is_floating_point() else a for a in args
            )

        handle = layer.register_forward_pre_hook(pre_hook)
    else:

        def hook(module: nn.Module, args: tuple, out: Any) -> Any:
            seen.append(True)
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
