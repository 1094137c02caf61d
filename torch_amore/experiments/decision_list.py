"""A decision list: rule sets read in order as ``IF r1 THEN target ELSE IF r2 THEN target ... ELSE not target``, the
result of :func:`torch_amore.experiments.protocol.sequential_covering`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.data import validation as V
from torch_amore.rules import serialization as S
from torch_amore.rules.metrics import (
    RuleMetrics,
    confidence_of_counts,
    fitness_of_counts,
    hits_of_rates,
    recall,
    rule_metrics,
)
from torch_amore.rules.rules import RuleSet, load_rule_sets

__all__ = ["DecisionList"]


@dataclass(frozen=True)
class DecisionList:
    """An ordered list of rule sets read as ``IF r1 THEN target ELSE IF r2 THEN target ... ELSE not target``.

    Entry ``i``'s metrics are measured on the samples no earlier entry covers (the data it was extracted from).

    Attributes:
        rule_sets: the entries, in order.
        n_samples: samples in the data the list was built on.
        n_target: target samples in that data.
        target_name: name of the subgroup in the printed form.

    Example:
        >>> import torch
        >>> from torch_amore import Rule
        >>> X = torch.tensor([[0.1], [0.5], [0.7], [0.9]])
        >>> target = torch.tensor([False, True, True, True])
        >>> first = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, target)
        >>> rest = X[:2], target[:2]
        >>> second = RuleSet.from_rules([Rule(0, "x", low=0.4)], *rest)
        >>> dl = DecisionList((first, second), n_samples=4, n_target=3)
        >>> print(dl)
        IF x >= 0.65 THEN target  (support=2, confidence=1.000, fitness=0.667)
        ELSE IF x >= 0.4 THEN target  (support=1, confidence=1.000, fitness=1.000)
        ELSE not target
        covers 3 of 3 target samples (coverage=1.000); support=3, confidence=1.000, fitness=1.000
        >>> dl.coverage, dl.hits
        (1.0, (2, 1))
        >>> dl.assign(torch.tensor([[0.9], [0.5], [0.1]])).tolist()
        [0, 1, -1]
    """

    rule_sets: tuple[RuleSet, ...]
    n_samples: int
    n_target: int
    target_name: str = "target"

    def __post_init__(self) -> None:
        object.__setattr__(self, "rule_sets", tuple(self.rule_sets))

    def __len__(self) -> int:
        return len(self.rule_sets)

    def __iter__(self) -> Iterator[RuleSet]:
        return iter(self.rule_sets)

    def __getitem__(self, i: int) -> RuleSet:
        return self.rule_sets[i]

    @property
    def hits(self) -> tuple[int, ...]:
        """Target samples newly covered by each entry."""
        return tuple(hits_of_rates(r.confidence, r.support) for r in self.rule_sets)

    @property
    def support(self) -> int:
        """Samples covered by the list."""
        return int(sum(r.support for r in self.rule_sets))

    @property
    def covered_target(self) -> int:
        """Target samples covered by the list."""
        return int(sum(self.hits))

    @property
    def coverage(self) -> float:
        """Share of the target subgroup covered by the list."""
        return recall(self.covered_target, self.n_target)

    @property
    def confidence(self) -> float:
        """Support-weighted confidence of the entries (= share of target among the covered samples)."""
        return confidence_of_counts(self.covered_target, self.support)

    @property
    def fitness(self) -> float:
        """Fitness of the covered region (the union of the entries) on the data the list was built on:
        ``(2 * covered_target - support) / n_target``, what :meth:`evaluate` gives on those rows. (Each entry's own
        fitness divides by the target samples still uncovered when it was found, so they do not average to this.)"""
        return fitness_of_counts(self.covered_target, self.support, self.n_target)

    def assign(self, X: ArrayLike) -> torch.Tensor:
        """(N,) int64: index of the first entry covering each row, -1 where none does."""
        out = None
        for i in reversed(range(len(self.rule_sets))):
            m = self.rule_sets[i].mask(X)
            out = torch.full_like(m, -1, dtype=torch.long) if out is None else out
            out[m] = i
        if out is None:
            return torch.full((X.shape[0],), -1, dtype=torch.long)
        return out

    def mask(self, X: ArrayLike) -> torch.Tensor:
        """Boolean (N,): rows covered by some entry."""
        return self.assign(X) >= 0

    def evaluate(self, X: ArrayLike, target: MaskLike) -> RuleMetrics:
        """Support, confidence and fitness of the covered region (the union of the entries) on any data."""
        if not self.rule_sets:
            raise ValueError("The decision list is empty: it covers no sample.")
        target = V.align_rows(target, X, "target")
        mask = self.mask(X)
        if hasattr(target, "to_numpy"):
            target = target.to_numpy()
        t = torch.as_tensor(np.array(target) if not isinstance(target, torch.Tensor) else target)
        t = (t if t.dtype == torch.bool else t != 0).to(mask.device).reshape(-1)
        return rule_metrics(mask, t)

    def format(self, precision: int = 3) -> str:
        """The list as text: one ``IF``/``ELSE IF`` line per entry, ``ELSE not <target>``, then the totals."""
        if not self.rule_sets:
            return f"(empty decision list: no rule set for {self.target_name})"
        lines = [r.format(precision) if i == 0 else "ELSE " + r.format(precision) for i, r in enumerate(self)]
        lines.append(f"ELSE not {self.target_name}")
        lines.append(
            f"covers {self.covered_target} of {self.n_target} target samples (coverage={self.coverage:.3f}); "
            f"support={self.support}, confidence={self.confidence:.3f}, fitness={self.fitness:.3f}"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict; :meth:`from_dict` gives back an equal decision list."""
        return {
            "rule_sets": [r.to_dict() for r in self.rule_sets],
            "n_samples": int(self.n_samples),
            "n_target": int(self.n_target),
            "target_name": self.target_name,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DecisionList:
        """The decision list written by :meth:`to_dict`, every field checked: a ``ValueError`` names the bad field's
        path (``rule_sets[2].rules[0].feature``)."""
        data = S.expect_mapping(data)
        S.expect_keys(data, ("rule_sets", "n_samples", "n_target"), ("target_name",))
        n_samples = S.expect_int(data["n_samples"], "n_samples", low=0)
        n_target = S.expect_int(data["n_target"], "n_target", low=0, high=n_samples + 1)
        out = cls(
            rule_sets=tuple(load_rule_sets(data["rule_sets"])),
            n_samples=n_samples,
            n_target=n_target,
            target_name=S.expect_str(data.get("target_name", "target"), "target_name"),
        )
        # the entries are disjoint parts of the n_samples rows: their counts must fit in the list's totals
        if out.covered_target > n_target:
            raise S.FieldError(
                "n_target", f"the entries cover {out.covered_target} target samples, but n_target is {n_target}."
            )
        if out.support - out.covered_target > n_samples - n_target:  # hence also support <= n_samples
            raise S.FieldError(
                "n_samples",
                f"the entries cover {out.support} samples, {out.support - out.covered_target} of them not target, "
                f"but n_samples={n_samples} with n_target={n_target} leaves {n_samples - n_target} non-target samples.",
            )
        return out
