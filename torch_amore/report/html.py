"""A self-contained HTML report of a :class:`~torch_amore.RegionalExplanation` (:func:`write_html`), nothing fetched
from the network: the sortable rule table, held-out metrics when given, the evidence and verification when computed,
the full list of rule sets, figures inlined as PNG data URIs, the options and the library version.
"""

from __future__ import annotations

import base64
import html
import io
import platform
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from torch_amore._version import __version__
from torch_amore.data.arguments import check_int
from torch_amore.report.distinct import MAX_JACCARD, duplicate_of, duplicate_reason
from torch_amore.report.plot import plot_rule
from torch_amore.rules.evidence_columns import EvidenceColumn, evidence_columns, legend_lines, verdict_line
from torch_amore.rules.metrics import RuleMetrics
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.verification import verification_cells, verification_header, verification_note

_STYLE = """
*, *::before, *::after { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 88em; color: #222; padding: 0 1em;
       line-height: 1.35; }
h1 { font-size: 1.45em; margin-bottom: 0.2em; overflow-wrap: anywhere; }
h2 { font-size: 1.2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.85em; max-width: 100%; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.35em; text-align: right; vertical-align: top; }
th { background: #f3f3f3; cursor: pointer; user-select: none; font-weight: 600; }
th.rule, td.rule, td.note, th.verdict, td.verdict { text-align: left; }
td.rule { font-family: ui-monospace, monospace; font-size: 0.92em; }
.cond { white-space: nowrap; }
td.note { color: #555; font-size: 0.92em; overflow-wrap: anywhere; min-width: 8em; }
tr.negative td { color: #a00; }
tr.duplicate td { color: #888; }
th.verified, td.verified { background: #f2f6fb; }
.interval { font-size: 0.85em; color: #555; white-space: nowrap; }
table#options { table-layout: fixed; width: 100%; }
table#options th, table#options td { text-align: left; font-family: ui-monospace, monospace; overflow-wrap: anywhere; }
table#options th:first-child { width: 16em; }
figure { margin: 1em 0 2em; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { font-size: 0.9em; color: #555; }
.note { color: #555; font-size: 0.9em; }
"""

# click a header to sort by that column (numbers by their data-value); no external script
_SCRIPT = """
document.querySelectorAll("table.sortable th").forEach(function (th, col) {
  th.addEventListener("click", function () {
    var body = th.closest("table").tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    var up = th.dataset.order !== "asc";
    th.dataset.order = up ? "asc" : "desc";
    function key(r) {
      var c = r.cells[col]; var v = c.dataset.value;
      return v === undefined ? c.textContent : parseFloat(v);
    }
    rows.sort(function (a, b) {
      var x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * (up ? 1 : -1);
    });
    rows.forEach(function (r) { body.appendChild(r); });
  });
});
"""


def figure_data_uri(fig: Any, *, dpi: int = 100) -> str:
    """A matplotlib figure as a ``data:image/png;base64,...`` URI (tight bounding box, no software metadata).

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> from matplotlib.figure import Figure
        >>> figure_data_uri(Figure(figsize=(1, 1))).startswith("data:image/png;base64,iVBOR")
        True
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _cond_html(rs: RuleSet) -> str:
    """The conditions, each in a ``cond`` span that never breaks (lines break only between conditions)."""
    conds = [f'<span class="cond">{html.escape(r.format())}</span>' for r in rs.rules]
    return " AND ".join(conds) or '<span class="cond">TRUE</span>'


def _num(value: float, text: str) -> str:
    return f'<td data-value="{float(value)!r}">{text}</td>'


def _lead_cells(position: int, cond: str) -> str:
    """The ``#`` and rule set cells that start a row of every table."""
    return _num(position, str(position)) + f'<td class="rule">{cond}</td>'


def _sortable(table_id: str, head: str, rows: Sequence[str]) -> str:
    """A table sorted by clicking a column header (``head``: the ``<th>`` cells after ``#`` and rule set)."""
    head = '<th>#</th><th class="rule">rule set</th>' + head
    return (
        f'<table id="{table_id}" class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'
    )


