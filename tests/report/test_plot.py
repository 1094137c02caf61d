"""torch_amore.report.plot: every figure drawn into a temporary PNG (Agg); the values shown are recomputed here — rule
means, shared colour scales, signs towards satisfying the rule, histograms of subgroup vs rest in raw units."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from figures_agg import close_figures  # noqa: E402, F401  (autouse: every figure closed after each test)
from matplotlib.patches import Rectangle  # noqa: E402

from torch_amore import RegionalExplanation, Rule, RuleSet  # noqa: E402
from torch_amore.report.plot import plot_rule, plot_rule_attributions, plot_rule_means  # noqa: E402


def _save(fig, tmp_path, name):
    path = tmp_path / f"{name}.png"
    fig.savefig(path, dpi=60)
    assert path.stat().st_size > 1000
    return path


def _data():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(50, 3, generator=g)
    images = torch.rand(50, 1, 5, 4, generator=g)
    rules = RuleSet((Rule(0, "z_0", low=0.5), Rule(2, "z_2", high=0.3)), 0, 0.0, 0.0, target_name="predicted 7")
    return X, images, rules


# ------------------------------------------------------------------------------------------------------ rule means
def test_mean_images_per_rule_share_one_scale_and_show_count_and_confidence(tmp_path):
    X, images, rules = _data()
    subgroup = X[:, 1] > 0.5
    fig = plot_rule_means(images, rules, X, subgroup=subgroup)
    masks = [subgroup, X[:, 0] >= 0.5, X[:, 2] < 0.3, (X[:, 0] >= 0.5) & (X[:, 2] < 0.3)]
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4
    means = [images[m, 0].double().mean(0).numpy() for m in masks]
    lo, hi = min(m.min() for m in means), max(m.max() for m in means)
    for ax, mask, mean in zip(panels, masks, means):
        n = int(mask.sum())
        assert f"n = {n}" in ax.get_title()
        assert np.allclose(np.asarray(ax.images[0].get_array()), mean)
        assert ax.images[0].get_clim() == pytest.approx((lo, hi))  # one intensity scale for every panel
    for ax, mask in zip(panels[1:], masks[1:]):
        conf = int((mask & subgroup).sum()) / int(mask.sum())
        assert ax.get_title().endswith(f"confidence {conf:.2f}")
    assert panels[1].get_title().startswith("z_0 >= 0.5")
    assert "predicted 7" in fig.get_suptitle()
    _save(fig, tmp_path, "means")


def test_mean_images_from_an_explanation_and_empty_rules(tmp_path):
    X, images, _ = _data()
    empty = RuleSet((Rule(0, "z_0", low=5.0),), 0, 0.0, 0.0)
    expl = RegionalExplanation([empty], X[:, 1] > 0.5, None, [0, 1, 2], ["z_0", "z_1", "z_2"], features_matrix=X)
    fig = plot_rule_means(images[:, 0], expl)  # (N, H, W) images; X and subgroup from the explanation
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 2
    ax = panels[1]
    assert ax.get_title().endswith("n = 0")
    assert any(t.get_text() == "no samples" for t in ax.texts)
    _save(fig, tmp_path, "means_empty")
    with pytest.raises(ValueError, match="one row per image"):
        plot_rule_means(images[:10], empty, X)
    with pytest.raises(TypeError, match="RuleSet"):
        plot_rule_means(images, "z_0 > 1", X)


def test_mean_images_on_given_axes():
    X, images, rules = _data()
    fig, axes = plt.subplots(1, 3)
    assert plot_rule_means(images, rules, X, axes=axes) is fig
    with pytest.raises(ValueError, match="axes"):
        plot_rule_means(images, rules, X, axes=axes[:2])


# -------------------------------------------------------------------------------------------------- pixel maps
def test_attribution_maps_share_one_symmetric_scale_and_are_opaque(tmp_path):
    _, images, _ = _data()
    images = images[:3]
    attr = torch.zeros(2, 3, 1, 5, 4, dtype=torch.float64)
    attr[0] = torch.randn(3, 1, 5, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    attr[1, 0, 0, 0, 0] = 0.1  # a weak map: on the shared scale it stays pale
    fig = plot_rule_attributions(images, attr, titles=["r1", "r2"], row_labels=["a", "b", "c"])
    grid = np.array([ax for ax in fig.axes if ax.images]).reshape(3, 3)
    peak = float(attr.abs().max())
    for i in range(3):
        for j in range(2):
            im = grid[i, j + 1].images[0]
            assert np.allclose(np.asarray(im.get_array()), attr[j, i, 0].numpy())  # as given: no rule, no flip
            assert im.get_clim() == pytest.approx((-peak, peak))
            assert im.get_alpha() is None  # opaque: the colours are the colorbar's
    assert [ax.get_title() for ax in grid[0]] == ["image", "r1", "r2"]
    assert [ax.get_ylabel() for ax in grid[:, 0]] == ["a", "b", "c"]
    _save(fig, tmp_path, "pixels")
    per_panel = plot_rule_attributions(images, attr, scale="panel")
    im = [ax for ax in per_panel.axes if ax.images][2].images[0]  # row 0, rule 2: the weak map scaled to its peak
    assert np.asarray(im.get_array()).max() == pytest.approx(1.0) and im.get_clim() == pytest.approx((-1, 1))
    fig_abs = plot_rule_attributions(images, attr[0], absolute=True)  # a single rule, (N, ...) maps
    im = [ax for ax in fig_abs.axes if ax.images][1].images[0]
    assert np.asarray(im.get_array()).min() >= 0 and im.get_clim()[0] == 0
    with pytest.raises(ValueError, match="titles"):
        plot_rule_attributions(images, attr, titles=["only one"])
    with pytest.raises(ValueError, match="attributions"):
        plot_rule_attributions(images, torch.zeros(2, 4, 1, 5, 4))
    with pytest.raises(ValueError, match="scale"):
        plot_rule_attributions(images, attr, scale="own")


def test_signs_point_towards_satisfying_each_rule_and_titles_show_the_unit_value(tmp_path):
    _, images, _ = _data()
    images = images[:2]
    attr = torch.ones(3, 2, 1, 5, 4, dtype=torch.float64)
    rules = RuleSet(
        (Rule(0, "z_0", low=0.5), Rule(2, "z_2", high=0.3, scale=10.0, offset=1.0), Rule(1, "z_1", low=0.2, high=0.4)),
        0, 0.0, 0.0, target_name="predicted 7",
    )  # fmt: skip
    feats = torch.tensor([[0.7, 0.3, 0.1], [0.2, 0.9, 0.5]], dtype=torch.float64)
    fig = plot_rule_attributions(images, attr, rules=rules, features=feats, target_name="predicted 7")
    grid = np.array([ax for ax in fig.axes if ax.images]).reshape(2, 4)
    expected_sign = [1.0, -1.0, 1.0]  # z_2 < b is flipped: lowering the unit satisfies it
    for i in range(2):
        for j, rule in enumerate(rules.rules):
            shown = np.asarray(grid[i, j + 1].images[0].get_array())
            assert np.all(shown == expected_sign[j])
            raw = float(feats[i, rule.feature]) * rule.scale + rule.offset
            inside = rule.contains(float(feats[i, rule.feature]))
            assert grid[i, j + 1].get_title().endswith(f"{rule.name} = {raw:.3g} ({'in' if inside else 'out'})")
    assert grid[0, 2].get_title().startswith("z_2 < 4\n(red lowers z_2)")  # raw units: 0.3 * 10 + 1
    assert "predicted 7" in fig.get_suptitle()
    cbar_label = fig.axes[-1].get_ylabel()
    assert "towards satisfying the rule" in cbar_label and "flipped" in cbar_label
    _save(fig, tmp_path, "pixels_signed")
    with pytest.raises(ValueError, match="features"):
        plot_rule_attributions(images, attr, rules=rules, features=feats[:, :2])
    with pytest.raises(ValueError, match="rules"):
        plot_rule_attributions(images, attr, rules=rules.rules[:2])


# --------------------------------------------------------------------------------------------------- tabular rule
def test_plot_rule_histograms_subgroup_and_rest_in_raw_units(tmp_path):
    g = np.random.default_rng(0)
    age = g.uniform(0, 1, 400)  # scaled; raw = age * 80
    smoker = g.integers(0, 2, 400).astype(float)
    X = np.column_stack([age, smoker])
    subgroup = (age > 0.5) & (smoker == 1) | (g.random(400) < 0.05)
    rs = RuleSet.from_rules(
        [Rule(0, "age", low=0.5, scale=80.0), Rule(1, "smoker", value=1.0, kind="cat")], X, subgroup,
        target_name="predicted sick",
    )  # fmt: skip
    fig = plot_rule(rs, X, subgroup)
    ax_age, ax_smoker = fig.axes[:2]
    # the histogram bars: shares of each group per bin, in raw units (0..80)
    rest_bars = [p for p in ax_age.patches if isinstance(p, Rectangle) and p.get_alpha() == 0.45]
    assert min(p.get_x() for p in rest_bars) == pytest.approx(80 * age.min())
    edges = np.histogram_bin_edges(80 * age, bins=30)
    rest_share = np.histogram(80 * age[~subgroup], bins=edges)[0] / (~subgroup).sum()
    assert sorted(p.get_height() for p in rest_bars) == pytest.approx(sorted(rest_share))
    assert ax_age.get_title() == "age >= 40"
    assert any(line.get_xdata()[0] == pytest.approx(40.0) for line in ax_age.lines)  # the bound, raw units
    # bars per value for the categorical condition: subgroup and rest shares
    bars = [p for p in ax_smoker.patches if isinstance(p, Rectangle) and p.get_width() == pytest.approx(0.4)]
    heights = sorted(p.get_height() for p in bars)
    want = [np.mean(smoker[m] == v) for m in (subgroup, ~subgroup) for v in (0.0, 1.0)]
    assert heights == pytest.approx(sorted(want))
    # the title's metrics are measured on the data shown
    mask = (age >= 0.5) & (smoker == 1)
    hits = int((mask & subgroup).sum())
    title = fig.get_suptitle()
    assert f"support {int(mask.sum())}, confidence {hits / mask.sum():.3f}" in title
    assert f"fitness {(2 * hits - mask.sum()) / subgroup.sum():.3f}" in title
    _save(fig, tmp_path, "rule")
    fig2, axes = plt.subplots(1, 2)
    assert plot_rule(rs, X, subgroup, axes=axes) is fig2
    with pytest.raises(ValueError, match="subgroup"):
        plot_rule(rs, X)
    with pytest.raises(ValueError, match="one entry per"):
        plot_rule(rs, X, subgroup[:10])


def test_plot_rule_from_an_explanation_with_negative_scale_and_nan(tmp_path):
    X = torch.tensor([[0.1], [0.4], [float("nan")], [0.8], [0.9]], dtype=torch.float64)
    subgroup = torch.tensor([False, False, False, True, True])
    rule = Rule(0, "depth", low=0.6, scale=-10.0, offset=0.0)  # raw: depth <= -6
    rs = RuleSet.from_rules([rule], X, subgroup)
    expl = RegionalExplanation([rs], subgroup, None, [0], ["depth"], features_matrix=X)
    fig = plot_rule(expl, bins=4, max_bars=2)  # 4 distinct values: a histogram, not bars
    ax = fig.axes[0]
    lines = [line.get_xdata()[0] for line in ax.lines]
    assert lines == pytest.approx([-6.0])
    assert ax.get_xlim() == pytest.approx((-9.0, -1.0))
    assert not math.isnan(sum(p.get_height() for p in ax.patches if isinstance(p, Rectangle)))
    _save(fig, tmp_path, "rule_negative_scale")


def test_plot_rule_reads_a_frames_columns_by_name_and_checks_its_arguments_before_drawing():
    """A DataFrame in another column order: each panel draws the column its rule names (its x range is that column's);
    probabilities or NaN as the subgroup are refused, as extract_rules refuses them; bad bins and max_bars fail
    before a figure is made; an all-NaN column draws without error."""
    pd = pytest.importorskip("pandas")
    rng = np.random.default_rng(0)
    df = pd.DataFrame({"age": rng.uniform(20, 80, 500), "bmi": rng.uniform(15, 40, 500)})
    sub = (df.age > 50).to_numpy() & (df.bmi > 25).to_numpy()
    rs = RuleSet.from_rules([Rule(0, "age", low=50.0), Rule(1, "bmi", low=25.0)], df, sub)
    fig = plot_rule(rs, df[["bmi", "age"]], sub)
    spans = [ax.get_xlim() for ax in fig.axes[:2]]
    assert spans[0][0] <= df.age.min() and spans[0][1] >= df.age.max() and spans[0][0] > df.bmi.max() - 25
    assert spans[1][1] < df.age.min() + 25 and spans[1][0] <= df.bmi.min()
    plt.close(fig)
    open_before = len(plt.get_fignums())
    for bad, error in ((dict(bins=0), ValueError), (dict(bins=2.5), TypeError), (dict(max_bars="x"), TypeError)):
        with pytest.raises(error):
            plot_rule(rs, df, sub, **bad)
    with pytest.raises(TypeError, match="boolean"):
        plot_rule(rs, df, np.where(sub, 0.9, 0.1))
    with pytest.raises(ValueError, match="NaN"):
        plot_rule(rs, df, np.where(sub, 1.0, np.nan))
    assert len(plt.get_fignums()) == open_before
    empty = df.assign(bmi=np.nan)
    fig = plot_rule(RuleSet.from_rules([Rule(1, "bmi", low=25.0)], empty, sub), empty, sub)
    assert fig.axes[0].get_title() == "bmi >= 25"
    plt.close(fig)
