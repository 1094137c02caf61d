"""A rule set's numbers on rows the search did not see (:class:`HeldOut`), with an exact interval and a p-value.

On the rows it saw, the search's choice makes a rule set's numbers optimistic; on held-out rows it is a fixed
hypothesis: ``confidence_interval`` is the Clopper-Pearson interval of its confidence, ``raw_p_value`` the one-sided
exact binomial test of its hits against the held-out base rate, and ``p_value`` that p-value Holm-adjusted over the
rule sets of one call (:func:`holm`).

Example:
    >>> import torch
    >>> mask = torch.tensor([True] * 10 + [False] * 30)
    >>> target = torch.tensor([True] * 8 + [False] * 2 + [True] * 2 + [False] * 28)
    >>> h = held_out_metrics([mask], target)[0]
    >>> h.support, h.confidence, round(h.lift, 2), h.base_rate
    (10, 0.8, 3.2, 0.25)
    >>> [round(v, 3) for v in h.confidence_interval], f"{h.p_value:.1e}"
    ([0.444, 0.975], '4.2e-04')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import torch

from torch_amore.rules.metrics import base_rate, confidence_of_counts, fitness_of_counts, lift
from torch_amore.rules.serialization import (
    FieldError,
    expect_float,
    expect_int,
    expect_keys,
    expect_mapping,
    load_items,
)

__all__ = [
    "HeldOut",
    "binomial_p_value",
    "check_level",
    "clopper_pearson",
    "format_p_value",
    "held_out_metrics",
    "holm",
]


def check_level(level: Any, name: str = "level", example: str = "0.95") -> float:
    """``level`` as a float in (0, 1), else a ``TypeError``/``ValueError`` naming ``name`` (with an ``example``).

    Example:
        >>> check_level(0.9)
        0.9
    """
    if isinstance(level, (bool, np.bool_)) or not isinstance(level, (int, float, np.integer, np.floating)):
        # a Python or numpy number, as every numeric option takes (a tensor would be read back from its device)
        raise TypeError(f"Expected `{name}` to be a number in (0, 1) such as {example}, but got {level!r}.")
    value = float(level)
    if not 0.0 < value < 1.0:
        raise ValueError(f"Expected `{name}` to be a number in (0, 1) such as {example}, but got {level}.")
    return value


def clopper_pearson(hits: int, support: int, level: float = 0.95) -> tuple[float, float]:
    """The two-sided Clopper-Pearson interval of a binomial proportion ``hits / support`` at ``level``
    (``(0.0, 1.0)`` for ``support == 0``: nothing is known).

    Example:
        >>> [round(v, 4) for v in clopper_pearson(3, 10)]
        [0.0667, 0.6525]
        >>> clopper_pearson(0, 0)
        (0.0, 1.0)
    """
    from scipy.stats import beta

    if support <= 0:
        return (0.0, 1.0)
    alpha = 1.0 - level
    low = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, support - hits + 1))
    high = 1.0 if hits == support else float(beta.ppf(1 - alpha / 2, hits + 1, support - hits))
    return (low, high)


def binomial_p_value(hits: int, support: int, rate: float) -> float:
    """One-sided exact binomial p-value: the chance of at least ``hits`` successes in ``support`` draws at ``rate``
    (1.0 for ``support == 0``).

    Example:
        >>> round(binomial_p_value(8, 10, 0.25), 6)
        0.000416
    """
    from scipy.stats import binom

    if support <= 0 or hits <= 0:
        return 1.0
    return min(1.0, max(0.0, float(binom.sf(hits - 1, support, rate))))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment of ``p_values`` (family-wise error control over all of them), in their order.

    Example:
        >>> holm([0.01, 0.04, 0.03])
        [0.03, 0.06, 0.06]
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    out = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * float(p_values[i])))
        out[i] = running
    return out


@dataclass(frozen=True)
class HeldOut:
    """A rule set's numbers on held-out rows (see the module's docstring).

    Args:
        support: held-out rows selected by the rule set.
        confidence: share of them in the target subgroup (0 when none is selected).
        fitness: ``(2 * hits - support) / T`` with ``T`` the held-out target rows.
        lift: confidence over the held-out base rate.
        confidence_interval: Clopper-Pearson interval of the confidence at ``level``.
        p_value: the one-sided exact binomial p-value against the base rate, Holm-adjusted over the rule sets of
            the call.
        raw_p_value: the same p-value before the adjustment.
        base_rate: the share of target rows among the held-out rows.
        level: the interval's confidence level.
    """

    support: int
    confidence: float
    fitness: float
    lift: float
    confidence_interval: tuple[float, float]
    p_value: float
    raw_p_value: float
    base_rate: float
    level: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict; :meth:`from_dict` gives back an equal object."""
        out = asdict(self)
        out["confidence_interval"] = list(self.confidence_interval)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> HeldOut:
        """The object of a dict written by :meth:`to_dict`, every field checked (a ``FieldError`` names it): the
        shares in [0, 1], ``confidence_interval`` two of them in order (low <= high), ``level`` in (0, 1).

        Example:
            >>> h = HeldOut(5, 0.6, 0.1, 2.0, (0.15, 0.95), 0.2, 0.1, 0.3)
            >>> HeldOut.from_dict(h.to_dict()) == h
            True
            >>> HeldOut.from_dict({**h.to_dict(), "confidence_interval": [0.95, 0.15]})
            Traceback (most recent call last):
            ...
            torch_amore.data.fields.FieldError: Invalid `confidence_interval`: expected low <= high, but got \
[0.95, 0.15].
        """
        data = expect_mapping(data)
        expect_keys(data, [f.name for f in fields(cls) if f.name != "level"], ("level",))
        unit = {"low": 0.0, "high": 1.0}
        interval = load_items(data["confidence_interval"], lambda v: expect_float(v, "", **unit), "confidence_interval")
        if len(interval) != 2:
            raise FieldError("confidence_interval", f"expected two numbers (low, high), but got {len(interval)}.")
        if interval[0] > interval[1]:
            raise FieldError("confidence_interval", f"expected low <= high, but got {interval}.")
        level = expect_float(data.get("level", 0.95), "level", **unit)
        if not 0.0 < level < 1.0:
            raise FieldError("level", f"expected a number in (0, 1), but got {level}.")
        return cls(
            support=expect_int(data["support"], "support", low=0),
            confidence=expect_float(data["confidence"], "confidence", **unit),
            fitness=expect_float(data["fitness"], "fitness", high=1.0),
            lift=expect_float(data["lift"], "lift", low=0.0),
            confidence_interval=(interval[0], interval[1]),
            p_value=expect_float(data["p_value"], "p_value", **unit),
            raw_p_value=expect_float(data["raw_p_value"], "raw_p_value", **unit),
            base_rate=expect_float(data["base_rate"], "base_rate", **unit),
            level=level,
        )

    def text(self) -> str:
        """``held out: confidence=0.800 (95% CI 0.444-0.975), p=0.0004``.

        Example:
            >>> HeldOut(10, 0.8, 0.1, 3.2, (0.444, 0.975), 0.0004, 0.0004, 0.25).text()
            'held out: confidence=0.800 (95% CI 0.444-0.975), p=0.0004'
        """
        low, high = self.confidence_interval
        pct, p = f"{100 * self.level:g}%", format_p_value(self.p_value)
        return f"held out: confidence={self.confidence:.3f} ({pct} CI {low:.3f}-{high:.3f}), p={p}"


