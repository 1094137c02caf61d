"""Held-out numbers, Holm, the interval's coverage, the verdict line and the JSON of the evidence fields."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import binomtest

from torch_amore.rules import HeldOut, RuleSet, clopper_pearson, holm, load_rule_sets, noise_message, verdict
from torch_amore.rules.rule import Rule


def test_holm_is_the_step_down_loop():
    rng = np.random.default_rng(0)
    p = list(rng.uniform(0, 0.2, size=12))
    order = sorted(range(len(p)), key=lambda i: p[i])
    expected = [0.0] * len(p)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        expected[i] = running
    assert holm(p) == pytest.approx(expected)
    assert holm([]) == []


@pytest.mark.parametrize(("hits", "support", "level"), [(0, 12, 0.95), (7, 40, 0.9), (40, 40, 0.99), (3, 5, 0.5)])
def test_clopper_pearson_matches_scipy(hits, support, level):
    ci = binomtest(hits, support).proportion_ci(confidence_level=level, method="exact")
    assert clopper_pearson(hits, support, level) == pytest.approx((ci.low, ci.high), abs=1e-12)


def test_interval_covers_the_true_confidence():
    """2,000 simulated held-out draws (support 60, true confidence 0.27): coverage at least level - 0.02."""
    rng = np.random.default_rng(1)
    true, support, level, n = 0.27, 60, 0.95, 2000
    covered = 0
    for hits in rng.binomial(support, true, size=n):
        low, high = clopper_pearson(int(hits), support, level)
        covered += low <= true <= high
    assert covered / n >= level - 0.02


def rule_set(**evidence) -> RuleSet:
    return RuleSet((Rule(0, "x", low=0.5),), support=30, confidence=0.6, fitness=0.2, **evidence)


def test_json_keeps_the_evidence_and_old_files_load():
    held = HeldOut(12, 0.5, 0.1, 2.0, (0.21, 0.79), 0.03, 0.01, 0.25, 0.9)
    rs = rule_set(held_out=held, p_value=0.01, stability=0.75)
    back = RuleSet.from_json(rs.to_json())
    assert back == rs and back.held_out == held and back.p_value == 0.01 and back.stability == 0.75
    old = {"rules": [{"feature": 0, "name": "x", "low": 0.5}], "support": 30, "confidence": 0.6, "fitness": 0.2}
    loaded = load_rule_sets(json.loads(json.dumps([old])))[0]
    assert loaded.held_out is None and loaded.p_value is None and loaded.stability is None
    bad = rs.to_dict()
    bad["held_out"]["p_value"] = 1.5
    with pytest.raises(ValueError, match=r"held_out\.p_value"):
        RuleSet.from_dict(bad)


def test_printed_numbers_only_when_computed():
    assert str(rule_set()) == "IF x >= 0.5 THEN target  (support=30, confidence=0.600, fitness=0.200)"
    held = HeldOut(12, 0.5, 0.1, 2.0, (0.21, 0.79), 0.03, 0.01, 0.25, 0.9)
    text = str(rule_set(held_out=held, p_value=0.01, stability=0.75))
    assert "held out: confidence=0.500 (90% CI 0.210-0.790), p=0.03" in text
    assert "search-aware p=0.01" in text and "stability=0.75" in text


def test_verdict_counts_and_noise_message():
    ps = [0.01, 0.04, 0.05, 0.3, 0.9]
    found = [rule_set(p_value=p) for p in ps]
    n = sum(p <= 0.05 for p in ps)
    assert verdict(found, permutations=99) == (
        f"{n} of 5 rule sets beat the search on shuffled targets at 0.05, 99 permutations"
    )
    assert noise_message(found) is None
    assert "not distinguishable" in noise_message([rule_set(p_value=0.2)])
    assert noise_message([rule_set(p_value=0.2)], permutations=9) is None  # 1/10 > 0.05: cannot tell
    assert verdict([]) is None


def test_binomial_tail_agrees_with_binomtest():
    from torch_amore.rules.held_out import binomial_p_value

    for hits, support, rate in [(5, 20, 0.1), (0, 10, 0.3), (30, 30, 0.5), (17, 100, 0.1)]:
        assert binomial_p_value(hits, support, rate) == pytest.approx(
            binomtest(hits, support, rate, alternative="greater").pvalue, rel=1e-9
        )
