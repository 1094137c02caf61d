"""Support, confidence and fitness of a fixed rule set as torchmetrics metrics, for streaming (validation) data.

``update(x, target)`` counts the rule set on a batch in states summed over batches and DDP processes, and
``compute()`` turns the counts into the criterion (:mod:`torch_amore.rules.metrics`). In a LightningModule::

    self.rule_fitness = RuleFitness(rule_set)
    ...
    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.rule_fitness(x, self(x).argmax(1) == 3)
        self.log("val/rule_fitness", self.rule_fitness)
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics import Metric, MetricCollection

from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.rules.metrics import as_bool, confidence_compute, fitness_compute, fitness_update
from torch_amore.rules.rules import RuleSet


class _RuleCounts(Metric):
    """Counts of a rule set on streaming data: ``covered``, ``hits`` (target samples covered) and ``n_target``."""

    is_differentiable = False
    higher_is_better = True
    full_state_update = False

    covered: torch.Tensor
    hits: torch.Tensor
    n_target: torch.Tensor

    def __init__(self, rule_set: RuleSet, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(rule_set, RuleSet):
            raise TypeError(f"Expected `rule_set` to be a torch_amore.RuleSet, but got {type(rule_set).__name__}.")
        self.rule_set = rule_set
        for name in ("covered", "hits", "n_target"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, x: ArrayLike, target: MaskLike) -> None:
        """Evaluate the rule set on the batch ``x`` (N, F) and count it against the boolean subgroup ``target``."""
        mask = self.rule_set.mask(x).to(self.covered.device)
        target = as_bool(torch.as_tensor(target, device=mask.device).reshape(-1), "target")
        if target.shape[0] != mask.shape[0]:
            raise ValueError(
                f"Expected `target` to have one entry per row of `x` ({mask.shape[0]}), but got {target.shape[0]}."
            )
        covered, hits, n_target = fitness_update(mask, target)
        self.covered += covered
        self.hits += hits
        self.n_target += n_target


class RuleSupport(_RuleCounts):
    """Number of samples satisfying a rule set, summed over batches and processes.

    Args:
        rule_set: the rule set to measure.
        kwargs: torchmetrics ``Metric`` options (e.g. ``sync_on_compute``), as for :class:`RuleConfidence` and
            :class:`RuleFitness`.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> rs = RuleSet((Rule(0, "x", low=0.5),), support=0, confidence=0.0, fitness=0.0)
        >>> metric = RuleSupport(rs)
        >>> metric.update(torch.tensor([[0.2], [0.7]]), torch.tensor([False, True]))
        >>> metric.update(torch.tensor([[0.9], [0.6]]), torch.tensor([False, True]))
        >>> metric.compute()
        tensor(3)
    """

    def compute(self) -> torch.Tensor:
        return self.covered.clone()


class RuleConfidence(_RuleCounts):
    """Share of the samples satisfying a rule set that lie in the target subgroup (0 while none does); arguments as
    for :class:`RuleSupport`.

    Example:
        Called on a batch, the metric returns the batch's confidence and accumulates it:

        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> metric = RuleConfidence(RuleSet((Rule(0, "x", low=0.5),), support=0, confidence=0.0, fitness=0.0))
        >>> [float(metric(torch.tensor([[x]]), torch.tensor([t]))) for x, t in ((0.7, True), (0.9, False), (0.6, True))]
        [1.0, 0.0, 1.0]
        >>> metric.compute()
        tensor(0.6667, dtype=torch.float64)
    """

    plot_lower_bound = 0.0
    plot_upper_bound = 1.0

    def compute(self) -> torch.Tensor:
        return confidence_compute(self.covered, self.hits)


class RuleFitness(_RuleCounts):
    """(target - other samples satisfying a rule set) / target samples (0 while no target sample was seen); arguments
    as for :class:`RuleSupport`.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> metric = RuleFitness(RuleSet((Rule(0, "x", low=0.5),), support=0, confidence=0.0, fitness=0.0))
        >>> metric.update(torch.tensor([[0.9]]), torch.tensor([False]))
        >>> metric.compute()  # no target sample yet
        tensor(0., dtype=torch.float64)
        >>> metric.update(torch.tensor([[0.2], [0.7], [0.6]]), torch.tensor([True, True, True]))
        >>> metric.compute()
        tensor(0.3333, dtype=torch.float64)
    """

    plot_upper_bound = 1.0

    def compute(self) -> torch.Tensor:
        return fitness_compute(self.covered, self.hits, self.n_target)


class RuleSetMetrics(MetricCollection):
    """Support, confidence and fitness of one rule set, updated together (one rule evaluation per batch).

    Args:
        rule_set: the rule set to measure.
        prefix: prepended to the keys ``support``, ``confidence``, ``fitness`` (e.g. ``"val/rule_"``).
        postfix: appended to the keys.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> rs = RuleSet((Rule(0, "x", low=0.5),), support=0, confidence=0.0, fitness=0.0)
        >>> metrics = RuleSetMetrics(rs, prefix="val/")
        >>> metrics.update(torch.tensor([[0.2], [0.7], [0.9]]), torch.tensor([True, True, False]))
        >>> {k: round(float(v), 4) for k, v in metrics.compute().items()}
        {'val/confidence': 0.5, 'val/fitness': 0.0, 'val/support': 2.0}
    """

    def __init__(self, rule_set: RuleSet, *, prefix: str | None = None, postfix: str | None = None) -> None:
        super().__init__(
            {
                "support": RuleSupport(rule_set),
                "confidence": RuleConfidence(rule_set),
                "fitness": RuleFitness(rule_set),
            },
            prefix=prefix,
            postfix=postfix,
            compute_groups=[["support", "confidence", "fitness"]],
        )
