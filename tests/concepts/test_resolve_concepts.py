"""What ``concepts=`` may be: each accepted form gives its basis, everything else a clear TypeError or ValueError."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from concept_models import TinySAE

from torch_amore.concepts import (
    ConceptBasis,
    Directions,
    EncoderDecoder,
    FittedBasis,
    SparseAutoencoderBasis,
    resolve_concepts,
)


def test_none_and_a_basis_pass_through():
    assert resolve_concepts(None) is None
    basis = Directions(torch.eye(2))
    assert resolve_concepts(basis) is basis
    with pytest.raises(ValueError, match="no `names` with `concepts` given as a ConceptBasis"):
        resolve_concepts(basis, names=["a", "b"])


@pytest.mark.parametrize("W", [torch.eye(4)[:, :2], np.eye(4)[:, :2]], ids=["tensor", "ndarray"])
def test_a_matrix_is_directions(W):
    basis = resolve_concepts(W, names=["u0", "u1"])
    assert isinstance(basis, Directions) and basis.names == ["u0", "u1"]
    a = torch.arange(8.0).reshape(2, 4)
    assert basis.encode(a).tolist() == [[0.0, 1.0], [4.0, 5.0]]


def test_a_vector_is_one_direction_and_a_pair_has_a_center():
    one = resolve_concepts(torch.tensor([1.0, 1.0]))
    assert one.n_concepts == 1 and one.encode(torch.tensor([[2.0, 3.0]])).item() == 5.0
    centred = resolve_concepts((torch.eye(2), torch.tensor([1.0, 2.0])))
    assert centred.encode(torch.tensor([[1.0, 2.0]])).tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize(("method", "cls"), [("pca", FittedBasis), ("NMF", FittedBasis), ("ica", FittedBasis),
                                             ("sae", SparseAutoencoderBasis)])  # fmt: skip
def test_method_names_give_unfitted_bases(method, cls):
    basis = resolve_concepts(method, n_concepts=3, seed=4, names=["a", "b", "c"])
    assert type(basis) is cls and not basis.fitted
    assert basis.kind == method.lower() and basis.n_concepts == 3 and basis.seed == 4 and basis.names == ["a", "b", "c"]
    pair = resolve_concepts((method, 2))
    assert type(pair) is cls and pair.n_concepts == 2


def test_method_names_need_n_concepts_and_a_known_name():
    with pytest.raises(ValueError, match=r"Expected `n_concepts` with `concepts='pca'`"):
        resolve_concepts("pca")
    with pytest.raises(
        ValueError, match=r"among \['pca', 'nmf', 'ica', 'sae'\], but got 'sea' \(did you mean 'sae'\?\)"
    ):
        resolve_concepts("sea", n_concepts=2)
    with pytest.raises(ValueError, match="`n_concepts` once"):
        resolve_concepts(("pca", 2), n_concepts=2)
    with pytest.raises(ValueError, match="`n_concepts` to be an integer >= 1"):
        resolve_concepts("pca", n_concepts=0)


def test_a_dict_of_callables_is_an_encoder_decoder():
    basis = resolve_concepts({"encode": lambda a: a[:, :1], "decode": lambda c: c.repeat(1, 2), "names": ["first"]})
    assert isinstance(basis, EncoderDecoder) and basis.names == ["first"]
    assert basis.fit(torch.ones(3, 2)).n_concepts == 1
    with pytest.raises(ValueError, match=r"an unexpected key 'decoder' \(did you mean 'decode'\?\)"):
        resolve_concepts({"encode": abs, "decoder": abs})
    with pytest.raises(ValueError, match="it has no 'encode'"):
        resolve_concepts({"decode": abs})
    with pytest.raises(ValueError, match="names once"):
        resolve_concepts({"encode": abs, "names": ["a"]}, names=["a"])


def test_a_module_with_encode_and_decode_is_used_by_its_methods():
    sae = TinySAE()
    basis = resolve_concepts(sae, names=["f0", "f1", "f2", "f3"])
    assert isinstance(basis, EncoderDecoder) and basis.encoder.__self__ is sae
    a = torch.randn(5, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(basis.fit(a).encode(a), sae.encode(a))
    assert basis.to_dict()["modules"][0]["class"] == "TinySAE"  # the module is what is saved


def test_a_saved_dict_is_loaded():
    saved = Directions(torch.eye(3)[:, :1], names=["x"]).to_dict()
    basis = resolve_concepts(saved)
    assert isinstance(basis, ConceptBasis) and basis.names == ["x"]


@pytest.mark.parametrize(
    "bad", [3, [[1.0, 0.0]], torch.nn.Linear(2, 2), abs], ids=["int", "list", "module", "function"]
)
def test_anything_else_is_a_type_error_listing_what_is_accepted(bad):
    with pytest.raises(TypeError, match=r"Expected `concepts` to be one of: None; a ConceptBasis; a \(D, K\) tensor"):
        resolve_concepts(bad)


def test_a_module_without_encode_is_told_what_it_lacks():
    with pytest.raises(TypeError, match=r"but got Linear \(an nn.Module needs an `encode` method\)"):
        resolve_concepts(torch.nn.Linear(2, 2))