def _metric_cells(m: RuleMetrics | RuleSet) -> str:
    return (
        _num(m.support, str(m.support))
        + _num(m.confidence, f"{m.confidence:.3f}")
        + _num(m.fitness, f"{m.fitness:.3f}")
    )


def _evidence_cell(column: EvidenceColumn, rs: RuleSet) -> str:
    """A cell of an evidence column: ``-`` where not computed, the held-out interval in a smaller ``interval`` span."""
    value = column.value(rs)
    if value != value:  # NaN: not computed for this rule set
        return "<td>-</td>"
    text = html.escape(column.text(rs))
    if " [" in text:
        point, interval = text.split(" ", 1)
        text = f'{point} <span class="interval">{interval}</span>'
    return _num(value, text)


def _evidence_table(explanation: Any, notes: Sequence[str]) -> str:
    """The section "How far to trust these rule sets": the verdict, how to read the evidence and a sortable table of
    every rule set with the evidence columns computed ('' when the search computed none)."""
    rule_sets = explanation.rule_sets
    columns = evidence_columns(rule_sets)
    if not columns:
        return ""
    body = []
    for i, rs in enumerate(rule_sets):
        cls = "negative" if rs.fitness < 0 else "duplicate" if notes[i].startswith("near-duplicate") else ""
        cells = _lead_cells(i + 1, _cond_html(rs)) + "".join(_evidence_cell(c, rs) for c in columns)
        body.append(f'<tr data-index="{i}" class="{cls}">{cells}</tr>')
    head = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    return "<h2>How far to trust these rule sets</h2>" + _evidence_note(explanation) + _sortable("evidence", head, body)


def _evidence_note(explanation: Any) -> str:
    """The verdict and how to read the evidence columns."""
    verdict = verdict_line(explanation.rule_sets, explanation.params)
    legend = legend_lines(explanation.rule_sets, explanation.params)
    out = f'<p id="verdict"><b>{html.escape(verdict)}</b></p>' if verdict is not None else ""
    return out + (
        '<p class="note" id="evidence-note">How to read the evidence columns: '
        + html.escape("; ".join(legend))
        + ". Every rule set the search returned is listed (near-duplicates in grey, negative fitness in red), as the "
        "verdict counts them. p(perm) compares a rule set with the best of whole searches on shuffled targets (is "
        "there anything here at all?); p(held-out) tests one fixed rule set on new rows (does this region hold up?). "
        "A small p-value is not a large effect: read the held-out confidence and its interval next to it. They "
        "measure association in this sample given the search, not whether the model uses the region (that is "
        "verify's question).</p>"
    )


def _rule_table(rows: Sequence[tuple[int, RuleSet, str]], held: Mapping[int, RuleMetrics] | None, table_id: str) -> str:
    """rows: (index in explanation.rule_sets, rule set, note), shown as ``#index+1`` (no note column without notes)."""
    head = "<th>length</th><th>support</th><th>confidence</th><th>fitness</th>"
    if held is not None:
        head += "<th>held-out support</th><th>held-out confidence</th><th>held-out fitness</th>"
    with_note = any(note for _, _, note in rows)
    if with_note:
        head += '<th class="rule">note</th>'
    body = []
    for i, rs, note in rows:
        cls = "negative" if rs.fitness < 0 else "duplicate" if note.startswith("near-duplicate") else ""
        cells = _lead_cells(i + 1, _cond_html(rs)) + _num(len(rs), str(len(rs))) + _metric_cells(rs)
        if held is not None:
            cells += _metric_cells(held[i])
        if with_note:
            cells += f'<td class="note">{html.escape(note)}</td>'
        body.append(f'<tr data-index="{i}" class="{cls}">{cells}</tr>')
    return _sortable(table_id, head, body)


