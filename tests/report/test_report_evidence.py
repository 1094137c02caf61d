"""The HTML report's evidence: the verdict, a note on how to read the columns and a table of every rule set with
the columns themselves (held-out confidence with its interval, p(held-out), p(perm), stability) when the search
computed them, every cell's number
recomputed from the held-out rows' masks or read back from the rule set's fields; nothing of it otherwise."""

from __future__ import annotations

import pytest
import torch
from scipy.stats import binomtest
from torch import nn

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from figures_agg import close_figures  # noqa: E402, F401  (autouse: every figure closed after each test)
from test_report import Page  # noqa: E402

from torch_amore import RegionalRuleExplainer  # noqa: E402
from torch_amore.search.evidence_split import holdout_mask  # noqa: E402

OPTS = {"max_length": 2, "min_support": 40, "progress": False}
EVIDENCE = ["held-out confidence [95% CI]", "p(held-out)", "p(perm)", "stability"]


def _planted() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(1500, 4, generator=g, dtype=torch.float64)
    return X, ((X[:, 0] > 0.7) & (X[:, 1] > 0.5)) ^ (torch.rand(1500, generator=g, dtype=torch.float64) < 0.05)


def _page(expl, tmp_path) -> tuple[Page, str]:
    text = expl.to_html(tmp_path / "r.html", plot_rules=0).read_text()
    page = Page()
    page.feed(text)
    return page, text


def test_the_report_shows_the_verdict_the_note_and_the_evidence_columns(tmp_path):
    X, target = _planted()
    expl = RegionalRuleExplainer(nn.Identity()).explain(X, target, holdout=0.3, permutations=4, stability=2, **OPTS)
    page, text = _page(expl, tmp_path)
    verdict = str(expl).splitlines()[1].strip()
    assert verdict.startswith("verdict: ") and f'<p id="verdict"><b>{verdict}</b></p>' in text
    assert 'id="evidence-note">How to read the evidence columns: held-out: measured on rows the search did not' in text
    held = holdout_mask(target, 0.3, seed=0)
    (_, head), *rows = page.tables["evidence"]
    assert [name for _, name in head] == ["#", "rule set", *EVIDENCE]
    assert [int(cells[0][1]) for _, cells in rows] == list(range(1, len(expl.rule_sets) + 1))  # every rule set
    for attrs, cells in rows:
        rs = expl.rule_sets[int(attrs["data-index"])]
        assert cells[1][1] == " AND ".join(r.format() for r in rs.rules)
        covered = rs.mask(X) & held
        hits, support = int((covered & target).sum()), int(covered.sum())
        ci = binomtest(hits, support).proportion_ci(0.95, method="exact")
        conf = cells[2]
        assert conf[1] == f"{hits / support:.3f} [{ci.low:.3f}, {ci.high:.3f}]"
        assert float(conf[0]["data-value"]) == pytest.approx(hits / support)
        assert float(cells[3][0]["data-value"]) == rs.held_out.p_value
        assert float(cells[4][0]["data-value"]) == rs.p_value
        assert float(cells[5][0]["data-value"]) == rs.stability and cells[5][1] == f"{rs.stability:.2f}"
    assert "<h2>How far to trust these rule sets</h2>" in text


def test_only_the_computed_columns_and_no_note_without_evidence(tmp_path):
    X, target = _planted()
    explainer = RegionalRuleExplainer(nn.Identity())
    page, text = _page(explainer.explain(X, target, permutations=3, **OPTS), tmp_path)
    assert [name for _, name in page.tables["evidence"][0][1]] == ["#", "rule set", "p(perm)"]
    assert 'id="verdict"' in text
    page, text = _page(explainer.explain(X, target, **OPTS), tmp_path)
    assert "evidence" not in page.tables and "How far to trust" not in text
    assert 'id="verdict"' not in text and "evidence-note" not in text
