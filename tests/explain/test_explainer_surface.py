"""The explainer's whole surface (issue 14): every search option, no swallowed keywords, per-sample model arguments,
guardrails for rare subgroups, rules in the user's units, graph inputs, and small input mismatches."""

from __future__ import annotations

import json
import math
import re
import warnings

import numpy as np
import pytest
import torch
from graph_models import GCN
from rule_compare import assert_activations_close, assert_rule_sets_close
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, WeightedRandomSampler

import torch_amore
from torch_amore import RegionalExplanation, RegionalRuleExplainer, SearchOptions, extract_rules, search_hyperparameters
from torch_amore.rules.metrics import rule_metrics

FAST = dict(max_length=2, n_grids=6, progress=False)


def _ten_class_model() -> nn.Sequential:
    """4 inputs -> 8 hidden units -> 10 classes; class 7 wins where hidden unit 0 is large."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 10))
    with torch.no_grad():
        model[2].weight.mul_(0.1)
        model[2].weight[7, 0] = 3.0
        model[2].bias.zero_()
        model[2].bias[7] = -1.5
    return model


def _hidden_and_prediction(model: nn.Sequential, X: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        hidden = torch.relu(X @ model[0].weight.T + model[0].bias)  # by hand
        return hidden, (hidden @ model[2].weight.T + model[2].bias).argmax(1)


@pytest.fixture(scope="module")
def task() -> tuple[torch.Tensor, nn.Sequential]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(1200, 4, generator=g), _ten_class_model()


# --------------------------------------------------------------------------------------------------- acceptance 1


def test_every_search_option_reaches_the_search_through_explain(task):
    X, model = task
    hidden, predicted = _hidden_and_prediction(model, X)
    mask = predicted == 7
    assert 0.05 < float(mask.double().mean()) < 0.6
    s, o = [2.0 + i for i in range(8)], [float(-i) for i in range(8)]
    kw = dict(strategy="paper", min_confidence=0.9, beam_width=3, feature_scale=s, feature_offset=o, min_support=60)
    names = [f"z_{i}" for i in range(8)]
    expected = extract_rules(hidden, mask, feature_names=names, target_name="predicted 7", **FAST, **kw)
    assert expected and all(rs.confidence >= 0.9 for rs in expected)
    explainer = RegionalRuleExplainer(model, "1")
    got = explainer.explain(X, 7, **FAST, **kw)
    assert_rule_sets_close(got.rule_sets, expected)
    assert [str(a) for a in got.rule_sets] == [str(b) for b in expected]  # printed in the scaled units
    by_object = explainer.explain(X, 7, options=SearchOptions(**FAST, **kw))
    assert by_object.rule_sets == got.rule_sets
    assert got.params["strategy"] == "paper" and got.params["min_confidence"] == 0.9 and got.params["beam_width"] == 3
    # the beam strategy with the same confidence floor and beam width
    beam = dict(kw, strategy="beam")
    assert_rule_sets_close(
        explainer.explain(X, 7, **FAST, **beam).rule_sets,
        extract_rules(hidden, mask, feature_names=names, target_name="predicted 7", **FAST, **beam),
    )


def test_search_hyperparameters_takes_the_same_options_as_the_explainer(task):
    X, model = task
    hidden, predicted = _hidden_and_prediction(model, X)
    mask = predicted == 7
    options = SearchOptions(strategy="paper", min_confidence=0.9, beam_width=3, feature_scale=[3.0] * 8, **FAST)
    result = search_hyperparameters(
        hidden, mask, options=options, bin_strategies="uniform", n_grids=6, min_supports=60, confidence_lower_bound=0.0
    )
    direct = extract_rules(hidden, mask, options=options, min_support=60)
    assert direct and result.best == direct[0]


# --------------------------------------------------------------------------------------------------- acceptance 2


def test_a_misspelt_option_is_a_type_error_before_the_model_runs(task):
    X, model = task
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        explainer = RegionalRuleExplainer(model, "1")
        with pytest.raises(TypeError, match=r"'min_suport'.*did you mean 'min_support'"):
            explainer.explain(X, 7, min_suport=50)
        with pytest.raises(TypeError, match=r"'beam_widht'.*did you mean 'beam_width'"):
            explainer.explain_local(0, X, 7, beam_widht=3)
        with pytest.raises(TypeError, match="forward_kwargs"):
            explainer.explain(X, 7, forward_kwargs=[("scale", 2)])
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"feature_names": 5}, TypeError, "`feature_names`"),
        ({"feature_names": torch.tensor(3)}, TypeError, "`feature_names`"),
        ({"stream": np.array([1, 2])}, ValueError, "`stream`"),
        ({"local": {"row": 1}}, TypeError, "`x`"),
        ({"local": "row 3"}, TypeError, "`x`"),
        ({"local": 1.5}, TypeError, "`x`"),
        ({"features": [0.5, 2]}, ValueError, "whole feature indices"),
        ({"features": [True, False, True, False]}, TypeError, "booleans (a mask?)"),
        ({"features": torch.tensor([True, False, True, False])}, TypeError, "booleans (a mask?)"),
        ({"input_key": "x"}, ValueError, "`input_key` only with a Dataset or DataLoader"),
        ({"input_key": 3.5}, TypeError, "`input_key` to be an index or key of the batches"),
        ({"feature_names": ["a", "b", "a", "c", "d", "e", "f", "g"]}, ValueError, "duplicates ['a']"),
        ({"target": 1.0}, TypeError, "got 1.0 (float)"),
        ({"target": "7"}, TypeError, "got '7' (str)"),
        ({"target": None}, TypeError, "got None (NoneType)"),
        ({"target": [7, 0, 3] * 400}, TypeError, "Captum's per-sample output indices are not a subgroup"),
        ({"target": np.zeros(1200, dtype=np.int64)}, TypeError, "boolean mask of the subgroup, but got dtype int64"),
        ({"target": (7, "a")}, TypeError, "a (low, high) range of a regression output"),
        ({"label_key": 1}, ValueError, "drop `label_key` and pass the labels as `labels=`"),
    ],
)
def test_odd_arguments_are_refused_by_name_before_the_model_runs(task, kwargs, error, words):
    # not numpy's or torch's own message about truth values or iteration, and no silent reading of a fraction or a
    # boolean mask as feature indices (``int(0.5)`` is 0, ``int(True)`` is 1)
    X, model = task
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(error) as info:
            RegionalRuleExplainer(model).explain(X, **{"target": 7, **kwargs}, **FAST)
    finally:
        handle.remove()
    assert words in str(info.value)
    assert calls == []


def test_a_loader_dropping_its_last_batch_counts_the_rows_the_model_sees(task):
    # 1,200 rows in batches of 500 with drop_last: the model sees 1,000; per-row arguments are checked on those
    # before the model runs, and the explanation is that of the first 1,000 rows
    X, model = task
    loader = DataLoader(TensorDataset(X), batch_size=500, drop_last=True)
    with torch.no_grad():
        predicted = model(X).argmax(1) == 7
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        for kwargs in ({"target": predicted}, {"target": 7, "holdout_rows": torch.arange(1200) % 4 == 1}):
            with pytest.raises(
                ValueError, match=r"1000\D.*the loader dropping its last partial batch \(drop_last=True\)"
            ):
                RegionalRuleExplainer(model).explain(loader, **kwargs, **FAST)
        assert calls == []
    finally:
        handle.remove()
    held = torch.arange(1000) % 4 == 1
    got = RegionalRuleExplainer(model).explain(loader, predicted[:1000], holdout_rows=held, min_support=40, **FAST)
    expected = RegionalRuleExplainer(model).explain(X[:1000], 7, holdout_rows=held, min_support=40, **FAST)
    assert got.params["n_samples"] == 1000 and expected.rule_sets
    assert got.rule_sets == expected.rule_sets
    assert [rs.held_out for rs in got.rule_sets] == [rs.held_out for rs in expected.rule_sets]


def test_evaluate_and_verify_refuse_an_unknown_keyword_before_the_model_runs(task):
    X, model = task
    explanation = RegionalRuleExplainer(model, "1").explain(X, 7, min_support=60, **FAST)
    calls = []
    handle = model.register_forward_hook(lambda *a: calls.append(1))
    try:
        with pytest.raises(
            TypeError, match=r"^RegionalExplanation.evaluate\(\) got an unexpected keyword argument 'bs'$"
        ):
            explanation.evaluate(X, bs=64)
        with pytest.raises(
            TypeError, match=r"^RegionalExplanation.verify\(\) got an unexpected keyword argument 'label_key'$"
        ):
            explanation.verify(X, label_key=1)
        assert calls == []
        # the keywords of the group reach the model run: the metrics with another batch size and a progress bar
        # equal those computed by hand on the hidden layer
        hidden, predicted = _hidden_and_prediction(model, X)
        expected = [rs.evaluate(hidden, predicted == 7) for rs in explanation.rule_sets]
        assert explanation.evaluate(X, batch_size=77, progress=False, input_key=None) == expected
        assert len(calls) == -(-len(X) // 77)
    finally:
        handle.remove()


def test_explain_local_is_explain_with_local_and_refuses_what_it_cannot_do(task):
    X, model = task
    explainer = RegionalRuleExplainer(model, "1")
    hidden, predicted = _hidden_and_prediction(model, X)
    row = int(torch.nonzero(predicted == 7)[0])
    via_local = explainer.explain_local(row, X, 7, max_length=2, min_support=40)
    via_explain = explainer.explain(X, 7, local=row, max_length=2, min_support=40)
    assert len(via_local) > 0
    assert [str(rs) for rs in via_local] == [str(rs) for rs in via_explain]
    for rule_set in via_local:  # every interval holds the sample's own hidden activations, computed by hand
        assert bool(rule_set.mask(hidden[row : row + 1])[0])
    with pytest.raises(TypeError, match="`x` only"):
        explainer.explain_local(row, X, 7, local=row)
    with pytest.raises(ValueError, match=r"local rules \(explain_local\) with stream=True"):
        explainer.explain_local(row, X, 7, stream=True)
    with pytest.raises(ValueError, match="sample `x`"):
        explainer.explain_local(None, X, 7)


class _Weighted(nn.Module):
    """Two logits; the second scaled per sample by ``w`` (positional or keyword) and shifted by a shared ``bias``."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        out = self.fc(x)
        out = torch.stack([out[:, 0], out[:, 1] * w], 1)
        return out if bias is None else out + bias


