"""How far to trust the rule sets of one call, in words: each one's evidence (:func:`evidence_text`), one verdict
line for a list (:func:`verdict`), and the warning when none stands out from what the search finds in noise
(:func:`noise_message`, :func:`warn_noise`). The numbers are those of ``extract_rules`` with ``permutations``,
``holdout`` or ``stability`` (``RuleSet.p_value``, ``RuleSet.held_out``, ``RuleSet.stability``; see docs/trust.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

from torch_amore.rules.held_out import format_p_value

__all__ = ["evidence_text", "noise_message", "verdict", "warn_noise"]


def evidence_text(rule_set: Any) -> str:
    """The evidence a rule set carries, ``"; "``-separated (``""`` when none was computed).

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> evidence_text(RuleSet((), 10, 0.9, 0.5, p_value=0.01, stability=0.85))
        'search-aware p=0.01; stability=0.85'
    """
    parts = []
    if getattr(rule_set, "held_out", None) is not None:
        parts.append(rule_set.held_out.text())
    if getattr(rule_set, "p_value", None) is not None:
        parts.append(f"search-aware p={format_p_value(rule_set.p_value)}")
    if getattr(rule_set, "stability", None) is not None:
        parts.append(f"stability={rule_set.stability:.2f}")
    return "; ".join(parts)


def _count(n: int, total: int) -> str:
    return f"{n} of {total} rule set{'s' if total != 1 else ''}"


def verdict(rule_sets: Sequence[Any], *, permutations: int | None = None, alpha: float = 0.05) -> str | None:
    """One line on the evidence of ``rule_sets``: how many beat the search on shuffled targets (``p_value <=
    alpha``) and how many hold on held-out rows (Holm-adjusted ``held_out.p_value <= alpha``); ``None`` when no
    rule set carries either. ``permutations``: the count behind the p-values, named in the line when given.

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> found = [RuleSet((), 10, 0.9, 0.5, p_value=0.01), RuleSet((), 10, 0.9, 0.4, p_value=0.2)]
        >>> verdict(found, permutations=99)
        '1 of 2 rule sets beat the search on shuffled targets at 0.05, 99 permutations'
        >>> verdict([RuleSet((), 10, 0.9, 0.5)]) is None
        True
    """
    parts = []
    tested = [rs for rs in rule_sets if getattr(rs, "p_value", None) is not None]
    if tested:
        n = sum(rs.p_value <= alpha for rs in tested)
        line = f"{_count(n, len(tested))} beat the search on shuffled targets at {alpha:g}"
        parts.append(line + (f", {permutations} permutations" if permutations is not None else ""))
    held = [rs for rs in rule_sets if getattr(rs, "held_out", None) is not None]
    if held:
        n = sum(rs.held_out.p_value <= alpha for rs in held)
        parts.append(f"{_count(n, len(held))} hold on the held-out rows at {alpha:g} (Holm-adjusted)")
    return "; ".join(parts) if parts else None


def noise_message(rule_sets: Sequence[Any], *, alpha: float = 0.05, permutations: int | None = None) -> str | None:
    """The warning's text when the evidence computed for ``rule_sets`` shows none of them apart from noise: no
    ``p_value <= alpha`` (where computed, and where ``permutations`` allow one: ``1 / (permutations + 1) <= alpha``)
    and no held-out ``p_value <= alpha`` (where computed); ``None`` otherwise.

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> print(noise_message([RuleSet((), 10, 0.3, 0.1, p_value=0.4)]))  # doctest: +NORMALIZE_WHITESPACE
        None of the 1 rule sets beats the best fitness the same search finds on shuffled targets at 0.05: they are
        not distinguishable from what the search finds in noise.
    """
    found = list(rule_sets)
    reasons = []
    tested = [rs for rs in found if getattr(rs, "p_value", None) is not None]
    if permutations is not None and 1.0 / (permutations + 1) > alpha:
        tested = []  # too few permutations to reach alpha: no p-value can say "noise" or not
    if tested and not any(rs.p_value <= alpha for rs in tested):
        reasons.append(
            f"None of the {len(tested)} rule sets beats the best fitness the same search finds on shuffled targets "
            f"at {alpha:g}"
        )
    held = [rs for rs in found if getattr(rs, "held_out", None) is not None]
    if held and not any(rs.held_out.p_value <= alpha for rs in held):
        reasons.append(
            f"none of the {len(held)} rule sets selects more target rows than the base rate on the held-out rows "
            f"at {alpha:g} (Holm-adjusted)"
        )
    if not reasons:
        return None
    text = "; ".join(reasons)
    return text[0].upper() + text[1:] + ": they are not distinguishable from what the search finds in noise."


def warn_noise(
    rule_sets: Sequence[Any], *, alpha: float = 0.05, permutations: int | None = None, stacklevel: int = 2
) -> str | None:
    """Emit :func:`noise_message` as one ``UserWarning`` when there is one; returns the message.

    Example:
        >>> from torch_amore.rules.rules import RuleSet
        >>> warn_noise([RuleSet((), 10, 0.9, 0.5, p_value=0.01)]) is None
        True
    """
    message = noise_message(rule_sets, alpha=alpha, permutations=permutations)
    if message is not None:
        warnings.warn(message, UserWarning, stacklevel=stacklevel + 1)
    return message
