"""RegionalRuleExplainer: rules on layers / inputs / separate features, data paths, targets, local rules, errors."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from rule_compare import assert_activations_close, assert_rule_sets_close
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from torch_amore import RegionalExplanation, RegionalRuleExplainer, RuleSet, extract_rules
from torch_amore.rules.metrics import rule_metrics

OPTS = dict(max_length=2, min_support=40, n_grids=6, top_k=3, progress=False)


def _mlp(seed: int = 0, n_out: int = 3) -> nn.Sequential:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Dropout(0.5), nn.Linear(8, n_out))


@pytest.fixture
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    X = torch.randn(600, 4, generator=g)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 0.5).long()
    return X, y


def _scorer() -> nn.Sequential:
    """A single-logit model that tracks the toy labels (y > 0), with a hidden layer."""
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [0.3, -0.2, 0, 0.5]]))
        model[0].bias.zero_()
        model[2].weight.copy_(torch.tensor([[2.0, 1.5, 0.3, 0.2]]))
        model[2].bias.fill_(0.2)
    return model


def _hooks(model: nn.Module) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


# --------------------------------------------------------------------------------------------------- acceptance 1


def test_layer_rules_equal_extract_rules_on_activations_by_hand(data):
    X, _ = data
    model = _mlp()
    model.train()  # the explainer must switch to eval (dropout off) and back
    with torch.no_grad():
        model.eval()
        hidden = torch.relu(model[0](X))  # by hand
        predicted = (hidden @ model[3].weight.T + model[3].bias).argmax(1)
        model.train()
    c = int(torch.bincount(predicted).argmin())
    expected = extract_rules(hidden, predicted == c, feature_names=[f"z_{i}" for i in range(8)], **OPTS)
    assert expected, "the toy task should yield rules"
    for layer, layer_input in [(model[1], False), ("1", False), (model[2], True), ("3", True)]:
        explanation = RegionalRuleExplainer(model, layer, layer_input=layer_input).explain(X, c, **OPTS)
        assert_rule_sets_close(explanation.rule_sets, expected)  # batches of 256 vs one matmul: ulps apart
        assert torch.equal(explanation.subgroup, predicted == c)
        assert_activations_close(explanation.features_matrix, hidden)
    assert model.training and all(m.training for m in model.modules())
    assert _hooks(model) == 0


def test_dataloader_dataset_and_dict_paths_equal_tensor_path(data):
    X, y = data
    model = _mlp()
    explainer = RegionalRuleExplainer(model, "1")
    ref = explainer.explain(X, 2, **OPTS)

    class DictData(Dataset):
        def __len__(self):
            return len(X)

        def __getitem__(self, i):
            return {"image": X[i], "label": y[i]}

    runs = [
        explainer.explain(DataLoader(TensorDataset(X, y), batch_size=64), 2, **OPTS),
        explainer.explain(TensorDataset(X, y), 2, batch_size=50, **OPTS),
        explainer.explain(X, 2, batch_size=7, **OPTS),
        explainer.explain(DataLoader(DictData(), batch_size=33), 2, input_key="image", label_key="label", **OPTS),
        explainer.explain(DataLoader(DictData(), batch_size=33), 2, input_key=lambda b: b["image"], **OPTS),
    ]
    for run in runs:
        assert_rule_sets_close(run.rule_sets, ref.rule_sets)  # batch sizes differ: activations may differ in ulps
        assert torch.equal(run.subgroup, ref.subgroup)
        assert_activations_close(run.features_matrix, ref.features_matrix)  # batches of 64, 50, 7, 33 vs 256


def test_labels_come_from_tuple_and_dict_batches_for_roc(data):
    X, y = data
    model = _scorer()
    labels = (y > 0).long()
    explainer = RegionalRuleExplainer(model)
    ref = explainer.explain(X, 1, labels=labels, threshold="roc", **OPTS)
    loader = DataLoader(TensorDataset(X, labels), batch_size=128)
    assert math.isclose(explainer.explain(loader, 1, threshold="roc", **OPTS).threshold, ref.threshold, rel_tol=1e-5)
    dict_loader = DataLoader([{"x": a, "y": b} for a, b in zip(X, labels)], batch_size=100)
    run = explainer.explain(dict_loader, 1, threshold="roc", input_key="x", label_key="y", **OPTS)
    assert math.isclose(run.threshold, ref.threshold, rel_tol=1e-5)
    assert_rule_sets_close(run.rule_sets, ref.rule_sets)


def test_tuple_inputs_are_positional_model_inputs(data):
    X, _ = data

    class Two(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(2, 3), nn.Linear(2, 3)

        def forward(self, u, v):
            return self.a(u) + self.b(v)

    torch.manual_seed(0)
    model = Two()
    with torch.no_grad():
        expected_mask = model(X[:, :2], X[:, 2:]).argmax(1) == 1
    expl = RegionalRuleExplainer(model, "a").explain((X[:, :2], X[:, 2:]), 1, **OPTS)
    assert torch.equal(expl.subgroup, expected_mask)
    loader = DataLoader(TensorDataset(X[:, :2], X[:, 2:]), batch_size=100)
    batched = RegionalRuleExplainer(model, "a").explain(loader, 1, input_key=(0, 1), **OPTS)
    assert_rule_sets_close(batched.rule_sets, expl.rule_sets)  # batches of 100 vs 256


def test_rules_on_inputs_and_on_a_separate_features_matrix(data):
    X, y = data
    model = _mlp()
    with torch.no_grad():
        mask = model.eval()(X).argmax(1) == 2
    expected = extract_rules(X, mask, **OPTS)
    assert RegionalRuleExplainer(model).explain(X, 2, **OPTS).rule_sets == expected
    F = torch.cat([X[:, :2] * 10, y[:, None].double()], 1).double()
    names = ["a", "b", "label"]
    got = RegionalRuleExplainer(model, "1").explain(X, 2, features=F, feature_names=names, **OPTS)
    assert got.rule_sets == extract_rules(F, mask, feature_names=names, **OPTS)
    assert got.params["source"] == "features" and torch.equal(got.features_matrix, F)
    # feature indices restrict the search
    sub = RegionalRuleExplainer(model).explain(X, 2, features=[1, 3], **OPTS)
    assert sub.rule_sets == extract_rules(X, mask, features=[1, 3], **OPTS) and sub.features == [1, 3]
    assert {r.feature for rs in sub for r in rs.rules} <= {1, 3}


# --------------------------------------------------------------------------------------------------- targets


def test_target_kinds_define_the_expected_subgroups(data):
    X, _ = data
    model = _mlp()
    with torch.no_grad():
        out = model.eval()(X)
    explainer = RegionalRuleExplainer(model, "1")
    mask = out[:, 0] > out[:, 1]
    assert torch.equal(explainer.explain(X, mask, **OPTS).subgroup, mask)
    assert torch.equal(explainer.explain(X, mask.numpy(), **OPTS).subgroup, mask)
    assert torch.equal(explainer.explain(X, lambda o: o[:, 2] > 0.1, **OPTS).subgroup, out[:, 2] > 0.1)
    assert torch.equal(explainer.explain(X, torch.tensor(2), **OPTS).subgroup, out.argmax(1) == 2)
    # multi-class with a probability threshold: softmax probability of the class
    prob = torch.softmax(out.double(), 1)[:, 1]
    got = explainer.explain(X, 1, threshold=0.4, **OPTS)
    assert got.threshold == 0.4 and torch.equal(got.subgroup, prob > 0.4)
    # regression: a value range of a single output, [low, high)
    reg = _mlp(n_out=1)
    with torch.no_grad():
        y = reg.eval()(X)[:, 0]
    lo, hi = float(y.quantile(0.6)), float(y.quantile(0.9))
    got = RegionalRuleExplainer(reg).explain(X, (lo, hi), **OPTS)
    assert torch.equal(got.subgroup, (y >= lo) & (y < hi))
    assert torch.equal(RegionalRuleExplainer(reg).explain(X, (hi, None), **OPTS).subgroup, y >= hi)


def test_binary_single_output_thresholds_and_roc_against_sklearn(data):
    from sklearn.metrics import roc_curve

    X, y = data
    labels = (y > 0).long()
    logit_model = _scorer()
    prob_model = nn.Sequential(logit_model, nn.Sigmoid())
    with torch.no_grad():
        p = torch.sigmoid(logit_model.eval()(X)[:, 0])
    fpr, tpr, thr = roc_curve(labels.numpy(), p.numpy())
    best = float(thr[np.argmax(tpr - fpr)])
    for model in (logit_model, prob_model):  # logits go through a sigmoid, probabilities are used as they are
        ex = RegionalRuleExplainer(model)
        assert torch.equal(ex.explain(X, 1, **OPTS).subgroup, p > 0.5)
        assert torch.equal(ex.explain(X, 1, threshold=0.3, **OPTS).subgroup, p > 0.3)
        assert torch.equal(ex.explain(X, 0, threshold=0.3, **OPTS).subgroup, ~(p > 0.3))
        roc = ex.explain(X, 1, labels=labels, threshold="roc", **OPTS)
        assert roc.threshold == pytest.approx(best, abs=1e-6)
        assert torch.equal(roc.subgroup, p > roc.threshold)


def test_paper_diabetes_subgroup_from_the_logistic_model(diabetes_task):
    d = diabetes_task
    X = torch.from_numpy(d["X"])
    model = nn.Sequential(nn.Linear(X.shape[1], 1), nn.Sigmoid()).double()
    with torch.no_grad():
        model[0].weight.copy_(torch.from_numpy(d["coef"]).reshape(1, -1))
        model[0].bias.copy_(torch.from_numpy(np.asarray(d["intercept"])).reshape(1))
    ex = RegionalRuleExplainer(model, feature_names=[str(n) for n in d["feature_names"]])
    labels = torch.from_numpy(d["y"]).long()
    got = ex.explain(X, 1, labels=labels, threshold="roc", max_length=1, min_support=2000, n_grids=7,
                     batch_size=10_000, progress=False)  # fmt: skip
    assert got.threshold == pytest.approx(float(d["threshold"]), abs=1e-9)
    assert torch.equal(got.subgroup, torch.from_numpy(d["target"]))


# --------------------------------------------------------------------------------------------------- local rules


def test_local_rules_contain_the_sample(data):
    X, _ = data
    model = _mlp()
    explainer = RegionalRuleExplainer(model, "1")
    ref = explainer.explain(X, 2, **OPTS)
    inside = torch.nonzero(ref.subgroup).flatten()
    for i in inside[:5].tolist():
        for x in (i, X[i], X[i : i + 1]):
            local = explainer.explain_local(x, X, 2, **OPTS)
            assert local.rule_sets, "a subgroup member should get local rules"
            z = ref.features_matrix[i : i + 1]
            assert_activations_close(local.sample, z[0])  # one-sample forward vs batched forward
            for rs in local.rule_sets:
                assert bool(rs.mask(local.sample[None])[0]), f"{rs} does not contain sample {i}"
                m = rule_metrics(rs.mask(ref.features_matrix), ref.subgroup)
                assert (m.support, m.confidence) == (rs.support, pytest.approx(rs.confidence))


def test_local_rules_for_an_outlier_are_empty_with_a_message():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(500, 2, generator=g)
    ident = nn.Identity()
    target = X[:, 0] > 0.7
    far = torch.tensor([0.0, 0.5])  # no interval around x_0 = 0 raises the subgroup's share
    with pytest.warns(UserWarning, match="outlier"):
        local = RegionalRuleExplainer(ident).explain_local(far, X, target, max_length=1, min_support=50,
                                                          progress=False)  # fmt: skip
    assert local.rule_sets == [] and local.best is None and "outlier" in local.message
    assert "outlier" in str(local)


def test_paper_diabetes_local_rules_for_a_high_probability_test_sample(diabetes_task):
    d = diabetes_task
    X, X_test = torch.from_numpy(d["X"]), torch.from_numpy(d["X_test"])
    target = torch.from_numpy(d["target"])
    i = int(np.argmax(d["prob_test"]))
    assert d["prob_test"][i] > 0.9
    ex = RegionalRuleExplainer(nn.Identity(), feature_names=[str(n) for n in d["feature_names"]])
    local = ex.explain_local(X_test[i], X, target, max_length=3, min_support=1000, n_grids=7, progress=False)
    assert local.rule_sets
    assert all(bool(rs.mask(X_test[i : i + 1])[0]) for rs in local.rule_sets)
    assert all(rs.support >= 1000 for rs in local.rule_sets)
    best = local.best
    m = rule_metrics(best.mask(X), target)
    assert (m.support, m.confidence, m.fitness) == (best.support, pytest.approx(best.confidence),
                                                     pytest.approx(best.fitness))  # fmt: skip
    assert best.confidence > 0.9


# --------------------------------------------------------------------------------------------------- the result


def test_explanation_serializes_and_evaluates_on_new_data(tmp_path, data):
    X, y = data
    model = _mlp()
    explainer = RegionalRuleExplainer(model, "1")
    expl = explainer.explain(X[:400], 2, **OPTS)
    path = tmp_path / "rules.json"
    expl.to_json(path)
    back = RegionalExplanation.from_json(path)
    assert back.rule_sets == expl.rule_sets and back.feature_names == expl.feature_names
    assert back.threshold == expl.threshold and back.params == expl.params and back.features == expl.features
    for a, b in zip(back.rule_sets, expl.rule_sets):
        assert torch.equal(a.mask(expl.features_matrix), b.mask(expl.features_matrix))
    # evaluate on a held-out part, against masks computed by hand
    X_test = X[400:]
    with torch.no_grad():
        hidden = torch.relu(model[0](X_test))
        mask = model.eval()(X_test).argmax(1) == 2
    metrics = expl.evaluate(X_test)
    assert len(metrics) == len(expl.rule_sets)
    for rs, m in zip(expl.rule_sets, metrics):
        r = rs.mask(hidden)
        hits = int((r & mask).sum())
        assert m.support == int(r.sum())
        assert m.confidence == pytest.approx(hits / max(1, int(r.sum())))
        assert m.fitness == pytest.approx((2 * hits - int(r.sum())) / int(mask.sum()))
    assert back.evaluate(hidden, target=mask) == metrics  # without explainer: a feature matrix and a mask
    assert RegionalExplanation.from_json(path, explainer=explainer).evaluate(X_test) == metrics
    # table, html, dataframe
    text = str(expl)
    assert "predicted 2" in text and expl.best.rules[0].format() in text
    assert "<table>" in expl._repr_html_()
    df = expl.to_dataframe(distinct=False, include_negative=True)  # every rule set
    assert df["support"].tolist() == [rs.support for rs in expl.rule_sets]
    assert df["fitness"].tolist() == [rs.fitness for rs in expl.rule_sets]
    assert df["length"].tolist() == [len(rs) for rs in expl.rule_sets]


def test_select_features_restricts_the_search_to_the_selection():
    pytest.importorskip("mlxtend")
    from torch_amore import select_features

    g = torch.Generator().manual_seed(0)
    X = torch.randn(800, 6, generator=g)
    model = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[3.0, 0.0, 0.0, -2.0, 0.0, 0.0]]))
        model[0].bias.zero_()
    got = RegionalRuleExplainer(model).explain(X, 1, select_features=True, **OPTS)
    mask = model(X)[:, 0].detach() > 0.5
    selection = select_features(model, X, mask.long())
    assert tuple(got.features) == tuple(selection.features) == (0, 3)
    assert got.selection is not None and tuple(got.selection.features) == (0, 3)
    assert got.rule_sets == extract_rules(X, mask, features=selection.features, **OPTS)


# --------------------------------------------------------------------------------------------------- errors


class _Boom(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)
        self.fail = False

    def forward(self, x):
        h = self.fc(x)
        if self.fail:
            raise RuntimeError("boom")
        return h


def test_hooks_removed_and_modes_restored_on_errors(data):
    X, _ = data
    model = _Boom()
    model.train()
    model.fc.eval()  # a mixed state must come back exactly
    explainer = RegionalRuleExplainer(model, "fc")
    model.fail = True
    with pytest.raises(RuntimeError, match="boom"):
        explainer.explain(X, 1, **OPTS)
    assert _hooks(model) == 0 and model.training and not model.fc.training
    model.fail = False
    with pytest.raises(ValueError, match="number of model outputs"):
        explainer.explain(X, 7, **OPTS)
    assert _hooks(model) == 0 and model.training and not model.fc.training
    nan_model = nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3))
    with torch.no_grad():
        nan_model[1].bias[0] = float("nan")
    nan_model.train()
    with pytest.raises(ValueError, match="NaN"):
        RegionalRuleExplainer(nan_model, "0").explain(X, 1, **OPTS)
    assert _hooks(nan_model) == 0 and nan_model.training
    with pytest.raises(ValueError, match="run once"):  # a module called twice per forward
        shared = nn.Linear(4, 4)
        RegionalRuleExplainer(nn.Sequential(shared, nn.ReLU(), shared), shared).explain(X, 1, **OPTS)
    assert _hooks(shared) == 0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(target=1, threshold="roc"), ValueError, "labels"),
        (dict(target=1, features=torch.zeros(10, 2)), ValueError, r"one row per sample .*600.* 10 rows"),
        (dict(target=7), ValueError, "number of model outputs"),
        (dict(target=(0.1, 0.5)), ValueError, "single model output"),
        (dict(target=True), TypeError, "class index"),
        (dict(target=torch.ones(600, dtype=torch.bool)), ValueError, "some but not all"),
        (dict(target=torch.zeros(5, dtype=torch.bool)), ValueError, "one entry per sample"),
        (dict(target=1, threshold=1.5), ValueError, "probability"),
        (dict(target=1, threshold="best"), ValueError, "'roc'"),
        (dict(target=lambda o: o[:, 0] > 0, threshold=0.5), ValueError, "class-index"),
        (dict(target=lambda o: o[:, 0]), TypeError, "boolean mask"),
        (dict(target=1, max_length=0), ValueError, "max_length"),
        (dict(target=1, bin_strategy="bogus"), ValueError, "bin_strategy"),
        (dict(target=1, min_support=10_000), ValueError, "min_support"),
    ],
)
def test_bad_arguments_raise_clear_errors(data, kwargs, error, match):
    X, _ = data
    model = _mlp()
    with pytest.raises(error, match=match):
        RegionalRuleExplainer(model, "1").explain(X, progress=False, **kwargs)
    assert _hooks(model) == 0


def test_bad_layers_inputs_and_batches(data):
    X, y = data
    model = _mlp()
    with pytest.raises(ValueError, match="submodule"):
        RegionalRuleExplainer(model, "encoder.fc")
    with pytest.raises(ValueError, match="not part of it"):
        RegionalRuleExplainer(model, nn.Linear(2, 2))
    with pytest.raises(TypeError, match="nn.Module"):
        RegionalRuleExplainer(lambda x: x)
    ex = RegionalRuleExplainer(model, "1")
    with pytest.raises(ValueError, match="at least one sample"):
        ex.explain(DataLoader(TensorDataset(X[:0], y[:0]), batch_size=8), 1, **OPTS)
    with pytest.raises(TypeError, match="DataLoader"):
        ex.explain([1, 2, 3], 1, **OPTS)
    with pytest.raises(ValueError, match="input_key"):
        ex.explain(DataLoader([{"x": a} for a in X], batch_size=50), 1, **OPTS)
    with pytest.raises(ValueError, match="select an element"):
        ex.explain(DataLoader([{"x": a} for a in X], batch_size=50), 1, input_key="image", **OPTS)
    with pytest.raises(ValueError, match="shuffle=False"):
        ex.explain(DataLoader(TensorDataset(X, y), shuffle=True), 1, features=X, **OPTS)
    with pytest.raises(ValueError, match="one row per sample"):  # a node-level layer of a graph model, say
        ex2 = RegionalRuleExplainer(nn.Sequential(nn.Unflatten(1, (2, 2)), nn.Flatten(0, 1), nn.Unflatten(0, (-1, 2)),
                                                  nn.Flatten()), "1")  # fmt: skip
        ex2.explain(X, 1, **OPTS)
    with pytest.raises(ValueError, match="`features=`"):
        RegionalRuleExplainer(model).explain(X, 1, select_features=True, features=[0, 1], **OPTS)


def test_empty_dataloader_without_known_length_raises():
    class Empty(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(())

    model = _mlp()
    with pytest.raises(ValueError, match="no batches"):
        RegionalRuleExplainer(model, "1").explain(DataLoader(Empty(), batch_size=4), 1, **OPTS)
    assert _hooks(model) == 0


def test_progress_bar_and_device_roundtrip(data, capsys):
    X, _ = data
    model = _mlp()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        expl = RegionalRuleExplainer(model, "1").explain(X, 2, batch_size=100, max_length=2, min_support=40,
                                                         n_grids=6, progress=True)  # fmt: skip
    assert expl.rule_sets and math.isfinite(expl.best.fitness)
    assert isinstance(expl.best, RuleSet)
