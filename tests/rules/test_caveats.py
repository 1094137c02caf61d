"""Caveats of a search's result, in one UserWarning per call: rule sets at the base rate (their confidence's Wilson
interval, written out here, contains it) and features that leak the target (a one-condition rule set whose rows
match the subgroup with a Jaccard index >= 0.95, recomputed from the masks), next to the older reasons (no positive
fitness, max_length capped)."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from torch import nn

import torch_amore as ta
from torch_amore.rules.caveats import LEAK_JACCARD, at_base_rate, confidence_interval

Z95 = 1.959963984540054


def _wilson(hits: int, n: int) -> tuple[float, float]:
    p = hits / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n**2)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _calls_warnings(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, [w for w in caught if issubclass(w.category, UserWarning)]


def _leaky(n: int = 1000, flip: float = 0.01, seed: int = 0):
    """Two unrelated features and 'diagnosis_benign', the subgroup's complement with ``flip`` of its rows flipped."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 3, generator=g, dtype=torch.float64)
    target = X[:, 0] > 0.6
    leak = (~target).double()
    flipped = torch.rand(n, generator=g) < flip
    leak[flipped] = 1 - leak[flipped]
    return torch.cat([X[:, 1:], leak[:, None]], 1), target


def _leaks(rule_sets, X, target) -> dict[str, int]:
    """The leaking features, each with the first one-condition rule set's 1-based place, from the masks."""
    out: dict[str, int] = {}
    for i, rs in enumerate(rule_sets, 1):
        if len(rs) != 1 or rs.rules[0].name in out:
            continue
        mask = rs.mask(X)
        jaccard = int((mask & target).sum()) / int((mask | target).sum())
        if jaccard >= LEAK_JACCARD:
            out[rs.rules[0].name] = i
    return out


def test_confidence_interval_is_wilson_written_out():
    g = torch.Generator().manual_seed(1)
    X = torch.rand(500, 2, generator=g)
    target = (X[:, 0] > 0.5) ^ (torch.rand(500, generator=g) < 0.2)
    found = ta.extract_rules(X, target, max_length=2, min_support=20)
    assert len(found) >= 3
    base = int(target.sum()) / 500
    for rs in found:
        mask = rs.mask(X)
        hits, support = int((mask & target).sum()), int(mask.sum())
        want = _wilson(hits, support)
        assert confidence_interval(rs) == pytest.approx(want, abs=1e-12)
        assert at_base_rate(rs, base) == (want[0] <= base <= want[1])


def test_a_trivial_best_rule_at_the_base_rate_warns_once_and_is_flagged():
    """The issue's case: a subgroup of ~92 % of the rows, no feature related to it: the fittest rule set covers
    almost every row with a lift near 1 and a high fitness."""
    g = torch.Generator().manual_seed(0)
    X = torch.rand(2000, 3, generator=g)
    target = torch.rand(2000, generator=g) < 0.92
    found, caught = _calls_warnings(ta.extract_rules, X, target, max_length=2)
    base = int(target.sum()) / 2000
    flagged = []
    for i, rs in enumerate(found, 1):
        mask = rs.mask(X)
        low, high = _wilson(int((mask & target).sum()), int(mask.sum()))
        if rs.fitness > 0 and low <= base <= high:
            flagged.append(i)
    assert found[0].fitness > 0.5 and flagged[:1] == [1]  # the case the warning is for
    assert len(caught) == 1
    message = str(caught[0].message)
    assert message.startswith("Rule sets #1, ") and "may describe the data rather than the subgroup" in message
    assert f"contains the base rate {base:.3f}" in message
    named = [f"#{i}" for i in flagged[:5]]
    assert message.split(" may describe")[0] == "Rule sets " + ", ".join(named) + (
        f" and {len(flagged) - 5} more" if len(flagged) > 5 else ""
    )
    # the explanation's displays flag them: '*' after the lift, the DataFrame column, the legend
    explanation = ta.RegionalExplanation(found, target, None, [0, 1, 2], ["a", "b", "c"],
                                         {"n_samples": 2000, "subgroup_size": int(target.sum())},
                                         features_matrix=X)  # fmt: skip
    frame = explanation.to_dataframe(distinct=False)
    assert [i for i in frame.index if frame.loc[i, "at_base_rate"]] == flagged
    rows = [
        line for line in explanation.format(max_rows=None, distinct=False).splitlines() if line[:4].strip().isdigit()
    ]
    assert [int(line.split()[0]) for line in rows if "*" in line.split()[4]] == flagged
    assert "*: the confidence's 95% interval contains the base rate" in str(explanation)


