"""torch_amore.report.html: explanation.to_html writes one self-contained file; parsed here — no network references, a
rule table whose numbers equal the explanation's, one embedded PNG per figure; rendered by headless Chromium if
present."""

from __future__ import annotations

import base64
import io
import os
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest
import torch

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from figures_agg import close_figures  # noqa: E402, F401  (autouse: every figure closed after each test)

import torch_amore  # noqa: E402
from torch_amore import RegionalExplanation, Rule, RuleSet  # noqa: E402


class Page(HTMLParser):
    """Tables (id -> rows of (attrs, [(cell attrs, text)])) and images of an HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: dict[str, list] = {}
        self.images: list[dict] = []
        self._table = self._row = self._cell = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "table":
            self._table = self.tables.setdefault(attrs.get("id", f"t{len(self.tables)}"), [])
        elif tag == "tr" and self._table is not None:
            self._row = (attrs, [])
        elif tag in ("td", "th") and self._row is not None:
            self._cell = (attrs, [])
        elif tag == "img":
            self.images.append(attrs)

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1].append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row[1].append((self._cell[0], "".join(self._cell[1])))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self._table.append(self._row)
            self._row = None
        elif tag == "table":
            self._table = None


def _explanation():
    """Rule sets on 400 rows with a near-duplicate pair and a negative-fitness one, on data whose answers are exact."""
    g = np.random.default_rng(0)
    X = torch.from_numpy(np.column_stack([np.arange(400) / 4.0, g.integers(0, 3, 400)]).astype(np.float64))
    target = (X[:, 0] >= 50) & (X[:, 1] != 2)
    rules = [
        [Rule(0, "x", low=50.0)],
        [Rule(0, "x", low=51.0)],  # near-duplicate of x >= 50 (Jaccard 0.98)
        [Rule(0, "x", low=50.0), Rule(1, "k", value=2.0, kind="cat")],
        [Rule(0, "x", low=80.0)],
        [Rule(0, "x", high=30.0)],  # negative fitness
    ]
    rule_sets = torch_amore.search.extractor.sort_rule_sets(
        [RuleSet.from_rules(r, X, target, target_name="predicted 1") for r in rules]
    )
    params = {"n_samples": 400, "subgroup_size": int(target.sum()), "max_length": 2, "min_support": 20}
    return RegionalExplanation(rule_sets, target, 0.5, [0, 1], ["x", "k"], params, features_matrix=X)


def _check_metrics(cells, m):
    """support, confidence, fitness cells (with data-value) equal a RuleSet's or RuleMetrics' numbers."""
    assert [float(c[0]["data-value"]) for c in cells] == [float(m.support), m.confidence, m.fitness]
    assert [c[1] for c in cells] == [str(m.support), f"{m.confidence:.3f}", f"{m.fitness:.3f}"]


def test_to_html_is_one_self_contained_file_whose_table_equals_the_explanation(tmp_path):
    expl = _explanation()
    X_new = expl.features_matrix.flip(0)[:300]
    held = expl.evaluate(X_new, target=(X_new[:, 0] >= 60))
    extra = plt.figure(figsize=(2, 2))
    extra.gca().plot([0, 1], [1, 0])
    path = expl.to_html(tmp_path / "report.html", figures={"my figure": extra}, held_out=held, plot_rules=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]  # one file, nothing beside it
    text = path.read_text(encoding="utf-8")
    assert "http://" not in text and "https://" not in text
    assert "<link" not in text and ' src="data:image/png;base64,' in text
    page = Page()
    page.feed(text)
    # the default table: the distinct, non-negative rule sets, with their exact numbers and the held-out ones
    shown = expl.distinct()
    assert [str(rs) for rs in shown] != [str(rs) for rs in expl.rule_sets]  # the example has something to collapse
    header, *rows = page.tables["rules"]
    assert [c[1] for c in header[1]][:6] == ["#", "rule set", "length", "support", "confidence", "fitness"]
    assert len(rows) == len(shown)
    for (attrs, cells), rs in zip(rows, shown):
        i = expl.rule_sets.index(rs)
        assert int(attrs["data-index"]) == i
        assert cells[1][1] == " AND ".join(r.format() for r in rs.rules)
        assert cells[2][1] == str(len(rs))
        _check_metrics(cells[3:6], rs)
        _check_metrics(cells[6:9], held[i])
    # the full list: every rule set, the negative one and the near-duplicate marked
    _, *every = page.tables["all-rules"]
    assert len(every) == len(expl.rule_sets)
    for (attrs, cells), rs in zip(every, expl.rule_sets):
        _check_metrics(cells[3:6], rs)
        assert ("negative" in attrs["class"]) == (rs.fitness < 0)
        assert ("negative fitness" in cells[-1][1]) == (rs.fitness < 0)
    notes = [cells[-1][1] for _, cells in every]
    assert sum(n.startswith("near-duplicate of #1 (") for n in notes) == 1
    # one embedded PNG per figure: two rule plots and the caller's figure, each a real, non-blank image
    assert len(page.images) == 3
    for img in page.images:
        data = base64.b64decode(img["src"].split(",", 1)[1])
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and b"http" not in data
        pixels = plt.imread(io.BytesIO(data))
        assert pixels.std() > 0.01
    assert page.images[-1]["alt"] == "my figure"
    assert plt.fignum_exists(extra.number)  # the caller's figure stays open; the report closed its own
    assert len(plt.get_fignums()) == 1
    # options and the library version
    options = {cells[0][1]: cells[1][1] for _, cells in page.tables["options"][1:]}
    assert options["torch_amore version"] == torch_amore.__version__
    assert options["min_support"] == "20" and options["threshold used"] == "0.5"


def test_to_html_without_data_or_rule_sets(tmp_path):
    expl = RegionalExplanation.from_dict(_explanation().to_dict())  # no features matrix, no subgroup
    text = expl.to_html(tmp_path / "r.html").read_text()
    page = Page()
    page.feed(text)
    assert page.images == []  # no data: no rule plots
    assert len(page.tables["rules"]) - 1 == len(expl.distinct())  # the data-free near-duplicate proxy
    empty = RegionalExplanation([], torch.zeros(4, dtype=torch.bool), None, [0], ["x"], message="nothing found")
    text = empty.to_html(tmp_path / "e.html").read_text()
    assert "nothing found" in text and "No rule set" in text


def test_bad_report_arguments_are_named(tmp_path):
    expl = _explanation()
    with pytest.raises(ValueError, match="held_out"):
        expl.to_html(tmp_path / "r.html", held_out=[])
    with pytest.raises(TypeError, match="figures"):
        expl.to_html(tmp_path / "r.html", figures=["not a figure"])
    with pytest.raises(TypeError, match="plot_rulez"):
        expl.to_html(tmp_path / "r.html", plot_rulez=1)
    from torch_amore.report.html import write_html

    with pytest.raises(TypeError, match="RegionalExplanation"):
        write_html([RuleSet((), 0, 0.0, 0.0)], tmp_path / "r.html")
    assert not (tmp_path / "r.html").exists()


def _figure():
    fig = plt.figure(figsize=(1, 1))
    fig.gca().plot([0, 1], [1, 0])
    return fig


# values of `figures` none of the documented shapes, made inside the test (its figures are closed after it)
BAD_FIGURES = [
    pytest.param(lambda: 3, id="an int"),
    pytest.param(lambda: 2.5, id="a float"),
    pytest.param(lambda: {"x": None}, id="a dict of None"),
    pytest.param(lambda: {"x": "not a figure"}, id="a dict of a string"),
    pytest.param(lambda: {1: _figure()}, id="a dict with a caption that is not a string"),
]


@pytest.mark.parametrize("make", BAD_FIGURES)
def test_figures_of_any_other_shape_are_a_type_error_naming_figures_before_anything_is_rendered(tmp_path, make):
    expl = _explanation()  # holds its data: plot_rules=3 would render three figures before the caller's
    figures = make()
    open_before = list(plt.get_fignums())
    with pytest.raises(TypeError, match=r"Expected (`figures`|the captions in `figures`) to be"):
        expl.to_html(tmp_path / "r.html", figures=figures, plot_rules=3)
    assert not (tmp_path / "r.html").exists()
    assert plt.get_fignums() == open_before  # no rule plot rendered (and left open) before the check


@pytest.mark.parametrize(
    ("kwargs", "error", "named"),
    [
        ({"title": 3}, TypeError, "`title`"),
        ({"plot_rules": "2"}, TypeError, "`plot_rules`"),
        ({"plot_rules": 2.5}, TypeError, "`plot_rules`"),
        ({"plot_rules": -1}, ValueError, "`plot_rules`"),
        ({"dpi": 0}, ValueError, "`dpi`"),
        ({"dpi": 2.5}, TypeError, "`dpi`"),
        ({"held_out": 3}, TypeError, "`held_out`"),
    ],
    ids=[
        "title int",
        "plot_rules str",
        "plot_rules float",
        "plot_rules negative",
        "dpi 0",
        "dpi float",
        "held_out int",
    ],
)
def test_other_bad_report_arguments_are_named_before_anything_is_rendered(tmp_path, kwargs, error, named):
    expl = _explanation()
    with pytest.raises(error, match=named):
        expl.to_html(tmp_path / "r.html", **kwargs)
    assert not (tmp_path / "r.html").exists()
    assert plt.get_fignums() == []


def _chromium():
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


@pytest.mark.slow
@pytest.mark.skipif(
    _chromium() is None and os.environ.get("CI") != "true",
    reason="no headless Chromium on this machine (CI installs Debian's chromium, and there the test must run)",
)
def test_the_report_renders_in_headless_chromium(tmp_path):
    assert _chromium() is not None, "CI installs Debian's chromium: the browser test must run there, not skip"
    path = _explanation().to_html(tmp_path / "report.html")
    shot = tmp_path / "shot.png"
    subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}", "--window-size=1200,900",
         path.as_uri()],
        check=True, timeout=120, capture_output=True,
    )  # fmt: skip
    pixels = plt.imread(shot)
    assert pixels.std() > 0.02  # not a blank page


def _printed_rows(out: str) -> list[tuple[int, str, int]]:
    """(rank, rule text, support) of the command line's table rows."""
    rows = []
    for line in out.splitlines():
        if line[:4].strip().isdigit() and line[4:6] == "  ":
            rank, rest = line.strip().split(maxsplit=1)
            text, support, _, _ = rest.rsplit(maxsplit=3)
            rows.append((int(rank), text.strip(), int(support)))
    return rows