def _verification_table(explanation: Any, verified: Any) -> str:
    """The verified rule sets (``#`` as everywhere) with their shares, controls and verdicts ('' without)."""
    if verified is None:
        return ""
    body = []
    for row in verified.rows:
        i = row.position - 1
        rs = explanation.rule_sets[i] if 0 <= i < len(explanation.rule_sets) else None
        cond = _cond_html(rs) if rs is not None else html.escape(row.rule_set)
        body.append(f'<tr data-index="{i}">{_lead_cells(row.position, cond)}{verification_cells(row)}</tr>')
    return (
        "<h2>Verification by intervention</h2>"
        + verification_note(verified)
        + _sortable("verification", verification_header(), body)
    )


def _notes(explanation: Any, max_jaccard: float) -> tuple[list[int], list[str]]:
    """Indices of the default table's rule sets and a note per rule set of the full list."""
    rule_sets = explanation.rule_sets
    rep = duplicate_of(rule_sets, explanation.features_matrix, max_jaccard=max_jaccard)
    shown = explanation.distinct(max_jaccard=max_jaccard)
    index = {id(rs): i for i, rs in enumerate(rule_sets)}
    shown_idx = [index[id(rs)] for rs in shown]
    notes = []
    for i, rs in enumerate(rule_sets):
        parts = []
        if rep[i] != i:
            reason = duplicate_reason(explanation.features_matrix is not None, max_jaccard)
            parts.append(f"near-duplicate of #{rep[i] + 1} ({reason})")
        if rs.fitness < 0:
            parts.append("negative fitness: covers more rows outside the subgroup than in it")
        elif explanation.stats(rs)["at_base_rate"]:
            parts.append("at the base rate: the confidence's 95% interval contains it")
        notes.append("; ".join(parts))
    return shown_idx, notes


def _default_figures(explanation: Any, shown_idx: Sequence[int], n_rules: int) -> list[tuple[str, Any]]:
    """plot_rule for the first ``n_rules`` rule sets of the default table (when the data are at hand)."""
    if explanation.features_matrix is None or explanation.subgroup is None or n_rules <= 0:
        return []
    try:
        import matplotlib  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the environment: the report without figures
        return []
    X, subgroup = explanation.features_matrix, explanation.subgroup
    caption = "Rule set #{}: each condition's feature in the subgroup and in the rest"
    return [(caption.format(i + 1), plot_rule(explanation.rule_sets[i], X, subgroup)) for i in shown_idx[:n_rules]]


_FIGURES = "a matplotlib figure, a list of figures or (caption, figure) pairs, or a dict {caption: figure}"


def _figure_list(figures: Any) -> list[tuple[str, Any]]:
    """``figures`` as (caption, figure) pairs; any other value is a TypeError naming ``figures`` (before any plotting).

    Example:
        >>> _figure_list({"rule #1": None})  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: Expected `figures` to be a matplotlib figure, ..., but got NoneType (caption 'rule #1').
    """
    if figures is None:
        return []
    if hasattr(figures, "savefig"):
        return [("", figures)]
    if isinstance(figures, Mapping):
        out = list(figures.items())
        where = [f"caption {caption!r}" for caption in figures]
    elif isinstance(figures, Iterable) and not isinstance(figures, (str, bytes)):
        out = [item if isinstance(item, tuple) and len(item) == 2 else ("", item) for item in figures]
        where = [f"item {i}" for i in range(len(out))]
    else:
        raise TypeError(f"Expected `figures` to be {_FIGURES}, but got {type(figures).__name__}.")
    for (caption, fig), at in zip(out, where):
        if not isinstance(caption, str):
            raise TypeError(f"Expected the captions in `figures` to be strings, but got {caption!r} ({at}).")
        if not hasattr(fig, "savefig"):
            raise TypeError(f"Expected `figures` to be {_FIGURES}, but got {type(fig).__name__} ({at}).")
    return out