def test_a_leaking_feature_is_named_in_the_one_warning():
    X, target = _leaky()
    names = ["a", "b", "diagnosis_benign"]
    found, caught = _calls_warnings(ta.extract_rules, X, target, feature_names=names, max_length=2)
    leaks = _leaks(found, X, target)
    assert list(leaks) == ["diagnosis_benign"]  # the planted leak, found from the masks
    assert len(caught) == 1
    message = str(caught[0].message)
    rs = found[leaks["diagnosis_benign"] - 1]
    mask = rs.mask(X)
    jaccard = int((mask & target).sum()) / int((mask | target).sum())
    assert f"Feature 'diagnosis_benign' may leak the target: rule set #{leaks['diagnosis_benign']} " in message
    assert f"with the subgroup is {jaccard:.3f} (>= 0.95)" in message
    # a noisier copy (Jaccard below 0.95) is not named
    X2, target2 = _leaky(flip=0.2)
    found2, caught2 = _calls_warnings(ta.extract_rules, X2, target2, feature_names=names, max_length=2)
    assert _leaks(found2, X2, target2) == {}
    assert not any("may leak" in str(w.message) for w in caught2)


def test_every_reason_of_a_call_goes_into_one_warning():
    """One feature that leaks and max_length 3 on it (capped to 1): one UserWarning with both reasons."""
    X, target = _leaky()
    found, caught = _calls_warnings(ta.extract_rules, X[:, 2:], target, feature_names=["y_copy"], max_length=3)
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "max_length" in message and "Feature 'y_copy' may leak the target" in message
    assert caught[0].filename == __file__  # it points at the caller's line


class _Threshold(nn.Module):
    """Class 1 iff input 0 > 0.6, through a hidden layer whose unit 0 is input 0."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(3, 2)
        with torch.no_grad():
            self.hidden.weight.copy_(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
            self.hidden.bias.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(x)
        return torch.stack([0.6 - h[:, 0], h[:, 0] - 0.6], 1)


class _Ripples(nn.Module):
    """Class 1 for about 90 % of the rows, by a pattern far finer than any grid: no interval beats the base rate."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = torch.sin(997.0 * x[:, 0] + 613.0 * x[:, 1])
        return torch.stack([-0.95 - s, s + 0.95], 1)


def test_explain_leaves_the_leak_out_its_rules_are_meant_to_match_the_decision():
    g = torch.Generator().manual_seed(2)
    X = torch.rand(800, 3, generator=g)
    for layer in (None, "hidden"):
        explanation, caught = _calls_warnings(ta.RegionalRuleExplainer(_Threshold(), layer=layer).explain, X, 1)
        best = explanation.best
        assert len(best) == 1 and best.features == (0,) and best.confidence == 1.0  # reproduces the decision
        assert caught == [] and explanation.message == ""


def test_explain_gives_one_warning_with_every_reason_and_keeps_it_as_its_message():
    """A best rule at the base rate and max_length 3 on two features (capped): one UserWarning with both reasons."""
    g = torch.Generator().manual_seed(3)
    X = torch.rand(3000, 2, generator=g)
    explanation, caught = _calls_warnings(ta.RegionalRuleExplainer(_Ripples()).explain, X, 1, max_length=3)
    size = int(explanation.subgroup.sum())
    best = explanation.best
    mask = best.mask(X)
    low, high = _wilson(int((mask & explanation.subgroup).sum()), int(mask.sum()))
    assert 0.8 < size / 3000 < 0.97 and low <= size / 3000 <= high  # the case the warning is for
    assert len(caught) == 1 and explanation.message == str(caught[0].message)
    assert "max_length" in explanation.message and "#1" in explanation.message
    assert "may describe the data rather than the subgroup" in explanation.message
    assert caught[0].filename == __file__


def test_streamed_explain_warns_the_same_way():
    g = torch.Generator().manual_seed(3)
    X = torch.rand(3000, 2, generator=g)
    explanation, caught = _calls_warnings(ta.RegionalRuleExplainer(_Ripples()).explain, X, 1, stream=True)
    base = int(explanation.subgroup.sum()) / 3000
    low, high = _wilson(int((explanation.best.mask(X) & explanation.subgroup).sum()), explanation.best.support)
    assert low <= base <= high
    assert len(caught) == 1 and explanation.message == str(caught[0].message)
    assert explanation.message.startswith("Rule set") and "may describe the data rather than" in explanation.message