def test_per_sample_model_arguments_are_batched_with_the_inputs():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(700, 3, generator=g)
    w = torch.rand(700, generator=g) * 4 - 1
    bias = torch.tensor([0.3, -0.2])  # shared: passed whole
    torch.manual_seed(0)
    model = _Weighted()
    with torch.no_grad():
        expected = model(X, w, bias).argmax(1) == 1  # the whole data in one call, by hand
    assert 0.1 < float(expected.double().mean()) < 0.9
    explainer = RegionalRuleExplainer(model, "fc")
    runs = [
        explainer.explain(X, 1, batch_size=64, forward_kwargs={"w": w, "bias": bias}, **FAST),
        explainer.explain(X, 1, batch_size=50, additional_forward_args=(w,), forward_kwargs={"bias": bias}, **FAST),
        explainer.explain(X.numpy(), 1, batch_size=99, additional_forward_args=(w.numpy(), bias.numpy()), **FAST),
        explainer.explain(DataLoader(TensorDataset(X), batch_size=128), 1, additional_forward_args=(w, bias), **FAST),
    ]
    for run in runs:
        assert torch.equal(run.subgroup, expected)
    # new data need their own per-sample arguments; given, the metrics are those computed by hand
    with pytest.raises(ValueError, match="per-sample"):
        runs[0].evaluate(X)
    with torch.no_grad():
        hidden = model.fc(X)
    metrics = runs[0].evaluate(X, forward_kwargs={"w": w, "bias": bias})
    assert metrics == [rs.evaluate(hidden, expected) for rs in runs[0].rule_sets]
    with pytest.raises(ValueError, match="in order"):  # per-sample arguments need the rows in order
        sampler = WeightedRandomSampler(torch.ones(700), 700)
        explainer.explain(DataLoader(TensorDataset(X), sampler=sampler, batch_size=100), 1,
                          forward_kwargs={"w": w}, **FAST)  # fmt: skip


