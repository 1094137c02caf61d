"""Verdicts of verify in words: each follows from the share's and the control's interval by the documented rule
(used: the share's lower end above the control's upper end; below control: its upper end below the control's lower
end; at control level: they overlap), recomputed here from the counts with a literal Wilson formula; the same verdict
in str(), the DataFrame, the JSON and the HTML report."""

from __future__ import annotations

import math

import pytest
import torch
from test_verification import PlantedMLP, _rule_on

from torch_amore import RegionalRuleExplainer
from torch_amore.verify.verification import ControlShare, RuleVerification, Share, Verification, verdict

Z95 = 1.959963984540054  # the 97.5 % quantile of the standard normal


def _wilson(hits: int, n: int) -> tuple[float, float]:
    """The Wilson score interval at 95 %, written out."""
    p = hits / n
    centre = (p + Z95**2 / (2 * n)) / (1 + Z95**2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n**2)) / (1 + Z95**2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def _rule(low: float, high: float, c_low: float, c_high: float) -> str:
    """The documented rule, literally."""
    if low > c_high:
        return "used"
    if high < c_low:
        return "below control"
    return "at control level"


def _control(hits: int, n: int) -> ControlShare:
    """One control draw on ``n`` samples of which the first ``hits`` flip (one sample per cluster: plain Wilson)."""
    return ControlShare.of([[True] * hits + [False] * (n - hits)], 0.95)


# (sufficiency hits, necessity hits, control sufficiency hits, control necessity hits), each of 60 samples
CASES = [(50, 55, 2, 1), (3, 4, 2, 3), (0, 1, 20, 25), (40, 2, 1, 3), (2, 45, 3, 1), (12, 6, 6, 12), (30, 30, 22, 38)]


@pytest.mark.parametrize("counts", CASES)
def test_each_verdict_follows_from_the_intervals_by_the_documented_rule(counts, tmp_path):
    s_hits, n_hits, cs_hits, cn_hits = counts
    n = 60
    row = RuleVerification(3, "z_0 >= 1", (0,), Share.of(s_hits, n, 0.95), Share.of(n_hits, n, 0.95),
                           _control(cs_hits, n), _control(cn_hits, n))  # fmt: skip
    want = []
    for hits, c_hits, got in ((s_hits, cs_hits, row.sufficiency_verdict), (n_hits, cn_hits, row.necessity_verdict)):
        low, high = _wilson(hits, n)
        c_low, c_high = _wilson(c_hits, n)
        assert (low, high) == pytest.approx(_wilson(hits, n), abs=1e-12)
        want.append(_rule(low, high, c_low, c_high))
        assert got == want[-1]
    s, nec = want
    if s == nec:
        whole = s
    elif "used" in (s, nec):
        whole = f"used ({'sufficiency' if s == 'used' else 'necessity'})"
    else:
        whole = f"sufficiency {s}, necessity {nec}"
    assert row.verdict == whole
    result = Verification([row], "resample", 1, 0.95, 0, 2 * n, "predicted 1")
    line = next(line for line in str(result).splitlines() if line.startswith("   3  "))
    assert whole in line and line.endswith("z_0 >= 1")
    frame = result.to_frame()
    assert frame.loc[3, "verdict"] == whole
    assert (frame.loc[3, "sufficiency_verdict"], frame.loc[3, "necessity_verdict"]) == (s, nec)
    assert result.to_dict()["rows"][0]["verdict"] == whole
    assert Verification.from_dict(result.to_dict()) == result


def test_the_cases_cover_every_verdict():
    seen = set()
    for s_hits, n_hits, cs_hits, cn_hits in CASES:
        for hits, c_hits in ((s_hits, cs_hits), (n_hits, cn_hits)):
            seen.add(_rule(*_wilson(hits, 60), *_wilson(c_hits, 60)))
    assert seen == {"used", "at control level", "below control"}


def test_verdict_edges_and_missing_numbers():
    assert verdict(0.30, 0.5, 0.1, 0.30) == "at control level"  # touching ends overlap
    assert verdict(0.3000001, 0.5, 0.1, 0.3) == "used"
    assert verdict(0.1, 0.2999999, 0.3, 0.5) == "below control"
    assert verdict(math.nan, math.nan, 0.1, 0.2) == "not measured"
    assert verdict(0.1, 0.2, math.nan, math.nan) == "no control"


def test_planted_model_read_unit_is_used_its_copy_is_not(tmp_path):
    """The head reads unit 0; unit 1 is an identical copy: the verdicts say 'used' and not 'used', and every shown
    verdict is the rule applied to the shown intervals."""
    pytest.importorskip("matplotlib")
    model = PlantedMLP()
    X = torch.randn(600, 3, generator=torch.Generator().manual_seed(1))
    explanation = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1, top_k=10)
    result = explanation.verify(X, rule_sets=[_rule_on(explanation, 0), _rule_on(explanation, 1)], n_controls=5)
    read, copy = result.rows
    for row in result.rows:
        for share, control, got in ((row.sufficiency, row.control_sufficiency, row.sufficiency_verdict),
                                    (row.necessity, row.control_necessity, row.necessity_verdict)):  # fmt: skip
            assert got == _rule(share.low, share.high, control.low, control.high)
    assert read.verdict == "used"
    assert "used" not in copy.verdict
    text = explanation.to_html(tmp_path / "r.html", plot_rules=0).read_text()
    for row in result.rows:
        assert f'<td class="verified verdict">{row.verdict}</td>' in text
    assert "'used' when a share's interval lies above its control's" in text
    printed = str(explanation)
    assert "verdict" in printed and "sufficiency/necessity: share of decisions" in printed
