"""One numbering (``rule_sets[i]`` is ``#i+1`` in text, HTML, JSON, DataFrame and the command line; near-duplicates
left out leave gaps) and the report's layout: the note column only when a row has a note, and in headless Chromium
at 1,000 and 1,400 px no sideways scroll and no condition split over two lines."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
from figures_agg import close_figures  # noqa: E402, F401  (autouse: every figure closed after each test)
from test_report import Page, _explanation  # noqa: E402

import torch_amore  # noqa: E402
from torch_amore import RegionalExplanation, Rule, RuleSet  # noqa: E402
from torch_amore.verify.verification import ControlShare, RuleVerification, Share, Verification  # noqa: E402


def _positions(explanation) -> list[int]:
    """Where the distinct, positive rule sets sit in the full list, 1-based: the numbers every display must show."""
    return [explanation.rule_sets.index(rs) + 1 for rs in explanation.distinct()]


def test_every_display_numbers_rule_sets_i_as_i_plus_1(tmp_path):
    expl = _explanation()
    want = _positions(expl)
    assert want != list(range(1, len(want) + 1))  # a near-duplicate was left out: the numbers have a gap
    text_rows = [line for line in str(expl).splitlines() if line[:4].strip().isdigit()]
    assert [int(line.split()[0]) for line in text_rows] == want
    assert list(expl.to_dataframe().index) == want
    assert [r["position"] for r in expl.to_dict()["rule_sets"]] == list(range(1, len(expl.rule_sets) + 1))
    html = expl.to_html(tmp_path / "r.html", plot_rules=3).read_text()
    page = Page()
    page.feed(html)
    _, *rows = page.tables["rules"]
    assert [int(cells[0][1]) for _, cells in rows] == want
    assert [int(attrs["data-index"]) + 1 for attrs, _ in rows] == want
    _, *every = page.tables["all-rules"]
    assert [int(cells[0][1]) for _, cells in every] == list(range(1, len(expl.rule_sets) + 1))
    assert re.findall(r"<figcaption>Rule set #(\d+): each condition", html) == [str(i) for i in want]
    notebook = re.findall(r"<tr><td>(\d+)</td>", expl._repr_html_())
    assert [int(i) for i in notebook] == want


def test_the_verification_table_uses_the_same_numbers(tmp_path):
    expl = _explanation()
    control = ControlShare.of([[False] * 40], 0.95)
    rows = [
        RuleVerification(
            p, str(expl.rule_sets[p - 1]), (0,), Share.of(30, 40, 0.95), Share.of(2, 40, 0.95), control, control
        )  # fmt: skip
        for p in _positions(expl)
    ]
    expl.verification = Verification(rows, "resample", 1, 0.95, 0, 80, "predicted 1")
    page = Page()
    page.feed(expl.to_html(tmp_path / "r.html", plot_rules=0).read_text())
    _, *shown = page.tables["verification"]
    assert [int(cells[0][1]) for _, cells in shown] == _positions(expl)
    for (_, cells), row in zip(shown, rows):
        rs = expl.rule_sets[row.position - 1]
        assert cells[1][1] == " AND ".join(r.format() for r in rs.rules)
        assert cells[-1][1] == row.verdict
    printed = [line for line in expl.verification.format().splitlines() if line[:4].strip().isdigit()]
    assert [int(line.split()[0]) for line in printed] == _positions(expl)


def test_the_command_line_numbers_rows_by_their_place_in_the_json(tmp_path, capsys):
    import pandas as pd

    from torch_amore.cli.commands import main

    g = np.random.default_rng(1)
    n = 800
    df = pd.DataFrame({"age": g.uniform(20, 80, n).round(1), "bmi": g.uniform(15, 45, n).round(1)})
    df["sick"] = ((df["age"] > 55) & (df["bmi"] > 30)) ^ (g.random(n) < 0.05)
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False)
    assert main(["rules", str(csv), "--target", "sick", "--min-support", "40", "--json", str(tmp_path / "a.json")]) == 0
    out = capsys.readouterr().out
    saved = json.loads((tmp_path / "a.json").read_text())["rule_sets"]
    text = {" AND ".join(_rule_text(r) for r in rs["rules"]): rs["position"] for rs in saved}
    rows = [line for line in out.splitlines() if line[:4].strip().isdigit() and line[4:6] == "  "]
    assert len(rows) >= 2
    for line in rows:
        number, rest = line.split(maxsplit=1)
        rule = rest.rsplit(maxsplit=3)[0].strip()
        assert int(number) == text[rule]
    X = torch.tensor(df[["age", "bmi"]].to_numpy(dtype=np.float64))
    every = RegionalExplanation.from_json(tmp_path / "a.json").rule_sets
    shown = torch_amore.report.distinct.distinct_rule_sets(every, X, min_fitness=0.0)
    assert [int(line.split()[0]) for line in rows] == [every.index(rs) + 1 for rs in shown]


def _rule_text(rule: dict) -> str:
    return Rule.from_dict(rule).format()


def test_the_note_column_only_when_a_row_has_a_note(tmp_path):
    expl = _explanation()
    page = Page()
    page.feed(expl.to_html(tmp_path / "r.html", plot_rules=0).read_text())
    notes = page.tables["all-rules"][0][1][-1][1]
    assert notes == "note"  # the full list has near-duplicates and a negative rule set
    header = [c[1] for c in page.tables["rules"][0][1]]
    shown_notes = [n for n in _notes_of(expl) if n]
    assert ("note" in header) == bool(shown_notes)


def _notes_of(expl) -> list[str]:
    from torch_amore.report.html import _notes

    shown_idx, notes = _notes(expl, 0.9)
    return [notes[i] for i in shown_idx]


# --------------------------------------------------------------------------------------------------------------------
# the page in a browser


def _chromium():
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


_CHECK = """<script>
document.querySelectorAll("details").forEach(function (d) { d.open = true; });
var split = [], n = 0;
document.querySelectorAll(".cond").forEach(function (e) {
  n += 1;
  if (e.getClientRects().length !== 1) { split.push(e.textContent); }
});
var out = document.createElement("pre");
out.id = "layout-check";
out.textContent = JSON.stringify({scrollWidth: document.documentElement.scrollWidth,
                                  innerWidth: window.innerWidth, conds: n, split: split});