# --------------------------------------------------------------------------------------------------- acceptance 3


class _Corner(nn.Module):
    """Binary classifier (two logits) predicting 1 iff x_0 > 0.9 and x_1 > 0.89: about 1.1 % of uniform data."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        margin = torch.minimum(x[:, 0] - 0.9, x[:, 1] - 0.89)
        return torch.stack([torch.zeros_like(margin), 50 * margin], 1)


@pytest.fixture(scope="module")
def rare() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    X = torch.rand(4000, 3, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0.9) & (X[:, 1] > 0.89)


def test_a_one_percent_subgroup_gets_rules_with_positive_fitness_by_default(rare):
    X, mask = rare
    n, size = X.shape[0], int(mask.sum())
    assert 0.005 < size / n < 0.02
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no guardrail warning
        got = RegionalRuleExplainer(_Corner()).explain(X, 1, progress=False)
    assert torch.equal(got.subgroup, mask)
    assert got.params["min_support"] is None
    assert got.params["min_support_count"] == math.ceil(min(0.05 * n, 0.5 * size))  # the documented rule
    best = got.best
    m = rule_metrics(best.mask(X), mask)  # recomputed from the mask
    assert (m.support, m.confidence, m.fitness) == (best.support, pytest.approx(best.confidence),
                                                     pytest.approx(best.fitness))  # fmt: skip
    assert best.fitness > 0.8 and got.message == ""


def test_min_support_above_the_subgroup_warns_and_negative_rule_sets_leave_the_tables(rare):
    X, mask = rare
    size = int(mask.sum())
    with pytest.warns(UserWarning, match=r"exceeds the subgroup .*positive fitness") as record:
        got = RegionalRuleExplainer(_Corner()).explain(X, 1, min_support=0.05, **FAST)  # 200 samples > subgroup
    assert f"({size} of 4000 samples)" in str(record[0].message) and got.message == str(record[0].message)
    assert got.rule_sets and all(rs.fitness < 0 for rs in got.rule_sets)  # kept in the list
    text = got.format()
    assert "no rule sets with positive fitness" in text and f"{len(got.rule_sets)} with fitness <= 0" in text
    assert len(got.to_dataframe()) == 0
    full = got.to_dataframe(include_negative=True, distinct=False)
    assert len(full) == len(got.rule_sets) and not full["positive_fitness"].any()
    assert str(got.rule_sets[0].rules[0]) in got.format(include_negative=True, distinct=False)
    # a count above the subgroup warns too (the 21-row subgroup with min_support=400)
    small = torch.zeros(4000, dtype=torch.bool)
    small[torch.nonzero(mask).flatten()[:21]] = True
    with pytest.warns(UserWarning, match=r"min_support \(400 samples\) exceeds the subgroup \(21 of 4000"):
        RegionalRuleExplainer(nn.Identity()).explain(X, small, min_support=400, **FAST)


def test_lift_recall_and_base_rate_beside_the_metrics(rare, tmp_path):
    X, mask = rare
    got = RegionalRuleExplainer(_Corner()).explain(X, 1, min_support=10, **FAST)
    n, size = X.shape[0], int(mask.sum())
    df = got.to_dataframe(include_negative=True, distinct=False)
    assert len(df) == len(got.rule_sets) > 1
    for (_, row), rs in zip(df.iterrows(), got.rule_sets):
        r = rs.mask(X)
        hits, support = int((r & mask).sum()), int(r.sum())
        assert row["support"] == support
        assert row["base_rate"] == pytest.approx(size / n)
        assert row["lift"] == pytest.approx((hits / support) / (size / n))
        assert row["recall"] == pytest.approx(hits / size)
        assert row["positive_fitness"] == (2 * hits - support > 0)
    path = tmp_path / "e.json"
    got.to_json(path)
    data = json.loads(path.read_text())
    assert data["format_version"] == 3 and data["library_version"] == torch_amore.__version__
    assert [r["recall"] for r in data["rule_sets"]] == pytest.approx(df["recall"].tolist())
    assert [r["lift"] for r in data["rule_sets"]] == pytest.approx(df["lift"].tolist())
    back = RegionalExplanation.from_json(path)
    assert back.rule_sets == got.rule_sets and back.params == json.loads(json.dumps(got.params))
    old = {k: v for k, v in data.items() if k not in ("format_version", "library_version", "selection")}
    old["version"] = 1  # a file of the first format: rule sets without the derived columns
    old["rule_sets"] = [{k: v for k, v in r.items() if k not in ("lift", "recall", "base_rate", "positive_fitness")}
                        for r in data["rule_sets"]]  # fmt: skip
    assert RegionalExplanation.from_dict(old).rule_sets == got.rule_sets
    with pytest.raises(ValueError, match="format_version"):
        RegionalExplanation.from_dict({**data, "format_version": 99})
    full = back.to_dataframe(include_negative=True, distinct=False)
    assert full["recall"].tolist() == pytest.approx(df["recall"].tolist())


def test_format_max_rows_none_prints_all_and_repr_is_short(rare):
    X, _ = rare
    # min_gain=0: every rule set found, more than the 10 rows format() shows by default
    got = RegionalRuleExplainer(nn.Identity()).explain(X, X[:, 0] + X[:, 1] > 1, min_support=10, min_gain=0, **FAST)
    shown = got.shown()
    assert len(shown) > 10
    rows = [line for line in got.format(max_rows=None).splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]
    assert [int(r.split()[0]) for r in rows] == [i for i, _ in shown]
    assert len([line for line in got.format().splitlines() if re.match(r"^\s+\d+\s+\d+\s", line)]) == 10
    assert len(repr(got)) < 300 and "rule_sets=" in repr(got)
    with pytest.raises(ValueError, match="max_rows"):
        got.format(max_rows=-1)


# --------------------------------------------------------------------------------------------------- acceptance 4


@pytest.fixture(scope="module")
def diabetes_like():
    """Raw age, bmi and a 0/1 hypertension column; the model sees standardized inputs and predicts 1 iff
    age >= 50 and hypertension == 1 (in raw units)."""
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    raw = np.column_stack([rng.uniform(20, 80, 3000), rng.normal(27, 5, 3000), rng.random(3000) < 0.3])
    scaler = StandardScaler().fit(raw)
    age_cut = (50 - scaler.mean_[0]) / scaler.scale_[0]
    hyp_mid = (0.5 - scaler.mean_[2]) / scaler.scale_[2]

    class Model(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return (20 * torch.minimum(x[:, 0] - age_cut, x[:, 2] - hyp_mid))[:, None]  # one logit

    return raw, scaler, Model()


def _number(text: str, pattern: str) -> float:
    found = re.search(pattern, text)
    assert found, text
    return float(found.group(1))


def test_rules_on_standardized_inputs_print_in_raw_units(diabetes_like):
    from sklearn.preprocessing import MinMaxScaler

    raw, scaler, model = diabetes_like
    Xs = scaler.transform(raw)
    names = ["age", "bmi", "hypertension"]
    explainer = RegionalRuleExplainer(model, feature_names=names)
    got = explainer.explain(Xs, 1, scaler=scaler, min_support=100, **FAST)
    text = str(got.best)
    assert "hypertension == 1 " in text  # inferred a 0/1 category in raw units
    age = _number(text, r"age >= ([\d.]+)")
    assert 49.5 <= age <= 50.5  # the model's cut in years
    assert got.best.confidence == 1.0
    in_years = (raw[:, 0] >= age) & (raw[:, 2] == 1)  # the printed rule applied to the raw data
    assert abs(int(in_years.sum()) - got.best.support) <= 3  # the printed bound is rounded to 3 decimals
    # feature_scale/feature_offset, explicit feature types and with_units give the same rules
    units = dict(feature_scale=scaler.scale_, feature_offset=scaler.mean_)
    assert explainer.explain(Xs, 1, min_support=100, **units, **FAST).rule_sets == got.rule_sets
    mm = MinMaxScaler().fit(raw)  # rules on min-max scaled data for the same subgroup print in years too
    by_minmax = RegionalRuleExplainer(nn.Identity(), feature_names=names).explain(
        mm.transform(raw), got.subgroup.numpy(), scaler=mm, min_support=100, **FAST
    )
    assert "hypertension == 1 " in str(by_minmax.best)
    assert _number(str(by_minmax.best), r"age >= ([\d.]+)") == pytest.approx(age, abs=0.01)
    typed = explainer.explain(Xs, 1, min_support=100, feature_types=["float", "float", "cat"], **units, **FAST)
    assert "hypertension == 1 " in str(typed.best)
    plain = explainer.explain(Xs, 1, min_support=100, feature_types=["float", "float", "cat"], **FAST)
    assert "hypertension == 1.502" in str(plain.best)  # model units: the standardized value of 1
    converted = plain.with_units(scaler=scaler)  # the same bounds, printed in years (not re-cut to round numbers)
    assert str(converted.best) == str(plain.with_units(scaler.scale_, scaler.mean_).best)
    assert torch.equal(converted.best.mask(Xs), plain.best.mask(Xs)) and "hypertension == 1 " in str(converted.best)
    low = plain.best.rules[0].low * scaler.scale_[0] + scaler.mean_[0]
    assert _number(str(converted.best), r"age >= ([\d.]+)") == pytest.approx(low, abs=5e-4)


def test_scaler_units_match_the_scalers_own_parameters():
    from sklearn.preprocessing import MinMaxScaler, StandardScaler

    from torch_amore.explain.units import scaler_units

    raw = np.random.default_rng(1).normal(5, 3, size=(50, 3))
    std = StandardScaler().fit(raw)
    mm = MinMaxScaler().fit(raw)
    assert np.allclose(scaler_units(std, 3), [std.scale_, std.mean_])
    assert np.allclose(scaler_units(mm, 3), [1 / mm.scale_, -mm.min_ / mm.scale_])
    scale, offset = scaler_units(mm, 3)
    assert np.allclose(mm.transform(raw) * scale + offset, raw)
    with pytest.raises(ValueError, match="fitted on the 2 features"):
        scaler_units(std, 2)
    with pytest.raises(TypeError, match="inverse_transform"):
        scaler_units(object(), 3)
    ex = RegionalRuleExplainer(nn.Sequential(nn.Linear(4, 3)), "0")
    with pytest.raises(ValueError, match="not on a layer"):
        ex.explain(torch.randn(100, 4), 1, scaler=std, **FAST)


# --------------------------------------------------------------------------------------------------- acceptance 5


def _graphs(n: int = 60):
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(0)
    graphs = []
    for _ in range(n):
        k = int(torch.randint(4, 10, (1,), generator=g))
        src = torch.randint(0, k, (2 * k,), generator=g)
        dst = torch.randint(0, k, (2 * k,), generator=g)
        graphs.append(Data(x=torch.randn(k, 3, generator=g), edge_index=torch.stack([src, dst])))
    return graphs


@pytest.mark.slow
def test_graph_lists_batches_and_single_graphs():
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch
    from torch_geometric.loader import DataLoader as GraphLoader

    graphs, model = _graphs(), GCN()
    with torch.no_grad():  # shift class 1's logit so that about half the graphs are predicted 1
        out = model(Batch.from_data_list(graphs))
        model.out.bias[1] -= float((out[:, 1] - out[:, 0]).median()) + 1e-3
    explainer = RegionalRuleExplainer(model, "head")
    opts = dict(max_length=2, min_support=5, n_grids=4, progress=False)
    ref = explainer.explain(GraphLoader(graphs, batch_size=16), 1, **opts)
    assert ref.rule_sets and 0 < int(ref.subgroup.sum()) < len(graphs)
    for inputs in (graphs, Batch.from_data_list(graphs)):
        run = explainer.explain(inputs, 1, batch_size=7, **opts)
        assert torch.equal(run.subgroup, ref.subgroup)
        assert_activations_close(run.features_matrix, ref.features_matrix)
        assert_rule_sets_close(run.rule_sets, ref.rule_sets)
    i = int(torch.nonzero(ref.subgroup)[0])
    local = explainer.explain_local(graphs[i], graphs, 1, **opts)
    assert_activations_close(local.sample, ref.features_matrix[i])
    assert local.rule_sets and all(bool(rs.mask(local.sample[None])[0]) for rs in local.rule_sets)
    with pytest.raises(TypeError, match="tensor model inputs .*DataBatch") as err:  # a layer was given: no hint at it
        explainer.explain(graphs, 1, select_features=True, **opts)
    assert "layer=" not in str(err.value)
    with pytest.raises(TypeError, match="single graph"):
        explainer.explain(graphs[0], 1, **opts)


# --------------------------------------------------------------------------------------------------- inputs


def test_numpy_dataframe_and_float64_inputs_into_a_float32_model():
    import pandas as pd

    g = torch.Generator().manual_seed(0)
    X = torch.randn(500, 4, generator=g, dtype=torch.float64)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3))  # float32 parameters
    with torch.no_grad():
        mask = model(X.float()).argmax(1) == 2
    explainer = RegionalRuleExplainer(model)
    ref = explainer.explain(X, 2, min_support=30, **FAST)
    assert torch.equal(ref.subgroup, mask) and ref.features_matrix.dtype == torch.float64  # the inputs as given
    assert ref.rule_sets == extract_rules(X, mask, min_support=30, target_name="predicted 2", **FAST)
    assert explainer.explain(X.numpy(), 2, min_support=30, **FAST).rule_sets == ref.rule_sets
    frame = pd.DataFrame(X.numpy(), columns=["a", "b", "c", "d"])
    named = explainer.explain(frame, 2, min_support=30, **FAST)
    assert named.feature_names == ["a", "b", "c", "d"] and torch.equal(named.subgroup, mask)


def test_non_sequential_samplers_are_refused_where_rows_must_align():
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 4, generator=g)
    y = (X[:, 0] > 0).long()
    ex = RegionalRuleExplainer(nn.Linear(4, 2))
    sampler = WeightedRandomSampler(torch.ones(300), 300)
    loader = DataLoader(TensorDataset(X, y), sampler=sampler, batch_size=50)
    for kwargs in (dict(features=X.numpy()), dict(labels=y, threshold="roc")):
        with pytest.raises(ValueError, match="WeightedRandomSampler"):
            ex.explain(loader, 1, min_support=20, **kwargs, **FAST)
    with pytest.raises(ValueError, match="in order"):
        ex.explain(loader, y.bool(), min_support=20, **FAST)  # a mask target is aligned with the rows too
    ordered = DataLoader(TensorDataset(X, y), batch_size=50)
    assert torch.equal(ex.explain(ordered, y.bool(), features=X, min_support=20, **FAST).subgroup, y.bool())


class _Scores(nn.Module):
    """One output in [0, 1] per sample: probabilities or logits, depending on who trained it."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, :1]