def _options_table(explanation: Any) -> str:
    rows = [("torch_amore version", __version__), ("python", platform.python_version()), ("torch", torch.__version__)]
    rows += [(str(k), str(v)) for k, v in sorted(explanation.params.items())]
    if explanation.threshold is not None:
        rows.append(("threshold used", f"{explanation.threshold:.6g}"))
    body = "".join(
        f'<tr><td class="key">{html.escape(k)}</td><td class="key">{html.escape(v)}</td></tr>' for k, v in rows
    )
    return f'<table id="options"><thead><tr><th>option</th><th>value</th></tr></thead><tbody>{body}</tbody></table>'


def _optimum_note(explanation: Any) -> str:
    """The best rule set's fitness against the grid's optimum (:meth:`RuleSet.optimum_text`), when computed."""
    best = explanation.best
    if best is None or best.optimum is None:
        return ""
    return (
        f'<p class="note">Best rule set, #1: {html.escape(best.optimum_text(), quote=False)}. The best rule set on '
        "the coarse grid (the n_grids cuts per feature, the same length and support limits) is found by an "
        "exhaustive search, as strategy='exact' does; the search then moves its cuts to points between observed "
        "values, which can do better.</p>"
    )


def _png_width(uri: str) -> int:
    """The pixel width of a PNG data URI (its IHDR chunk)."""
    head = base64.b64decode(uri.split(",", 1)[1][:32])
    return int.from_bytes(head[16:20], "big")


def _figure_html(caption: str, fig: Any, dpi: int) -> str:
    """A figure at its natural size (one image pixel per CSS pixel), narrower where the window is."""
    uri = figure_data_uri(fig, dpi=dpi)
    alt = html.escape(caption or "figure", quote=True)
    cap = f"<figcaption>{html.escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img src="{uri}" width="{_png_width(uri)}" alt="{alt}">{cap}</figure>'


def _title(header: str) -> str:
    """The page's heading: the header without its facts in parentheses (they follow below it)."""
    cut = header.rfind(" (")
    return header[:cut] if cut > 0 and header.endswith(")") else header


def explanation_html(
    explanation: Any,
    *,
    figures: Any = None,
    held_out: Sequence[RuleMetrics] | None = None,
    title: str | None = None,
    plot_rules: int = 3,
    max_jaccard: float = MAX_JACCARD,
    dpi: int = 150,
) -> str:
    """The report as one HTML string (see :func:`write_html`)."""
    if not (hasattr(explanation, "rule_sets") and hasattr(explanation, "distinct")):
        raise TypeError(f"Expected a RegionalExplanation, but got {type(explanation).__name__}.")
    n_sets = len(explanation.rule_sets)
    if title is not None and not isinstance(title, str):
        raise TypeError(f"Expected `title` to be a string or None, but got {type(title).__name__}.")
    plot_rules, dpi = check_int(plot_rules, "plot_rules", 0), check_int(dpi, "dpi", 1)
    if held_out is not None:
        if not isinstance(held_out, Iterable) or isinstance(held_out, (str, bytes)):
            raise TypeError(
                f"Expected `held_out` to be {n_sets} RuleMetrics (explanation.evaluate(...) on new data), but got "
                f"{type(held_out).__name__}."
            )
        held_out = list(held_out)
        if len(held_out) != n_sets or not all(isinstance(m, RuleMetrics) for m in held_out):
            raise ValueError(
                f"Expected `held_out` to be {n_sets} RuleMetrics (explanation.evaluate(...) on new data, one per rule "
                f"set), but got {len(held_out)} items."
            )
    held = None if held_out is None else dict(enumerate(held_out))
    verified = getattr(explanation, "verification", None)
    figs = _figure_list(figures)  # checked before any plotting
    shown_idx, notes = _notes(explanation, max_jaccard)
    own = _default_figures(explanation, shown_idx, plot_rules)
    figs = own + figs
    header = explanation.format(max_rows=0).splitlines()[0]
    heading = title or _title(header)
    parts = [
        f"<h1>{html.escape(heading)}</h1>",
        f"<p>{html.escape(header)}</p>" if heading != header else "",
        f'<p class="note">{html.escape(explanation.message)}</p>' if explanation.message else "",
        "<h2>Rule sets</h2>",
        f'<p class="note">Best fitness first; near-duplicates '
        f"({html.escape(duplicate_reason(explanation.features_matrix is not None, max_jaccard))}) are collapsed "
        "into the fitter rule set and negative-fitness rule sets left out; the full list is below. "
        "# is a rule set's place in the full list (rule_sets[i] is #i+1), so rule sets left out leave gaps. "
        "Click a column header to sort. Support: rows satisfying the rule set; confidence: the share of them in "
        "the subgroup; fitness: (covered rows in the subgroup - covered rows outside it) / subgroup size."
        + (" Held-out support, confidence and fitness: the same rule sets on new data." if held is not None else "")
        + "</p>",
        _rule_table([(i, explanation.rule_sets[i], notes[i]) for i in shown_idx], held, "rules")
        if shown_idx
        else '<p class="note">No rule set with non-negative fitness.</p>',
        _optimum_note(explanation),
        _evidence_table(explanation, notes),
        _verification_table(explanation, verified),
    ]
    if figs:
        parts.append("<h2>Figures</h2>")
        parts += [_figure_html(caption, fig, dpi) for caption, fig in figs]
        if own:
            import matplotlib.pyplot as plt

            for _, fig in own:
                plt.close(fig)  # the report's own figures; the caller's stay open
    parts += [
        f"<h2>All {n_sets} rule sets</h2>",
        "<details><summary>show the full list (near-duplicates and negative fitness marked)</summary>",
        _rule_table([(i, rs, notes[i]) for i, rs in enumerate(explanation.rule_sets)], held, "all-rules"),
        "</details>",
        "<h2>Options</h2>",
        _options_table(explanation),
    ]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title or header)}</title><style>{_STYLE}</style></head>\n<body>\n"
        + "\n".join(p for p in parts if p)
        + f"\n<script>{_SCRIPT}</script>\n</body></html>\n"
    )


