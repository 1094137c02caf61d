"""The evidence where users see it: ``print(explanation)`` (the verdict line after the header, the evidence columns
and their legend, only what was computed), ``to_dataframe()`` and the notebook table; every number recomputed from
the held-out rows' masks (scipy's exact interval) or read back from the rule sets' fields."""

from __future__ import annotations

import math
import warnings

import pytest
import torch
from scipy.stats import binomtest
from torch import nn

from torch_amore import RegionalRuleExplainer
from torch_amore.search.evidence_split import holdout_mask

OPTS = {"max_length": 2, "min_support": 40, "progress": False}


def planted(n: int = 1500, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    flip = torch.rand(n, generator=g, dtype=torch.float64) < 0.05
    return X, ((X[:, 0] > 0.7) & (X[:, 1] > 0.5)) ^ flip


def explain(X: torch.Tensor, target: torch.Tensor, **evidence):
    return RegionalRuleExplainer(nn.Identity()).explain(X, target, **OPTS, **evidence)


def _rows(text: str) -> dict[int, str]:
    return {int(line.split()[0]): line for line in text.splitlines() if line[:4].strip().isdigit()}


def _held_out(rs, X, target, held) -> tuple[int, int]:
    """(target rows, rows) of the rule set on the held-out rows, from its mask."""
    covered = rs.mask(X) & held
    return int((covered & target).sum()), int(covered.sum())


def _expected_verdict(rule_sets, permutations: int) -> str:
    tested = [rs for rs in rule_sets if rs.p_value is not None]
    beat = 0
    for rs in tested:
        beat += rs.p_value <= 0.05
    hold = 0
    for rs in rule_sets:
        hold += rs.held_out.p_value <= 0.05
    n = len(rule_sets)
    return (
        f"verdict: {beat} of {n} rule sets beat the search on shuffled targets at 0.05, {permutations} permutations; "
        f"{hold} of {n} rule sets hold on the held-out rows at 0.05 (Holm-adjusted)"
    )


def test_the_printout_heads_with_the_verdict_and_shows_the_evidence_columns():
    X, target = planted()
    expl = explain(X, target, holdout=0.3, permutations=9, stability=3)
    text = str(expl)
    lines = text.splitlines()
    assert lines[0].startswith("Regional rules for target")
    assert lines[1] == "  " + _expected_verdict(expl.rule_sets, 9)
    header = lines[2]
    for name in ("held-out confidence [95% CI]", "p(held-out)", "p(perm)", "stability"):
        assert name in header
    held = holdout_mask(target, 0.3, seed=0)
    rows = _rows(text)
    assert len(rows) >= 2
    for position, line in rows.items():
        rs = expl.rule_sets[position - 1]
        hits, support = _held_out(rs, X, target, held)
        low, high = binomtest(hits, support).proportion_ci(0.95, method="exact")
        assert f"{hits / support:.3f} [{low:.3f}, {high:.3f}]" in line
        assert f"{rs.stability:.2f}" in line.split()
    # the columns line up under their headers: each cell ends where its header ends
    first = rows[min(rows)]
    rs = expl.rule_sets[min(rows) - 1]
    for name, cell in (("p(perm)", f"{rs.p_value:.2g}"), ("stability", f"{rs.stability:.2f}")):
        end = header.index(name) + len(name)
        assert first[end - len(cell) : end] == cell
    assert "  held-out: measured on rows the search did not see" in text
    assert "  p(perm): the share of 9 searches on shuffled targets that reach this fitness" in text
    assert "  stability: the share of 3 half-samples that find nearly the same rows" in text


def test_only_the_computed_columns_and_no_verdict_without_evidence():
    X, target = planted()
    only_perm = str(explain(X, target, permutations=4))
    assert "p(perm)" in only_perm and "held-out" not in only_perm and "stability" not in only_perm
    assert only_perm.splitlines()[1].startswith("  verdict: ") and "held-out rows" not in only_perm.splitlines()[1]
    plain = explain(X, target)
    text = str(plain)
    assert "verdict" not in text and "p(perm)" not in text and "held-out" not in text
    assert list(plain.to_dataframe().columns)[-1] == "at_base_rate"


def test_the_dataframe_has_the_evidence_fields_of_the_rule_sets():
    X, target = planted()
    expl = explain(X, target, holdout=0.3, permutations=4, stability=2)
    frame = expl.to_dataframe()
    evidence = ["held_out_support", "held_out_confidence", "held_out_confidence_low", "held_out_confidence_high"]
    assert list(frame.columns[-7:]) == [*evidence, "held_out_p_value", "p_value", "stability"]
    held = holdout_mask(target, 0.3, seed=0)
    for position, row in frame.iterrows():
        rs = expl.rule_sets[position - 1]
        hits, support = _held_out(rs, X, target, held)
        ci = binomtest(hits, support).proportion_ci(0.95, method="exact")
        assert row["held_out_support"] == support
        assert row["held_out_confidence"] == pytest.approx(hits / support)
        assert (row["held_out_confidence_low"], row["held_out_confidence_high"]) == pytest.approx((ci.low, ci.high))
        assert row["held_out_p_value"] == rs.held_out.p_value
        assert row["p_value"] == rs.p_value and row["stability"] == rs.stability
        assert not math.isnan(row["p_value"])


def test_the_notebook_table_shows_the_verdict_and_the_columns():
    X, target = planted()
    expl = explain(X, target, holdout=0.3, permutations=4)
    page = expl._repr_html_()
    assert "<th>p(perm)</th>" in page and "<th>held-out confidence [95% CI]</th>" in page
    assert str(expl).splitlines()[1].strip() in page
    best = expl.best
    assert f"<td>{best.held_out.confidence:.3f} [" in page


@pytest.mark.parametrize("evidence", [{}, {"holdout": 0.3}])
def test_explain_gives_one_warning_per_call(evidence):
    X, _ = planted()
    noise = torch.rand(X.shape[0], generator=torch.Generator().manual_seed(7)) < 0.1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        explain(X, noise, **evidence)
    assert len([w for w in caught if issubclass(w.category, UserWarning)]) == 1, [str(w.message) for w in caught]


def test_a_noise_target_prints_a_verdict_of_none_and_warns():
    X, _ = planted()
    noise = torch.rand(X.shape[0], generator=torch.Generator().manual_seed(7)) < 0.1  # independent of X
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expl = explain(X, noise, holdout=0.3, permutations=19)
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    assert len(messages) == 1, messages  # one UserWarning per call, with every reason it has
    assert "not distinguishable from what the search finds in noise" in messages[0]
    assert caught[0].filename == __file__  # attributed to the caller's line
    n = len(expl.rule_sets)
    assert sum(rs.p_value <= 0.05 for rs in expl.rule_sets) == 0
    assert str(expl).splitlines()[1] == (
        f"  verdict: 0 of {n} rule sets beat the search on shuffled targets at 0.05, 19 permutations; "
        f"0 of {n} rule sets hold on the held-out rows at 0.05 (Holm-adjusted)"
    )


def test_with_a_holdout_the_recall_is_of_the_subgroup_rows_the_search_saw():
    X, target = planted()
    expl = explain(X, target, holdout=0.3)
    searched = ~holdout_mask(target, 0.3, seed=0)
    frame = expl.to_dataframe()
    assert len(frame) >= 2
    for position, row in frame.iterrows():
        rs = expl.rule_sets[position - 1]
        covered = rs.mask(X) & searched
        assert rs.support == int(covered.sum())  # the rule set's own numbers are on the searched rows
        assert row["recall"] == pytest.approx(int((covered & target).sum()) / int((searched & target).sum()))
