"""Concept bases saved as JSON numbers and loaded back: encode equal before and after, for every kind; user modules by
import path and state_dict only, loaded from the classes the caller passes (nothing a file names is imported); each
thing that cannot be saved or loaded gets a clear message."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from concept_models import SizedSAE, TinySAE, planted_features

from torch_amore.concepts import (
    ConceptBasis,
    Directions,
    EncoderDecoder,
    FittedBasis,
    SparseAutoencoderBasis,
)


def round_trip(basis: ConceptBasis, **kwargs) -> ConceptBasis:
    text = json.dumps(basis.to_dict(), allow_nan=False)  # plain JSON: numbers, strings, lists, dicts
    return ConceptBasis.from_dict(json.loads(text), **{"classes": [TinySAE], **kwargs})


A, _, _ = planted_features(n=200, d=6, k=4, seed=3)


def bases() -> dict[str, ConceptBasis]:
    g = torch.Generator().manual_seed(0)
    return {
        "directions": Directions(torch.randn(6, 3, generator=g), names=["a", "b", "c"]),
        "directions_center": Directions(torch.randn(6, 2, generator=g, dtype=torch.float64), torch.ones(6)),
        "pca": FittedBasis("pca", 3, seed=1).fit(A),
        "nmf": FittedBasis("nmf", 2, names=["x", "y"]).fit(A.abs()),
        "ica": FittedBasis("ica", 2, options={"max_iter": 500}).fit(A),
        "sae": SparseAutoencoderBasis(8, top_k=2, steps=30).fit(A),
        "module": EncoderDecoder(TinySAE().encode, TinySAE().decode).fit(A),
    }


@pytest.mark.parametrize("name", list(bases()))
def test_round_trip_keeps_encode_decode_names_and_kind(name):
    basis = bases()[name]
    again = round_trip(basis)
    assert type(again) is type(basis) and again.kind == basis.kind
    assert again.names == basis.names and again.n_concepts == basis.n_concepts
    c = basis.encode(A)
    assert torch.allclose(again.encode(A), c, atol=1e-6)
    assert torch.allclose(again.decode(c), basis.decode(c), atol=1e-6)
    assert again.to_dict() == basis.to_dict()


def test_directions_keep_their_dtype_and_numbers_exactly():
    basis = bases()["directions"]
    data = basis.to_dict()
    assert data["kind"] == "directions" and data["dtype"] == "float32" and data["center"] is None
    assert data["W"] == [[float(v) for v in row] for row in basis.W]
    again = round_trip(basis)
    assert again.W.dtype == torch.float32 and torch.equal(again.W, basis.W)


def test_fitted_and_sae_bases_keep_their_settings_and_errors():
    ica = round_trip(bases()["ica"])
    assert (ica.seed, ica.options, ica.fvu) == (0, {"max_iter": 500}, bases()["ica"].fvu)
    sae = bases()["sae"]
    again = round_trip(sae)
    assert (again.top_k, again.steps, again.seed) == (2, 30, 0)
    assert again.reconstruction_error == sae.reconstruction_error
    unfitted = round_trip(FittedBasis("pca", 2))
    assert not unfitted.fitted and unfitted.n_concepts == 2
    assert not round_trip(SparseAutoencoderBasis(4)).fitted


def test_one_module_behind_encode_and_decode_is_saved_once():
    sae = TinySAE()
    data = EncoderDecoder(sae.encode, sae.decode).to_dict()
    assert len(data["modules"]) == 1
    assert data["modules"][0]["module"] == "concept_models" and data["modules"][0]["class"] == "TinySAE"
    assert data["encode"] == {"module": 0, "method": "encode"} and data["decode"] == {"module": 0, "method": "decode"}
    assert data["modules"][0]["state_dict"]["steps"] == {"dtype": "int64", "shape": [], "data": 0}
    again = ConceptBasis.from_dict(data, classes=[TinySAE])
    module = again.encoder.__self__
    assert isinstance(module, TinySAE) and module is again.decoder.__self__
    for key, value in sae.state_dict().items():
        assert torch.equal(module.state_dict()[key], value)


def test_modules_called_as_they_are_and_modules_that_need_arguments():
    encoder, decoder = torch.nn.Linear(6, 3), torch.nn.Linear(3, 6)
    basis = EncoderDecoder(encoder, decoder, names=["p", "q", "r"]).fit(A)
    data = basis.to_dict()
    assert data["encode"] == {"module": 0, "method": None} and data["decode"] == {"module": 1, "method": None}
    with pytest.raises(ValueError, match=r"cannot be built without arguments .*modules="):
        ConceptBasis.from_dict(data)
    linear = "torch.nn.modules.linear.Linear"
    again = ConceptBasis.from_dict(data, modules={0: torch.nn.Linear(6, 3), linear: lambda: torch.nn.Linear(3, 6)})
    assert again.names == ["p", "q", "r"] and again.n_units == 6
    assert torch.allclose(again.encode(A), basis.encode(A)) and torch.equal(again.decoder.weight, decoder.weight)
    sized = SizedSAE(6, 4)
    saved = EncoderDecoder(sized.encode, sized.decode).to_dict()
    again = ConceptBasis.from_dict(saved, modules={"concept_models.SizedSAE": SizedSAE(6, 4)})
    assert torch.allclose(again.encode(A), sized.encode(A))


def test_functions_and_lambdas_cannot_be_saved():
    with pytest.raises(ValueError, match=r"`encode` \(a function, .*<lambda>\) cannot be saved: only an nn.Module"):
        EncoderDecoder(lambda a: a[:, :2]).to_dict()
    sae = TinySAE()
    with pytest.raises(ValueError, match=r"`decode` \(a function, .*<locals>.*\) cannot be saved"):

        def decode(c):
            return sae.decode(c)

        EncoderDecoder(sae.encode, decode).to_dict()


def test_local_classes_cannot_be_saved():
    class Local(torch.nn.Module):
        def forward(self, a):
            return a

    with pytest.raises(ValueError, match="defined at the top level of a module"):
        EncoderDecoder(Local()).to_dict()


def test_classes_not_given_are_refused_and_bad_files_get_clear_messages():
    data = EncoderDecoder(TinySAE().encode, TinySAE().decode).to_dict()
    with pytest.raises(ValueError, match=r"`modules\[0\].class`: concept_models.TinySAE is not one of torch.nn's .*"
                       r"pass the class, `classes=\[TinySAE\]`"):  # fmt: skip
        ConceptBasis.from_dict(data)
    data["modules"][0]["module"] = "no_such_package.sae"
    with pytest.raises(ValueError, match=r"no_such_package.sae.TinySAE is not one of torch.nn's module classes"):
        ConceptBasis.from_dict(data, classes=[SizedSAE])
    data["modules"][0].update(module="os", **{"class": "getcwd"})
    with pytest.raises(ValueError, match=r"os.getcwd is not one of torch.nn's module classes"):
        ConceptBasis.from_dict(data, classes=[TinySAE])
    data["modules"][0].update(module="os; import sys")
    with pytest.raises(ValueError, match=r"`modules\[0\].module`: expected a dotted module path"):
        ConceptBasis.from_dict(data)
    good = EncoderDecoder(TinySAE().encode, TinySAE().decode).to_dict()
    good["encode"]["method"] = "__init__"
    with pytest.raises(ValueError, match="public method name"):
        ConceptBasis.from_dict(good, classes=[TinySAE])
    state = EncoderDecoder(TinySAE().encode).to_dict()
    del state["modules"][0]["state_dict"]["enc.weight"]
    with pytest.raises(ValueError, match="does not fit a new concept_models.TinySAE"):
        ConceptBasis.from_dict(state, classes=[TinySAE])


def test_unknown_kinds_and_keys():
    with pytest.raises(
        ValueError, match=r"among \[.*'directions'.*\], but got 'direction' \(did you mean 'directions'"
    ):
        ConceptBasis.from_dict({"kind": "direction"})
    data = bases()["directions"].to_dict()
    data["extra"] = 1
    with pytest.raises(ValueError, match=r"`extra`: unexpected key"):
        ConceptBasis.from_dict(data)
    with pytest.raises(ValueError, match="expected a saved Directions, but the dict holds a FittedBasis"):
        Directions.from_dict(bases()["pca"].to_dict())
    bad = bases()["directions"].to_dict()
    bad["W"] = [[1.0, "x"]]
    with pytest.raises(ValueError, match="`W`: expected nested lists of numbers"):
        ConceptBasis.from_dict(bad)


def test_options_that_are_not_json_and_errors_that_are_not_finite():
    basis = FittedBasis("ica", 2, options={"w_init": np.eye(2)}).fit(A)
    with pytest.raises(ValueError, match="`options` cannot be saved as JSON"):
        basis.to_dict()
    sae = SparseAutoencoderBasis(4, steps=3).fit(A)
    sae.fvu = float("inf")  # as reconstruction_error gives for constant activations reconstructed badly
    assert round_trip(sae).fvu is None
