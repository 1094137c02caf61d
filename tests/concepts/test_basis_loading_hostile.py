"""Saved concept bases from hostile or corrupted files: loading imports nothing a file names and builds only torch.nn's
module classes or the classes the caller passes; corrupted fitted numbers (shapes that do not fit together, NaN) and
hostile tensors (negative or huge shapes, integers outside their dtype) are each refused with a ``FieldError``
naming the field, before anything is built."""

from __future__ import annotations

import copy
import json
import sys

import pytest
import torch
from concept_models import SizedSAE, TinySAE, planted_features

from torch_amore.concepts import ConceptBasis, Directions, EncoderDecoder, FittedBasis, SparseAutoencoderBasis
from torch_amore.concepts.saving import tensor_from_json, tensor_to_json

A, _, _ = planted_features(n=200, d=6, k=4, seed=3)


def saved(basis: ConceptBasis) -> dict:
    return json.loads(json.dumps(basis.to_dict(), allow_nan=False))


def refused(data: dict, path: str, words: str, **kwargs) -> ValueError:
    """The FieldError (a ValueError with ``path``) of loading ``data``: it names ``path`` and says ``words``."""
    with pytest.raises(ValueError) as info:
        ConceptBasis.from_dict(data, **kwargs)
    assert getattr(info.value, "path", None) == path, str(info.value)
    assert (not path or f"`{path}`" in str(info.value)) and words in str(info.value), str(info.value)
    return info.value


# ------------------------------------------------------------------------------------ item 1: no import, no any-class