def write_html(explanation: Any, path: str | Path, **kwargs: Any) -> Path:
    """Write a self-contained HTML report of an explanation and return its path.

    Args:
        explanation: a :class:`~torch_amore.RegionalExplanation`.
        path: the ``.html`` file to write.
        figures: extra matplotlib figures: a figure, a list of figures or ``(caption, figure)`` pairs, or a dict
            ``{caption: figure}`` (e.g. :func:`~torch_amore.report.plot.plot_rule_attributions`); inlined as PNG.
            Captions are strings; anything else is a ``TypeError`` raised before any figure is rendered.
        held_out: ``explanation.evaluate(...)`` on new data (one :class:`~torch_amore.RuleMetrics` per rule set).
        title: the page title (default: the explanation's header; its facts in parentheses follow the heading).
        plot_rules: a :func:`~torch_amore.report.plot.plot_rule` figure for this many of the best distinct rule sets
            (when the explanation holds its data); ``0`` for none.
        max_jaccard: near-duplicate threshold of the default table (:mod:`torch_amore.report.distinct`).
        dpi: resolution of the inlined figures, an integer >= 1 (each shown at one image pixel per CSS pixel, at
            most the page's width).

    Returns:
        The path written.

    Example:
        >>> import matplotlib
        >>> matplotlib.use("Agg")
        >>> import tempfile, torch
        >>> from torch_amore import RegionalExplanation, Rule, RuleSet
        >>> X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
        >>> subgroup = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, subgroup, target_name="predicted 1")
        >>> explanation = RegionalExplanation([rs], subgroup, 0.5, [0], ["x"], features_matrix=X)
        >>> path = write_html(explanation, Path(tempfile.mkdtemp()) / "report.html")
        >>> text = path.read_text()
        >>> "x &gt;= 0.65" in text, text.count("<img "), "http" in text
        (True, 1, False)
    """
    path = Path(path)
    text = explanation_html(explanation, **kwargs)
    path.write_text(text, encoding="utf-8")
    return path
