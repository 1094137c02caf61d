"""Feature selection (Algorithm 1): impact matrix, threshold scan, FP-Growth, bad input.

Every expected value is computed here independently: closed forms of integrated gradients on models that are linear
in the attributed variables, and brute-force counting for the threshold and the frequent itemsets. Captum multiplies
the gradients by float32 quadrature weights, so the closed forms hold to about 1e-7 relative, even in float64.
"""

from __future__ import annotations

import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from torch_amore import FeatureSelection, extract_rules, select_features
from torch_amore.selection import _frequent_itemsets, _impact_matrix, _threshold_scan


def _linear(weight: torch.Tensor, bias: float = 0.0) -> nn.Linear:
    weight = torch.as_tensor(weight, dtype=torch.float64).reshape(-1, weight.shape[-1])
    lin = nn.Linear(weight.shape[1], weight.shape[0]).double()
    with torch.no_grad():
        lin.weight.copy_(weight)
        lin.bias.fill_(bias)
    return lin


def _class_means(X: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    return torch.stack([X[labels == c].mean(0) for c in range(int(labels.max()) + 1)])


def _closed_form(delta: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """|delta_i w_i / sum_k delta_k w_k|: the normalised integrated gradient of a linear function."""
    contrib = delta * w
    return (contrib / contrib.sum(1, keepdim=True)).abs()


@pytest.fixture
def linear_data() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(300, 5, generator=g, dtype=torch.float64)
    w = torch.tensor([2.0, -1.0, 0.5, 0.0, 3.0], dtype=torch.float64)
    return X, w, (X @ w > 0)


# ------------------------------------------------------------------------------------------ impact matrix J


def test_linear_logit_integrated_gradient_is_exact(linear_data):
    X, w, labels = linear_data
    base = _class_means(X, labels.long())
    test = X[:40]
    pair_b = torch.tensor([0] * 40 + [1] * 40)
    pair_m = torch.arange(40).repeat(2)
    raw = _impact_matrix(
        _linear(w, 0.3),
        test,
        base,
        pair_b,
        pair_m,
        torch.ones(80, dtype=torch.float64),
        target=None,
        layer=None,
        attribute_to_layer_input=False,
        n_steps=7,
        internal_batch_size=64,
    )
    expected = ((test[pair_m] - base[pair_b]) * w).abs()  # |(x - x~) w|, the logit's integrated gradient
    torch.testing.assert_close(raw, expected, rtol=1e-6, atol=1e-12)


def test_linear_logit_selection_matches_closed_form(linear_data):
    X, w, labels = linear_data
    sel = select_features(_linear(w, 0.3), X, labels, n_test_per_class=30, n_steps=5, internal_batch_size=32)
    base = _class_means(X, labels.long())
    delta = X[sel.pairs[:, 1]] - base[sel.pairs[:, 0]]
    torch.testing.assert_close(sel.importance, _closed_form(delta, w), rtol=1e-6, atol=1e-12)
    assert sel.importance.shape == (120, 5) and sel.n_skipped == 0
    assert 3 not in sel.features  # zero weight: never important


def test_sigmoid_probability_normalised_impact_equals_logit_form(linear_data):
    """For sigmoid(w.x + b) the path integral of sigma' is one scalar for all features, so the normalised impact is
    |delta_i w_i / (w.delta)| as for the logit (up to the quadrature error of the integral)."""
    X, w, labels = linear_data
    model = nn.Sequential(_linear(w, 0.3), nn.Sigmoid())
    sel = select_features(model, X, labels, n_test_per_class=30, n_steps=50)
    base = _class_means(X, labels.long())
    delta = X[sel.pairs[:, 1]] - base[sel.pairs[:, 0]]
    torch.testing.assert_close(sel.importance, _closed_form(delta, w), rtol=1e-6, atol=1e-9)


def test_layer_integrated_gradients_on_activations_closed_form():
    g = torch.Generator().manual_seed(2)
    X = torch.randn(200, 5, generator=g, dtype=torch.float64)
    enc = _linear(torch.randn(8, 5, generator=g, dtype=torch.float64), 0.1)
    head = _linear(torch.randn(1, 8, generator=g, dtype=torch.float64))
    model = nn.Sequential(enc, nn.Tanh(), head)
    with torch.no_grad():
        labels = model(X).squeeze(1) > 0
        base_h = torch.tanh(enc(_class_means(X, labels.long())))  # activations of the (input-space) class means
        h = torch.tanh(enc(X))
    sel = select_features(model, X, labels, layer=model[1], n_test_per_class=20, n_steps=3)
    delta = h[sel.pairs[:, 1]] - base_h[sel.pairs[:, 0]]
    assert sel.importance.shape == (80, 8)
    torch.testing.assert_close(sel.importance, _closed_form(delta, head.weight[0].detach()), rtol=1e-6, atol=1e-12)
    same = select_features(
        model, X, labels, layer=model[2], attribute_to_layer_input=True, n_test_per_class=20, n_steps=3
    )
    torch.testing.assert_close(same.importance, sel.importance, rtol=1e-6, atol=1e-12)
    assert same.names[0].startswith("feature_")


def test_multiclass_target_and_regression_output():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(150, 4, generator=g, dtype=torch.float64)
    W = torch.randn(3, 4, generator=g, dtype=torch.float64)
    model = _linear(W)
    labels = (X @ W.T).argmax(1)
    sel = select_features(model, X, labels, target=2, n_test_per_class=10, n_steps=2)
    base = _class_means(X, labels)
    delta = X[sel.pairs[:, 1]] - base[sel.pairs[:, 0]]
    assert sel.pairs[:, 0].unique().tolist() == [0, 1, 2]
    torch.testing.assert_close(sel.importance, _closed_form(delta, W[2]), rtol=1e-6, atol=1e-12)

    class Regressor(nn.Module):  # returns (N,): a regression output
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(W[0].clone())

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x @ self.w

    groups = (X @ W[0] > 0).long()  # regression: baselines from groups of the target
    reg = select_features(Regressor(), X, groups, target=0, n_test_per_class=10, n_steps=2)
    delta = X[reg.pairs[:, 1]] - _class_means(X, groups)[reg.pairs[:, 0]]
    torch.testing.assert_close(reg.importance, _closed_form(delta, W[0]), rtol=1e-6, atol=1e-12)


def test_zero_shift_pairs_are_skipped(linear_data):
    X, w, _ = linear_data
    model = _linear(w)
    n = 20
    sel = select_features(model, X[:n], baselines=X[:1], n_test_per_class=n, gamma=0.5, min_frequency=0.1)
    pairs = {tuple(p) for p in sel.pairs.tolist()}
    assert sel.n_skipped == 1 and len(pairs) == n - 1 and (0, 0) not in pairs
    assert bool(torch.isfinite(sel.importance).all())


def test_test_samples_are_class_balanced_and_seeded():
    X = torch.randn(120, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    labels = torch.zeros(120, dtype=torch.long)
    labels[:15] = 1  # minor class: fewer samples than requested, all are used
    model = _linear(torch.tensor([1.0, 2.0, -1.0]), 0.5)
    a = select_features(model, X, labels, n_test_per_class=25, seed=7)
    b = select_features(model, X, labels, n_test_per_class=25, seed=7)
    c = select_features(model, X, labels, n_test_per_class=25, seed=8)
    rows = a.pairs[a.pairs[:, 0] == 0, 1]
    assert torch.equal(a.pairs, b.pairs) and not torch.equal(a.pairs, c.pairs)
    assert rows.unique().numel() == rows.numel() == 40
    assert int((labels[rows] == 0).sum()) == 25 and set(rows[labels[rows] == 1].tolist()) == set(range(15))


def test_selects_the_three_inputs_a_model_depends_on():
    idx = [17, 901, 1642]

    class ThreeOf2000(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            g = torch.Generator().manual_seed(5)
            self.mlp = nn.Sequential(nn.Linear(3, 16), nn.Tanh(), nn.Linear(16, 1))
            with torch.no_grad():
                for p in self.mlp.parameters():
                    p.copy_(torch.randn(p.shape, generator=g))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(self.mlp(x[:, idx]))

    model = ThreeOf2000().eval()
    X = torch.randn(400, 2000, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        p = model(X).squeeze(1)
    labels = p > p.median()
    sel = select_features(model, X, labels, n_test_per_class=60, n_steps=20)
    assert sel.features == tuple(idx)
    assert sel.names == tuple(f"feature_{i}" for i in idx)
    rules = extract_rules(X, labels, features=sel, max_length=2, min_support=20)
    assert {r.feature for rs in rules for r in rs.rules} <= set(idx)


# --------------------------------------------------------------------------------------------- threshold scan


def _brute_threshold(J: np.ndarray, gamma: float) -> tuple[float, int]:
    """Scan every distinct value of J upwards; count, per feature, the rows scoring >= threshold."""
    n, d = J.shape
    last = None
    for thr in sorted(set(J.ravel().tolist())):
        n_freq = 0
        for i in range(d):
            count = sum(1 for r in range(n) if J[r, i] >= thr)
            n_freq += count >= gamma * n
        if n_freq == 1:
            return thr, 1
        if n_freq >= 1:
            last = (thr, n_freq)
    return last


@pytest.mark.filterwarnings("ignore:No impact threshold leaves exactly one feature")
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("gamma", [1.0, 0.99, 0.9, 0.6, 0.35])
def test_threshold_scan_matches_brute_force(seed, gamma):
    rng = np.random.default_rng(seed)
    J = np.round(rng.gamma(2.0, size=(37, 7)) * rng.uniform(0.2, 2.0, size=7), 1)  # rounding makes value ties
    thr, n_freq = _threshold_scan(torch.from_numpy(J), gamma)
    assert (thr, n_freq) == _brute_threshold(J, gamma)


@pytest.mark.parametrize("block", [1, 5, 64])
def test_blocked_scans_match_brute_force(monkeypatch, block):
    """The scans over J run in blocks of _BLOCK elements (bounded memory); tiny blocks give the same answers."""
    import torch_amore.selection as selection

    monkeypatch.setattr(selection, "_BLOCK", block)
    rng = np.random.default_rng(block)
    J = np.round(rng.gamma(2.0, size=(23, 6)) * rng.uniform(0.2, 2.0, size=6), 2)
    J[:, 4] *= 3.0  # one clearly dominant feature: no tie at the top
    thr, n_freq = _threshold_scan(torch.from_numpy(J), 0.9)
    assert (thr, n_freq) == _brute_threshold(J, 0.9)
    sel = select_features(importance=J, gamma=0.9, min_frequency=0.3)
    brute = _brute_itemsets(J >= thr, 0.3, None)
    best = max(brute.items(), key=lambda kv: (len(kv[0]), kv[1], [-i for i in sorted(kv[0])]))
    assert set(sel.itemsets["itemsets"]) == set(brute) and sel.features == tuple(sorted(best[0]))


def test_threshold_scan_tie_falls_back_to_highest_threshold_with_a_warning():
    rng = np.random.default_rng(0)
    J = rng.uniform(0.0, 0.5, size=(20, 5))
    J[:, 1] = J[:, 3] = 0.8  # two features tie at the top: no threshold leaves exactly one
    with pytest.warns(UserWarning, match="tie"):
        thr, n_freq = _threshold_scan(torch.from_numpy(J), 0.9)
    assert (thr, n_freq) == _brute_threshold(J, 0.9) == (0.8, 2)
    with pytest.warns(UserWarning):
        sel = select_features(importance=J, gamma=0.9, min_frequency=0.5)
    assert sel.features == (1, 3)


def test_threshold_scan_curve_and_plot():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    J = np.abs(np.random.default_rng(1).normal(size=(50, 6))) * np.arange(1, 7)
    sel = select_features(importance=J, gamma=0.9, min_frequency=0.2)
    thresholds, n_features = sel.threshold_scan(torch.tensor([0.0, sel.threshold, 1e9], dtype=torch.float64))
    expected = [sum(int((J[:, i] >= t).sum() >= 0.9 * 50) for i in range(6)) for t in thresholds.tolist()]
    assert n_features.tolist() == expected and expected[1] == 1
    fig = sel.plot_threshold_scan()
    assert isinstance(fig, Figure) and len(fig.axes) == 1


# --------------------------------------------------------------------------------------------------- FP-Growth


def _brute_itemsets(used: np.ndarray, min_frequency: float, max_length: int | None) -> dict[frozenset, float]:
    n, d = used.shape
    out = {}
    for k in range(1, (max_length or d) + 1):
        for items in itertools.combinations(range(d), k):
            count = int(used[:, list(items)].all(axis=1).sum())
            if count >= min_frequency * n:
                out[frozenset(items)] = count / n
    return out


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize(("min_frequency", "max_length"), [(0.1, None), (0.25, None), (0.1, 2), (0.5, 3)])
def test_frequent_itemsets_match_brute_force(sparse, min_frequency, max_length):
    rng = np.random.default_rng(int(min_frequency * 100) + (max_length or 0))
    latent = rng.uniform(size=(60, 1))
    used = rng.uniform(size=(60, 7)) < latent * np.linspace(0.2, 1.0, 7)  # correlated columns, varied frequency
    table = _frequent_itemsets(torch.from_numpy(used), min_frequency, max_length, sparse=sparse)
    brute = _brute_itemsets(used, min_frequency, max_length)
    got = dict(zip(table["itemsets"], table["support"]))
    assert got.keys() == brute.keys()
    for items, support in brute.items():
        assert math.isclose(got[items], support, rel_tol=1e-12)
    assert table["length"].tolist() == [len(s) for s in table["itemsets"]]
    best = max(brute.items(), key=lambda kv: (len(kv[0]), kv[1], [-i for i in sorted(kv[0])]))
    assert table["itemsets"][0] == best[0]


def test_selection_picks_longest_then_most_frequent_itemset():
    # pairs {0,1}, {0,3}, {0,4}, {3,4} tie at support 0.3: with max_length=2 the lowest indices win
    # rows binarise (threshold 2.0) to: {0,1,2} x2, {0,1} x1, {0,3,4} x3, {0} x4 -> longest frequent: {0,3,4}
    rows = [[0, 1, 2]] * 2 + [[0, 1]] + [[0, 3, 4]] * 3 + [[0]] * 4
    J = np.full((10, 5), 0.5)
    for r, items in enumerate(rows):
        J[r, items] = 2.0
    sel = select_features(importance=-J, gamma=1.0, min_frequency=0.2)  # signed scores count by magnitude
    assert sel.threshold == 2.0
    assert sel.features == (0, 3, 4) and sel.support == 0.3 and isinstance(sel, FeatureSelection)
    best_three = sel.itemsets[sel.itemsets["length"] == 3]
    assert best_three["itemsets"].tolist() == [frozenset({0, 3, 4}), frozenset({0, 1, 2})]
    assert best_three["support"].tolist() == [0.3, 0.2]
    assert select_features(importance=J, gamma=1.0, min_frequency=0.2, max_length=2).features == (0, 1)


def test_warns_before_an_itemset_explosion():
    used = torch.ones(5, 40, dtype=torch.bool)  # 2^40 frequent itemsets: warn (here: raise) before FP-Growth runs
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="max_length"):
            _frequent_itemsets(used, 0.5, None)
        table = _frequent_itemsets(used, 0.5, 2)  # bounded: 40 + 780 itemsets, no warning
    assert len(table) == 40 + 780


def test_importance_dataframe_names():
    pd = pytest.importorskip("pandas")
    J = pd.DataFrame({"a": [0.1, 0.2, 0.1], "b": [0.9, 0.8, 0.7], "c": [0.0, 0.0, 0.0]})
    sel = select_features(importance=J, gamma=1.0, min_frequency=0.5)
    assert sel.names == ("b",) and sel.itemsets["names"][0] == ("b",) and sel.pairs is None


# --------------------------------------------------------------------------------------- acceptance: diabetes


@pytest.mark.slow
def test_diabetes_selection_reproduces_paper_rule(diabetes_task):
    d = diabetes_task
    names = [str(n) for n in d["feature_names"]]
    model = nn.Sequential(_linear(torch.from_numpy(d["coef"])[None], float(d["intercept"][0])), nn.Sigmoid())
    with torch.no_grad():
        prob = model(torch.from_numpy(d["X"])).squeeze(1).numpy()
    np.testing.assert_allclose(prob, d["prob"], atol=1e-9)  # the rebuilt model is the paper's model

    sel = select_features(model, d["X"], d["y"], feature_names=names)
    assert {"HbA1c_level", "blood_glucose_level"} <= set(sel.names)

    best = extract_rules(
        d["X"],
        d["target"],
        features=sel,
        max_length=1,
        min_support=2000,
        n_grids=7,
        bin_strategy="uniform",
        top_k=3,
        feature_types=[str(t) for t in d["feature_types"]],
        feature_names=names,
    )[0]
    (rule,) = best.rules
    h = names.index("HbA1c_level")
    assert rule.feature == h and rule.high == math.inf
    # the paper's grid edge 0.5714 (6.643 raw), stored as a short cut between the observed values: the same samples
    assert np.array_equal(d["X"][:, h] >= rule.low, d["X"][:, h] >= 4 / 7)
    mask = d["X"][:, h] >= rule.low
    hits, support = int((mask & d["target"]).sum()), int(mask.sum())
    assert (2 * hits - support) / int(d["target"].sum()) == pytest.approx(0.202, abs=5e-4)
    assert best.fitness == pytest.approx((2 * hits - support) / int(d["target"].sum()), abs=1e-12)


# ------------------------------------------------------------------------------------------------- bad input


class _NoGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self.lin(x)


class _FirstOnly(nn.Module):
    """Has a submodule its forward never calls."""

    def __init__(self) -> None:
        super().__init__()
        self.used = nn.Linear(3, 1)
        self.unused = nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.used(x)


@pytest.fixture
def small() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    X = torch.randn(30, 3, generator=torch.Generator().manual_seed(9))
    return nn.Linear(3, 1), X, (X[:, 0] > 0).long()


def test_non_differentiable_models_point_to_importance(small):
    model, X, labels = small
    with pytest.raises(TypeError, match="importance="):
        select_features(model, torch.randint(0, 5, (30, 3)), labels)
    with pytest.raises(TypeError, match="importance="):
        select_features(_NoGrad(), X, labels)
    head_no_grad = nn.Sequential(nn.Linear(3, 3), _NoGrad())  # no gradient from the output to the first layer
    with pytest.raises(TypeError, match="importance="):
        select_features(head_no_grad, X, labels, layer=head_no_grad[0])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"labels": None}, ValueError, "labels"),
        ({"labels": "skip_class"}, ValueError, r"class\(es\) \[1\] have none"),
        ({"layer": nn.Linear(3, 1)}, ValueError, "submodule"),
        ({"gamma": 0.0}, ValueError, "gamma"),
        ({"gamma": 1.5}, ValueError, "gamma"),
        ({"min_frequency": 0.0}, ValueError, "min_frequency"),
        ({"min_frequency": 1.2}, ValueError, "min_frequency"),
        ({"gamma": 0.2, "min_frequency": 0.3}, ValueError, "gamma"),
        ({"baselines": "medians"}, ValueError, "baselines"),
        ({"baselines": torch.zeros(2, 4)}, ValueError, "baselines"),
        ({"max_length": 0}, ValueError, "max_length"),
        ({"n_steps": 0}, ValueError, "n_steps"),
        ({"labels": "fractional"}, TypeError, "labels"),
    ],
)
def test_bad_input(small, kwargs, error, match):
    model, X, labels = small
    kwargs = dict(kwargs)
    if kwargs.get("labels") == "skip_class":
        kwargs["labels"] = labels * 2  # classes 0 and 2: class 1 has no samples
    elif kwargs.get("labels") == "fractional":
        kwargs["labels"] = labels * 0.5
    args = {"labels": labels, **kwargs}
    with pytest.raises(error, match=match):
        select_features(model, X, **args)


def test_bad_outputs_and_matrices(small):
    _, X, labels = small
    with pytest.raises(ValueError, match="target"):
        select_features(nn.Linear(3, 4), X, labels)
    with pytest.raises(ValueError, match="target"):
        select_features(nn.Linear(3, 4), X, labels, target=4)
    constant = nn.Linear(3, 1)
    with torch.no_grad():
        constant.weight.zero_()
    with pytest.raises(ValueError, match="zero output shift"):
        select_features(constant, X, labels)
    model = _FirstOnly()
    with pytest.raises(ValueError, match="never called"):
        select_features(model, X, labels, layer=model.unused)
    with pytest.raises(ValueError, match="finite"):
        select_features(importance=np.array([[0.1, np.nan]]))
    with pytest.raises(ValueError, match="shape"):
        select_features(importance=np.ones(3))
    with pytest.raises(TypeError, match="model"):
        select_features(None, X, labels)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the plain path warns about nothing
        select_features(nn.Linear(3, 1), X, labels, n_test_per_class=5)
