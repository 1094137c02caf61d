"""Each argument is checked once, at the public boundary, with one message whatever the entry point (issue 29,
criterion 4); selection converts its inputs and labels with the converters of ``data/validation.py``."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import torch
from torch import nn

import torch_amore as ta
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.explain.explainer import RegionalRuleExplainer
from torch_amore.grids.binning import bin_features
from torch_amore.grids.edges import grid_edges
from torch_amore.search.options import SearchOptions

X = torch.rand(200, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
TARGET = X[:, 0] > 0.6

# the messages as the documentation promises them, written out here rather than taken from the code
BAD_N_GRIDS = {
    1: (ValueError, "Expected `n_grids` to be an integer >= 2, but got 1."),
    32768: (ValueError, "Expected `n_grids` to be an integer in [2, 32767] (bin codes are int16), but got 32768."),
    2.5: (TypeError, "Expected `n_grids` to be an integer >= 2, but got 2.5."),
    "10": (TypeError, "Expected `n_grids` to be an integer >= 2, but got '10'."),
}


def _batches():
    return ((X[i : i + 50], TARGET[i : i + 50]) for i in range(0, 200, 50))


ENTRY_POINTS = {
    "SearchOptions": lambda v: SearchOptions(n_grids=v),
    "SearchOptions.resolve": lambda v: SearchOptions.resolve({"n_grids": v}),
    "extract_rules": lambda v: ta.extract_rules(X, TARGET, n_grids=v),
    "extract_rules on batches": lambda v: ta.extract_rules(_batches, n_grids=v),
    "explain": lambda v: RegionalRuleExplainer(nn.Linear(3, 2)).explain(X.float(), 0, n_grids=v),
    "explain_local": lambda v: RegionalRuleExplainer(nn.Linear(3, 2)).explain_local(0, X.float(), 0, n_grids=v),
    "bin_features": lambda v: bin_features(X, [0, 1, 2], ["float"] * 3, n_grids=v),
    "grid_edges": lambda v: grid_edges(X, v),
}


@pytest.mark.parametrize("value", list(BAD_N_GRIDS), ids=[repr(v) for v in BAD_N_GRIDS])
@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_a_bad_n_grids_gets_the_same_message_from_every_entry_point(entry, value):
    error, message = BAD_N_GRIDS[value]
    with pytest.raises(error) as info:
        ENTRY_POINTS[entry](value)
    assert str(info.value) == message


@pytest.mark.parametrize(
    "call",
    [
        lambda: SearchOptions(bin_strategy="kmean"),
        lambda: ta.extract_rules(X, TARGET, bin_strategy="kmean"),
        lambda: bin_features(X, [0, 1, 2], ["float"] * 3, bin_strategy="kmean"),
        lambda: grid_edges(X, 4, "kmean"),
    ],
    ids=["SearchOptions", "extract_rules", "bin_features", "grid_edges"],
)
def test_a_bad_bin_strategy_gets_the_same_message_everywhere(call):
    with pytest.raises(ValueError) as info:
        call()
    assert str(info.value) == "Expected `bin_strategy` to be one of ['uniform', 'quantile', 'kmeans'], but got 'kmean'."


def test_prepare_trusts_the_checked_options(monkeypatch):
    """``prepare`` takes a checked SearchOptions: neither it nor the binning checks ``n_grids`` again (it calls
    ``encode_features``, the unchecked core of the public ``bin_features``)."""
    import torch_amore.grids.binning as binning
    import torch_amore.search.extract as extract

    calls = []

    def spy(value):
        calls.append(value)
        return A.check_n_grids(value)

    monkeypatch.setattr(binning, "check_n_grids", spy)
    options = SearchOptions(n_grids=7)
    extractor = extract.prepare(X, TARGET, options)
    assert calls == []  # checked once, by SearchOptions(n_grids=7) above: nothing in prepare or the binning
    assert extractor.binned.n_grids == 7


@pytest.mark.parametrize(("min_support", "resolved"), [(0.1, 1), (30, 1), (None, 0)])
def test_extract_rules_resolves_min_support_once(monkeypatch, min_support, resolved):
    original = A.resolve_min_support
    spy_calls = []

    def counting(value, n):
        spy_calls.append((value, n))
        return original(value, n)

    monkeypatch.setattr(A, "resolve_min_support", counting)
    found = ta.extract_rules(X, TARGET, min_support=min_support, max_length=2)
    assert spy_calls == [(min_support, 200)] * resolved
    count = {0.1: math.ceil(0.1 * 200), 30: 30, None: None}[min_support]
    if count is None:  # the default: 5 % of the rows, at most half the subgroup
        count = math.ceil(min(0.05 * 200, 0.5 * int(TARGET.sum())))
    assert found and all(rs.support >= count for rs in found)


def test_given_support_count():
    assert SearchOptions(min_support=0.25).given_support_count(10) == 3  # ceil(2.5)
    assert SearchOptions(min_support=4).given_support_count(10) == 4
    assert SearchOptions().given_support_count(10) is None
    message = "Expected `min_support` to lie in [1, 10] (the number of samples), but got 11."
    with pytest.raises(ValueError, match=re.escape(message)):
        SearchOptions(min_support=11).given_support_count(10)
    assert SearchOptions().support_count(1000, 100) == 50  # half the subgroup, below 5 % of the rows
    assert SearchOptions(min_support=0.1).support_count(1000, 100) == 100


# ------------------------------------------------------------------------------------------------ the converters


def test_to_tensor_takes_samples_of_any_shape_and_can_keep_integers():
    ids = np.arange(24).reshape(2, 3, 4)
    kept, names = V.to_tensor(ids, "inputs", samples=True, keep_integers=True)
    assert kept.dtype == torch.int64 and kept.tolist() == ids.tolist() and names is None
    as_float, _ = V.to_tensor(ids, "inputs", samples=True)
    assert as_float.dtype == torch.float64 and as_float.tolist() == ids.astype(float).tolist()
    flags, _ = V.to_tensor(np.array([[True, False]]), "inputs", samples=True, keep_integers=True)
    assert flags.dtype == torch.bool
    with pytest.raises(ValueError, match=re.escape("Expected `X` to have shape (N, F) (2 dimensions), but got shape")):
        V.to_tensor_2d(ids)
    with pytest.raises(ValueError, match=re.escape("Expected `inputs` to have shape (N, ...) with N >= 1")):
        V.to_tensor(np.zeros(3), "inputs", samples=True)
    frame = pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]})
    values, names = V.to_tensor(frame, "inputs", samples=True, keep_integers=True)
    assert names == ["a", "b"] and values.dtype == torch.float64 and values.tolist() == [[1.0, 0.5], [2.0, 1.5]]


def test_to_class_labels():
    assert V.to_class_labels(pd.Series([True, False, True]), 3).tolist() == [1, 0, 1]
    assert V.to_class_labels(np.array([[0], [2], [1]]), 3).tolist() == [0, 2, 1]
    labels = V.to_class_labels(torch.tensor([0.0, 1.0]), 2)
    assert labels.dtype == torch.int64 and labels.tolist() == [0, 1]
    short = "Expected `labels` to have one entry per sample of `inputs` (3), but got 2."
    with pytest.raises(ValueError, match=re.escape(short)):
        V.to_class_labels([0, 1], 3)
    with pytest.raises(TypeError, match=re.escape("Expected `labels` to hold class indices, but got dtype <U1.")):
        V.to_class_labels(["a", "b"], 2)


@pytest.mark.parametrize(
    "bad", [[[True], [False, True]] * 20, np.zeros((20, 2), dtype=bool)], ids=["ragged", "two columns"]
)
def test_extract_rules_and_explain_convert_a_mask_target_alike(bad):
    """One converter of per-sample values: a malformed mask ``target`` gets the same message from ``extract_rules``
    (which also takes 0/1 numbers) and ``explain`` (booleans only, Captum's integers being class indices)."""
    X = torch.rand(40, 3)
    with pytest.raises(ValueError) as extracting:
        ta.extract_rules(X, bad)
    with pytest.raises(ValueError) as explaining:
        ta.RegionalRuleExplainer(nn.Linear(3, 2)).explain(X, bad)
    assert str(extracting.value) == str(explaining.value)
    assert str(extracting.value).startswith("Expected `target` to ")


def test_explain_converts_numpy_inputs_and_model_arguments_with_the_one_converter():
    """numpy inputs and model arguments go through ``numpy_to_tensor``: its message, naming the argument; integer ids
    keep their dtype for an embedding."""
    strings = np.array([["a", "b", "c"]] * 40)
    with pytest.raises(TypeError) as converting:
        V.numpy_to_tensor(strings, "inputs")
    explainer = ta.RegionalRuleExplainer(nn.Linear(3, 2))
    with pytest.raises(TypeError) as explaining:
        explainer.explain(strings, 1, threshold=0.5)
    assert str(explaining.value) == str(converting.value)
    X = np.random.default_rng(0).random((40, 3))
    with pytest.raises(TypeError, match=r"^Expected `additional_forward_args` to have a numeric dtype, but got <U1"):
        explainer.explain(X, 1, additional_forward_args=np.array(["x"]))
    with pytest.raises(TypeError, match=r"^Expected `forward_kwargs\['w'\]` to have a real numeric dtype"):
        explainer.explain(X, 1, forward_kwargs={"w": np.ones(40, dtype=complex)})
    ids = np.arange(80).reshape(40, 2) % 7
    torch.manual_seed(0)
    embedding = nn.Sequential(nn.Embedding(7, 3), nn.Flatten(), nn.Linear(6, 2))
    with torch.no_grad():
        embedding[0].weight[:, 0] = torch.arange(7.0) - 3  # class 1 where the first id is large
        embedding[2].weight.zero_()
        embedding[2].weight[1, 0] = 1.0
    explanation = ta.RegionalRuleExplainer(embedding, "1").explain(ids, 1, min_support=4, max_length=1)
    with torch.no_grad():
        expected = embedding(torch.from_numpy(ids)).argmax(1) == 1
    assert torch.equal(explanation.subgroup, expected)


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        (np.array(["a", "b"] * 20), TypeError),
        (np.array([1, "b"] * 20, dtype=object), TypeError),
        ("ab" * 20, TypeError),
        (torch.zeros(30, dtype=torch.int64), ValueError),
        (torch.zeros(40, 2, dtype=torch.int64), ValueError),
        ([[0, 1], [1]] * 20, ValueError),
    ],
    ids=["strings", "objects", "a string", "short", "two columns", "ragged"],
)
def test_explain_and_select_features_convert_labels_alike(bad, error):
    """One converter of labels: ``explain(labels=)`` and ``select_features(labels=)`` refuse the same bad labels with
    the same message, before the model runs (integer labels of a class index search; the class checks are
    ``select_features``' own)."""
    X = torch.rand(40, 3)
    model = nn.Linear(3, 2)
    calls = []
    model.register_forward_hook(lambda *a: calls.append(1))
    with pytest.raises(error) as explaining:
        ta.RegionalRuleExplainer(model).explain(X, 1, labels=bad, threshold=0.5)
    with pytest.raises(error) as selecting:
        ta.select_features(model, X, bad)
    assert str(explaining.value) == str(selecting.value).replace("class indices", "numbers or booleans")
    assert str(explaining.value).startswith("Expected `labels` to")
    assert calls == []


