"""Explanations read from hostile or corrupted JSON: nothing a file names is imported or built (a user's encoder class
is passed with ``classes=``); a corrupted concept basis, ``params`` or ``verification`` is a ``FieldError`` naming the
field at load time, not wrong numbers or a crash later; and a round trip of a round trip is exact, the feature
selection included."""

from __future__ import annotations

import copy
import json
import sys

import numpy as np
import pytest
import torch
from concept_models import StrokeModel, StrokeSAE, stroke_images
from torch import nn

from torch_amore import RegionalExplanation, RegionalRuleExplainer
from torch_amore.rules.serialization import FieldError

SEARCH = dict(max_length=2, n_grids=6, top_k=3, progress=False)


def toy_model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 2)).eval()


def toy_data() -> torch.Tensor:
    return torch.randn(400, 5, generator=torch.Generator().manual_seed(1))


def as_json(explanation: RegionalExplanation) -> dict:
    return json.loads(json.dumps(explanation.to_dict()))


def refused(data: dict, path: str, words: str, **kwargs) -> FieldError:
    with pytest.raises(FieldError) as info:
        RegionalExplanation.from_dict(data, **kwargs)
    assert info.value.path == path and f"`{path}`" in str(info.value) and words in str(info.value), str(info.value)
    return info.value


# -------------------------------------------------------------------- item 1: loading imports and builds nothing named


def test_the_reviewers_file_runs_no_import_side_effect(tmp_path, capsys):
    if "this" in sys.modules:  # imported before: its import would print nothing either way
        pytest.skip("the `this` module is imported already")
    modules = [{"module": "this", "class": "X", "training": False, "state_dict": {}}]
    concepts = {"kind": "encoder", "names": None, "n_concepts": 1, "n_units": 1,
                "encode": {"module": 0, "method": None}, "decode": None, "modules": modules}  # fmt: skip
    data = {"format": "torch_amore.RegionalExplanation", "format_version": 3, "rule_sets": [], "concepts": concepts}
    (tmp_path / "evil.json").write_text(json.dumps(data))
    with pytest.raises(FieldError) as info:
        RegionalExplanation.from_json(tmp_path / "evil.json")
    assert info.value.path == "concepts.modules[0].class" and "classes=[X]" in str(info.value)
    assert "Beautiful is better than ugly" not in capsys.readouterr().out and "this" not in sys.modules


