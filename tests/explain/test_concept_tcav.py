"""Rules over TCAV concepts through the explainer (issue 43, criterion 3): the CAVs that ``captum.concept.TCAV``
computes on a toy image model with two planted concepts (a top stroke, which the head reads, and a left stroke, which
it does not) become rule features named after the Concepts; the rule on the read concept beats the rule on the other
one, and ``verify`` moves decisions along the read concept only."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
import torch
from concept_models import StrokeModel, stroke_images

from torch_amore import RegionalRuleExplainer
from torch_amore.concepts import from_tcav

tcav_module = pytest.importorskip("captum.concept")
pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")  # Captum's, while it fits the CAVs

SEARCH = dict(min_support=0.05, progress=False)


@pytest.fixture(scope="module")
def stroke_tcav(tmp_path_factory):
    """The stroke model, its TCAV directions (``stroke_top``, ``stroke_left``), 600 images and their concepts."""
    torch.manual_seed(0), random.seed(0), np.random.seed(0)  # noqa: NPY002  (Captum's classifier uses all three)
    model = StrokeModel().eval()
    top = tcav_module.Concept(0, "stroke_top", [stroke_images(100, top=True, left=False, seed=1)[0]])
    left = tcav_module.Concept(1, "stroke_left", [stroke_images(100, top=False, left=True, seed=2)[0]])
    rand = tcav_module.Concept(2, "random", [stroke_images(100, top=False, left=False, seed=3)[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tcav = tcav_module.TCAV(model, ["hidden"], save_path=str(tmp_path_factory.mktemp("tcav")))
        basis = from_tcav(tcav, [[top, rand], [left, rand]])
    X, has_top, has_left = stroke_images(600, seed=4)
    return model, basis, X, has_top, has_left


def literal_concepts(model: StrokeModel, W: torch.Tensor, X: torch.Tensor) -> list[list[float]]:
    """c_i = h_i @ W with ``h`` the hidden layer's activations, one sample and one sum at a time."""
    out = []
    with torch.no_grad():
        for i in range(X.shape[0]):
            h = model.hidden(model.relu(model.detect(model.flatten(X[i : i + 1]))))[0].tolist()
            out.append([sum(h[j] * float(W[j, k]) for j in range(len(h))) for k in range(W.shape[1])])
    return out


def literal_fitness(rule_set, C: list[list[float]], target: list[bool]) -> float:
    """(2 hits - covered) / |subgroup|, the rows covered found by a loop over the conditions."""
    covered = [i for i in range(len(C)) if all(r.contains(C[i][r.feature]) for r in rule_set.rules)]
    hits = sum(target[i] for i in covered)
    return (2 * hits - len(covered)) / sum(target)


def test_tcav_concepts_are_rule_features_and_the_read_one_wins(stroke_tcav):
    model, basis, X, has_top, _ = stroke_tcav
    explainer = RegionalRuleExplainer(model, layer="hidden", concepts=basis)
    explanation = explainer.explain(X, 1, max_length=2, **SEARCH)
    assert explanation.feature_names == ["stroke_top", "stroke_left"]
    # by construction the model predicts 1 exactly on the images with a top stroke
    with torch.no_grad():
        predicted = [int(model(X[i : i + 1]).argmax(1)) == 1 for i in range(X.shape[0])]
    assert predicted == has_top.tolist() and explanation.subgroup.tolist() == predicted
    C = literal_concepts(model, basis.W, X)
    assert torch.allclose(explanation.features_matrix.double(), torch.tensor(C, dtype=torch.float64), atol=1e-5)
    best = explanation.best
    assert best.rules and {r.name for r in best.rules} == {"stroke_top"}
    assert best.fitness == pytest.approx(literal_fitness(best, C, predicted))
    assert str(best).startswith("IF stroke_top ")

    on_top = explainer.explain(X, 1, max_length=1, features=[0], **SEARCH)
    on_left = explainer.explain(X, 1, max_length=1, features=[1], **SEARCH)
    assert all(r.name == "stroke_top" for rs in on_top.rule_sets for r in rs.rules)
    assert all(r.name == "stroke_left" for rs in on_left.rule_sets for r in rs.rules)
    for restricted in (on_top, on_left):
        assert restricted.best.fitness == pytest.approx(literal_fitness(restricted.best, C, predicted))
    assert on_top.best.fitness > on_left.best.fitness


def test_verify_moves_decisions_along_the_read_concept_only(stroke_tcav):
    model, basis, X, _, _ = stroke_tcav
    explainer = RegionalRuleExplainer(model, layer="hidden", concepts=basis)
    # the premise, from the construction: the head reads Q[:, 0]; the left stroke's CAV has no part along it, the
    # top stroke's a large one (the CAVs have unit length)
    read = model.Q[:, 0].double()
    assert abs(float(basis.W[:, 1].double() @ read)) < 1e-5 and float(basis.W[:, 0].double() @ read) > 0.5
    top = explainer.explain(X, 1, max_length=1, features=[0], **SEARCH).verify(X, rule_sets=1, n_controls=0)
    left = explainer.explain(X, 1, max_length=1, features=[1], **SEARCH).verify(X, rule_sets=1, n_controls=0)
    assert top.rows[0].sufficiency.value >= 0.9 and top.rows[0].necessity.value >= 0.9
    assert left.rows[0].sufficiency.value <= 0.05 and left.rows[0].necessity.value <= 0.05
