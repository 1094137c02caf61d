"""torch_amore.plot: mean images per rule and attribution maps per rule (all-zero maps, empty rules)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from torch_amore import RegionalExplanation, Rule, RuleSet  # noqa: E402
from torch_amore.plot import plot_rule_attributions, plot_rule_means  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(50, 3, generator=g)
    images = torch.rand(50, 1, 5, 4, generator=g)
    rules = RuleSet((Rule(0, "z_0", low=0.5), Rule(2, "z_2", high=0.3)), 0, 0.0, 0.0, target_name="predicted 7")
    return X, images, rules


def test_mean_images_per_rule_and_conjunction():
    X, images, rules = _data()
    subgroup = X[:, 1] > 0.5
    fig = plot_rule_means(images, rules, X, subgroup=subgroup)
    masks = [subgroup, X[:, 0] >= 0.5, X[:, 2] < 0.3, (X[:, 0] >= 0.5) & (X[:, 2] < 0.3)]
    assert len(fig.axes) == 4
    for ax, mask in zip(fig.axes, masks):
        assert ax.get_title().endswith(f"n = {int(mask.sum())}")
        shown = np.asarray(ax.images[0].get_array())
        assert np.allclose(shown, images[mask, 0].double().mean(0).numpy())
    assert fig.axes[1].get_title().startswith("z_0 >= 0.5")


def test_mean_images_from_an_explanation_and_empty_rules():
    X, images, _ = _data()
    empty = RuleSet((Rule(0, "z_0", low=5.0),), 0, 0.0, 0.0)
    expl = RegionalExplanation([empty], X[:, 1] > 0.5, None, [0, 1, 2], ["z_0", "z_1", "z_2"], features_matrix=X)
    fig = plot_rule_means(images[:, 0], expl)  # (N, H, W) images; X and subgroup from the explanation
    assert len(fig.axes) == 2
    ax = fig.axes[1]
    assert ax.get_title().endswith("n = 0")
    assert np.isfinite(np.asarray(ax.images[0].get_array())).all()
    assert any(t.get_text() == "no samples" for t in ax.texts)
    with pytest.raises(ValueError, match="one row per image"):
        plot_rule_means(images[:10], empty, X)
    with pytest.raises(TypeError, match="RuleSet"):
        plot_rule_means(images, "z_0 > 1", X)


def test_attribution_maps_are_scaled_per_map_and_zero_maps_stay_flat():
    _, images, _ = _data()
    images = images[:3]
    attr = torch.zeros(2, 3, 1, 5, 4)
    attr[0] = torch.randn(3, 1, 5, 4, generator=torch.Generator().manual_seed(1))
    fig = plot_rule_attributions(images, attr, titles=["r1", "r2"], row_labels=["a", "b", "c"])
    grid = np.array(fig.axes[:9]).reshape(3, 3)
    for i in range(3):
        over = np.asarray(grid[i, 1].images[1].get_array())
        expected = attr[0, i, 0].numpy()
        assert np.allclose(over, expected / np.abs(expected).max())
        flat = np.asarray(grid[i, 2].images[1].get_array())
        assert np.all(flat == 0) and np.isfinite(flat).all()
    assert [ax.get_title() for ax in grid[0]] == ["image", "r1", "r2"]
    fig_abs = plot_rule_attributions(images, attr[0], absolute=True)  # a single rule, (N, ...) maps
    over = np.asarray(fig_abs.axes[1].images[1].get_array())
    assert over.min() >= 0 and over.max() == pytest.approx(1.0)
    with pytest.raises(ValueError, match="titles"):
        plot_rule_attributions(images, attr, titles=["only one"])
    with pytest.raises(ValueError, match="attributions"):
        plot_rule_attributions(images, torch.zeros(2, 4, 1, 5, 4))
