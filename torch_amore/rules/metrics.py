"""The paper's three rule-quality criteria: support, confidence and fitness.

Functional forms take a boolean rule ``mask`` (samples satisfying a rule set) and the boolean ``target`` subgroup, and
return 0-dim tensors on the inputs' device. They are the single source of the maths: ``RuleSet.evaluate`` and the
torchmetrics wrappers (:mod:`torch_amore.integrations.metric_classes`) call them.

Definitions (``T`` = number of target samples):

* support    = ``sum(mask)``
* confidence = ``sum(mask & target) / sum(mask)`` (0 when the mask is empty)
* fitness    = ``(sum(mask & target) - sum(mask & ~target)) / T``
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


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


def support_update(mask: torch.Tensor) -> torch.Tensor:
    """Samples under the rule."""
    return mask.sum()


def confidence_update(mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(samples under the rule, target samples under the rule)."""
    return mask.sum(), (mask & target).sum()


def fitness_update(mask: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(samples under the rule, target samples under the rule, target samples)."""
    return mask.sum(), (mask & target).sum(), target.sum()


def confidence_compute(covered: torch.Tensor, hits: torch.Tensor) -> torch.Tensor:
    """``hits / covered`` in float64 (0 where nothing is covered), elementwise."""
    covered, hits = covered.to(torch.float64), hits.to(torch.float64)
    return torch.where(covered > 0, hits / covered.clamp(min=1), torch.zeros_like(covered))


def fitness_compute(covered: torch.Tensor, hits: torch.Tensor, n_target: torch.Tensor) -> torch.Tensor:
    """``(2 * hits - covered) / n_target`` in float64 (0 without target samples), elementwise."""
    covered, hits, n_target = (t.to(torch.float64) for t in (covered, hits, n_target))
    return torch.where(n_target > 0, (2 * hits - covered) / n_target.clamp(min=1), torch.zeros_like(covered))


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


def fitness_of_counts(hits: int, support: int, n_target: int) -> float:
    """Fitness from counts: ``(hits - (support - hits)) / n_target`` (0 without target samples); the searches' form
    of :func:`fitness`.

    Example:
        >>> fitness_of_counts(3, 4, 5)
        0.4
    """
    return fitness_value(hits, support) / n_target if n_target else 0.0


def support(mask: torch.Tensor) -> torch.Tensor:
    """Number of samples satisfying the rule set.

    Example:
        >>> import torch
        >>> support(torch.tensor([True, False, True]))
        tensor(2)
    """
    return support_update(as_bool(mask, "mask"))


def confidence(mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Share of the samples satisfying the rule set that belong to the target subgroup (0 for an empty mask).

    Example:
        >>> import torch
        >>> confidence(torch.tensor([True, True, False, True]), torch.tensor([True, False, False, True]))
        tensor(0.6667, dtype=torch.float64)
    """
    mask, target = check_pair(mask, target)
    return confidence_compute(*confidence_update(mask, target))


def fitness(mask: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(target samples under the rule - other samples under the rule) / target samples; at most 1.

    Example:
        >>> import torch
        >>> fitness(torch.tensor([True, True, False, True]), torch.tensor([True, False, True, True]))
        tensor(0.3333, dtype=torch.float64)
    """
    mask, target = check_pair(mask, target)
    if not bool(target.any()):
        raise ValueError("Expected `target` to select at least one sample: fitness divides by the subgroup size.")
    return fitness_compute(*fitness_update(mask, target))


def rule_metrics(mask: torch.Tensor, target: torch.Tensor) -> RuleMetrics:
    """All three criteria as Python numbers.

    Example:
        >>> import torch
        >>> rule_metrics(torch.tensor([True, True, False, True]), torch.tensor([True, False, True, True]))
        RuleMetrics(support=3, confidence=0.6666666666666666, fitness=0.3333333333333333)
    """
    mask, target = check_pair(mask, target)
    covered, hits, n_target = fitness_update(mask, target)
    if int(n_target) == 0:
        raise ValueError("Expected `target` to select at least one sample: fitness divides by the subgroup size.")
    return RuleMetrics(
        support=int(covered),
        confidence=float(confidence_compute(covered, hits)),
        fitness=float(fitness_compute(covered, hits, n_target)),
    )
