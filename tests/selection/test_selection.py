"""Feature selection (Algorithm 1): impact matrix, threshold scan, longest frequent itemset, budget fallback, bad input.

Every expected value is computed here independently: closed forms of integrated gradients on models that are linear
in the attributed variables, brute-force counting for the threshold and the longest frequent itemset (and mlxtend's
``fpmax`` where brute force is too slow), and a literal re-implementation of the documented budget fallback. Captum
multiplies the gradients by float32 quadrature weights, so the closed forms hold to about 1e-7 relative, even in
float64.
"""

from __future__ import annotations

import itertools
import json
import math
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from torch_amore import FeatureSelection, RegionalRuleExplainer, extract_rules, select_features
from torch_amore.selection.impact import _impact_matrix
from torch_amore.selection.itemsets import longest_frequent_itemset
from torch_amore.selection.thresholds import _threshold_scan


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
    by_name = select_features(model, X, labels, layer="1", n_test_per_class=20, n_steps=3)  # dotted name
    torch.testing.assert_close(by_name.importance, sel.importance, rtol=1e-6, atol=1e-12)


def test_wide_inputs_are_attributed_in_smaller_batches(monkeypatch):
    """Path points per batch shrink so that one (points x features) tensor stays under _IG_BYTES: same J."""
    import torch_amore.selection.selection as selection

    g = torch.Generator().manual_seed(8)
    X = torch.randn(100, 6, generator=g, dtype=torch.float64)
    w = torch.randn(6, generator=g, dtype=torch.float64)
    labels = X @ w > 0
    model = nn.Sequential(_linear(w), nn.Sigmoid())
    full = select_features(model, X, labels, n_test_per_class=10, n_steps=8)
    calls = []
    original = selection._impact_matrix

    def spy(*args, **kwargs):
        calls.append(kwargs["internal_batch_size"])
        return original(*args, **kwargs)

    monkeypatch.setattr(selection, "_IG_BYTES", 5 * 6 * 8)  # 5 path points of 6 float64 features
    monkeypatch.setattr(selection, "_impact_matrix", spy)
    small = select_features(model, X, labels, n_test_per_class=10, n_steps=8)
    assert calls == [5]
    torch.testing.assert_close(small.importance, full.importance, rtol=1e-6, atol=1e-12)
    assert small.features == full.features


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
    import torch_amore.selection.thresholds as thresholds

    monkeypatch.setattr(thresholds, "_BLOCK", block)
    rng = np.random.default_rng(block)
    J = np.round(rng.gamma(2.0, size=(23, 6)) * rng.uniform(0.2, 2.0, size=6), 2)
    J[:, 4] *= 3.0  # one clearly dominant feature: no tie at the top
    thr, n_freq = _threshold_scan(torch.from_numpy(J), 0.9)
    assert (thr, n_freq) == _brute_threshold(J, 0.9)
    sel = select_features(importance=J, gamma=0.9, min_frequency=0.3)
    items, count = _brute_longest(J >= thr, math.ceil(0.3 * 23), None)
    assert sel.exact and sel.features == items and sel.support == count / 23


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


# ------------------------------------------------------------------------------------- longest frequent itemset


def _brute_longest(used: np.ndarray, min_count: int, max_length: int | None) -> tuple[tuple[int, ...], int]:
    """Every itemset by itertools: the longest held by >= min_count rows, then the most rows, then lowest indices."""
    n, d = used.shape
    best: tuple[int, int, tuple[int, ...]] = (0, 0, ())
    for k in range(1, (max_length or d) + 1):
        for items in itertools.combinations(range(d), k):
            count = int(used[:, list(items)].all(axis=1).sum())
            if count >= min_count and ((k, count) > best[:2] or ((k, count) == best[:2] and items < best[2])):
                best = (k, count, items)
    return best[2], best[1]


@pytest.mark.parametrize("max_length", [None, 1, 2, 3])
@pytest.mark.parametrize("seed", range(8))
def test_longest_itemset_matches_brute_force(seed, max_length):
    rng = np.random.default_rng(seed)
    for _ in range(12):
        n, d = int(rng.integers(3, 40)), int(rng.integers(1, 10))
        latent = rng.uniform(size=(n, 1))  # correlated columns of varied frequency: long itemsets and ties
        used = rng.uniform(size=(n, d)) < latent * rng.uniform(0.3, 1.2, size=d) + rng.uniform(0.0, 0.4)
        min_count = int(rng.integers(1, n + 1))
        got = longest_frequent_itemset(used, min_count, max_length=max_length)
        assert got.exact and got.stopped_by is None
        assert (got.items, got.count) == _brute_longest(used, min_count, max_length)
        if got.items:  # the reported count is the number of rows holding the itemset
            assert got.count == int(used[:, list(got.items)].all(axis=1).sum())