def test_command_line_writes_the_report_and_prints_distinct_rule_sets(tmp_path, capsys):
    import pandas as pd

    from torch_amore.cli.commands import main

    g = np.random.default_rng(1)
    n = 800
    df = pd.DataFrame({"age": g.uniform(20, 80, n).round(1), "bmi": g.uniform(15, 45, n).round(1)})
    df["sick"] = ((df["age"] > 55) & (df["bmi"] > 30)) ^ (g.random(n) < 0.05)
    csv = tmp_path / "t.csv"
    df.to_csv(csv, index=False)
    base = ["rules", str(csv), "--target", "sick", "--min-support", "40"]
    assert main([*base, "--all", "--json", str(tmp_path / "all.json")]) == 0
    every = RegionalExplanation.from_json(tmp_path / "all.json").rule_sets
    capsys.readouterr()
    html_path = tmp_path / "out.html"
    assert main([*base, "--json", str(tmp_path / "d.json"), "--html", str(html_path)]) == 0
    out = capsys.readouterr().out
    assert RegionalExplanation.from_json(tmp_path / "d.json").rule_sets == every  # --json keeps every rule set
    X = torch.tensor(df[["age", "bmi"]].to_numpy(dtype=np.float64))
    shown = torch_amore.report.distinct.distinct_rule_sets(every, X, min_fitness=0.0)
    assert [r[1:] for r in _printed_rows(out)] == [
        (" AND ".join(r.format() for r in rs.rules), rs.support) for rs in shown
    ]
    assert len(shown) < len(every) and f"{len(every) - len(shown)} of {len(every)} rule sets not shown" in out
    assert f"wrote the HTML report to {html_path}" in out
    page = Page()
    page.feed(html_path.read_text())
    _, *rows = page.tables["rules"]
    assert len(rows) == len(shown)
    for (_, cells), rs in zip(rows, shown):
        _check_metrics(cells[3:6], rs)
    assert len(page.images) == min(3, len(shown))
    assert main([*base, "--html", str(tmp_path / "no_dir" / "x.html")]) == 2
    assert "cannot write --html" in capsys.readouterr().err