def test_a_module_named_by_the_file_is_never_imported(tmp_path, monkeypatch):
    """A module beside the script whose import has a side effect (it writes a file): loading must not run it."""
    marker = tmp_path / "imported.txt"
    (tmp_path / "payload_on_import.py").write_text(
        f"open({str(marker)!r}, 'w').write('ran')\nimport torch\nclass Payload(torch.nn.Module):\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    data = saved(EncoderDecoder(TinySAE().encode).fit(A))
    data["modules"][0].update(module="payload_on_import", **{"class": "Payload"})
    with pytest.raises(ValueError) as info:
        ConceptBasis.from_dict(data)
    assert not marker.exists() and "payload_on_import" not in sys.modules  # its code never ran
    assert getattr(info.value, "path", None) == "modules[0].class", str(info.value)
    assert "payload_on_import.Payload is not one of torch.nn's module classes" in str(info.value)
    message = str(info.value)
    assert "classes=[Payload]" in message and "modules={'payload_on_import.Payload': instance}" in message


def test_a_class_that_is_not_given_is_never_built(monkeypatch):
    """Even a class that is importable (and imported) is built only when the caller passes it."""
    built = []
    monkeypatch.setattr(TinySAE, "__init__", lambda self, *a, **k: built.append(1) or torch.nn.Module.__init__(self))
    data = saved(EncoderDecoder(torch.nn.Identity()).fit(A))
    data["modules"][0].update(module="concept_models", **{"class": "TinySAE"})
    refused(data, "modules[0].class", "pass the class, `classes=[TinySAE]`")
    assert built == []


@pytest.mark.parametrize(
    ("module", "cls"),
    [
        ("os", "system"),  # not a class
        ("builtins", "object"),  # a class, not an nn.Module
        ("torch.nn.functional", "relu"),  # inside torch.nn, but a function
        ("torch.nn.modules.linear", "ReLU"),  # a torch.nn class saved under another module's path
        ("torch.nn", "__class__"),
        ("torch", "Tensor"),
    ],
)
def test_names_outside_torch_nn_module_classes_are_refused(module, cls):
    data = saved(EncoderDecoder(torch.nn.ReLU()).fit(A))
    data["modules"][0].update(module=module, **{"class": cls})
    refused(data, "modules[0].class", "is not one of torch.nn's module classes nor of the `classes` given")


def test_torch_nn_module_classes_load_without_being_passed():
    basis = EncoderDecoder(torch.nn.ReLU(), torch.nn.Identity(), names=[f"u{i}" for i in range(6)]).fit(A)
    data = saved(basis)
    assert [(m["module"], m["class"]) for m in data["modules"]] == [
        ("torch.nn.modules.activation", "ReLU"),
        ("torch.nn.modules.linear", "Identity"),
    ]
    again = ConceptBasis.from_dict(data)
    assert isinstance(again.encoder, torch.nn.ReLU) and isinstance(again.decoder, torch.nn.Identity)
    assert torch.equal(again.encode(A), torch.where(A > 0, A, torch.zeros_like(A)))  # relu by hand
    assert again.names == [f"u{i}" for i in range(6)] and again.n_units == 6


def test_a_class_passed_loads_by_its_path_or_by_its_name():
    sae = TinySAE()
    data = saved(EncoderDecoder(sae.encode, sae.decode).fit(A))
    want = torch.relu(A @ sae.enc.weight.detach().T + sae.enc.bias.detach())  # the encoder by hand
    again = ConceptBasis.from_dict(data, classes=[TinySAE])
    assert torch.allclose(again.encode(A), want, atol=1e-6)
    # saved from a script (``__main__.TinySAE``), loaded where the class is imported: found by its name
    data["modules"][0]["module"] = "__main__"
    again = ConceptBasis.from_dict(data, classes=[SizedSAE, TinySAE])
    assert type(again.encoder.__self__) is TinySAE and torch.allclose(again.encode(A), want, atol=1e-6)
    # two classes of that name, neither at the saved path: which one is meant is not guessed
    twin = type("TinySAE", (TinySAE,), {"__module__": "elsewhere"})
    refused(data, "modules[0].class", "two of the classes given are named TinySAE", classes=[TinySAE, twin])


@pytest.mark.parametrize("classes", [TinySAE, ["concept_models.TinySAE"], [len], {"TinySAE": TinySAE}])
def test_classes_must_be_a_list_of_module_classes(classes):
    data = saved(EncoderDecoder(TinySAE().encode).fit(A))
    with pytest.raises(TypeError, match="`classes`"):
        ConceptBasis.from_dict(data, classes=classes)


def test_a_module_that_needs_arguments_says_how_to_pass_it():
    data = saved(EncoderDecoder(SizedSAE(6, 4).encode).fit(A))
    error = refused(data, "modules[0].class", "cannot be built without arguments", classes=[SizedSAE])
    assert "modules={'concept_models.SizedSAE': module}" in str(error)


# ----------------------------------------------------------------------------- item 2: corrupted fitted bases


def fitted(kind: str) -> FittedBasis:
    return FittedBasis(kind, 3, seed=1).fit(A.abs() if kind == "nmf" else A)


@pytest.mark.parametrize(
    ("kind", "field", "value", "path", "words"),
    [
        ("pca", "mean", [1.0], "mean", "expected shape [6], but got [1]"),
        ("pca", "mean", [[0.0] * 6], "mean", "expected shape [6], but got [1, 6]"),
        ("pca", "components", [[float("nan")] * 6] * 3, "components", "finite"),
        ("pca", "components", [[1.0] * 6] * 2, "components", "expected shape [3, 'any'], but got [2, 6]"),
        ("pca", "components", [[[1.0] * 6]] * 3, "components", "expected shape [3, 'any'], but got [3, 1, 6]"),
        ("pca", "components", [[1.0, 0.0]] * 3, "components", "D >= K"),
        ("pca", "components", [[1.0, "x"]] * 3, "components", "nested lists of numbers"),
        ("pca", "components", [[1.0, 2.0], [3.0]], "components", "do not form an array"),
        ("pca", "mean", None, "mean", "missing, but a fitted PCA basis saves ['components', 'mean']"),
        ("pca", "mixing", [[1.0] * 3] * 6, "mixing", "saved, but a fitted PCA basis saves"),
        ("ica", "mixing", None, "mixing", "missing, but a fitted ICA basis saves"),
        ("ica", "mixing", [[1.0] * 6] * 3, "mixing", "expected shape [6, 3], but got [3, 6]"),
        ("ica", "mixing", [[float("inf")] * 3] * 6, "mixing", "finite"),
        ("nmf", "fvu", -1.0, "fvu", ">= 0.0"),
        ("nmf", "mse", "small", "mse", "expected a number"),
        ("nmf", "n_concepts", 0, "n_concepts", "integer >= 1"),
        ("nmf", "n_concepts", "3", "n_concepts", "integer >= 1"),
        ("nmf", "n_concepts", 2, "components", "expected shape [2, 'any'], but got [3, 6]"),
        ("nmf", "seed", -1, "seed", "integer >= 0"),
        ("nmf", "names", ["a"], "names", "expected 3 concept names"),
        ("nmf", "names", "abc", "names", "list of concept names"),
        ("nmf", "options", [1], "options", "expected a dict"),
        ("nmf", "options", {"n_components": 2}, "options", "n_components"),
    ],
)
def test_a_corrupted_fitted_basis_is_refused_naming_the_field(kind, field, value, path, words):
    data = saved(fitted(kind))
    data[field] = value
    refused(data, path, words)


def test_an_intact_fitted_basis_loads_its_numbers_exactly():
    for kind in ("pca", "nmf", "ica"):
        basis = fitted(kind)
        again = ConceptBasis.from_dict(saved(basis))
        for name in ("components", "mean", "mixing"):
            got, want = getattr(again, name), getattr(basis, name)
            assert (got is None and want is None) or torch.equal(got, want)
    unfitted = ConceptBasis.from_dict(saved(FittedBasis("pca", 2)))
    assert not unfitted.fitted and unfitted.n_concepts == 2


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("W_enc", [[0.0] * 6] * 8, "expected shape [6, 8], but got [8, 6]"),
        ("b_dec", [0.0] * 5, "expected shape [6], but got [5]"),
        ("W_dec", [[float("nan")] * 6] * 8, "finite"),
        ("center", None, "missing, but a trained sparse autoencoder saves"),
        ("dtype", "int64", "expected a floating dtype"),
        ("dtype", "float128", "expected one of"),
        ("top_k", 99, "`top_k` <= `n_concepts`"),
    ],
)
def test_a_corrupted_sparse_autoencoder_is_refused_naming_the_field(field, value, words):
    data = saved(SparseAutoencoderBasis(8, top_k=2, steps=5).fit(A))
    data[field] = value
    refused(data, "" if field == "top_k" else field, words)


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("W", [[float("nan"), 1.0]] * 6, "finite"),
        ("W", [1.0] * 6, "expected shape ['any', 'any'], but got [6]"),
        ("center", [0.0] * 5, "expected shape [6], but got [5]"),
        ("dtype", "int8", "expected a floating dtype"),
        ("names", ["a", "b", "c"], "expected 2 concept names"),
    ],
)
def test_corrupted_directions_are_refused_naming_the_field(field, value, words):
    data = saved(Directions(torch.randn(6, 2, generator=torch.Generator().manual_seed(0)), torch.zeros(6)))
    data[field] = value
    refused(data, field, words)


