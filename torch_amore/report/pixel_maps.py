"""Pixel attribution maps of latent rules (:func:`plot_rule_attributions`, re-exported by
:mod:`torch_amore.report.plot`): each rule's map over each image, signed towards satisfying the rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet


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


def _axes_grid(axes: Any, rows: int, cols: int, figsize: tuple[float, float]) -> tuple[Any, np.ndarray]:
    """A (rows, cols) array of axes: new ones in a constrained-layout figure, or the user's ``axes``."""
    if axes is None:
        fig, grid = _pyplot().subplots(rows, cols, figsize=figsize, squeeze=False, layout="constrained")
        return fig, grid
    grid = np.asarray(axes, dtype=object).reshape(-1)
    if grid.size != rows * cols:
        raise ValueError(f"Expected `axes` to hold {rows * cols} axes ({rows} x {cols}), but got {grid.size}.")
    return grid[0].figure, grid.reshape(rows, cols)


def _direction(rule: Rule) -> float:
    """-1 for an upper-bound condition (``z < b``: lowering the unit satisfies it), +1 otherwise."""
    return -1.0 if not rule.is_categorical and rule.low == -math.inf else 1.0


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

    Maps are drawn opaque under a faint contour of the image. With ``rules``, signs mean "towards satisfying the
    rule": a map is flipped for an upper-bound condition (``z < b``), so red lowers the unit there and raises it
    elsewhere, as each column's title says.

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
    titles: Sequence[str] | None, row_labels: Sequence[str] | None, rule_list: list[Rule] | None, n_rules: int, n: int
) -> list[str] | None:
    """One title per rule column (the given ones or the rules' text, with the sign's note), the counts checked."""
    if titles is not None and len(titles) != n_rules:
        raise ValueError(f"Expected {n_rules} `titles` (one per rule), but got {len(titles)}.")
    if row_labels is not None and len(row_labels) != n:
        raise ValueError(f"Expected {n} `row_labels` (one per image), but got {len(row_labels)}.")
    titles = list(titles) if titles is not None else [r.format() for r in rule_list] if rule_list else None
    if rule_list is not None:
        titles = [
            f"{t}\n(red {'lowers' if _direction(r) < 0 else 'raises'} {r.name})" for t, r in zip(titles, rule_list)
        ]
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
        inside = rule.contains((v - rule.offset) / rule.scale)  # the raw value in model units
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
