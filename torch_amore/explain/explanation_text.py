"""The printout of a :class:`~torch_amore.RegionalExplanation`: its heading line, its text table (``print``,
``format``) and the HTML table of notebooks (``_repr_html_``). Rule sets are numbered ``#i+1`` for ``rule_sets[i]``
(those left out leave gaps), and a ``*`` after the lift flags a confidence interval containing the base rate.
"""

from __future__ import annotations

import html
import math
from typing import Any

from torch_amore.rules.evidence_columns import aligned_evidence, evidence_columns, legend_lines, verdict_line
from torch_amore.rules.rules import RuleSet

#: The mark after the lift of a rule set at the base rate.
AT_BASE_RATE = "*"


def holds_out(params: dict[str, Any]) -> bool:
    """Whether the search of an explanation with these ``params`` held rows out (``holdout`` or ``holdout_rows``)."""
    return bool(params.get("holdout")) or params.get("held_out_subgroup") is not None


def searched_counts(params: dict[str, Any]) -> tuple[int | None, int | None]:
    """The rows the search saw and the subgroup's rows among them: all ``n_samples`` and ``subgroup_size``, less
    those held out by ``holdout_rows`` (``held_out_rows``, ``held_out_subgroup``) or, with a ``holdout`` fraction,
    ``round(holdout * k)`` of each side's ``k`` rows (the split is stratified); ``None`` where unknown (e.g. the rows
    held out by a file written without ``held_out_rows``).

    Example:
        >>> searched_counts({"n_samples": 100, "subgroup_size": 20, "holdout": 0.3})
        (70, 14)
        >>> searched_counts({"n_samples": 100, "subgroup_size": 20, "held_out_rows": 50, "held_out_subgroup": 5})
        (50, 15)
    """
    n, size = params.get("n_samples"), params.get("subgroup_size")
    rows, held, holdout = params.get("held_out_rows"), params.get("held_out_subgroup"), params.get("holdout")
    if size is None or not holds_out(params):
        return n, size
    if held is not None:
        return (None if n is None or rows is None else n - rows), size - held
    size_held = int(round(holdout * size))
    return (None if n is None else n - size_held - int(round(holdout * (n - size)))), size - size_held


def header(explanation: Any) -> str:
    """The heading line of every display: local or regional rules for the subgroup, with its size, the layer, the
    concept basis and the threshold where known."""
    n, size = explanation.params.get("n_samples"), explanation.params.get("subgroup_size")
    facts = []
    if n is not None and size is not None:
        facts.append(f"subgroup: {size} of {n} samples")
        searched, searched_size = searched_counts(explanation.params)
        if holds_out(explanation.params) and searched is not None:  # the table's numbers are on these rows
            facts.append(f"{searched} searched ({searched_size} of the subgroup) and {n - searched} held out")
    if explanation.params.get("layer") is not None:
        where = "input of" if explanation.params.get("layer_input") else "layer"
        facts.append(f"{where} {explanation.params['layer']}")
    if isinstance(explanation.params.get("concepts"), dict):
        facts.append(concepts_text(explanation.params["concepts"]))
    if explanation.threshold is not None:
        facts.append(f"threshold {explanation.threshold:.4g}")
    kind = "Local rules" if explanation.sample is not None or explanation.params.get("local") else "Regional rules"
    return f"{kind} for {explanation.target_name}" + (f" ({', '.join(facts)})" if facts else "")


def concepts_text(facts: dict[str, Any]) -> str:
    """The basis as the header names it: kind, K and the reconstruction error (FVU) where there is one.

    Example:
        >>> concepts_text({"kind": "sae", "n_concepts": 64, "reconstruction_error": {"fvu": 0.0123, "mse": 0.4}})
        'concepts: sae, K=64, reconstruction error (FVU) 0.0123'
    """
    text = f"concepts: {facts.get('kind')}, K={facts.get('n_concepts')}"
    error = facts.get("reconstruction_error")
    if isinstance(error, dict):
        error = error.get("fvu")
    return text if not isinstance(error, (int, float)) else f"{text}, reconstruction error (FVU) {error:.3g}"


def legend(base_rate: float | None, flagged: bool, rows: str = "all rows") -> str:
    """The line that says what the table's columns mean (``flagged``: and a line for the ``*``); ``rows``: the rows
    the numbers are of ("the rows searched" when some were held out).

    Example:
        >>> print(legend(0.25, True))
          lift: confidence / base rate 0.250 (1: no better than all rows); recall: share of the subgroup covered
          *: the confidence's 95% interval contains the base rate (not measurably above all rows)
    """
    base = "the base rate" if base_rate is None or math.isnan(base_rate) else f"base rate {base_rate:.3f}"
    line = f"  lift: confidence / {base} (1: no better than {rows}); recall: share of the subgroup covered"
    if flagged:
        line += (
            f"\n  {AT_BASE_RATE}: the confidence's 95% interval contains the base rate (not measurably above {rows})"
        )
    return line


