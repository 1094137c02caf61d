"""The one source of the paper's rule-quality criteria and the measures derived from the same counts, with
``hits = sum(mask & target)``, ``T`` target and ``N`` samples: support ``sum(mask)``, confidence ``hits / support``,
fitness ``(2 * hits - support) / T``, recall ``hits / T`` (also fitness's optimistic bound) and lift
``confidence / (T / N)``. Functional forms take boolean ``mask`` and ``target`` tensors and return 0-dim tensors; the
count forms take the counts.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any, NamedTuple

import torch

#: The error of a fitness asked of a data set without target samples.
_NO_TARGET = "Expected `target` to select at least one sample: fitness divides by the subgroup size."


class RuleMetrics(NamedTuple):
    """Support, confidence and fitness of one rule set on one data set."""

    support: int
    confidence: float
    fitness: float


def as_bool(x: torch.Tensor, name: str) -> torch.Tensor:
    """``x`` as a (N,) boolean tensor; ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    if not isinstance(x, torch.Tensor):
        x = torch.as_tensor(x)
    if x.dtype != torch.bool:
        raise TypeError(f"Expected `{name}` to be a boolean tensor, but got dtype {x.dtype}.")
    if x.ndim != 1:
        raise ValueError(f"Expected `{name}` to have shape (N,), but got shape {tuple(x.shape)}.")
    return x