def test_longest_itemset_ties_go_to_more_rows_then_lowest_indices():
    # no 3 items share 3 rows; {0, 1} and {2, 3} are in 3 rows each, {1, 2} in 4: the length ties, support decides
    used = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 1, 1, 1], [0, 0, 1, 1], [0, 1, 1, 0]])
    used = used.astype(bool)
    assert longest_frequent_itemset(used, 3).items == (1, 2)
    twin = np.array([[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 1], [0, 0, 1, 1]], bool)  # same length and support
    assert longest_frequent_itemset(twin, 2).items == (0, 1)
    assert longest_frequent_itemset(twin[:, ::-1], 2).items == (0, 1)


@pytest.mark.parametrize("seed", range(2))
def test_longest_itemset_matches_fpmax_on_larger_matrices(seed):
    """Too many itemsets for itertools: the longest of mlxtend's maximal itemsets (ties: support, indices)."""
    pd = pytest.importorskip("pandas")
    from mlxtend.frequent_patterns import fpmax

    rng = np.random.default_rng(10 + seed)
    latent = rng.uniform(size=(150, 1))
    used = rng.uniform(size=(150, 15)) < 0.35 + 0.6 * latent * rng.uniform(0.5, 1.0, size=15)
    table = fpmax(pd.DataFrame(used, columns=range(15)), min_support=0.1, use_colnames=True)
    counts = [int(used[:, sorted(s)].all(axis=1).sum()) for s in table["itemsets"]]
    items, count = max(
        ((tuple(sorted(s)), c) for s, c in zip(table["itemsets"], counts)),
        key=lambda ic: (len(ic[0]), ic[1], [-i for i in ic[0]]),
    )
    got = longest_frequent_itemset(used, 15)
    assert got.exact and (got.items, got.count) == (items, count) and len(items) >= 5


def test_longest_itemset_budgets_stop_the_search():
    rng = np.random.default_rng(0)
    used = rng.uniform(size=(200, 300)) < 0.5  # noise: the exact search would run for ages
    for budget, value in [("max_itemsets", 50), ("max_bytes", 100_000), ("max_seconds", 1e-9)]:
        got = longest_frequent_itemset(used, 20, **{budget: value})
        assert not got.exact and got.stopped_by == budget
        if got.items:  # the best found so far (none if stopped at the first itemset) is a frequent itemset
            assert got.count == int(used[:, list(got.items)].all(axis=1).sum()) >= 20
    stopped = longest_frequent_itemset(used, 20, max_itemsets=50)
    assert len(stopped.items) >= 3
    assert stopped.n_examined == 51  # the 51st itemset is the one over budget
    assert longest_frequent_itemset(used, 20, max_itemsets=50) == stopped  # deterministic


def test_selection_picks_longest_then_most_frequent_itemset():
    # rows binarise (threshold 2.0) to: {0,1,2} x2, {0,1} x1, {0,3,4} x3, {0} x4 -> longest frequent: {0,3,4}
    # with max_length=2, pairs {0,1}, {0,3}, {0,4}, {3,4} tie at support 0.3: the lowest indices win
    rows = [[0, 1, 2]] * 2 + [[0, 1]] + [[0, 3, 4]] * 3 + [[0]] * 4
    J = np.full((10, 5), 0.5)
    for r, items in enumerate(rows):
        J[r, items] = 2.0
    sel = select_features(importance=-J, gamma=1.0, min_frequency=0.2)  # signed scores count by magnitude
    assert sel.threshold == 2.0
    assert sel.features == (0, 3, 4) and sel.support == 0.3 and isinstance(sel, FeatureSelection)
    assert sel.exact and sel.reason.startswith("exact")
    assert select_features(importance=J, gamma=1.0, min_frequency=0.2, max_length=2).features == (0, 1)


# ------------------------------------------------------------------------------------------- budget fallback