def test_a_module_beside_the_script_is_not_run_by_from_json(tmp_path, monkeypatch):
    marker = tmp_path / "ran.txt"
    (tmp_path / "evil_encoder.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nimport torch\nclass Enc(torch.nn.Module):\n"
        f"    def __init__(self):\n        super().__init__()\n        open({str(marker)!r}, 'a').write('built')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    model, X = toy_model(), toy_data()
    explanation = RegionalRuleExplainer(model, layer="1", concepts={"encode": nn.Identity()}).explain(X, 1, **SEARCH)
    data = as_json(explanation)
    data["concepts"]["modules"][0].update(module="evil_encoder", **{"class": "Enc"})
    (tmp_path / "e.json").write_text(json.dumps(data))
    with pytest.raises(ValueError) as info:
        RegionalExplanation.from_json(tmp_path / "e.json")
    assert not marker.exists() and "evil_encoder" not in sys.modules  # neither imported nor built
    assert isinstance(info.value, FieldError) and info.value.path == "concepts.modules[0].class"
    assert "loading imports nothing a file names" in str(info.value)


@pytest.mark.parametrize(
    ("shape", "numbers", "path"),
    [([-3, -1], [1.0, 2.0, 3.0], "shape"), ([2**32, 2**32], [], "data"), ([2**62, 4], [], "data")],
)
def test_a_hostile_state_dict_shape_is_a_field_error_not_a_crash(tmp_path, shape, numbers, path):
    """Shapes whose product matches the numbers given only by sign or by overflow (-3 * -1 = 3; 2**64 wraps to 0)."""
    model, X = toy_model(), toy_data()
    torch.manual_seed(0)
    explainer = RegionalRuleExplainer(model, layer="1", concepts={"encode": nn.Linear(8, 3)})
    data = as_json(explainer.explain(X, 1, **SEARCH))
    data["concepts"]["modules"][0]["state_dict"]["weight"].update(shape=shape, data=numbers)
    (tmp_path / "e.json").write_text(json.dumps(data))
    with pytest.raises(FieldError) as info:
        RegionalExplanation.from_json(tmp_path / "e.json", modules={0: nn.Linear(8, 3)})
    assert info.value.path == f"concepts.modules[0].state_dict.weight.{path}", str(info.value)


def test_a_users_encoder_loads_when_its_class_is_passed(tmp_path):
    model, (X, _, _) = StrokeModel().eval(), stroke_images(200, seed=4)
    explanation = RegionalRuleExplainer(model, layer="hidden", concepts=StrokeSAE()).explain(X, 1, **SEARCH)
    explanation.to_json(tmp_path / "e.json")
    with pytest.raises(FieldError) as info:
        RegionalExplanation.from_json(tmp_path / "e.json")
    assert info.value.path == "concepts.modules[0].class" and "classes=[StrokeSAE]" in str(info.value)
    loaded = RegionalExplanation.from_json(tmp_path / "e.json", classes=[StrokeSAE])
    sae = explanation.concepts.encoder.__self__  # the module given (its `encode` is the basis's)
    with torch.no_grad():
        h = model.hidden(model.relu(model.detect(model.flatten(X[:30]))))
        want = torch.relu(h @ sae.enc.weight.T + sae.enc.bias)  # StrokeSAE.encode by hand
    assert isinstance(loaded.concepts.encoder.__self__, StrokeSAE) and torch.allclose(loaded.concepts.encode(h), want)


# ------------------------------------------------------------------------------ item 2: a corrupted fitted basis


@pytest.fixture(scope="module")
def pca():
    """A PCA explanation of the toy model's ReLU layer (8 units, K=4), its JSON dict and its explainer."""
    model, X = toy_model(), toy_data()
    explainer = RegionalRuleExplainer(model, layer="1", concepts="pca", n_concepts=4)
    explanation = explainer.explain(X, 1, **SEARCH)
    return explanation, as_json(explanation), explainer, model, X


def test_an_intact_pca_basis_evaluates_to_the_counts_by_hand(pca):
    explanation, data, explainer, model, X = pca
    loaded = RegionalExplanation.from_dict(copy.deepcopy(data), explainer=explainer)
    with torch.no_grad():
        h = model[1](model[0](X[:50])).double().numpy()
        predicted = (model(X[:50]).argmax(1) == 1).numpy()
    mean, components = np.array(data["concepts"]["mean"]), np.array(data["concepts"]["components"])
    C = (h - mean) @ components.T  # the saved PCA by hand
    best = loaded.rule_sets[0]
    covered = np.array([all(r.contains(float(c[r.feature])) for r in best.rules) for c in C])
    metrics = loaded.evaluate(X[:50])[0]
    assert covered.sum() > 0 and metrics.support == int(covered.sum())
    assert metrics.confidence == pytest.approx(predicted[covered].mean())


@pytest.mark.parametrize(
    ("field", "value", "path", "words"),
    [
        ("mean", [1.0], "concepts.mean", "expected shape [8], but got [1]"),
        ("components", [[float("nan")] * 8] * 4, "concepts.components", "finite"),
        ("components", [[[1.0] * 8]] * 4, "concepts.components", "expected shape [4, 'any'], but got [4, 1, 8]"),
        ("components", [[1.0] * 8] * 3, "concepts.components", "expected shape [4, 'any'], but got [3, 8]"),
        ("components", [[1.0] * 5] * 4, "concepts.mean", "expected shape [5], but got [8]"),
        ("mean", [float("inf")] * 8, "concepts.mean", "finite"),
    ],
)
def test_a_corrupted_pca_basis_is_refused_at_load(pca, field, value, path, words):
    data = copy.deepcopy(pca[1])
    data["concepts"][field] = value
    refused(data, path, words, explainer=pca[2])


def test_a_basis_that_does_not_fit_the_explanation_is_refused(pca):
    data = copy.deepcopy(pca[1])
    data["concepts"].update(components=[[1.0] * 5] * 4, mean=[0.0] * 5)  # consistent, but 5 units, not the layer's 8
    refused(data, "concepts", "n_units=5, but the explanation's params.concepts say 8")
    data = copy.deepcopy(pca[1])
    data["feature_names"] = data["feature_names"][:3]
    refused(data, "concepts", "the basis has 4 concepts, but the explanation names 3 features")


# ----------------------------------------------------------------------- item 3: params and verification checked


@pytest.fixture(scope="module")
def plain():
    """An explanation of the toy model's inputs, verified, as a JSON dict."""
    model, X = toy_model(), toy_data()
    explanation = RegionalRuleExplainer(model).explain(X, 1, **SEARCH)
    explanation.verify(X[:100], rule_sets=1, n_controls=1)
    return as_json(explanation)


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("subgroup_size", "abc", "expected an integer"),
        ("n_samples", [1], "expected an integer"),
        ("n_samples", -4, "integer >= 0"),
        ("subgroup_size", 10**6, "expected at most `n_samples` (400)"),
        ("held_out_rows", 401, "expected at most `n_samples`"),
        ("source", {"a": 1}, "expected a string"),
        ("outputs", 3, "expected a string"),
        ("target_name", ["x"], "expected a string"),
        ("layer_input", "no", "expected true or false"),
        ("local", 1, "expected true or false"),
        ("holdout", 2.0, "in [0.0, 1.0]"),
        ("level", "high", "expected a number"),
        ("permutations", 1.5, "expected an integer"),
        ("layer", [0], "layer's name or null"),
        ("input_shape", [5, -1], "integer >= 0"),
        ("input_shape", 5, "expected a list"),
        ("target", [0.5, 1, 2], "[low, high]"),
        ("target", {"class": 1}, "class index, [low, high] or text"),
        ("target", True, "class index, [low, high] or text"),
        ("concepts", {"kind": "pca", "n_concepts": 0}, "integer >= 1"),
    ],
)
def test_params_the_code_reads_are_checked_at_load(plain, key, value, words):
    data = copy.deepcopy(plain)
    data["params"][key] = value
    with pytest.raises(FieldError) as info:
        RegionalExplanation.from_dict(data)
    assert info.value.path.startswith(f"params.{key}") and words in str(info.value), str(info.value)


