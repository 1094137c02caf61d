"""verify over concepts: a sample counts only when its patched activations, encoded again, lie where it was moved
(a top-k sparse autoencoder re-selects its k and undoes many patches; exact bases move every sample), recounted by a
literal loop; and a basis of K=2 concepts (the first example of docs/concept_rules.md) runs with default arguments,
rule sets naming both concepts verified without control."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

from torch_amore import RegionalRuleExplainer
from torch_amore.concepts import Directions
from torch_amore.verify.verification import Verification

TOLERANCE = 1e-4  # a re-encoded concept this close (times the largest concept magnitude) to its new value counts as it


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 12), nn.ReLU(), nn.Linear(12, 3))


def _explain(model: nn.Module, X: torch.Tensor, concepts, k: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # rule sets near the base rate: not what is tested here
        return RegionalRuleExplainer(model, layer="0", concepts=concepts, n_concepts=k).explain(X, 0, progress=False)


def _literal(model, X, explanation, row):
    """Per sample (sufficiency then necessity), by the documented definition: whether its rule-set concepts, encoded
    again after setting them to its donor's, lie on the donor's side of the rule set; whether its decision flipped."""
    rs, basis, d = explanation.rule_sets[row.position - 1], explanation.concepts, row.details
    S, Q, donors = d["sufficiency_samples"], d["necessity_samples"], d["donors"]
    with torch.no_grad():
        A = model[0](X)
        C = basis.encode(A)
    units, scale = [r.feature for r in rs.rules], float(C.abs().max())
    moved, flipped = [], []
    for pos, (i, donor) in enumerate(zip(torch.cat([S, Q]).tolist(), donors.tolist())):
        into = pos < len(S)
        c = C[i : i + 1].clone()
        c[0, units] = C[donor, units]
        assert bool(rs.mask(c)[0]) == into  # the donor lies on the side the sample is moved to
        with torch.no_grad():
            a = basis.intervene(A[i : i + 1], c)
            again = basis.encode(a)
            predicted = int(model[2](model[1](a)).argmax())
        for u in units:
            if abs(float(again[0, u]) - float(c[0, u])) <= TOLERANCE * scale:
                again[0, u] = c[0, u]
        moved.append(bool(rs.mask(again)[0]) == into)
        flipped.append((predicted == 0) == into)
    return len(S), moved, flipped


def test_a_sparse_autoencoder_counts_only_the_samples_it_moved() -> None:
    model = _model()
    X = torch.randn(800, 4)
    explanation = _explain(model, X, "sae", 6)
    with torch.no_grad():
        assert explanation.subgroup.tolist() == (model(X).argmax(1) == 0).tolist()
    with pytest.warns(UserWarning, match=r"The concept basis \(sae\) did not carry out every patch") as caught:
        result = explanation.verify(X, rule_sets=1, n_controls=2)
    assert sum("did not carry out" in str(w.message) for w in caught) == 1
    row = result.rows[0]
    n_s, moved, flipped = _literal(model, X, explanation, row)
    assert row.details["moved"].tolist() == moved
    counted = [
        (sum(f for f, m in zip(flipped[a:b], moved[a:b]) if m), sum(moved[a:b])) for a, b in ((0, n_s), (n_s, None))
    ]
    assert (row.sufficiency.hits, row.sufficiency.n) == counted[0]
    assert (row.necessity.hits, row.necessity.n) == counted[1]
    assert row.not_moved == (n_s - counted[0][1], len(moved) - n_s - counted[1][1])
    assert row.not_moved[1] > 0.05 * (len(moved) - n_s)  # the reviewer's case: most necessity samples stay inside
    # the control on the same samples: each draw's flips over the samples the rule set's own patch moved
    keep = torch.tensor(moved)
    for part, a, b in (("sufficiency", 0, n_s), ("necessity", n_s, len(moved))):
        control = getattr(row, f"control_{part}")
        shares = [float(f[a:b][keep[a:b]].double().mean()) for f in row.details["control_flipped"]]
        assert control.n == sum(moved[a:b]) and list(control.shares) == pytest.approx(shares, abs=1e-12)
    text = str(result)
    assert "not moved" in text and f"{row.not_moved[0]}/{n_s}, {row.not_moved[1]}/{len(moved) - n_s}" in text
    frame = result.to_frame()
    assert tuple(frame.loc[row.position, ["sufficiency_not_moved", "necessity_not_moved"]]) == row.not_moved
    assert Verification.from_dict(result.to_dict()) == result


@pytest.mark.parametrize("method", ["resample", "clamp", "mean"])
@pytest.mark.parametrize("kind", ["pca", "directions"])
def test_exact_bases_move_every_sample(kind: str, method: str) -> None:
    model = _model()
    X = torch.randn(600, 4)
    concepts = "pca" if kind == "pca" else Directions(torch.linalg.qr(torch.randn(12, 4))[0])
    explanation = _explain(model, X, concepts, 4 if kind == "pca" else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning of unmoved samples
        result = explanation.verify(X, rule_sets=3, n_controls=1, method=method)
    for row in result.rows:
        d = row.details
        assert row.not_moved == (0, 0) and bool(d["moved"].all())
        assert (row.sufficiency.n, row.necessity.n) == (len(d["sufficiency_samples"]), len(d["necessity_samples"]))
        n_s = row.sufficiency.n
        assert (row.sufficiency.hits, row.necessity.hits) == (
            int(d["flipped"][:n_s].sum()),
            int(d["flipped"][n_s:].sum()),
        )
    assert "not moved" not in str(result)


def _two_concepts(out: int = 10):
    """The first block of docs/concept_rules.md with a stand-in model: concepts W (6, 2) named stripes and dots."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, out))
    images, W = torch.randn(2000, 4), torch.randn(6, 2)
    return model, images, W


def test_two_concepts_verify_with_default_arguments_as_documented() -> None:
    model, images, W = _two_concepts()
    explainer = RegionalRuleExplainer(model, layer="0", concepts=W, concept_names=["stripes", "dots"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a stand-in model: its rule sets are weak, which is not what is tested
        explanation = explainer.explain(images, 7, progress=False)
    with pytest.warns(UserWarning, match=r"Too few other concepts for a control draw .* \(the explanation has 2\)"):
        result = explanation.verify(images)  # sufficiency and necessity of the concepts, not the units
    both = [r for r in result.rows if len(r.units) == 2]
    one = [r for r in result.rows if len(r.units) == 1]
    assert both and one and len(result.rows) == 5
    for r in both:  # no other concept to draw: no control
        assert r.details["control_units"] == [] and r.control_sufficiency.n == r.control_necessity.n == 0
        assert r.verdict == "no control"
    for r in one:  # the one other concept, in every draw of every sample
        draws = r.details["control_units"]
        assert len(draws) == 10 and all(bool((u == 1 - r.units[0]).all()) for u in draws)
        assert r.control_sufficiency.n == r.sufficiency.n > 0 and r.verdict != "no control"
    assert result.n_controls == 10


def test_too_few_units_for_a_control_say_units() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 2), nn.Linear(2, 10))
    X = torch.randn(2000, 4)
    explanation = RegionalRuleExplainer(model, layer="0").explain(X, 7, progress=False)
    crowded = next(rs for rs in explanation.rule_sets if len(rs.rules) == 2)
    with pytest.warns(UserWarning, match=r"as many units as rule set #\d+ \(2 units\) names \(the explanation has 2\)"):
        row = explanation.verify(X, rule_sets=[crowded], n_controls=3).rows[0]
    assert row.verdict == "no control"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert explanation.verify(X, rule_sets=[crowded], n_controls=0).rows[0].verdict == "no control"
