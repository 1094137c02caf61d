"""The evidence columns of the ``rules`` command's table (held-out confidence with its interval and p-value, the
search-aware p-value, stability) and its verdict line, when ``--holdout``, ``--permutations`` or ``--stability``
computed them."""

from __future__ import annotations

from collections.abc import Sequence

from torch_amore.rules.evidence import verdict
from torch_amore.rules.held_out import format_p_value
from torch_amore.rules.rules import RuleSet

__all__ = ["evidence_columns", "evidence_verdict"]


def evidence_columns(rule_sets: Sequence[RuleSet]) -> tuple[str, list[str]]:
    """The header and one cell string per rule set of the evidence columns (``("", [""] * n)`` when none was
    computed).

    Example:
        >>> from torch_amore.rules.rule import Rule
        >>> rs = RuleSet((Rule(0, "age", low=50.0),), 120, 0.75, 0.2, p_value=0.01, stability=0.5)
        >>> header, cells = evidence_columns([rs])
        >>> print(header); print(cells[0])
          p(perm)  stability
             0.01       0.50
    """
    columns: list[tuple[str, list[str]]] = []
    if any(rs.held_out is not None for rs in rule_sets):
        level = next(rs.held_out.level for rs in rule_sets if rs.held_out is not None)
        cells = [
            f"{h.confidence:.3f} [{h.confidence_interval[0]:.3f}, {h.confidence_interval[1]:.3f}]"
            if (h := rs.held_out) is not None
            else "-"
            for rs in rule_sets
        ]
        columns.append((f"held-out confidence [{100 * level:g}% CI]", cells))
        columns.append(
            ("p(held-out)", [format_p_value(rs.held_out.p_value) if rs.held_out else "-" for rs in rule_sets])
        )
    if any(rs.p_value is not None for rs in rule_sets):
        columns.append(("p(perm)", [format_p_value(rs.p_value) if rs.p_value is not None else "-" for rs in rule_sets]))
    if any(rs.stability is not None for rs in rule_sets):
        columns.append(("stability", [f"{rs.stability:.2f}" if rs.stability is not None else "-" for rs in rule_sets]))
    if not columns:
        return "", [""] * len(rule_sets)
    widths = [max(len(name), *(len(c) for c in cells)) for name, cells in columns]
    header = "".join(f"  {name:>{w}}" for (name, _), w in zip(columns, widths))
    rows = ["".join(f"  {cells[i]:>{w}}" for (_, cells), w in zip(columns, widths)) for i in range(len(rule_sets))]
    return header, rows


def evidence_verdict(rule_sets: Sequence[RuleSet], permutations: int, level: float) -> str | None:
    """The verdict line (:func:`torch_amore.rules.evidence.verdict`) at ``1 - level``, or ``None``.

    Example:
        >>> evidence_verdict([RuleSet((), 10, 0.9, 0.5, p_value=0.01)], 99, 0.95)
        'verdict: 1 of 1 rule set beat the search on shuffled targets at 0.05, 99 permutations'
    """
    line = verdict(rule_sets, permutations=permutations or None, alpha=round(1.0 - level, 12))
    return None if line is None else f"verdict: {line}"