def test_outputs_switch_between_logits_and_probabilities():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(400, 2, generator=g, dtype=torch.float64)
    v = X[:, 0]
    ex = RegionalRuleExplainer(_Scores())
    auto = ex.explain(X, 1, threshold=0.6, min_support=20, **FAST)
    probs = ex.explain(X, 1, threshold=0.6, outputs="probs", min_support=20, **FAST)
    logits = ex.explain(X, 1, threshold=0.6, outputs="logits", min_support=20, **FAST)
    assert torch.equal(auto.subgroup, v > 0.6) and torch.equal(probs.subgroup, v > 0.6)  # today's guess
    assert torch.equal(logits.subgroup, torch.sigmoid(v) > 0.6)
    assert logits.params["outputs"] == "logits"
    assert logits.evaluate(X)[0] == logits.best.evaluate(X, torch.sigmoid(v) > 0.6)  # same reading on new data
    with pytest.raises(ValueError, match="outputs='logits'"):
        RegionalRuleExplainer(nn.Linear(2, 1)).explain(X.float() * 10 - 5, 1, outputs="probs", **FAST)
    with pytest.raises(ValueError, match="`outputs`"):
        ex.explain(X, 1, outputs="scores", **FAST)


def test_captum_style_targets_get_clear_errors(task):
    X, model = task
    ex = RegionalRuleExplainer(model)
    with pytest.raises(ValueError, match="Captum's output index"):
        ex.explain(X, (0, 1), **FAST)
    with pytest.raises(TypeError, match="Captum's per-sample output indices"):
        ex.explain(X, [1] * len(X), **FAST)
    with pytest.raises(TypeError, match="Captum-style output indices"):
        ex.explain(X, (0, "a"), **FAST)
    got = ex.explain(X, np.int64(7), min_support=10, **FAST)  # an integer scalar is a class index
    assert got.params["target"] == 7 and torch.equal(got.subgroup, _hidden_and_prediction(model, X)[1] == 7)