def check_pair(mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``mask`` and ``target`` as boolean tensors of the same length (see :func:`as_bool`)."""
    mask, target = as_bool(mask, "mask"), as_bool(target, "target")
    if mask.shape != target.shape:
        raise ValueError(
            f"Expected `mask` and `target` of the same length, but got {mask.shape[0]} and {target.shape[0]}."
        )
    return mask, target


def fitness_update(mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(samples under the rule, target samples under the rule, target samples)."""
    return mask.sum(), (mask & target).sum(), target.sum()


def confidence_ratio(hits: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
    """``hits / support`` in float64, elementwise, and NaN where ``support`` is 0 (no comparison holds there, so an
    empty rule set never counts as confident): the searches' tensor form of :func:`confidence`.

    Example:
        >>> import torch
        >>> confidence_ratio(torch.tensor([3, 0]), torch.tensor([4, 0])).tolist()
        [0.75, nan]
    """
    return hits.to(torch.float64) / support.to(torch.float64)


def confidence_compute(covered: torch.Tensor, hits: torch.Tensor) -> torch.Tensor:
    """``hits / covered`` in float64 (0 where nothing is covered), elementwise."""
    ratio = confidence_ratio(hits, covered)
    return torch.where(covered > 0, ratio, torch.zeros_like(ratio))


def fitness_compute(covered: torch.Tensor, hits: torch.Tensor, n_target: torch.Tensor) -> torch.Tensor:
    """``(2 * hits - covered) / n_target`` in float64 (0 without target samples), elementwise."""
    covered, hits, n_target = (t.to(torch.float64) for t in (covered, hits, n_target))
    return torch.where(n_target > 0, fitness_value(hits, covered) / n_target.clamp(min=1), torch.zeros_like(covered))


def confidence_of_counts(hits: int, support: int) -> float:
    """Confidence from counts: ``hits / support`` (0 for an empty rule set); the searches' form of :func:`confidence`.

    Example:
        >>> confidence_of_counts(3, 4), confidence_of_counts(0, 0)
        (0.75, 0.0)
    """
    return hits / support if support else 0.0


def fitness_value(hits: Any, support: Any) -> Any:
    """The integer the searches rank by, ``2 * hits - support``: the target samples covered minus the others
    (``fitness * n_target``), on ints or integer tensors alike.

    Example:
        >>> fitness_value(3, 4)
        2
    """
    return 2 * hits - support


def fitness_bound(hits: Any) -> Any:
    """The optimistic estimate of :func:`fitness_value`: ``2 * hits - support <= hits`` for a rule set with ``hits``
    target samples and for every rule set that adds conditions to it (:func:`recall` in fitness units).

    Example:
        >>> fitness_bound(3) >= max(fitness_value(3, support) for support in range(3, 10))
        True
    """
    return hits


def fitness_of_counts(hits: int, support: int, n_target: int) -> float:
    """Fitness from counts: ``(hits - (support - hits)) / n_target`` (0 without target samples); the searches' form
    of :func:`fitness`.

    Example:
        >>> fitness_of_counts(3, 4, 5)
        0.4
    """
    return fitness_value(hits, support) / n_target if n_target else 0.0


def recall(hits: int, n_target: int) -> float:
    """Share of the target subgroup that a rule set covers, ``hits / n_target`` (0 without target samples); also the
    optimistic bound on its fitness and on that of every rule set below it (:func:`fitness_bound`).

    Example:
        >>> recall(3, 4), recall(0, 0)
        (0.75, 0.0)
    """
    return hits / n_target if n_target else 0.0


def hits_of_rates(confidence: float, support: int) -> int:
    """A rule set's target samples, given back from its confidence and support (the nearest integer to their
    product: confidence is ``hits / support`` rounded to a float).

    Example:
        >>> hits_of_rates(2 / 3, 3)
        2
    """
    return int(round(confidence * support))


def base_rate(n_target: Any, n_samples: Any) -> Any:
    """The target's share of the samples, ``n_target / n_samples`` (0 without samples): a float from ints, or on the
    device from float tensors (no host sync).

    Example:
        >>> import torch
        >>> base_rate(3, 12), base_rate(torch.tensor(3.0), torch.tensor(12.0)).item()
        (0.25, 0.25)
    """
    if isinstance(n_samples, torch.Tensor):
        return n_target / n_samples.clamp(min=1.0)
    return n_target / max(1, n_samples)


def lift(confidence: float, rate: float | None) -> float:
    """A rule set's confidence over the target's base rate (:func:`base_rate`): how many times likelier the target is
    under the rule set than overall; NaN where the base rate is 0 or unknown (``None``).

    Example:
        >>> lift(0.75, 0.25), lift(0.75, None)
        (3.0, nan)
    """
    return confidence / rate if rate else math.nan


def support(mask: torch.Tensor) -> torch.Tensor:
    """Number of samples satisfying the rule set.

    Example:
        >>> import torch
        >>> support(torch.tensor([True, False, True]))
        tensor(2)
    """
    return as_bool(mask, "mask").sum()


def confidence(mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Share of the samples satisfying the rule set that belong to the target subgroup (0 for an empty mask).

    Example:
        >>> import torch
        >>> confidence(torch.tensor([True, True, False, True]), torch.tensor([True, False, False, True]))
        tensor(0.6667, dtype=torch.float64)
    """
    mask, target = check_pair(mask, target)
    return confidence_compute(mask.sum(), (mask & target).sum())


def fitness(mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(target samples under the rule - other samples under the rule) / target samples; at most 1.

    Example:
        >>> import torch
        >>> mask = torch.tensor([True, True, False, True])
        >>> fitness(mask, torch.tensor([True, False, True, True])), fitness(mask, ~mask)
        (tensor(0.3333, dtype=torch.float64), tensor(-3., dtype=torch.float64))
    """
    mask, target = check_pair(mask, target)
    if not bool(target.any()):
        raise ValueError(_NO_TARGET)
    return fitness_compute(*fitness_update(mask, target))


def rule_metrics(mask: torch.Tensor, target: torch.Tensor) -> RuleMetrics:
    """All three criteria as Python numbers.

    Example:
        >>> import torch
        >>> rule_metrics(torch.tensor([True, True, False, True]), torch.tensor([True, False, True, True]))
        RuleMetrics(support=3, confidence=0.6666666666666666, fitness=0.3333333333333333)
    """
    covered, hits, n_target = fitness_update(*check_pair(mask, target))
    if int(n_target) == 0:
        raise ValueError(_NO_TARGET)
    return RuleMetrics(
        support=int(covered),
        confidence=float(confidence_compute(covered, hits)),
        fitness=float(fitness_compute(covered, hits, n_target)),
    )


def wilson_interval(hits: float, n: float, level: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of the proportion ``hits / n`` at confidence ``level`` ((nan, nan) when n = 0);
    ``n`` may be an effective sample size (and ``hits`` fractional). The interval holds ``hits / n``: it ends at
    exactly 0 when ``hits`` is 0 and at exactly 1 when ``hits`` is ``n`` (rounding would leave 1 - 1e-16).

    Example:
        >>> low, high = wilson_interval(45, 50)
        >>> round(low, 4), round(high, 4)
        (0.7864, 0.9565)
        >>> wilson_interval(138, 138)[1], wilson_interval(0, 138)[0]
        (1.0, 0.0)
    """
    if n <= 0:
        return math.nan, math.nan
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = hits / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if hits <= 0 else min(p, max(0.0, centre - half))
    high = 1.0 if hits >= n else max(p, min(1.0, centre + half))
    return low, high
