"""Rules over concepts (``concepts=``): a planted rotation, literal recomputations of the concept activations, the
rules' metrics and the interventions, streaming, JSON, pixel maps and the checks before the full pass."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torch_amore import RegionalExplanation, RegionalRuleExplainer
from torch_amore.concepts import ConceptBasis, EncoderDecoder

D = 8
FAST = dict(max_length=2, min_support=0.05, progress=False)


def rotated_model(seed: int = 0) -> tuple[nn.Sequential, torch.Tensor]:
    """A hidden layer ``z = R x`` (R a random rotation) and a head that reads ``(z_0 + z_1) / sqrt(2)`` (its logit);
    and the (D, 2) directions: the read one, and an orthogonal one the head does not read."""
    g = torch.Generator().manual_seed(seed)
    R, _ = torch.linalg.qr(torch.randn(D, D, generator=g))
    model = nn.Sequential(nn.Linear(D, D, bias=False), nn.Linear(D, 1, bias=False))
    W = torch.zeros(D, 2)
    W[0, 0] = W[1, 0] = W[0, 1] = 1 / math.sqrt(2)
    W[1, 1] = -1 / math.sqrt(2)
    with torch.no_grad():
        model[0].weight.copy_(R)
        model[1].weight.copy_(W[:, 0].reshape(1, D))
    return model, W


def data(n: int = 3000, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, D, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def planted():
    model, W = rotated_model()
    X = data()
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts=W, concept_names=["read", "unread"])
    return model, W, X, explainer, explainer.explain(X, 1, **FAST)


def literal_concepts(model: nn.Module, W: torch.Tensor, X: torch.Tensor, center=None) -> list[list[float]]:
    """c_i = (a_i - center) @ W, one sample and one sum at a time."""
    out = []
    with torch.no_grad():
        for i in range(X.shape[0]):
            a = model[0](X[i : i + 1])[0].tolist()
            if center is not None:
                a = [v - float(m) for v, m in zip(a, center)]
            out.append([sum(a[j] * float(W[j, k]) for j in range(len(a))) for k in range(W.shape[1])])
    return out


def in_target(model: nn.Module, x: torch.Tensor) -> bool:
    with torch.no_grad():
        return float(model(x.reshape(1, -1))[0, 0]) > 0  # sigmoid(logit) > 0.5


# --------------------------------------------------------------------------------------------------------------------
# acceptance: the planted rotation


def test_one_concept_condition_beats_the_units(planted):
    model, _, X, _, explanation = planted
    units = RegionalRuleExplainer(model, layer=model[0]).explain(X, 1, **FAST)
    best = explanation.best
    assert len(best.rules) == 1 and best.rules[0].name == "read"
    assert best.fitness >= units.best.fitness + 0.05
    assert explanation.feature_names == ["read", "unread"]
    assert explanation.params["concepts"]["kind"] == "directions" and explanation.params["concepts"]["n_concepts"] == 2
    assert "concepts: directions, K=2" in str(explanation)
    assert repr(planted[3]).endswith("concepts=Directions(kind='directions', n_concepts=2))")


def test_verify_in_concept_space_reads_the_read_direction_only(planted):
    model, W, X, explainer, explanation = planted
    read = explanation.verify(X, rule_sets=1, n_controls=2)
    row = read.rows[0]
    assert row.units == (0,)
    # by construction, moving the read concept across 0 flips the decision; moving the unread one never does
    assert row.sufficiency.value >= 0.9 and row.necessity.value >= 0.9
    unread = explainer.explain(X, 1, features=[1], **FAST)
    assert all(r.feature == 1 for rs in unread.rule_sets for r in rs.rules)
    other = unread.verify(X, rule_sets=1, n_controls=0).rows[0]
    assert other.sufficiency.value <= 0.05 and other.necessity.value <= 0.05


# --------------------------------------------------------------------------------------------------------------------
# honest numbers: literal loops


def test_concept_activations_and_rule_metrics_by_literal_loops(planted):
    model, W, X, _, explanation = planted
    C = literal_concepts(model, W, X)
    assert torch.allclose(explanation.features_matrix.double(), torch.tensor(C, dtype=torch.float64), atol=1e-5)
    target = [in_target(model, X[i]) for i in range(X.shape[0])]
    assert explanation.subgroup.tolist() == target
    Cm = explanation.features_matrix
    for rs in explanation.rule_sets[:5]:
        covered = [i for i in range(len(C)) if all(r.contains(float(Cm[i, r.feature])) for r in rs.rules)]
        hits = sum(target[i] for i in covered)
        assert rs.support == len(covered)
        assert rs.confidence == pytest.approx(hits / len(covered))
        assert rs.fitness == pytest.approx((2 * hits - len(covered)) / sum(target))


@pytest.mark.parametrize("method", ["resample", "clamp", "mean"])
def test_interventions_equal_a_literal_per_sample_patch(planted, method):
    model, W, X, _, explanation = planted
    rs = explanation.best
    result = explanation.verify(X[:600], rule_sets=[rs], method=method, n_controls=1, seed=3)
    details = result.rows[0].details
    S, Q, flipped = details["sufficiency_samples"], details["necessity_samples"], details["flipped"]
    C = literal_concepts(model, W, X[:600])
    values = _replacement_values(method, rs, C, S, Q, details)
    k = rs.rules[0].feature
    for pos, (i, v) in enumerate(zip(torch.cat([S, Q]).tolist(), values)):
        with torch.no_grad():
            a = model[0](X[i : i + 1])[0].tolist()
        shift = v - C[i][k]
        patched = torch.tensor([a[j] + float(W[j, k]) * shift for j in range(D)])  # W's columns are orthonormal
        with torch.no_grad():
            into = float(model[1](patched.reshape(1, -1))[0, 0]) > 0
        assert bool(flipped[pos]) == (into if pos < len(S) else not into)


def _replacement_values(method, rs, C, S, Q, details) -> list[float]:
    """The new value of the rule's concept, per sample of S then Q, by the method's definition."""
    k, rule = rs.rules[0].feature, rs.rules[0]
    inside = [i for i in range(len(C)) if rule.contains(C[i][k])]
    outside = [i for i in range(len(C)) if not rule.contains(C[i][k])]
    if method == "resample":
        return [C[d][k] for d in details["donors"].tolist()]
    if method == "mean":
        into, out = sum(C[i][k] for i in inside) / len(inside), sum(C[i][k] for i in outside) / len(outside)
        return [into] * len(S) + [out] * len(Q)
    values = []
    for rows, pool in ((S, inside), (Q, outside)):
        for i in rows.tolist():
            v = C[i][k]
            if pool is inside and rule.contains(v):
                values.append(v)
            else:
                values.append(min((C[j][k] for j in pool), key=lambda w: (abs(w - v), w)))
    return values


def test_an_encoder_decoder_gives_the_directions_numbers(planted):
    model, W, X, _, explanation = planted
    basis = EncoderDecoder(lambda a: a @ W, lambda c: c @ W.T, names=["read", "unread"])
    other = RegionalRuleExplainer(model, layer=model[0], concepts=basis).explain(X, 1, **FAST)
    assert [str(rs) for rs in other.rule_sets] == [str(rs) for rs in explanation.rule_sets]
    assert other.params["concepts"]["kind"] == "encoder"
    a = explanation.verify(X[:500], rule_sets=1, n_controls=1, seed=1).rows[0]
    b = other.verify(X[:500], rule_sets=1, n_controls=1, seed=1).rows[0]
    assert (a.sufficiency, a.necessity, a.control_sufficiency) == (b.sufficiency, b.necessity, b.control_sufficiency)


# --------------------------------------------------------------------------------------------------------------------
# everywhere: streaming, new data, local rules, selection, JSON


def test_streamed_rules_equal_the_in_memory_ones(planted):
    _, _, X, explainer, explanation = planted
    streamed = explainer.explain(X, 1, stream=True, batch_size=500, **FAST)
    assert [str(rs) for rs in streamed.rule_sets] == [str(rs) for rs in explanation.rule_sets]
    assert streamed.feature_names == ["read", "unread"] and streamed.concepts is explainer.concepts


def test_evaluate_and_features_matrix_encode_new_data(planted):
    model, W, _, explainer, explanation = planted
    new = data(400, seed=7)
    C = torch.tensor(literal_concepts(model, W, new))
    assert torch.allclose(explainer.features_matrix(new).double(), C.double(), atol=1e-5)
    target = torch.tensor([in_target(model, new[i]) for i in range(400)])
    metrics = explanation.evaluate(new)
    for rs, m in zip(explanation.rule_sets, metrics):
        covered = rs.mask(C)
        assert m.support == int(covered.sum())
        assert m.confidence == pytest.approx(float((covered & target).sum()) / max(int(covered.sum()), 1))


def test_local_rules_contain_the_samples_concepts(planted):
    model, W, X, explainer, _ = planted
    c = literal_concepts(model, W, X[5:6])[0]
    for x in (5, X[5]):
        local = explainer.explain_local(x, X, 1, **FAST)
        assert local.rule_sets
        assert all(r.contains(c[r.feature]) for rs in local.rule_sets for r in rs.rules)


def test_select_features_selects_concepts(planted):
    _, _, X, explainer, _ = planted
    explanation = explainer.explain(X, 1, select_features={"n_steps": 8}, **FAST)
    assert set(explanation.selection.features) <= {0, 1} and 0 in explanation.selection.features
    assert explanation.best.rules[0].name == "read"


def test_json_round_trip_keeps_the_basis(planted, tmp_path):
    model, W, X, _, explanation = planted
    path = tmp_path / "e.json"
    explanation.to_json(path)
    loaded = RegionalExplanation.from_json(path)
    assert isinstance(loaded.concepts, ConceptBasis) and loaded.concepts.names == ["read", "unread"]
    assert torch.allclose(loaded.concepts.W.float(), W)
    assert loaded.params["concepts"] == explanation.params["concepts"]
    assert "concepts: directions, K=2" in str(loaded)
    got = loaded.verify(X[:300], rule_sets=1, n_controls=0, model=model).rows[0]
    want = explanation.verify(X[:300], rule_sets=1, n_controls=0).rows[0]
    assert (got.sufficiency, got.necessity) == (want.sufficiency, want.necessity)
    plain = RegionalRuleExplainer(model, layer=model[0]).explain(X[:500], 1, **FAST)
    assert "concepts" not in plain.to_dict() and RegionalExplanation.from_dict(plain.to_dict()).concepts is None


def test_an_unsaved_encoder_is_described_and_refused_by_verify(planted):
    model, W, X, _, _ = planted
    basis = EncoderDecoder(lambda a: a @ W, lambda c: c @ W.T)
    explanation = RegionalRuleExplainer(model, layer=model[0], concepts=basis).explain(X[:800], 1, **FAST)
    loaded = RegionalExplanation.from_dict(explanation.to_dict())
    assert loaded.concepts is None and loaded.params["concepts"]["kind"] == "encoder"
    with pytest.raises(ValueError, match="concept basis"):
        loaded.verify(X[:100], model=model)


def test_the_report_names_the_basis(planted, tmp_path):
    _, _, _, _, explanation = planted
    text = explanation.to_html(tmp_path / "r.html").read_text()
    assert "concepts: directions, K=2" in text and "read &gt;= 0" in text.replace(">=", "&gt;=")
    assert list(explanation.to_dataframe()["features"].iloc[0]) == ["read"]


# --------------------------------------------------------------------------------------------------------------------
# pixel maps


def test_concept_maps_are_the_directions_combination_of_unit_maps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.Tanh(), nn.Linear(3, 1))
    W, center = torch.randn(3, 2), torch.randn(3)
    x = torch.randn(5, 4)
    units = RegionalRuleExplainer(model, layer=model[1]).attribute(x, [0, 1, 2], n_steps=16)
    concepts = RegionalRuleExplainer(model, layer=model[1], concepts=(W, center)).attribute(x, [0, 1], n_steps=16)
    for k in range(2):
        combined = sum(float(W[j, k]) * units[j] for j in range(3))
        assert torch.allclose(concepts[k], combined, atol=1e-5)


# --------------------------------------------------------------------------------------------------------------------
# bad input, before the full pass


class Counting(nn.Module):
    """The rotated model, counting the samples it runs on."""

    def __init__(self) -> None:
        super().__init__()
        self.net, _ = rotated_model()
        self.rows = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.rows += x.shape[0]
        return self.net(x)


def test_a_wrong_width_or_shape_fails_on_the_first_batch():
    model = Counting()
    wrong = RegionalRuleExplainer(model, layer="net.0", concepts=torch.eye(5)[:, :2])
    with pytest.raises(ValueError, match="5 units.*the layer has 8"):
        wrong.explain(data(), 1, batch_size=100, **FAST)
    assert model.rows == 100 < len(data())  # the first batch, no full pass
    not_nk = RegionalRuleExplainer(model, layer="net.0", concepts=EncoderDecoder(lambda a: a.sum()))
    with pytest.raises(ValueError, match=r"\(N, K\)"):
        not_nk.explain(data(), 1, batch_size=100, **FAST)
    assert model.rows == 200
    too_many = RegionalRuleExplainer(model, layer="net.0", concepts="pca", n_concepts=9)
    with pytest.raises(ValueError, match="`n_concepts` <= 8"):
        too_many.explain(data(), 1, batch_size=100, **FAST)
    assert model.rows == 300


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        (dict(concepts="banana"), ValueError, "banana"),
        (dict(concepts=3.5), TypeError, "`concepts`"),
        (dict(concepts=torch.eye(8), n_concepts=3), ValueError, "`n_concepts`"),
        (dict(n_concepts=3), ValueError, "`n_concepts`"),
        (dict(concept_names=["a"]), ValueError, "`concept_names`"),
        (dict(concepts=torch.eye(8)[:, :2], concept_names=["a"]), ValueError, "2 concept `concept_names`"),
        (dict(concepts=torch.eye(8)[:, :2], feature_names=["a", "b"]), ValueError, "`concept_names`"),
        (dict(concept=torch.eye(8)), TypeError, "did you mean 'concepts'"),
    ],
)
def test_bad_concept_arguments_fail_at_construction(kwargs, error, match):
    model, _ = rotated_model()
    with pytest.raises(error, match=match):
        RegionalRuleExplainer(model, layer=model[0], **kwargs)


def test_concepts_need_a_layer_and_no_features_matrix():
    model, W = rotated_model()
    with pytest.raises(ValueError, match="`layer`"):
        RegionalRuleExplainer(model, concepts=W)
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts=W)
    with pytest.raises(ValueError, match="separate `features` matrix"):
        explainer.explain(data(50), 1, features=torch.zeros(50, 3), **FAST)


def test_without_concepts_nothing_changes(planted):
    model, _, X, _, _ = planted
    explanation = RegionalRuleExplainer(model, layer=model[0]).explain(X[:500], 1, **FAST)
    assert explanation.concepts is None and "concepts" not in explanation.params
    assert explanation.feature_names == [f"z_{i}" for i in range(D)]


def test_a_fitted_basis_is_fitted_once_in_memory_and_on_the_first_rows_streamed(monkeypatch):
    from concept_bases import TopDirections

    from torch_amore.explain import concept_space

    model, _ = rotated_model()
    X = data(900)
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts=TopDirections(2))
    first = explainer.explain(X, 1, **FAST)
    assert explainer.concepts.fitted_on == 900 and first.concepts is explainer.concepts
    W = explainer.concepts.W.clone()
    explainer.explain(X[:300], 1, **FAST)  # kept: not fitted again
    assert explainer.concepts.fitted_on == 900 and torch.equal(explainer.concepts.W, W)
    monkeypatch.setattr(concept_space, "FIT_ROWS", 250)
    streamed = RegionalRuleExplainer(model, layer=model[0], concepts=TopDirections(2))
    explanation = streamed.explain(X, 1, stream=True, batch_size=100, **FAST)
    assert streamed.concepts.fitted_on == 250 and explanation.feature_names == ["concept_0", "concept_1"]
    assert "reconstruction error (FVU) 0.5" in str(explanation)


def test_random_concept_controls_equal_a_literal_per_sample_patch(planted):
    model, W, X, explainer, _ = planted
    unread = explainer.explain(X[:600], 1, features=[1], **FAST)  # the control draws the read concept
    result = unread.verify(X[:600], rule_sets=[unread.best], n_controls=2, seed=5)
    details = result.rows[0].details
    S, Q, donors = details["sufficiency_samples"], details["necessity_samples"], details["donors"].tolist()
    C = literal_concepts(model, W, X[:600])
    for draw, flipped in zip(details["control_units"], details["control_flipped"]):
        assert draw.flatten().tolist() == [0] * len(donors)
        for pos, (i, d) in enumerate(zip(torch.cat([S, Q]).tolist(), donors)):
            with torch.no_grad():
                a = model[0](X[i : i + 1])[0].tolist()
            shift = C[d][0] - C[i][0]
            patched = torch.tensor([a[j] + float(W[j, 0]) * shift for j in range(D)])
            with torch.no_grad():
                into = float(model[1](patched.reshape(1, -1))[0, 0]) > 0
            assert bool(flipped[pos]) == (into if pos < len(S) else not into)
    assert 0.3 < result.rows[0].control_sufficiency.value < 0.7  # the read concept of a random donor: about half


def test_a_malformed_saved_basis_names_the_field(planted):
    from torch_amore.rules.serialization import FieldError

    data = planted[4].to_dict()
    for bad in ({"kind": "martian"}, [1, 2]):
        with pytest.raises(FieldError, match="`concepts`"):
            RegionalExplanation.from_dict({**data, "concepts": bad})


def anisotropic(n: int = 3000, seed: int = 2) -> tuple[nn.Sequential, torch.Tensor]:
    """The rotated model on inputs whose hidden activations vary most along the read direction (sd 3), then along the
    unread one (sd 2), then 0.5 along the others: PCA's first two components are the two directions."""
    model, W = rotated_model()
    g = torch.Generator().manual_seed(seed)
    z = 0.5 * torch.randn(n, D, generator=g)
    z = z - (z @ W) @ W.T + torch.randn(n, 2, generator=g) * torch.tensor([3.0, 2.0]) @ W.T
    return model, z @ model[0].weight.detach()  # x = R^T z, so that the layer's z = R x is this z