@pytest.mark.parametrize(
    "bad",
    [
        [[0.1, 0.2, 0.3]] * 40,
        np.array([["a", "b", "c"]] * 40),
        pd.DataFrame({"a": ["x"] * 40, "b": 1.0, "c": 2.0}),
        np.zeros((40, 3), dtype="datetime64[D]"),
    ],
    ids=["list", "strings", "string column", "dates"],
)
def test_select_features_words_a_bad_input_as_extract_rules_does(bad):
    """One converter: ``select_features`` names its ``inputs`` as ``extract_rules`` names its ``X``."""
    labels = torch.arange(40) % 2
    with pytest.raises(TypeError) as selecting:
        ta.select_features(nn.Linear(3, 1), bad, labels)
    with pytest.raises(TypeError) as extracting:
        ta.extract_rules(bad, labels.bool())
    assert str(selecting.value) == str(extracting.value).replace("`X`", "`inputs`").replace("(X -", "(inputs -")


def test_select_features_on_a_list_names_the_types_it_takes():
    with pytest.raises(TypeError) as info:
        ta.select_features(nn.Linear(3, 1), [[0.1, 0.2, 0.3]] * 40, torch.arange(40) % 2)
    assert str(info.value) == "Expected `inputs` to be a torch.Tensor, numpy array or pandas DataFrame, but got list."


def test_select_features_takes_integer_ids_for_an_embedding_layer():
    """Integer inputs stay integers (token ids) when the attribution is to a layer with explicit baselines."""
    model = nn.Sequential(nn.Embedding(5, 2), nn.Flatten(), nn.Linear(6, 1))
    ids = torch.randint(0, 5, (60, 3), generator=torch.Generator().manual_seed(1))
    labels = (ids[:, 0] > 2).long()
    baselines = torch.zeros(1, 3, dtype=torch.long)  # one baseline sample: token 0 everywhere
    selection = ta.select_features(model, ids.numpy(), labels, layer=model[0], baselines=baselines, n_test_per_class=5)
    assert len(selection.features) >= 1 and max(selection.features) < 6