def _literal_fallback(J: np.ndarray, thr: float, min_count: int) -> tuple[int, ...]:
    """The documented fallback, written out: frequent features by mean impact (then frequency, then index), cut at
    the largest ratio between neighbours, then the longest prefix still used together in min_count rows."""
    used = J >= thr
    freq = used.sum(axis=0)
    frequent = [i for i in range(J.shape[1]) if freq[i] >= min_count]
    ranked = sorted(frequent, key=lambda i: (-J[:, i].mean(), -freq[i], i))
    means = [J[:, i].mean() for i in ranked]
    ratios = [means[r] / means[r + 1] for r in range(len(means) - 1)]
    top = ranked[: ratios.index(max(ratios)) + 1] if ratios else ranked
    chosen = []
    for i in top:
        if used[:, [*chosen, i]].all(axis=1).sum() < min_count:
            break
        chosen.append(i)
    return tuple(sorted(chosen))


def _noisy_importance(seed: int) -> tuple[np.ndarray, list[int]]:
    """300 rows x 400 features: 4 relevant features with large impacts, the rest noise whose median is about j_th (so
    each row uses about half of the noise features: far too many itemsets for an exact search)."""
    rng = np.random.default_rng(seed)
    J = rng.gamma(2.0, 0.069, size=(300, 400))
    relevant = [7, 50, 222, 399]
    J[:, relevant] = rng.gamma(4.0, 0.1, size=(300, 4)) * [1.0, 0.9, 0.8, 0.7]
    J[:, 3] = 0.0  # a feature never used
    return J, relevant


@pytest.mark.parametrize("seed", range(3))
def test_fallback_is_the_documented_choice_and_is_reported(seed):
    J, relevant = _noisy_importance(seed)
    with pytest.warns(UserWarning, match="max_itemsets") as caught:
        sel = select_features(importance=J, max_itemsets=200)
    assert len([w for w in caught if "select_features" in str(w.message)]) == 1  # one warning
    thr, _ = _threshold_scan(torch.from_numpy(J), 0.99)
    assert sel.threshold == thr and not sel.exact and sel.n_examined == 201
    assert sel.reason.startswith("fallback") and "max_itemsets=200" in sel.reason
    assert sel.features == _literal_fallback(J, thr, math.ceil(0.1 * 300))
    assert set(sel.features) <= set(relevant) and len(sel.features) >= 2
    assert sel.support == float((J[:, list(sel.features)] >= thr).all(axis=1).mean())
    d = json.loads(json.dumps(sel.to_dict()))
    assert d["features"] == list(sel.features) and d["exact"] is False and d["reason"] == sel.reason
    assert d["n_rows"] == 300 and d["n_features"] == 400 and d["threshold"] == sel.threshold


def test_max_length_keeps_the_search_small_and_exact():
    J, relevant = _noisy_importance(0)
    sel = select_features(importance=J, max_length=2)  # the bound prunes every pair below the best support
    used = (J >= sel.threshold).astype(np.int64)
    together = used.T @ used  # rows using both features of each pair
    np.fill_diagonal(together, -1)
    best = max(((i, j) for i in range(400) for j in range(i + 1, 400)), key=lambda p: (together[p], -p[0], -p[1]))
    assert sel.exact and sel.features == best and sel.support == together[best] / 300
    assert set(best) <= set(relevant)


def test_fallback_respects_max_length_and_is_deterministic():
    J, relevant = _noisy_importance(0)
    with pytest.warns(UserWarning, match="fallback"):
        a = select_features(importance=J, max_itemsets=1, max_length=2)
    with pytest.warns(UserWarning, match="fallback"):
        b = select_features(importance=J, max_itemsets=1, max_length=2)
    assert a.features == b.features and a.reason == b.reason and not a.exact
    ranked = sorted(relevant, key=lambda i: -J[:, i].mean())
    assert a.features == tuple(sorted(ranked[:2]))  # the two of highest mean impact (they are used together)


def test_exact_when_the_budget_suffices():
    J, _ = _noisy_importance(1)
    small = J[:40, [7, 50, 222, 399, 10, 11, 12, 13, 14, 15, 16, 17]]  # 12 features: brute force is cheap
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sel = select_features(importance=small, max_itemsets=None, max_bytes=None, max_seconds=None)
    thr, _ = _threshold_scan(torch.from_numpy(small), 0.99)
    items, count = _brute_longest(small >= thr, math.ceil(0.1 * 40), None)
    assert sel.exact and sel.features == items and sel.support == count / 40


