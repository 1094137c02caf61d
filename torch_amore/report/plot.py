"""Figures for rules (:func:`plot_rule`, :func:`plot_rule_means`, :func:`plot_rule_attributions`), each a
``matplotlib.figure.Figure`` laid out with ``constrained_layout``; matplotlib is imported only when one is drawn.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from torch_amore.data.arguments import check_int
from torch_amore.data.validation import to_mask
from torch_amore.report.pixel_maps import _as_hw, _axes_grid, _to_numpy, plot_rule_attributions
from torch_amore.rules.rule import Rule, frame_position
from torch_amore.rules.rules import RuleSet

__all__ = ["plot_rule", "plot_rule_attributions", "plot_rule_means"]

SUBGROUP_COLOR = "tab:orange"
REST_COLOR = "tab:blue"
RULE_COLOR = "tab:green"


def _unpack(rules: Any, X: Any, subgroup: Any) -> tuple[RuleSet, Any, Any]:
    """A RuleSet and its data from a RuleSet or a RegionalExplanation (its best rule set, features, subgroup)."""
    if hasattr(rules, "rule_sets") and hasattr(rules, "features_matrix"):
        explanation = rules
        if explanation.best is None:
            raise ValueError("Expected an explanation with at least one rule set, but it has none.")
        rules = explanation.best
        X = explanation.features_matrix if X is None else X
        subgroup = explanation.subgroup if subgroup is None else subgroup
    if not isinstance(rules, RuleSet):
        raise TypeError(f"Expected `rules` to be a RuleSet or a RegionalExplanation, but got {type(rules).__name__}.")
    if X is None:
        raise ValueError("Expected `X`, the (N, D) features the rules were extracted on, but got None.")
    return rules, X, subgroup


def _mask(subgroup: Any, n: int, what: str) -> np.ndarray:
    """``subgroup`` as a boolean (n,) array: booleans or 0/1 numbers, as ``extract_rules`` takes its target (not
    probabilities or NaN, which ``!= 0`` would read as members)."""
    values = _to_numpy(subgroup, "subgroup").reshape(-1)
    if values.shape[0] != n:
        raise ValueError(f"Expected `subgroup` to have one entry per {what} ({n}), but got {values.shape[0]}.")
    return to_mask(values, n, "subgroup").numpy()


# ------------------------------------------------------------------------------------------------------- tabular
def _raw_interval(rule: Rule) -> tuple[float, float]:
    """The rule's interval in raw units (``raw = x * scale + offset``; a negative scale swaps the ends)."""
    lo, hi = rule.low * rule.scale + rule.offset, rule.high * rule.scale + rule.offset
    if rule.low == -math.inf:
        lo = -math.inf if rule.scale > 0 else math.inf
    if rule.high == math.inf:
        hi = math.inf if rule.scale > 0 else -math.inf
    return (lo, hi) if lo <= hi else (hi, lo)


def _plot_condition(ax: Any, rule: Rule, col: np.ndarray, sub: np.ndarray, *, bins: int, max_bars: int) -> None:
    """One panel: the feature in raw units, subgroup vs rest as shares of each group, the rule's values shaded."""
    ok = ~np.isnan(col)
    raw = col[ok] * rule.scale + rule.offset
    in_sub, rest = raw[sub[ok]], raw[~sub[ok]]
    w_sub = np.full(in_sub.shape, 1.0 / max(1, in_sub.size))
    w_rest = np.full(rest.shape, 1.0 / max(1, rest.size))
    values = np.unique(raw)
    if rule.is_categorical or values.size <= max_bars:
        share_sub = np.array([(in_sub == v).sum() for v in values]) / max(1, in_sub.size)
        share_rest = np.array([(rest == v).sum() for v in values]) / max(1, rest.size)
        pos = np.arange(values.size)
        chosen = np.array([rule.contains((v - rule.offset) / rule.scale) for v in values], dtype=bool)
        for p in pos[chosen]:
            ax.axvspan(p - 0.5, p + 0.5, color=RULE_COLOR, alpha=0.15, linewidth=0)
        ax.bar(pos + 0.2, share_rest, width=0.4, color=REST_COLOR, alpha=0.45)
        ax.bar(pos - 0.2, share_sub, width=0.4, facecolor="none", edgecolor=SUBGROUP_COLOR, linewidth=1.8)
        ax.set_xticks(pos, [f"{v:.4g}" for v in values], fontsize=8, rotation=90 if values.size > 6 else 0)
        ax.set_xlim(-0.6, values.size - 0.4)
    else:
        edges = np.histogram_bin_edges(raw, bins=bins)
        ax.hist(rest, bins=edges, weights=w_rest, color=REST_COLOR, alpha=0.45)
        ax.hist(in_sub, bins=edges, weights=w_sub, histtype="step", color=SUBGROUP_COLOR, linewidth=1.8)
        lo, hi = _raw_interval(rule)
        ax.axvspan(max(lo, edges[0]), min(hi, edges[-1]), color=RULE_COLOR, alpha=0.15, linewidth=0)
        for bound in (lo, hi):
            if math.isfinite(bound):
                ax.axvline(bound, color=RULE_COLOR, linewidth=1.2)
        ax.set_xlim(edges[0], edges[-1])
    ax.set_title(rule.format(), fontsize=9)
    ax.set_xlabel(rule.name, fontsize=8)
    ax.tick_params(labelsize=8)