def test_pca_recovers_the_read_direction():
    model, X = anisotropic()
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts="pca", n_concepts=2)
    explanation = explainer.explain(X, 1, **FAST)
    units = RegionalRuleExplainer(model, layer=model[0]).explain(X, 1, **FAST)
    best = explanation.best
    assert len(best.rules) == 1 and best.rules[0].name == "pca_0"
    assert best.fitness >= units.best.fitness + 0.05
    assert "concepts: pca, K=2, reconstruction error (FVU)" in str(explanation)
    read = explanation.verify(X, rule_sets=1, n_controls=0).rows[0]
    assert read.sufficiency.value >= 0.9 and read.necessity.value >= 0.9
    other = explainer.explain(X, 1, features=[1], **FAST).verify(X, rule_sets=1, n_controls=0).rows[0]
    assert other.sufficiency.value <= 0.05 and other.necessity.value <= 0.05
    loaded = RegionalExplanation.from_dict(explanation.to_dict())
    assert torch.allclose(loaded.concepts.encode(X[:50]), explainer.concepts.encode(X[:50]), atol=1e-5)


def test_a_sparse_autoencoder_end_to_end(tmp_path):
    from torch_amore.concepts import SparseAutoencoderBasis

    model, X = anisotropic(1500)
    explainer = RegionalRuleExplainer(model, layer=model[0], concepts=SparseAutoencoderBasis(8, top_k=2, steps=300))
    explanation = explainer.explain(X, 1, **FAST)
    fvu = explainer.concepts.reconstruction_error["fvu"]
    assert explanation.params["concepts"]["reconstruction_error"]["fvu"] == fvu
    assert f"concepts: sae, K=8, reconstruction error (FVU) {fvu:.3g}" in str(explanation)
    assert explanation.feature_names == [f"sae_{k}" for k in range(8)]
    streamed = explainer.explain(X, 1, stream=True, batch_size=500, **FAST)  # the fitted basis, kept
    assert [str(rs) for rs in streamed.rule_sets] == [str(rs) for rs in explanation.rule_sets]
    row = explanation.verify(X[:400], rule_sets=1, n_controls=1).rows[0]
    assert row.sufficiency.n + row.necessity.n > 0
    explanation.to_json(tmp_path / "sae.json")
    loaded = RegionalExplanation.from_json(tmp_path / "sae.json")
    assert torch.equal(loaded.concepts.encode(X[:50]), explainer.concepts.encode(X[:50]))
    maps = explainer.attribute(X[:4], explanation.best, n_steps=8)
    assert maps.shape == (len(explanation.best.rules), 4, D) and bool(maps.abs().sum() > 0)
