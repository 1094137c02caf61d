"""Directions from Captum's TCAV (issue 43, criterion 3): on a toy image model with two planted concepts, the CAVs
computed by ``captum.concept.TCAV`` become a basis named after the Concepts whose activations separate the images
with each concept from those without."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from concept_models import StrokeModel, stroke_images

from torch_amore.concepts import Directions, from_tcav

tcav_module = pytest.importorskip("captum.concept")
# Captum's own warnings while it fits the CAVs (its default classifier keeps the data in memory; a slow conversion)
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """The probability that a positive scores above a negative (ties count half), over all pairs."""
    pos, neg = scores[labels].tolist(), scores[~labels].tolist()
    wins = sum((p > q) + 0.5 * (p == q) for p in pos for q in neg)
    return wins / (len(pos) * len(neg))


def hidden(model: StrokeModel, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.hidden(model.relu(model.detect(model.flatten(images))))


@pytest.fixture
def tcav_setup(tmp_path):
    # Captum's classifier shuffles with `random` and fits scikit-learn's SGD with numpy's global state
    torch.manual_seed(0), random.seed(0), np.random.seed(0)  # noqa: NPY002
    model = StrokeModel().eval()
    top = tcav_module.Concept(0, "stroke_top", [stroke_images(100, top=True, left=False, seed=1)[0]])
    left = tcav_module.Concept(1, "stroke_left", [stroke_images(100, top=False, left=True, seed=2)[0]])
    rand = tcav_module.Concept(2, "random", [stroke_images(100, top=False, left=False, seed=3)[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Captum's default classifier warns that it keeps the data in memory
        tcav = tcav_module.TCAV(model, ["hidden"], save_path=str(tmp_path))
    return model, tcav, top, left, rand


def test_cavs_become_named_directions_that_separate_their_concepts(tcav_setup):
    model, tcav, top, left, rand = tcav_setup
    basis = from_tcav(tcav, [[top, rand], [left, rand]])
    assert isinstance(basis, Directions)
    assert basis.names == ["stroke_top", "stroke_left"] and basis.n_units == 8
    images, has_top, has_left = stroke_images(300, seed=4)
    c = basis.encode(hidden(model, images))
    assert auroc(c[:, 0], has_top) >= 0.95
    assert auroc(c[:, 1], has_left) >= 0.95
    # each direction reads its own concept better than the other one
    assert auroc(c[:, 0], has_top) > auroc(c[:, 0], has_left)
    assert auroc(c[:, 1], has_left) > auroc(c[:, 1], has_top)


def test_directions_are_the_concepts_rows_of_the_cav_weights(tcav_setup):
    model, tcav, top, left, rand = tcav_setup
    basis = from_tcav(tcav, [[top, rand], [left, rand]])
    for k, (concept, key) in enumerate([(top, "0-2"), (left, "1-2")]):
        stats = tcav.cavs[key]["hidden"].stats
        row = stats["weights"][list(stats["classes"]).index(concept.id)].double()
        assert torch.allclose(basis.W[:, k], row / row.norm())
    raw = from_tcav(tcav, [[top, rand]], normalize=False)
    stats = tcav.cavs["0-2"]["hidden"].stats
    assert torch.allclose(raw.W[:, 0], stats["weights"][list(stats["classes"]).index(0)].double())


def test_concept_activations_by_a_literal_loop(tcav_setup):
    model, tcav, top, left, rand = tcav_setup
    basis = from_tcav(tcav, [[top, rand], [left, rand]])
    h = hidden(model, stroke_images(6, seed=5)[0])
    c = basis.encode(h)
    for i in range(6):
        for k in range(2):
            value = sum(float(h[i, j]) * float(basis.W[j, k]) for j in range(8))
            assert c[i, k].item() == pytest.approx(value, abs=1e-5)


def test_computed_cavs_are_taken_as_they_are(tcav_setup):
    model, tcav, top, left, rand = tcav_setup
    tcav.compute_cavs([[left, rand], [top, rand]])
    basis = from_tcav(tcav)  # every computed set, in the order computed
    assert basis.names == ["stroke_left", "stroke_top"]
    again = from_tcav(tcav, [[top, rand]], layer="hidden", names=["top stroke"])
    assert again.names == ["top stroke"] and torch.equal(again.W[:, 0], basis.W[:, 1])


def test_a_concept_in_several_sets_is_named_by_its_counter_set(tcav_setup, tmp_path):
    model, tcav, top, left, rand = tcav_setup
    basis = from_tcav(tcav, [[top, rand], [top, left]])
    assert basis.names == ["stroke_top-vs-random", "stroke_top-vs-stroke_left"]


def test_bad_layer_sets_and_objects(tcav_setup):
    model, tcav, top, left, rand = tcav_setup
    with pytest.raises(ValueError, match=r"one of the TCAV's layers \['hidden'\], but got 'hiden' \(did you mean"):
        from_tcav(tcav, [[top, rand]], layer="hiden")
    with pytest.raises(ValueError, match="holds no CAVs for layer 'hidden'"):
        from_tcav(tcav)
    with pytest.raises(ValueError, match=r"`experimental_sets\[0\]` to be a list of at least two Concepts"):
        from_tcav(tcav, [[top]])
    with pytest.raises(TypeError, match="captum.concept.TCAV"):
        from_tcav(object(), [[top, rand]])
    with pytest.raises(ValueError, match="Expected 1 concept `names`, one per concept, but got 2"):
        from_tcav(tcav, [[top, rand]], names=["a", "b"])