@pytest.mark.parametrize(
    ("field", "value", "path", "words"),
    [
        ("n_units", "eight", "n_units", "integer >= 1"),
        ("n_concepts", 0, "n_concepts", "integer >= 1"),
        ("modules", {"0": 1}, "modules", "list of saved modules"),
        ("encode", {"module": 5, "method": None}, "encode.module", "index into the 1 saved modules"),
        ("encode", {"module": 0, "method": "__init__"}, "encode.method", "public method name"),
        ("encode", {"module": 0, "method": "no_such"}, "encode.method", "is not a method"),
    ],
)
def test_a_corrupted_encoder_is_refused_naming_the_field(field, value, path, words):
    data = saved(EncoderDecoder(torch.nn.ReLU()).fit(A))
    data[field] = value
    refused(data, path, words)


# ------------------------------------------------------------------------------------- item 3: hostile tensors


def linear_encoder() -> dict:
    torch.manual_seed(0)
    return saved(EncoderDecoder(torch.nn.Linear(6, 3)).fit(A))


@pytest.mark.parametrize(
    ("key", "value", "path", "words"),
    [
        ("shape", [-3, -1], "shape", "integers >= 0, but got [-3, -1]"),
        ("shape", [2**32, 2**32], "data", "expected 18446744073709551616 numbers of shape [4294967296, 4294967296]"),
        ("shape", [2**64], "shape", "integers >= 0"),
        ("shape", [3, 2], "data", "expected 6 numbers of shape [3, 2], but got 18 of shape [3, 6]"),
        ("shape", [1.5], "shape", "integers >= 0"),
        ("shape", [1] * 40, "shape", "at most 32"),
        ("shape", [], "data", "expected 1 numbers of shape [], but got a list of 3"),
        ("dtype", "float128", "dtype", "expected one of"),
        ("dtype", "int8", "data", "integers within int64"),
        ("data", [[1.0] * 6] * 2, "data", "expected 18 numbers of shape [3, 6], but got a list of 2"),
        ("data", [[1.0] * 6, [1.0] * 6, [1.0] * 5], "data", "do not form an array"),
        ("data", [["1.0"] * 6] * 3, "data", "nested lists of numbers"),
    ],
)
def test_a_hostile_tensor_in_a_state_dict_is_refused_naming_the_field(key, value, path, words):
    data = linear_encoder()
    data["modules"][0]["state_dict"]["weight"][key] = value
    # the module given, so that the saved tensors are what is read (not the class)
    refused(data, f"modules[0].state_dict.weight.{path}", words, modules={0: torch.nn.Linear(6, 3)})