def format_p_value(value: float) -> str:
    """A p-value in 2 significant digits, fixed-point down to 1e-4; one too small for a float (0.0: the binomial
    tail underflowed) as ``<1e-300``, not as a p-value of 0.

    Example:
        >>> format_p_value(0.0123), format_p_value(3e-7), format_p_value(0.0)
        ('0.012', '3.0e-07', '<1e-300')
    """
    if value == 0:
        return "<1e-300"
    return f"{value:.2g}" if value >= 1e-4 else f"{value:.1e}"


def held_out_metrics(masks: Sequence[torch.Tensor], target: torch.Tensor, level: float = 0.95) -> list[HeldOut]:
    """:class:`HeldOut` numbers of rule sets given their boolean ``masks`` on the held-out rows and the ``target``
    there (at least one target row), the p-values Holm-adjusted over all ``masks``.
    """
    n_rows = int(target.shape[0])
    n_target = int(target.sum())
    if n_target == 0:
        raise ValueError("Expected the held-out rows to hold at least one target row, but they hold none.")
    rate = float(base_rate(n_target, n_rows))
    counts = [(int(m.sum()), int((m & target).sum())) for m in masks]
    raw = [binomial_p_value(h, s, rate) for s, h in counts]
    adjusted = holm(raw)
    out = []
    for (s, h), p_raw, p_adj in zip(counts, raw, adjusted):
        conf = confidence_of_counts(h, s)
        out.append(
            HeldOut(
                support=s,
                confidence=conf,
                fitness=fitness_of_counts(h, s, n_target),
                lift=float(lift(conf, rate)),
                confidence_interval=clopper_pearson(h, s, level),
                p_value=p_adj,
                raw_p_value=p_raw,
                base_rate=rate,
                level=level,
            )
        )
    return out
