"""Every kind of concept basis everywhere (issue 43, criterion 5): given directions, PCA, a sparse autoencoder fitted
on the layer, an encoder/decoder ``nn.Module`` and TCAV directions each go through ``explain`` (in memory and
streamed), ``verify``, the HTML report and the JSON round trip (the basis saved, loaded and used by ``verify``); the
Lightning callback with given directions and with PCA. One tiny model for all: the stroke model of
``concept_models`` (its ``hidden`` layer, 8 units), 400 images."""

from __future__ import annotations

import math
import random
import warnings

import numpy as np
import pytest
import torch
from concept_models import StrokeModel, StrokeSAE, stroke_images

from torch_amore import RegionalExplanation, RegionalRuleExplainer
from torch_amore.concepts import ConceptBasis, EncoderDecoder, SparseAutoencoderBasis, from_tcav

SEARCH = dict(max_length=2, min_support=0.05, n_grids=8, progress=False)
KINDS = ["directions", "pca", "sae", "encoder", "tcav"]


def tcav_directions(model: StrokeModel, path: str) -> ConceptBasis:
    """The CAVs of the top and the left stroke from Captum's TCAV (seeded: its classifier draws from all three)."""
    concept = pytest.importorskip("captum.concept")
    torch.manual_seed(0), random.seed(0), np.random.seed(0)  # noqa: NPY002
    top = concept.Concept(0, "stroke_top", [stroke_images(60, top=True, left=False, seed=1)[0]])
    left = concept.Concept(1, "stroke_left", [stroke_images(60, top=False, left=True, seed=2)[0]])
    rand = concept.Concept(2, "random", [stroke_images(60, top=False, left=False, seed=3)[0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Captum's, while it fits the CAVs
        return from_tcav(concept.TCAV(model, ["hidden"], save_path=path), [[top, rand], [left, rand]])


def concepts_of(kind: str, model: StrokeModel, tmp_path) -> dict:
    """The explainer's (and the callback's) concept arguments for one kind of basis."""
    if kind == "directions":
        return dict(concepts=model.Q[:, :2], concept_names=["top", "left"])
    if kind == "pca":
        return dict(concepts="pca", n_concepts=3)
    if kind == "sae":
        return dict(concepts=SparseAutoencoderBasis(4, top_k=2, steps=60))
    if kind == "encoder":
        return dict(concepts=StrokeSAE())
    return dict(concepts=tcav_directions(model, str(tmp_path)))


def hidden(model: StrokeModel, X: torch.Tensor) -> torch.Tensor:
    """The explained layer's activations, by the model's own modules."""
    with torch.no_grad():
        return model.hidden(model.relu(model.detect(model.flatten(X))))


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_of_basis_explains_streams_verifies_reports_and_round_trips(kind, tmp_path):
    model = StrokeModel().eval()
    X, has_top, _ = stroke_images(400, seed=4)
    explainer = RegionalRuleExplainer(model, layer="hidden", **concepts_of(kind, model, tmp_path))
    explanation = explainer.explain(X, 1, **SEARCH)
    basis = explainer.concepts
    names, K = basis.names, basis.n_concepts
    assert basis.fitted and explanation.concepts is basis and explanation.feature_names == names
    assert explanation.params["concepts"]["kind"] == basis.kind == ("directions" if kind == "tcav" else kind)
    # the concept activations are the basis's encoding of the layer's activations, and the rules' counts theirs
    C = basis.encode(hidden(model, X))
    assert torch.allclose(explanation.features_matrix.double(), C.double(), atol=1e-5)
    assert explanation.subgroup.tolist() == has_top.tolist()  # by construction: predicted 1 iff a top stroke
    for rs in explanation.rule_sets[:3]:
        covered = [i for i in range(len(X)) if all(r.contains(float(C[i, r.feature])) for r in rs.rules)]
        assert rs.support == len(covered)
        assert rs.fitness == pytest.approx((2 * sum(bool(has_top[i]) for i in covered) - len(covered)) / has_top.sum())

    streamed = explainer.explain(X, 1, stream=True, batch_size=100, **SEARCH)
    assert [str(rs) for rs in streamed.rule_sets] == [str(rs) for rs in explanation.rule_sets]
    assert streamed.concepts is basis

    result = explanation.verify(X[:200], rule_sets=1, n_controls=1, seed=0)
    row = result.rows[0]
    assert row.sufficiency.n + row.necessity.n + sum(row.not_moved) > 0
    for share in (row.sufficiency, row.necessity):  # of the samples the patch moved (none: no share)
        assert 0 <= share.value <= 1 if share.n else math.isnan(share.value)

    text = explanation.to_html(tmp_path / "report.html").read_text()
    assert f"concepts: {basis.kind}, K={K}" in text
    assert all(r.name in names and r.name in text for r in explanation.best.rules)

    explanation.to_json(tmp_path / "explanation.json")
    loaded = RegionalExplanation.from_json(tmp_path / "explanation.json", classes=[StrokeSAE])  # the encoder's class
    assert isinstance(loaded.concepts, type(basis)) and loaded.concepts.names == names
    assert torch.allclose(loaded.concepts.encode(hidden(model, X[:50])), C[:50], atol=1e-6)
    assert loaded.params["concepts"] == explanation.params["concepts"]
    assert [str(rs) for rs in loaded.rule_sets] == [str(rs) for rs in explanation.rule_sets]
    again = loaded.verify(X[:200], rule_sets=1, n_controls=1, seed=0, model=model).rows[0]
    assert (again.sufficiency, again.necessity, again.control_sufficiency, again.control_necessity) == (
        row.sufficiency,
        row.necessity,
        row.control_sufficiency,
        row.control_necessity,
    )


@pytest.mark.parametrize("kind", ["directions", "pca"])
def test_the_callback_with_directions_and_pca(kind, tmp_path):
    lightning = pytest.importorskip("pytorch_lightning")
    from torch.utils.data import DataLoader, TensorDataset

    from torch_amore import RegionalRuleExtractor

    class Strokes(lightning.LightningModule):
        """The stroke model under ``net``; training leaves it as it is (learning rate 0)."""

        def __init__(self) -> None:
            super().__init__()
            self.net = StrokeModel()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net(x)

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    X, has_top, _ = stroke_images(400, seed=4)
    data = DataLoader(TensorDataset(X, has_top.long()), batch_size=100)
    kw = dict(target=1, layer="net.hidden", data=data, **concepts_of(kind, StrokeModel(), tmp_path), **SEARCH)
    kw.pop("progress")
    mem = RegionalRuleExtractor(filename="mem", stream=False, **kw)
    streamed = RegionalRuleExtractor(filename="streamed", stream=True, **kw)
    module = Strokes()
    lightning.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path, callbacks=[mem, streamed], logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
        limit_val_batches=0,
    ).fit(module, data)  # fmt: skip
    explainer = RegionalRuleExplainer(module, layer="net.hidden", **concepts_of(kind, module.net, tmp_path))
    want = [str(rs) for rs in explainer.explain(X, 1, **SEARCH).rule_sets]
    assert want
    for cb in (mem, streamed):
        assert [str(rs) for rs in cb.explanation.rule_sets] == want
        assert cb.explanation.feature_names == explainer.concepts.names
        restored = RegionalExplanation.from_json(next(tmp_path.rglob(f"{cb.filename}.json")))
        assert restored.concepts.names == explainer.concepts.names
        got = restored.verify(X[:100], rule_sets=1, n_controls=0, model=module).rows[0]
        want_row = cb.explanation.verify(X[:100], rule_sets=1, n_controls=0, model=module).rows[0]
        assert (got.sufficiency, got.necessity) == (want_row.sufficiency, want_row.necessity)


def test_from_json_rebuilds_a_module_that_needs_arguments_from_modules(tmp_path):
    model = StrokeModel().eval()
    X, _, _ = stroke_images(200, seed=4)
    torch.manual_seed(0)
    encoder, decoder = torch.nn.Linear(8, 3), torch.nn.Linear(3, 8)
    basis = EncoderDecoder(encoder, decoder, names=["p", "q", "r"])
    explanation = RegionalRuleExplainer(model, layer="hidden", concepts=basis).explain(X, 1, **SEARCH)
    explanation.to_json(tmp_path / "explanation.json")
    with pytest.raises(ValueError, match=r"concepts.*modules="):  # a Linear cannot be built without its sizes
        RegionalExplanation.from_json(tmp_path / "explanation.json")
    linear = "torch.nn.modules.linear.Linear"
    loaded = RegionalExplanation.from_json(
        tmp_path / "explanation.json", modules={0: torch.nn.Linear(8, 3), linear: lambda: torch.nn.Linear(3, 8)}
    )
    assert loaded.concepts.names == ["p", "q", "r"]
    assert torch.equal(loaded.concepts.encoder.weight, encoder.weight)
    assert torch.equal(loaded.concepts.decoder.bias, decoder.bias)
    A = hidden(model, X[:20])
    assert torch.allclose(loaded.concepts.encode(A), basis.encode(A))