def plot_rule(
    rules: Any,
    X: Any = None,
    subgroup: Any = None,
    *,
    axes: Any = None,
    bins: int = 30,
    max_bars: int = 12,
    panel_size: tuple[float, float] = (3.0, 2.6),
) -> Any:
    """A tabular rule set by eye: per condition, the feature in the subgroup and in the rest, the interval shaded.

    Each panel shows one condition's feature in raw units as the share of the subgroup's rows (orange outline) and
    of the other rows (blue) per bin or value, the values it admits shaded green; the title gives the rule set's
    support, confidence and fitness on ``X`` and ``subgroup`` (of an explanation: on all its rows, the held-out ones
    included where its search held rows out), and on how many rows.

    Args:
        rules: a :class:`~torch_amore.RuleSet`, or a :class:`~torch_amore.RegionalExplanation` (its best rule set,
            features matrix and subgroup are used).
        X: the (N, D) features (tensor, array or DataFrame) the rules are measured on.
        subgroup: boolean (N,) mask of the subgroup.
        axes: one matplotlib axes per condition to draw on (default: a new figure).
        bins: histogram bins of a continuous feature.
        max_bars: features with at most this many distinct values are drawn as bars.
        panel_size: (width, height) in inches per panel.

    Returns:
        The matplotlib figure.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> X = torch.tensor([[20.0, 0.0], [35.0, 1.0], [50.0, 1.0], [65.0, 0.0]])
        >>> subgroup = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "age", low=40.0)], X, subgroup, target_name="predicted sick")
        >>> fig = plot_rule(rs, X, subgroup)
        >>> fig.axes[0].get_title(), fig.get_suptitle()
        ('age >= 40', 'IF age >= 40 THEN predicted sick\\nsupport 2, confidence 1.000, fitness 1.000 on 4 rows')
    """
    bins, max_bars = check_int(bins, "bins", 1), check_int(max_bars, "max_bars", 0)  # before anything is drawn
    rules, X, subgroup = _unpack(rules, X, subgroup)
    if subgroup is None:
        raise ValueError("Expected `subgroup`, a boolean (N,) mask, but got None.")
    if not rules.rules:
        raise ValueError("Expected a rule set with at least one condition, but it has none.")
    n = X.shape[0]
    sub = _mask(subgroup, n, "row of X")
    metrics = rules.evaluate(X, torch.from_numpy(sub))
    n_rules = len(rules.rules)
    fig, grid = _axes_grid(axes, 1, n_rules, (max(6.0, panel_size[0] * n_rules), panel_size[1] + 0.9))
    try:
        for ax, rule in zip(grid[0], rules.rules):
            at = frame_position(X, rule.feature, rule.name) if hasattr(X, "columns") else rule.feature  # by its name
            col = _to_numpy(X.iloc[:, at] if hasattr(X, "iloc") else X[:, at], "X")
            _plot_condition(ax, rule, col, sub, bins=bins, max_bars=max_bars)
    except Exception:
        if axes is None:  # the figure made here is not left open
            import matplotlib.pyplot as plt

            plt.close(fig)
        raise
    grid[0, 0].set_ylabel("share of group", fontsize=8)
    from matplotlib.patches import Patch

    handles = [
        Patch(
            facecolor="none", edgecolor=SUBGROUP_COLOR, linewidth=1.8, label=f"{rules.target_name} ({int(sub.sum())})"
        ),
        Patch(facecolor=REST_COLOR, alpha=0.45, label=f"rest ({int((~sub).sum())})"),
        Patch(facecolor=RULE_COLOR, alpha=0.15, label="rule"),
    ]
    if axes is None:
        fig.legend(handles=handles, fontsize=8, frameon=False, loc="outside lower center", ncols=3)
    else:
        grid[0, -1].legend(handles=handles, fontsize=7, frameon=False, loc="best")
    cond = " AND ".join(r.format() for r in rules.rules)
    fig.suptitle(
        f"IF {cond} THEN {rules.target_name}\nsupport {metrics.support}, confidence {metrics.confidence:.3f}, "
        f"fitness {metrics.fitness:.3f} on {n} rows",
        fontsize=10,
    )
    return fig