def test_the_json_keeps_the_feature_selection_when_it_has_a_dict_form():
    class Selection:  # what select_features returns, reduced to what the explanation reads
        features = [0]

        def to_dict(self):
            return {"features": [0], "exact": True, "reason": "hand-made"}

    rs = extract_rules(torch.tensor([[0.1], [0.6], [0.7], [0.9]]), torch.tensor([False, False, True, True]))
    explanation = RegionalExplanation(rs, None, None, [0], ["x"], {"n_samples": 4, "subgroup_size": 2},
                                      selection=Selection())  # fmt: skip
    assert explanation.to_dict()["selection"] == Selection().to_dict()
    assert RegionalExplanation(rs, None, None, [0], ["x"], selection=object()).to_dict()["selection"] is None


def test_an_explanation_is_a_sequence_of_its_rule_sets():
    from collections.abc import Sequence

    from torch_amore import Rule, RuleSet

    X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
    subgroup = torch.tensor([False, False, True, True])
    first = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, subgroup)
    second = RuleSet.from_rules([Rule(0, "x", low=0.5)], X, subgroup)
    outside = RuleSet.from_rules([Rule(0, "x", high=0.5)], X, subgroup)
    explanation = RegionalExplanation([first, second], subgroup, None, [0], ["x"], {"n_samples": 4})
    assert isinstance(explanation, Sequence)
    assert len(explanation) == 2 and explanation[1] is second and explanation[-1] is second
    assert list(explanation) == [first, second] and list(reversed(explanation)) == [second, first]
    assert second in explanation and outside not in explanation
    assert explanation.index(second) == 1 and explanation.count(first) == 1
    assert explanation[:1] == [first]


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        (dict(select_features={"n_step": 3}), TypeError, "argument 'n_step' (did you mean 'n_steps'?)"),
        (dict(select_features={"gamma": 0.05}), ValueError, "`gamma` >= `min_frequency`"),
        (dict(select_features={"max_seconds": 0}), ValueError, "`max_seconds` > 0"),
        (dict(select_features={"layer": "1"}), ValueError, "options without ['layer']: the explainer sets them"),
        (dict(select_features={"feature_names": list("abc")}), ValueError, "without ['feature_names']"),
        (dict(features=[0, -1]), ValueError, "`features` to hold feature indices >= 0"),
    ],
)
def test_selection_options_and_negative_features_fail_before_the_model_runs(kwargs, error, words):
    class Unrun(torch.nn.Module):
        def forward(self, x):
            raise AssertionError("the model ran")

    with pytest.raises(error) as info:
        RegionalRuleExplainer(Unrun()).explain(torch.rand(20, 3), 1, **kwargs)
    assert words in str(info.value)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(features=[0, 7]), "`features` indices in [0, 5]"),
        (dict(feature_names=["a", "b"]), "`feature_names` to have 6 entries"),
        (dict(features=torch.rand(40, 2), feature_names=["a"]), "`feature_names` to have 2 entries"),
        (dict(features=torch.rand(40, 2), select_features=False, target_name="t", min_support=3), None),
    ],
)
def test_features_and_names_of_a_known_width_fail_before_the_model_runs(kwargs, words):
    """Tensor inputs (2 x 3 per sample: 6 features, flattened) or a separate features matrix: the indices and names
    are checked against that width before the model runs, with the messages they get after it."""

    class Counted(torch.nn.Module):
        calls = 0

        def forward(self, x):
            Counted.calls += 1
            first = x.flatten(1)[:, 0]
            return torch.stack([first, 1 - first], 1)

    X = torch.rand(40, 2, 3, generator=torch.Generator().manual_seed(0))
    if words is None:  # the same arguments of the right width run
        assert RegionalRuleExplainer(Counted()).explain(X, 1, **kwargs).params["source"] == "features"
        return
    with pytest.raises(ValueError) as info:
        RegionalRuleExplainer(Counted()).explain(X, 1, **kwargs)
    assert words in str(info.value) and Counted.calls == 0