@pytest.mark.parametrize(
    ("dtype", "data", "words"),
    [
        ("int8", [300], "integers in [-128, 127]"),
        ("uint8", [-1], "integers in [0, 255]"),
        ("int64", [2**63], "integers in"),
        ("int64", [2**70], "integers within int64"),
        ("bool", [1, 0], "true or false"),
        ("int64", [True], "integers within int64"),
    ],
)
def test_integers_must_fit_their_dtype(dtype, data, words):
    with pytest.raises(ValueError) as info:
        tensor_from_json({"dtype": dtype, "shape": [len(data)], "data": data}, "steps")
    assert getattr(info.value, "path", None) == "steps.data" and words in str(info.value), str(info.value)


def test_exact_tensors_of_every_shape_round_trip():
    tensors = [torch.arange(6, dtype=torch.int8).reshape(2, 3), torch.zeros(0, 3), torch.zeros(2, 0, 4)]
    tensors += [torch.tensor(7), torch.tensor([True, False]), torch.tensor([0.1, -2.5], dtype=torch.float64)]
    for tensor in tensors:
        again = tensor_from_json(json.loads(json.dumps(tensor_to_json(tensor))), "t")
        assert again.dtype == tensor.dtype and again.shape == tensor.shape and torch.equal(again, tensor)


def test_the_training_flag_must_be_a_boolean():
    data = linear_encoder()
    data["modules"][0]["training"] = "false"
    refused(data, "modules[0].training", "expected true or false", modules={0: torch.nn.Linear(6, 3)})
    good = linear_encoder()
    assert good["modules"][0]["training"] is True  # a new Linear trains
    assert ConceptBasis.from_dict(copy.deepcopy(good), modules={0: torch.nn.Linear(6, 3)}).encoder.training is True
    good["modules"][0]["training"] = False
    assert ConceptBasis.from_dict(good, modules={0: torch.nn.Linear(6, 3)}).encoder.training is False