document.body.appendChild(out);
</script>"""


def _with_evidence(expl: RegionalExplanation) -> RegionalExplanation:
    """The same rule sets with every evidence field: held-out numbers on 300 new rows of the same source, a
    search-aware p-value and a stability each (the widest cells those columns print)."""
    from dataclasses import replace

    from torch_amore.rules.held_out import held_out_metrics

    g = np.random.default_rng(1)
    X = torch.from_numpy(np.column_stack([g.normal(0, 10, 300), g.normal(5, 3, 300), g.normal(0, 1, 300)]))
    target = (X[:, 0] >= 2) & (X[:, 1] < 7)
    held = held_out_metrics([rs.mask(X) for rs in expl.rule_sets], target)
    rule_sets = [
        replace(rs, held_out=h, p_value=1 / (k + 2) if k else 0.001, stability=k / 10)
        for k, (rs, h) in enumerate(zip(expl.rule_sets, held))
    ]
    params = {**expl.params, "holdout": 0.3, "permutations": 999, "stability": 10}
    return replace(expl, rule_sets=rule_sets, params=params)


def _wide_explanation() -> RegionalExplanation:
    """Long feature names, three-condition rule sets, held-out columns and a verification: the widest report."""
    g = np.random.default_rng(0)
    n = 600
    X = torch.from_numpy(np.column_stack([g.normal(0, 10, n), g.normal(5, 3, n), g.normal(0, 1, n)]))
    names = ["mean_concave_points_standardized", "worst_perimeter_in_original_units", "z_19"]
    target = (X[:, 0] >= 2) & (X[:, 1] < 7)
    rules = [
        [Rule(0, names[0], low=2.0), Rule(1, names[1], high=7.0)],
        [Rule(0, names[0], low=2.5), Rule(1, names[1], high=7.1)],
        [Rule(0, names[0], low=2.0, high=20.0), Rule(1, names[1], low=-3.0, high=7.0),
         Rule(2, names[2], low=-2.0, high=12.97)],
        [Rule(0, names[0], low=6.26), Rule(2, names[2], high=12.97)],
        [Rule(1, names[1], high=7.0)],
        [Rule(0, names[0], high=-10.0)],
    ]  # fmt: skip
    found = torch_amore.search.extractor.sort_rule_sets(
        [RuleSet.from_rules(r, X, target, target_name="predicted malignant (class 1 of the classifier)") for r in rules]
    )
    params = {"n_samples": n, "subgroup_size": int(target.sum()), "layer": "encoder.blocks.3.mlp.fc1", "max_length": 3}
    expl = RegionalExplanation(found, target, 0.5, [0, 1, 2], names, params, features_matrix=X)
    control = ControlShare.of([[False] * 199 + [True]] * 3, 0.95)
    expl.verification = Verification(
        [RuleVerification(i + 1, str(rs), (0, 1), Share.of(30, 200, 0.95), Share.of(5, 40, 0.95), control, control)
         for i, rs in enumerate(found[:4])],
        "resample", 3, 0.95, 0, n, "predicted malignant",
    )  # fmt: skip
    return expl


@pytest.mark.skipif(
    _chromium() is None and os.environ.get("CI") != "true",
    reason="no headless Chromium on this machine (CI installs Debian's chromium, and there the test must run)",
)
@pytest.mark.parametrize("evidence", [False, True], ids=["plain", "evidence"])
@pytest.mark.parametrize("width", [1000, 1400])
def test_the_report_fits_the_window_and_breaks_rules_only_between_conditions(tmp_path, width, evidence):
    assert _chromium() is not None, "CI installs Debian's chromium: the browser test must run there, not skip"
    expl = _with_evidence(_wide_explanation()) if evidence else _wide_explanation()
    held = expl.evaluate(expl.features_matrix, target=expl.subgroup)
    text = expl.to_html(tmp_path / "r.html", held_out=held, plot_rules=2).read_text()
    assert ('<table id="evidence"' in text and 'id="evidence-note"' in text) == evidence
    page = tmp_path / "check.html"
    page.write_text(text.replace("</body>", _CHECK + "</body>"), encoding="utf-8")
    run = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--window-size={width},900", "--dump-dom", page.as_uri()],
        check=True, timeout=120, capture_output=True, text=True,
    )  # fmt: skip
    found = re.search(r'<pre id="layout-check">([^<]*)</pre>', run.stdout)
    assert found is not None, run.stdout[-2000:]
    layout = json.loads(found.group(1))
    n_conds = text.count('<span class="cond">')
    assert layout["conds"] == n_conds > 20  # every condition of the tables was measured
    assert layout["innerWidth"] == width
    assert layout["scrollWidth"] <= layout["innerWidth"]
    assert layout["split"] == []