def test_the_width_probe_neither_asks_the_target_nor_refuses_a_shuffling_loader(task):
    """stream='auto' measures the features' width on a first batch before the run: that batch must not be handed to
    the target (a callable sees every output once), nor make a shuffling loader a streamed one (no rows must align
    with a class target), nor be a batch the run would not take (a model that squeezes a batch of one)."""
    X, model = task
    keep = X[:, 3] > 0
    seen = []

    def target(out):
        seen.append(out.shape[0])
        return (out.argmax(1) == 7) & keep

    auto = RegionalRuleExplainer(model, "1").explain(X, target, **FAST)
    in_memory = RegionalRuleExplainer(model, "1").explain(X, target, stream=False, **FAST)
    assert seen == [len(X), len(X)]
    assert auto.rule_sets == in_memory.rule_sets and len(auto.rule_sets) > 0
    hidden, prediction = _hidden_and_prediction(model, X)
    on_mask = extract_rules(hidden, (prediction == 7) & keep, **FAST)
    assert [(rs.support, rs.confidence) for rs in auto.rule_sets] == [(rs.support, rs.confidence) for rs in on_mask]

    plain = RegionalRuleExplainer(model, "1").explain(X, 7, **FAST)
    loader = DataLoader(TensorDataset(X), batch_size=50, shuffle=True, generator=torch.Generator().manual_seed(0))
    shuffled = RegionalRuleExplainer(model, "1").explain(loader, 7, **FAST)
    assert [rs.rules for rs in shuffled.rule_sets] == [rs.rules for rs in plain.rule_sets]

    class Squeezed(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = model

        def forward(self, x):
            return self.net(x).squeeze()  # (10,) on a batch of one: the run never takes one here

    squeezed = RegionalRuleExplainer(Squeezed(), "net.1").explain(X, 7, **FAST)
    assert [rs.rules for rs in squeezed.rule_sets] == [rs.rules for rs in plain.rule_sets]


@pytest.mark.parametrize("how", ["transposed", "pooled"])
def test_a_model_that_does_not_return_one_row_per_sample_is_named(task, how):
    X, model = task

    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = model[0]

        def forward(self, x):
            out = self.fc(x)
            return out.T if how == "transposed" else out.mean(0, keepdim=True)

    shape = "(8, 256)" if how == "transposed" else "(1, 8)"
    for kwargs in (dict(), dict(stream=False), dict(layer="fc")):
        layer = kwargs.pop("layer", None)
        with pytest.raises(
            ValueError, match=re.escape(f"one row per sample, but it returned outputs of shape {shape}")
        ):
            RegionalRuleExplainer(Odd(), layer).explain(X, 1, **kwargs, **FAST)


def test_a_features_frame_indexed_unlike_the_inputs_frame_is_refused(task):
    """Used by position, a features DataFrame in another row order than a DataFrame's inputs pairs samples with other
    samples' features; the same index passes and gives the rules of the arrays."""
    pd = pytest.importorskip("pandas")
    X, model = task
    frame = pd.DataFrame(X.numpy(), columns=list("abcd"))
    feats = pd.DataFrame({"f1": X[:, 0].numpy(), "f2": X[:, 1].numpy()})
    same = RegionalRuleExplainer(model).explain(frame, 7, features=feats, **FAST)
    arrays = RegionalRuleExplainer(model).explain(X, 7, features=X[:, :2], feature_names=["f1", "f2"], **FAST)
    assert [str(rs) for rs in same.rule_sets] == [str(rs) for rs in arrays.rule_sets] and len(same.rule_sets) > 0
    with pytest.raises(ValueError, match=r"`features` \(a DataFrame\) to be indexed like the DataFrame `inputs`"):
        RegionalRuleExplainer(model).explain(frame, 7, features=feats.sample(frac=1, random_state=1), **FAST)


def test_select_features_with_a_mask_target_on_several_outputs_names_the_output(task):
    """The labels of the selection are the subgroup; the output its gradients attribute is named by the class-index
    target, or for a mask or callable target by select_features={'target': k} (the message says so)."""
    X, model = task
    mask = X[:, 0] > 0.5
    with pytest.raises(ValueError, match=r"select_features=\{'target': k\} with a Tensor `target` on a model of 10"):
        RegionalRuleExplainer(model).explain(X, mask, select_features=True, **FAST)
    named = RegionalRuleExplainer(model).explain(X, mask, select_features={"target": 7, "n_steps": 4}, **FAST)
    picked = torch_amore.select_features(model, X, mask.long(), target=7, n_steps=4, feature_names=list("abcd"))
    assert named.selection.features == picked.features and len(named.rule_sets) > 0
    assert {f for rs in named.rule_sets for f in rs.features} <= set(picked.features)