def test_params_round_trip_as_written_and_other_entries_are_kept(plain):
    data = copy.deepcopy(plain)
    data["params"].update(source="torch-amore rules", target="label == 1", holdout_rows="rows.txt", anything=[{}])
    data["params"].update(held_out_rows=100, held_out_subgroup=40, subgroup_size=data["params"]["subgroup_size"])
    loaded = RegionalExplanation.from_dict(data)
    assert loaded.params == data["params"]
    str(loaded)  # the header reads the counts
    assert RegionalExplanation.from_dict(plain).params == plain["params"]


@pytest.mark.parametrize(
    ("change", "path", "words"),
    [
        (lambda v: {"a": 1}, "verification.version", "expected 1"),
        (lambda v: v.update(rows={"a": 1}), "verification.rows", "expected a list"),
        (lambda v: v.update(level=2), "verification.level", "in [0.0, 1.0]"),
        (lambda v: v.update(method=None), "verification.method", "expected a string"),
        (lambda v: v.update(extra=1), "verification.extra", "unknown key"),
        (lambda v: v.pop("seed"), "verification.seed", "missing"),
        (lambda v: v["rows"][0]["sufficiency"].update(hits="x"), "verification.rows[0].sufficiency.hits", "integer"),
        (lambda v: v["rows"][0]["sufficiency"].update(hits=10**6), "verification.rows[0].sufficiency.hits", "<"),
        (lambda v: v["rows"][0].update(units=[-1]), "verification.rows[0].units[0]", ">= 0"),
        (lambda v: v["rows"][0].update(position=0), "verification.rows[0].position", ">= 1"),
        (
            lambda v: v["rows"][0]["control_necessity"].update(shares=[2.0]),
            "verification.rows[0].control_necessity.shares[0]",
            "in [0.0, 1.0]",
        ),
        (lambda v: v["rows"][0].update(not_moved=[1]), "verification.rows[0].not_moved", "counts"),
    ],
)
def test_a_corrupted_verification_is_a_field_error_naming_it(plain, change, path, words):
    data = copy.deepcopy(plain)
    changed = change(data["verification"])
    if isinstance(changed, dict):
        data["verification"] = changed
    refused(data, path, words)


def test_a_verification_round_trips(plain):
    loaded = RegionalExplanation.from_dict(copy.deepcopy(plain))
    assert loaded.verification.to_dict() == plain["verification"]


# ----------------------------------------------------------------- item 4: a round trip of a round trip is exact


def test_to_json_from_json_twice_keeps_everything_the_selection_included(tmp_path):
    X = torch.randn(400, 5, generator=torch.Generator().manual_seed(2))
    torch.manual_seed(0)
    explanation = RegionalRuleExplainer(nn.Linear(5, 2)).explain(X, 1, max_length=2, select_features=True)
    selection = explanation.selection.to_dict()
    explanation.to_json(tmp_path / "a.json")
    first = RegionalExplanation.from_json(tmp_path / "a.json")
    first.to_json(tmp_path / "b.json")
    second = RegionalExplanation.from_json(tmp_path / "b.json")
    assert first.selection == second.selection == selection and selection["features"]
    assert second == first and second.to_dict() == first.to_dict() == explanation.to_dict()
    assert (tmp_path / "b.json").read_text() == (tmp_path / "a.json").read_text()
