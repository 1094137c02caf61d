"""Figures for rules (matplotlib is imported only when a function is called).

* :func:`plot_rule` — a tabular rule set: for each condition, the feature's distribution in the subgroup and in the
  rest (histogram, or bars for few values) in the rule's raw units, the condition's interval shaded;
* :func:`plot_rule_means` — the mean image of the samples satisfying each rule (the paper's MNIST figure), one
  intensity scale for all panels;
* :func:`plot_rule_attributions` — each rule's pixel attribution map over a few images (the paper's MRI figure), one
  symmetric colour scale for all panels, signed "towards satisfying the rule".

Each returns a ``matplotlib.figure.Figure`` (laid out with ``constrained_layout``: nothing is clipped when saved) and
never divides by zero: an empty rule shows an empty panel, an all-zero map a flat one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.rules.rules import Rule, RuleSet

SUBGROUP_COLOR = "tab:orange"
REST_COLOR = "tab:blue"
RULE_COLOR = "tab:green"


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("torch_amore.report.plot needs matplotlib: pip install 'torch-amore[plot]'.") from err
    return plt


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float64).numpy()
    if hasattr(x, "to_numpy"):
        x = x.to_numpy(dtype=np.float64, na_value=np.nan)
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        raise ValueError(f"Expected a non-empty `{name}`, but got shape {x.shape}.")
    return x


def _as_hw(images: np.ndarray, name: str = "images") -> np.ndarray:
    """(N, H, W) or (N, H, W, 3) from (N, H, W), (N, 1|3, H, W) or (N, H, W, 1|3); (N, D) with square D works too."""
    if images.ndim == 2:
        side = int(round(images.shape[1] ** 0.5))
        if side * side != images.shape[1]:
            raise ValueError(f"Expected `{name}` of shape (N, H, W) or (N, C, H, W), but got {images.shape}.")
        return images.reshape(-1, side, side)
    if images.ndim == 3:
        return images
    if images.ndim == 4:
        if images.shape[1] in (1, 3) and images.shape[-1] not in (1, 3):
            images = np.moveaxis(images, 1, -1)
        if images.shape[-1] == 1:
            return images[..., 0]
        if images.shape[-1] == 3:
            lo, hi = images.min(), images.max()
            return (images - lo) / (hi - lo) if hi > lo else np.zeros_like(images)
    raise ValueError(f"Expected `{name}` of shape (N, H, W) or (N, C, H, W) with C in (1, 3), got {images.shape}.")


def _map_hw(attr: np.ndarray) -> np.ndarray:
    """One attribution map per sample as (N, H, W): channels summed."""
    if attr.ndim == 4:
        axis = 1 if attr.shape[1] in (1, 3) and attr.shape[-1] not in (1, 3) else -1
        return attr.sum(axis=axis)
    return _as_hw(attr, "attributions")


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
    mask = _to_numpy(subgroup, "subgroup").reshape(-1) != 0
    if mask.shape[0] != n:
        raise ValueError(f"Expected `subgroup` to have one entry per {what} ({n}), but got {mask.shape[0]}.")
    return mask


def _axes_grid(axes: Any, rows: int, cols: int, figsize: tuple[float, float]) -> tuple[Any, np.ndarray]:
    """A (rows, cols) array of axes: new ones in a constrained-layout figure, or the user's ``axes``."""
    if axes is None:
        fig, grid = _pyplot().subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained")
        return fig, grid
    grid = np.asarray(axes, dtype=object).reshape(-1)
    if grid.size != rows * cols:
        raise ValueError(f"Expected `axes` to hold {rows * cols} axes ({rows} x {cols}), but got {grid.size}.")
    return grid[0].figure, grid.reshape(rows, cols)


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
        chosen = np.array([rule.contains((v - rule.offset) / rule.scale) for v in values])
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

    Each panel shows one condition's feature in raw units (the rules' ``scale``/``offset``) as the share of the
    subgroup's rows (orange outline) and of the other rows (blue) per bin; a feature with at most ``max_bars`` distinct
    values (or a categorical rule) is drawn as bars per value. The values the condition admits are shaded green.
    The title gives support, confidence and fitness of the whole rule set, measured on ``X`` and ``subgroup``.

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
        ('age >= 40', 'IF age >= 40 THEN predicted sick\\nsupport 2, confidence 1.000, fitness 1.000')
    """
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
    for ax, rule in zip(grid[0], rules.rules):
        col = _to_numpy(X.iloc[:, rule.feature] if hasattr(X, "iloc") else X[:, rule.feature], "X")
        _plot_condition(ax, rule, col, sub, bins=bins, max_bars=max_bars)
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
        f"fitness {metrics.fitness:.3f}",
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

    All panels share one intensity scale (the range of the mean images shown, with a colorbar), so a grey level means
    the same in every panel. Each panel's title gives the rule, the number of samples ``n`` and, when the subgroup is
    known, the confidence (share of those samples in the subgroup).

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


def _direction(rule: Rule) -> float:
    """-1 for an upper-bound condition (``z < b``: lowering the unit satisfies it), +1 otherwise."""
    return -1.0 if not rule.is_categorical and rule.low == -math.inf else 1.0


def _direction_note(rule: Rule) -> str:
    return f"red lowers {rule.name}" if _direction(rule) < 0 else f"red raises {rule.name}"


def plot_rule_attributions(
    images: Any,
    attributions: Any,
    *,
    rules: Any = None,
    features: Any = None,
    titles: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    target_name: str | None = None,
    absolute: bool = False,
    scale: str = "shared",
    cmap: str | None = None,
    outline: bool = True,
    image_cmap: str = "gray",
    panel_size: float = 2.0,
    axes: Any = None,
) -> Any:
    """Each rule's pixel attribution map over each image: rows are images, columns the image then one map per rule.

    Maps are drawn opaque with a faint contour of the image on top, so every colour is the colorbar's colour (no
    blending). With ``rules``, signs mean "towards satisfying the rule": a map is flipped for an upper-bound
    condition (``z < b``), where pixels that *lower* the unit help (red = lowers the unit); for ``z >= a`` and
    two-sided intervals red raises the unit. Each column's title says which. With ``features`` each panel's title
    shows the unit's value (raw units) and whether it satisfies the condition.

    Args:
        images: (N, H, W), (N, C, H, W) or (N, H, W, C) images.
        attributions: (R, N, ...) maps, e.g. from :meth:`torch_amore.RuleAttribution.attribute` (channels summed),
            or (N, ...) for a single rule.
        rules: the R rules (a :class:`~torch_amore.RuleSet` or a sequence of :class:`~torch_amore.Rule`): titles,
            signs and thresholds; without them maps are shown as given ("raises the unit").
        features: the (N, D) features of these images (e.g. ``explainer.features_matrix(images)``): each panel's
            title shows the unit's value against the rule; needs ``rules``.
        titles: one column title per rule (default: the rules' text).
        row_labels: one label per image (e.g. ``"label 7, predicted 7"``); default ``"image i"``.
        target_name: what the rules explain, named in the figure title (default: a RuleSet's ``target_name``).
        absolute: show ``|attribution|`` (sequential colormap from 0) instead of signed values.
        scale: ``"shared"`` (one symmetric colour scale for all panels, in attribution units) or ``"panel"`` (each
            panel divided by its own largest magnitude: shapes comparable, sizes not).
        cmap: colormap of the maps (default ``"RdBu_r"`` signed, ``"magma"`` absolute).
        outline: draw the image's contours over the maps.
        image_cmap: colormap of single-channel images.
        panel_size: inches per panel.
        axes: an (N, R + 1) grid of matplotlib axes to draw on (default: a new figure).

    Returns:
        The matplotlib figure.

    Example:
        >>> import torch
        >>> from torch_amore import Rule
        >>> images = torch.rand(2, 1, 4, 4)
        >>> rules = [Rule(0, "z_0", low=1.0), Rule(1, "z_1", high=2.0)]
        >>> fig = plot_rule_attributions(images, torch.ones(2, 2, 1, 4, 4), rules=rules,
        ...                              features=torch.tensor([[1.5, 3.0], [0.5, 1.0]]))
        >>> [ax.get_title() for ax in fig.axes[:3]]  # first row: the image, then one map per rule
        ['image', 'z_0 >= 1\\n(red raises z_0)\\nz_0 = 1.5 (in)', 'z_1 < 2\\n(red lowers z_1)\\nz_1 = 3 (out)']
        >>> float(fig.axes[2].images[0].get_array().max())  # flipped: lowering z_1 satisfies z_1 < 2
        -1.0
    """
    imgs, maps = _attribution_maps(images, attributions, scale)
    n, n_rules = imgs.shape[0], maps.shape[0]
    if target_name is None and isinstance(rules, RuleSet):
        target_name = rules.target_name
    rule_list = _rule_list(rules, n_rules)
    values = _unit_values(features, rule_list, n)
    titles = _column_titles(titles, row_labels, rule_list, n_rules, n)
    maps, vmin, vmax = _scaled_maps(maps, rule_list, absolute=absolute, scale=scale)
    cmap = cmap or ("magma" if absolute else "RdBu_r")
    fig, grid = _axes_grid(axes, n, n_rules + 1, (panel_size * (n_rules + 1) + 1.2, panel_size * n + 0.7))
    mappable = None
    for i in range(n):
        _draw_image_panel(grid[i, 0], imgs[i], i, row_labels, image_cmap)
        for j in range(1, n_rules + 1):
            ax = grid[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            mappable = ax.imshow(maps[j - 1, i], cmap=cmap, vmin=vmin, vmax=vmax)
            if outline:
                _outline(ax, imgs[i])
            ax.set_title("\n".join(_panel_lines(i, j, titles, values, rule_list)), fontsize=8)
    if mappable is not None:
        cbar = fig.colorbar(mappable, ax=list(grid.ravel()), shrink=0.8, pad=0.02)
        cbar.set_label(_colorbar_label(rule_list is not None, absolute, scale), fontsize=8)
    what = "Pixel attributions of each rule's unit" + (f" (explaining: {target_name})" if target_name else "")
    if axes is None:
        fig.suptitle(what, fontsize=10)
    return fig


def _attribution_maps(images: Any, attributions: Any, scale: str) -> tuple[np.ndarray, np.ndarray]:
    """The images as (N, H, W[, C]) and the maps as (R, N, H, W), their shapes and ``scale`` checked."""
    imgs = _as_hw(_to_numpy(images, "images"))
    attr = _to_numpy(attributions, "attributions")
    n = imgs.shape[0]
    if attr.ndim == np.ndim(images):  # (N, ...): a single rule
        attr = attr[None]
    if attr.shape[1] != n:
        raise ValueError(f"Expected `attributions` of shape (R, {n}, ...) for {n} images, but got {attr.shape}.")
    maps = np.stack([_map_hw(a) for a in attr])  # (R, N, H, W)
    if maps.shape[2:4] != imgs.shape[1:3]:
        raise ValueError(f"Expected maps of the images' size {imgs.shape[1:3]}, but got {maps.shape[2:4]}.")
    if scale not in ("shared", "panel"):
        raise ValueError(f"Expected `scale` to be 'shared' or 'panel', but got {scale!r}.")
    return imgs, maps


def _column_titles(
    titles: Sequence[str] | None,
    row_labels: Sequence[str] | None,
    rule_list: list[Rule] | None,
    n_rules: int,
    n: int,
) -> list[str] | None:
    """One title per rule column (the given ones or the rules' text, with the sign's note), the counts checked."""
    if titles is not None and len(titles) != n_rules:
        raise ValueError(f"Expected {n_rules} `titles` (one per rule), but got {len(titles)}.")
    if row_labels is not None and len(row_labels) != n:
        raise ValueError(f"Expected {n} `row_labels` (one per image), but got {len(row_labels)}.")
    titles = list(titles) if titles is not None else [r.format() for r in rule_list] if rule_list else None
    if rule_list is not None:
        titles = [f"{t}\n({_direction_note(r)})" for t, r in zip(titles, rule_list)]
    return titles


def _scaled_maps(
    maps: np.ndarray, rule_list: list[Rule] | None, *, absolute: bool, scale: str
) -> tuple[np.ndarray, float, float]:
    """The maps signed towards satisfying each rule, made absolute or divided per panel, and the colour range."""
    if rule_list is not None:
        maps = maps * np.array([_direction(r) for r in rule_list])[:, None, None, None]
    if absolute:
        maps = np.abs(maps)
    if scale == "panel":
        peaks = np.abs(maps).max(axis=(2, 3), keepdims=True)
        maps = np.divide(maps, peaks, out=np.zeros_like(maps), where=peaks > 0)
    top = float(np.abs(maps).max()) or 1.0
    return maps, (0.0 if absolute else -top), top


def _draw_image_panel(ax: Any, image: np.ndarray, i: int, row_labels: Sequence[str] | None, image_cmap: str) -> None:
    """The first column: image ``i`` itself, labelled."""
    ax.set_xticks([])
    ax.set_yticks([])
    ax.imshow(image, cmap=image_cmap if image.ndim == 2 else None)
    ax.set_title("image" if i == 0 else "", fontsize=8)
    ax.set_ylabel(str(row_labels[i]) if row_labels is not None else f"image {i + 1}", fontsize=8)


def _panel_lines(
    i: int, j: int, titles: list[str] | None, values: np.ndarray | None, rule_list: list[Rule] | None
) -> list[str]:
    """The title lines of the panel of image ``i`` and rule column ``j``: the column's title on the first row, and
    the unit's value against the rule when the features are given."""
    lines = [titles[j - 1] if titles is not None else f"rule {j}"] if i == 0 else []
    if values is not None:
        rule = rule_list[j - 1]
        v = values[i, j - 1]
        inside = rule.contains(_model_units(rule, v))
        lines.append(f"{rule.name} = {v:.3g} ({'in' if inside else 'out'})")
    return lines


def _rule_list(rules: Any, n_rules: int) -> list[Rule] | None:
    if rules is None:
        return None
    if isinstance(rules, RuleSet):
        rules = rules.rules
    if isinstance(rules, Rule):
        rules = [rules]
    rules = list(rules)
    if not all(isinstance(r, Rule) for r in rules):
        raise TypeError("Expected `rules` to be a RuleSet or a sequence of Rule objects.")
    if len(rules) != n_rules:
        raise ValueError(f"Expected {n_rules} `rules` (one per attribution map), but got {len(rules)}.")
    return rules


def _unit_values(features: Any, rules: list[Rule] | None, n: int) -> np.ndarray | None:
    """(N, R) values of the rules' units in raw units, from the (N, D) feature matrix."""
    if features is None:
        return None
    if rules is None:
        raise ValueError("Expected `rules` with `features` (the unit values are shown against the rules' thresholds).")
    vals = _to_numpy(features, "features")
    need = max(r.feature for r in rules) + 1
    if vals.ndim != 2 or vals.shape[0] != n or vals.shape[1] < need:
        raise ValueError(f"Expected `features` of shape ({n}, D) with D >= {need}, but got {vals.shape}.")
    out = vals[:, [r.feature for r in rules]]
    return out * np.array([r.scale for r in rules]) + np.array([r.offset for r in rules])


def _model_units(rule: Rule, raw: float) -> float:
    return (raw - rule.offset) / rule.scale


def _outline(ax: Any, image: np.ndarray) -> None:
    """Faint contours of the image (grey lines: they do not change the heat map's colours)."""
    grey = image.mean(axis=-1) if image.ndim == 3 else image
    lo, hi = float(np.nanmin(grey)), float(np.nanmax(grey))
    if hi > lo:
        ax.contour(
            grey, levels=[lo + 0.35 * (hi - lo), lo + 0.65 * (hi - lo)], colors="0.25", linewidths=0.5, alpha=0.7
        )


def _colorbar_label(signed_by_rule: bool, absolute: bool, scale: str) -> str:
    unit = " (each panel / its peak)" if scale == "panel" else ""
    if absolute:
        return f"|attribution|{unit}"
    if signed_by_rule:
        return f"attribution towards satisfying the rule{unit}\n(red helps; sign flipped for '<' conditions)"
    return f"attribution{unit}: red raises the unit"