# -------------------------------------------------------------------------------------------------------- images
def plot_rule_means(
    images: Any,
    rules: Any,
    X: Any = None,
    *,
    subgroup: Any = None,
    conjunction: bool = True,
    cmap: str = "gray",
    panel_size: float = 2.2,
    axes: Any = None,
) -> Any:
    """Mean image of the samples that satisfy each rule of a rule set (and all of them together).

    All panels share one intensity scale (with a colorbar); each title gives the rule, the number of samples ``n`` and,
    when the subgroup is known, the confidence.

    Args:
        images: (N, H, W), (N, C, H, W) or (N, H, W, C) images aligned with the rows of ``X``.
        rules: a :class:`~torch_amore.RuleSet`, or a :class:`~torch_amore.RegionalExplanation` (its best rule set,
            features matrix and subgroup are used).
        X: the (N, D) features the rules were extracted on (e.g. latent activations).
        subgroup: optional boolean (N,) mask; adds a first panel with the subgroup's mean image.
        conjunction: add a panel for the samples satisfying all rules.
        cmap: colormap for single-channel images.
        panel_size: inches per panel.
        axes: one matplotlib axes per panel to draw on (default: a new figure).

    Returns:
        The matplotlib figure.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> X = torch.tensor([[0.0], [1.0], [2.0]])
        >>> images = torch.arange(12.0).reshape(3, 2, 2)
        >>> fig = plot_rule_means(images, RuleSet((Rule(0, "z_0", low=0.5),), 2, 1.0, 1.0), X)
        >>> fig.axes[0].get_title()
        'z_0 >= 0.5\\nn = 2'
    """
    rules, X, subgroup = _unpack(rules, X, subgroup)
    imgs = _as_hw(_to_numpy(images, "images"))
    n = imgs.shape[0]
    if X.shape[0] != n:
        raise ValueError(f"Expected `X` to have one row per image ({n}), but got {X.shape[0]} rows.")
    sub = None if subgroup is None else _mask(subgroup, n, "image")
    panels: list[tuple[str, np.ndarray]] = []
    if sub is not None:
        panels.append((f"subgroup: {rules.target_name}", sub))
    for rule in rules.rules:
        panels.append((rule.format(), rule.mask(X).cpu().numpy()))
    if conjunction and len(rules.rules) > 1:
        panels.append(("all rules", rules.mask(X).cpu().numpy()))
    means = [imgs[m].mean(axis=0) if m.any() else None for _, m in panels]
    shown = [m for m in means if m is not None]
    vmin = min((float(m.min()) for m in shown), default=0.0)
    vmax = max((float(m.max()) for m in shown), default=1.0)
    vmax = vmax if vmax > vmin else vmin + 1.0
    fig, grid = _axes_grid(axes, 1, len(panels), (panel_size * len(panels) + 0.9, panel_size * 1.35))
    mappable = None
    for ax, (title, mask), mean in zip(grid[0], panels, means):
        count = int(mask.sum())
        ax.set_xticks([])
        ax.set_yticks([])
        text = f"{title}\nn = {count}"
        if sub is not None and count and not np.array_equal(mask, sub):
            text += f", confidence {float(sub[mask].mean()):.2f}"
        ax.set_title(text, fontsize=8)
        if mean is None:
            ax.imshow(np.full(imgs.shape[1:3], np.nan), cmap=cmap, vmin=vmin, vmax=vmax)
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes, color="0.5")
            continue
        im = ax.imshow(mean, cmap=cmap if mean.ndim == 2 else None, vmin=vmin, vmax=vmax)
        mappable = im if mean.ndim == 2 else mappable
    if mappable is not None:
        fig.colorbar(mappable, ax=list(grid[0]), shrink=0.8, pad=0.02).set_label("mean intensity", fontsize=8)
    if axes is None:
        fig.suptitle(f"Mean image of the samples satisfying each rule (explaining: {rules.target_name})", fontsize=10)
    return fig
