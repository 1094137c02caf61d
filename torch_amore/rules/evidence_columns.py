"""The evidence columns of the explanation's tables (its printout, ``to_dataframe()``, the HTML report): the held-out
confidence with its interval and Holm-adjusted p-value, the search-aware p-value and the stability, each only when
some rule set carries it (:func:`evidence_columns`), with the legend that says what they mean (:func:`legend_lines`)
and the verdict line that heads the printout (:func:`verdict_line`).

The numbers are the fields of :class:`~torch_amore.RuleSet` (``held_out``, ``p_value``, ``stability``) that
``holdout``, ``permutations`` and ``stability`` compute (docs/trust.md); a rule set without one shows ``-``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from torch_amore.rules.evidence import verdict
from torch_amore.rules.held_out import format_p_value

__all__ = ["EvidenceColumn", "aligned_evidence", "evidence_columns", "evidence_record", "legend_lines", "verdict_line"]

_NAN = float("nan")


@dataclass(frozen=True)
class EvidenceColumn:
    """One evidence column: its ``header``, the ``text`` of a rule set's cell (``-`` when not computed for it) and
    the ``value`` it sorts by (NaN when not computed)."""

    header: str
    text: Callable[[Any], str]
    value: Callable[[Any], float]


def _column(header: str, value: Callable[[Any], Any], text: Callable[[Any], str]) -> EvidenceColumn:
    """The column of ``value(rs)`` (``None``: not computed), shown as ``text(rs)`` where computed."""
    return EvidenceColumn(
        header,
        lambda rs: "-" if value(rs) is None else text(rs),
        lambda rs: _NAN if value(rs) is None else value(rs),
    )


def _interval_text(rs: Any) -> str:
    h = rs.held_out
    return f"{h.confidence:.3f} [{h.confidence_interval[0]:.3f}, {h.confidence_interval[1]:.3f}]"


def _level(rule_sets: Sequence[Any]) -> float:
    return next((rs.held_out.level for rs in rule_sets if rs.held_out is not None), 0.95)


def evidence_columns(rule_sets: Sequence[Any]) -> list[EvidenceColumn]:
    """The evidence columns some of ``rule_sets`` carry, in table order (``[]`` when none was computed).

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> found = [RuleSet((), 10, 0.9, 0.5, p_value=0.01), RuleSet((), 10, 0.9, 0.4, p_value=0.25)]
        >>> [(c.header, [c.text(rs) for rs in found]) for c in evidence_columns(found)]
        [('p(perm)', ['0.01', '0.25'])]
    """
    columns = []
    if any(rs.held_out is not None for rs in rule_sets):
        columns += [
            _column(
                f"held-out confidence [{100 * _level(rule_sets):g}% CI]",
                lambda rs: None if rs.held_out is None else rs.held_out.confidence,
                _interval_text,
            ),
            _column(
                "p(held-out)",
                lambda rs: None if rs.held_out is None else rs.held_out.p_value,
                lambda rs: format_p_value(rs.held_out.p_value),
            ),
        ]
    if any(rs.p_value is not None for rs in rule_sets):
        columns.append(_column("p(perm)", lambda rs: rs.p_value, lambda rs: format_p_value(rs.p_value)))
    if any(rs.stability is not None for rs in rule_sets):
        columns.append(_column("stability", lambda rs: rs.stability, lambda rs: f"{rs.stability:.2f}"))
    return columns


def aligned_evidence(rule_sets: Sequence[Any]) -> tuple[str, list[str]]:
    """The evidence columns of a text table, right-aligned: the header and one cell string per rule set (``""`` and
    ``[""] * n`` when none was computed).

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> header, cells = aligned_evidence([RuleSet((), 120, 0.75, 0.2, p_value=0.01, stability=0.5)])
        >>> print(header); print(cells[0])
          p(perm)  stability
             0.01       0.50
    """
    columns = evidence_columns(rule_sets)
    widths = [max([len(c.header)] + [len(c.text(rs)) for rs in rule_sets]) for c in columns]
    header = "".join(f"  {c.header:>{w}}" for c, w in zip(columns, widths))
    return header, ["".join(f"  {c.text(rs):>{w}}" for c, w in zip(columns, widths)) for rs in rule_sets]


def evidence_record(rule_set: Any, rule_sets: Sequence[Any]) -> dict[str, Any]:
    """The DataFrame fields of ``rule_set``'s evidence (``held_out_*``, ``p_value``, ``stability``; NaN where not
    computed for it), for the kinds some of ``rule_sets`` carry.

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> rs = RuleSet((), 10, 0.9, 0.5, stability=0.75)
        >>> evidence_record(rs, [rs])
        {'stability': 0.75}
    """
    out: dict[str, Any] = {}
    if any(rs.held_out is not None for rs in rule_sets):
        h = rule_set.held_out
        low, high = (_NAN, _NAN) if h is None else h.confidence_interval
        out.update(
            held_out_support=_NAN if h is None else h.support,
            held_out_confidence=_NAN if h is None else h.confidence,
            held_out_confidence_low=low,
            held_out_confidence_high=high,
            held_out_p_value=_NAN if h is None else h.p_value,
        )
    if any(rs.p_value is not None for rs in rule_sets):
        out["p_value"] = _NAN if rule_set.p_value is None else rule_set.p_value
    if any(rs.stability is not None for rs in rule_sets):
        out["stability"] = _NAN if rule_set.stability is None else rule_set.stability
    return out


def legend_lines(rule_sets: Sequence[Any], params: Mapping[str, Any] | None = None) -> list[str]:
    """What the evidence columns mean, one line per kind computed (``params``: the call's options, for the counts).

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> for line in legend_lines([RuleSet((), 10, 0.9, 0.5, p_value=0.01)], {"permutations": 99}):
        ...     print(line)
        p(perm): the share of 99 searches on shuffled targets that reach this fitness ((1 + k) / (P + 1))
    """
    params = params or {}
    lines = []
    if any(rs.held_out is not None for rs in rule_sets):
        lines.append(
            f"held-out: measured on rows the search did not see (confidence with its {100 * _level(rule_sets):g}% "
            "Clopper-Pearson interval; p(held-out): exact binomial test against their base rate, Holm-adjusted)"
        )
    if any(rs.p_value is not None for rs in rule_sets):
        p = params.get("permutations")
        count = f"{p} searches" if p else "the searches"
        lines.append(f"p(perm): the share of {count} on shuffled targets that reach this fitness ((1 + k) / (P + 1))")
    if any(rs.stability is not None for rs in rule_sets):
        b = params.get("stability")
        lines.append(
            f"stability: the share of {f'{b} ' if b else ''}half-samples that find nearly the same rows "
            "(Jaccard index >= 0.8)"
        )
    return lines


def verdict_line(rule_sets: Sequence[Any], params: Mapping[str, Any] | None = None) -> str | None:
    """``verdict: ...`` (:func:`torch_amore.rules.evidence.verdict` at ``1 - level`` of ``params``), or ``None``
    when no rule set carries a p-value.

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> verdict_line([RuleSet((), 10, 0.9, 0.5, p_value=0.2)], {"permutations": 19, "level": 0.95})
        'verdict: 0 of 1 rule set beat the search on shuffled targets at 0.05, 19 permutations'
    """
    params = params or {}
    level = float(params.get("level") or 0.95)
    line = verdict(rule_sets, permutations=params.get("permutations") or None, alpha=round(1.0 - level, 12))
    return None if line is None else f"verdict: {line}"
