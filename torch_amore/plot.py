"""Figures for rules on images (matplotlib is imported only when a function is called).

* :func:`plot_rule_means` — the mean image of the samples satisfying each rule (the paper's MNIST figure);
* :func:`plot_rule_attributions` — each rule's pixel attribution map over a few images (the paper's MRI figure).

Both return a ``matplotlib.figure.Figure`` and never divide by zero: an empty rule shows an empty panel, an all-zero
map a flat one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from torch_amore.rules import RuleSet


def _pyplot() -> Any:
    try:
        import matplotlib.pyplot as plt
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("torch_amore.plot needs matplotlib: pip install 'torch-amore[plot]'.") from err
    return plt


def _to_numpy(x: Any, name: str) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().to("cpu", torch.float64).numpy()
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


def plot_rule_means(
    images: Any,
    rules: Any,
    X: Any = None,
    *,
    subgroup: Any = None,
    conjunction: bool = True,
    cmap: str = "gray",
    panel_size: float = 2.4,
) -> Any:
    """Mean image of the samples that satisfy each rule of a rule set (and all of them together).

    Args:
        images: (N, H, W), (N, C, H, W) or (N, H, W, C) images aligned with the rows of ``X``.
        rules: a :class:`~torch_amore.RuleSet`, or a :class:`~torch_amore.RegionalExplanation` (its best rule set,
            features matrix and subgroup are used).
        X: the (N, D) features the rules were extracted on (e.g. latent activations).
        subgroup: optional boolean (N,) mask; adds a first panel with the subgroup's mean image.
        conjunction: add a panel for the samples satisfying all rules.
        cmap: colormap for single-channel images.
        panel_size: inches per panel.

    Returns:
        The matplotlib figure.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> X = torch.tensor([[0.0], [1.0], [2.0]])
        >>> images = torch.arange(12.0).reshape(3, 2, 2)
        >>> fig = plot_rule_means(images, RuleSet((Rule(0, "z_0", low=0.5),), 2, 1.0, 1.0), X)
        >>> [ax.get_title() for ax in fig.axes]
        ['z_0 >= 0.5\\nn = 2']
    """
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
    imgs = _as_hw(_to_numpy(images, "images"))
    n = imgs.shape[0]
    if X.shape[0] != n:
        raise ValueError(f"Expected `X` to have one row per image ({n}), but got {X.shape[0]} rows.")
    panels: list[tuple[str, np.ndarray]] = []
    if subgroup is not None:
        mask = _to_numpy(subgroup, "subgroup").astype(bool).reshape(-1)
        if mask.shape[0] != n:
            raise ValueError(f"Expected `subgroup` to have one entry per image ({n}), but got {mask.shape[0]}.")
        panels.append((rules.target_name, mask))
    for rule in rules.rules:
        panels.append((rule.format(), rule.mask(X).cpu().numpy()))
    if conjunction and len(rules.rules) > 1:
        panels.append(("all rules", rules.mask(X).cpu().numpy()))
    plt = _pyplot()
    fig, axes = plt.subplots(
        1, len(panels), figsize=(panel_size * len(panels), panel_size * 1.2), squeeze=False, layout="constrained"
    )
    for ax, (title, mask) in zip(axes[0], panels):
        count = int(mask.sum())
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_title(f"{title}\nn = {count}", fontsize=9)
        if count == 0:
            ax.imshow(np.zeros(imgs.shape[1:3]), cmap=cmap, vmin=0, vmax=1)
            ax.text(0.5, 0.5, "no samples", ha="center", va="center", transform=ax.transAxes, color="0.5")
            continue
        mean = imgs[mask].mean(axis=0)
        ax.imshow(mean, cmap=cmap if mean.ndim == 2 else None)
    return fig


def plot_rule_attributions(
    images: Any,
    attributions: Any,
    *,
    titles: Sequence[str] | None = None,
    row_labels: Sequence[str] | None = None,
    absolute: bool = False,
    cmap: str | None = None,
    alpha: float = 0.65,
    image_cmap: str = "gray",
    panel_size: float = 2.4,
) -> Any:
    """Each rule's attribution map over each image: rows are images, columns the image then one map per rule.

    Args:
        images: (N, H, W), (N, C, H, W) or (N, H, W, C) images.
        attributions: (R, N, ...) maps, e.g. from :meth:`torch_amore.RuleAttribution.attribute` (channels summed),
            or (N, ...) for a single rule.
        titles: one column title per rule (e.g. ``[r.format() for r in rule_set.rules]``).
        row_labels: one label per image (e.g. its true class).
        absolute: show ``|attribution|`` (sequential colormap) instead of signed values (diverging, centred at 0).
        cmap: colormap of the maps (default ``"RdBu_r"`` signed, ``"inferno"`` absolute).
        alpha: largest opacity of the maps over the images (reached where ``|map|`` peaks; weak values fade out).
        image_cmap: colormap of single-channel images.
        panel_size: inches per panel.

    Returns:
        The matplotlib figure. Each map is scaled by its own largest magnitude (an all-zero map stays flat).

    Example:
        >>> import torch
        >>> images = torch.rand(2, 1, 4, 4)
        >>> fig = plot_rule_attributions(images, torch.zeros(3, 2, 1, 4, 4), titles=["r1", "r2", "r3"])
        >>> [ax.get_title() for ax in fig.axes[:4]]  # first row: the image, then one map per rule
        ['image', 'r1', 'r2', 'r3']
    """
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
    n_rules = maps.shape[0]
    if titles is not None and len(titles) != n_rules:
        raise ValueError(f"Expected {n_rules} `titles` (one per rule), but got {len(titles)}.")
    if row_labels is not None and len(row_labels) != n:
        raise ValueError(f"Expected {n} `row_labels` (one per image), but got {len(row_labels)}.")
    if absolute:
        maps = np.abs(maps)
    cmap = cmap or ("inferno" if absolute else "RdBu_r")
    plt = _pyplot()
    fig, axes = plt.subplots(
        n, n_rules + 1, figsize=(panel_size * (n_rules + 1) + 0.8, panel_size * n), squeeze=False, layout="constrained"
    )
    mappable = None
    for i in range(n):
        for j in range(n_rules + 1):
            ax = axes[i, j]
            ax.set_xticks([])
            ax.set_yticks([])
            ax.imshow(imgs[i], cmap=image_cmap if imgs[i].ndim == 2 else None)
            if j == 0:
                ax.set_title("image" if i == 0 else "", fontsize=9)
                if row_labels is not None:
                    ax.set_ylabel(str(row_labels[i]), fontsize=9)
                continue
            m = maps[j - 1, i]
            peak = float(np.abs(m).max())
            scaled = m / peak if peak > 0 else np.zeros_like(m)
            vmin = 0.0 if absolute else -1.0
            # opacity grows with the magnitude, so the image stays visible where the unit does not look
            mappable = ax.imshow(scaled, cmap=cmap, vmin=vmin, vmax=1.0, alpha=alpha * np.sqrt(np.abs(scaled)))
            if i == 0:
                ax.set_title(titles[j - 1] if titles is not None else f"rule {j}", fontsize=9)
    if mappable is not None:
        cbar = fig.colorbar(mappable, ax=axes.ravel().tolist(), shrink=0.8, pad=0.02)
        label = "|attribution| (scaled per map)" if absolute else "attribution (scaled per map): red raises the unit"
        cbar.set_label(label, fontsize=8)
        cbar.solids.set_alpha(1.0)
    return fig