def _row(explanation: Any, i: int, rs: RuleSet, precision: int, cells: str) -> str:
    st = explanation.stats(rs)
    cond = " AND ".join(r.format(precision) for r in rs.rules)
    mark = AT_BASE_RATE if st["at_base_rate"] else " "
    return (
        f"  {i:>2}  {rs.support:>7}  {rs.confidence:>10.3f}  {rs.fitness:>7.3f}  {st['lift']:>6.3f}{mark} "
        f"{st['recall']:>6.3f}{cells}  {cond}"
    )


def _table(explanation: Any, rows: list[tuple[int, RuleSet]], precision: int) -> list[str]:
    """The header line, a line per rule set of ``rows`` and the legend (the evidence columns when computed)."""
    extra, cells = aligned_evidence([rs for _, rs in rows])
    lines = [
        f"  {'#':>2}  {'support':>7}  {'confidence':>10}  {'fitness':>7}  {'lift':>6}  {'recall':>6}{extra}  rule set"
    ]
    lines += [_row(explanation, i, rs, precision, cell) for (i, rs), cell in zip(rows, cells)]
    return lines


def _hidden_line(explanation: Any, n_shown: int, include_negative: bool) -> str:
    rule_sets = explanation.rule_sets
    hidden = len(rule_sets) - n_shown
    if not hidden:
        return ""
    negative = 0 if include_negative else sum(rs.fitness <= 0 for rs in rule_sets)
    why = [f"{negative} with fitness <= 0"] if negative else []
    alike = "near-duplicates" if explanation.features_matrix is not None else "alike by their bounds (no rows kept)"
    why += [f"{hidden - negative} {alike}"] if hidden > negative else []
    return (
        f"  ({hidden} rule sets not shown: {', '.join(why)}; format(distinct=False, include_negative=True) lists "
        f"all {len(rule_sets)})"
    )


def format_explanation(
    explanation: Any, max_rows: int | None, precision: int, *, include_negative: bool, distinct: bool
) -> str:
    """The text of :meth:`RegionalExplanation.format` (its arguments checked there)."""
    lines = [header(explanation)]
    verdict = verdict_line(explanation.rule_sets, explanation.params)
    if verdict is not None:
        lines.append(f"  {verdict}")
    rows = explanation.shown(include_negative, distinct=distinct)
    if not rows:
        what = "no rule sets with positive fitness" if explanation.rule_sets else "no rule sets"
        lines.append(f"  ({what}) {explanation.message}".rstrip())
    else:
        lines += _table(explanation, rows[:max_rows], precision)
        if max_rows is not None and len(rows) > max_rows:
            lines.append(f"  ... {len(rows) - max_rows} more")
        flagged = any(explanation.stats(rs)["at_base_rate"] for _, rs in rows[:max_rows])
        seen = "the rows searched" if holds_out(explanation.params) else "all rows"
        lines.append(legend(explanation.base_rate, flagged, seen))
        lines += [f"  {line}" for line in legend_lines([rs for _, rs in rows[:max_rows]], explanation.params)]
    best = explanation.best
    if best is not None and best.optimum is not None:
        lines.append(f"  best: {best.optimum_text(precision)}")
    hidden = _hidden_line(explanation, len(rows), include_negative)
    if hidden:
        lines.append(hidden)
    if explanation.verification is not None:
        lines.append(explanation.verification.format(precision))
    return "\n".join(lines)


def explanation_table_html(explanation: Any) -> str:
    """The notebook display: the header and the first 20 rows of :meth:`RegionalExplanation.shown`."""
    shown = explanation.shown()[:20]
    columns = evidence_columns([rs for _, rs in shown])
    rows = "".join(
        f"<tr><td>{i}</td><td>{rs.support}</td><td>{rs.confidence:.3f}</td><td>{rs.fitness:.3f}</td>"
        + "".join(f"<td>{html.escape(c.text(rs))}</td>" for c in columns)
        + f"<td>{html.escape(' AND '.join(r.format() for r in rs.rules))}</td></tr>"
        for i, rs in shown
    )
    empty = f"<p>{html.escape(explanation.message or 'No rule sets.')}</p>" if not explanation.rule_sets else ""
    verdict = verdict_line(explanation.rule_sets, explanation.params)
    verdict_html = "" if verdict is None else f"<p>{html.escape(verdict)}</p>"
    extra = "".join(f"<th>{html.escape(c.header)}</th>" for c in columns)
    return (
        f"<div><p><b>{html.escape(header(explanation))}</b></p>{verdict_html}{empty}"
        f"<table><thead><tr><th>#</th><th>support</th><th>confidence</th><th>fitness</th>{extra}<th>rule set</th></tr>"
        f"</thead><tbody>{rows}</tbody></table></div>"
    )