@pytest.mark.slow
def test_lightning_callback_writes_the_report_and_logs_the_rule_figure(tmp_path):
    pl = pytest.importorskip("pytorch_lightning")
    pytest.importorskip("tensorboard")
    pytest.importorskip("sklearn")
    from lightning_task import BreastCancerModule, loaders
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from torch_amore import RegionalRuleExtractor

    callback = RegionalRuleExtractor(target=1, data="val", n_grids=8, min_support=0.05, html=True, log_figures=True)
    tb = pl.loggers.TensorBoardLogger(tmp_path, name="tb")
    trainer = pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path, callbacks=[callback], logger=[tb],
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, log_every_n_steps=1,
    )  # fmt: skip
    trainer.fit(BreastCancerModule(), *loaders())
    expl = callback.explanation
    page = Page()
    page.feed(callback.last_path.with_suffix(".html").read_text())
    _, *rows = page.tables["rules"]
    assert len(rows) == len(expl.distinct()) > 0
    for (_, cells), rs in zip(rows, expl.distinct()):
        _check_metrics(cells[3:6], rs)
    events = EventAccumulator(tb.log_dir, size_guidance={"images": 0})
    events.Reload()
    tag = f"{callback.log_prefix}best_rule_set"
    assert tag in events.Tags()["images"]
    image = events.Images(tag)[0]
    assert image.width > 100 and image.height > 100