def test_gamma_is_lowered_when_no_feature_is_positive_often_enough():
    """ReLU units are zero for many pairs: no column is positive in 99% of the rows; gamma drops to the best reach."""
    rng = np.random.default_rng(4)
    J = rng.uniform(0.1, 1.0, size=(50, 6)) * (rng.uniform(size=(50, 6)) < [0.9, 0.8, 0.7, 0.6, 0.3, 0.2])
    reach = int((J > 0).sum(axis=0).max())
    with pytest.warns(UserWarning, match="gamma was lowered") as caught:
        sel = select_features(importance=J)
    assert len(caught) == 1 and sel.exact and sel.gamma == reach / 50
    thr, _ = _threshold_scan(torch.from_numpy(J), reach / 50)
    items, count = _brute_longest(J >= thr, 5, None)
    assert sel.threshold == thr and (sel.features, sel.support) == (items, count / 50)
    with pytest.raises(ValueError, match="lower `gamma`"):
        select_features(importance=J * (np.arange(50) < 4)[:, None])  # no feature positive in 10% of the rows


def test_importance_dataframe_names():
    pd = pytest.importorskip("pandas")
    J = pd.DataFrame({"a": [0.1, 0.2, 0.1], "b": [0.9, 0.8, 0.7], "c": [0.0, 0.0, 0.0]})
    sel = select_features(importance=J, gamma=1.0, min_frequency=0.5)
    assert sel.names == ("b",) and sel.pairs is None


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
        ({"layer": "no.such.layer"}, ValueError, "submodule"),
        ({"layer": 3}, TypeError, "layer"),
        ({"max_itemsets": 0}, ValueError, "max_itemsets"),
        ({"max_bytes": 1.5}, TypeError, "max_bytes"),
        ({"max_seconds": -1.0}, ValueError, "max_seconds"),
        ({"max_seconds": "1"}, TypeError, "max_seconds"),
        ({"max_gigabytes": 1}, TypeError, "max_gigabytes"),
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


# ------------------------------------------------------------------------------------ explainer and acceptance


def test_explainer_passes_selection_options_through():
    g = torch.Generator().manual_seed(11)
    X = torch.randn(400, 6, generator=g)
    model = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[2.0, -1.5, 1.0, 0.0, 0.0, 0.5]]))
        model[0].bias.zero_()
    opts = {"max_length": 2, "n_test_per_class": 20, "n_steps": 5}
    got = RegionalRuleExplainer(model).explain(X, 1, threshold=0.5, select_features=opts, progress=False)
    mask = (model(X).squeeze(1) > 0.5).long()
    direct = select_features(model, X, mask, **opts)
    assert got.selection.features == direct.features and len(direct.features) == 2
    assert json.loads(json.dumps(got.selection.to_dict()))["features"] == list(direct.features)


@pytest.mark.slow
def test_four_of_three_thousand_inputs_default_options():
    """Issue 16, acceptance 2: an MLP on 3,000 inputs that weighs 4 of them (small weights on the rest): the budget
    runs out and the fallback keeps only relevant features, at least two."""
    relevant = [5, 100, 2000, 2999]
    g = torch.Generator().manual_seed(0)
    model = nn.Sequential(nn.Linear(3000, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        w = torch.randn(32, 3000, generator=g) * 0.01
        w[:, relevant] = torch.randn(32, 4, generator=g)
        model[0].weight.copy_(w)
        model[0].bias.zero_()
        model[2].weight.copy_(torch.randn(1, 32, generator=g))
    X = torch.randn(2000, 3000, generator=g)
    with torch.no_grad():
        out = model(X).squeeze(1)
    with pytest.warns(UserWarning, match="fallback"):
        sel = select_features(model, X, out > out.median(), n_steps=10)
    assert not sel.exact and set(sel.features) <= set(relevant) and len(sel.features) >= 2


def test_repr_flags_a_fallback():
    J, _ = _noisy_importance(2)
    with pytest.warns(UserWarning, match="fallback"):
        sel = select_features(importance=J, max_itemsets=1)
    assert repr(sel).endswith(", exact=False)")
    assert "exact" not in repr(select_features(importance=J[:, [7, 50]]))
