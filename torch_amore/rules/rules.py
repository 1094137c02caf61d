"""Rule sets (:class:`RuleSet`) of rules (:class:`~torch_amore.rules.rule.Rule`): the objects users hold.

A numeric rule selects ``low <= x < high`` (``-inf``/``+inf`` leave a side open, and the rule prints one-sided,
``age >= 40``); a categorical rule selects ``x == value``. NaN satisfies no rule, and integer columns are compared
exactly. Bounds are stored in the units of the searched data and print in the units ``raw = x * scale + offset`` as
the shortest decimal that maps back to them exactly (:func:`torch_amore.rules.cuts.format_bound`), so what a rule
prints selects what it selects. ``to_dict``/``to_json`` write plain JSON with a ``format_version``;
``from_dict``/``from_json`` check every field and name a bad one's path.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch

from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.data.validation import align_rows, to_mask
from torch_amore.rules import serialization as S
from torch_amore.rules.evidence import evidence_text
from torch_amore.rules.held_out import HeldOut
from torch_amore.rules.metrics import RuleMetrics, rule_metrics
from torch_amore.rules.rule import Rule


@dataclass(frozen=True)
class RuleSet:
    """A conjunction of rules with its support, confidence and fitness on the data it was extracted from.

    Args:
        rules: the conditions, in the order the search added them.
        support: number of samples satisfying all rules.
        confidence: share of those samples in the target subgroup.
        fitness: (target - non-target samples satisfying the rules) / target samples.
        ratios: probability ratio of each rule at the step it was added (eq. ratio_approx).
        target_name: name of the subgroup in the printed form.
        optimum: the highest fitness on the search's grid at the same ``max_length`` and ``min_support``, when it
            was computed; ``None`` otherwise (cuts off the grid may exceed it).
        held_out: its numbers on rows the search did not see (:class:`torch_amore.rules.held_out.HeldOut`), with
            ``extract_rules(..., holdout=...)`` or ``holdout_rows=``; ``None`` otherwise.
        p_value: the search-aware p-value of ``extract_rules(..., permutations=P)``: the share of P searches on
            shuffled targets whose best fitness reaches this rule set's, ``(1 + count) / (P + 1)``; ``None`` otherwise.
        stability: with ``extract_rules(..., stability=B)``, the share of B half-samples whose search returns a rule
            set selecting nearly the same rows (Jaccard >= 0.8); ``None`` otherwise.

    Example:
        >>> import torch
        >>> X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
        >>> target = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, target)
        >>> print(rs)
        IF x >= 0.65 THEN target  (support=2, confidence=1.000, fitness=1.000)
        >>> RuleSet.from_json(rs.to_json()) == rs
        True
        >>> rs.mask(X).tolist(), rs.features
        ([False, False, True, True], (0,))
        >>> rs.evaluate(X[:3], target[:3])
        RuleMetrics(support=1, confidence=1.0, fitness=1.0)
        >>> print(rs.with_units(scale=[10.0], offset=[5.0]))
        IF x >= 11.5 THEN target  (support=2, confidence=1.000, fitness=1.000)
    """

    rules: tuple[Rule, ...]
    support: int
    confidence: float
    fitness: float
    ratios: tuple[float, ...] = field(default=(), compare=False)
    target_name: str = field(default="target", compare=False)
    optimum: float | None = field(default=None, compare=False)
    held_out: HeldOut | None = field(default=None, compare=False)
    p_value: float | None = field(default=None, compare=False)
    stability: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "rules", tuple(self.rules))
        object.__setattr__(self, "ratios", tuple(float(r) for r in self.ratios))
        for i, rule in enumerate(self.rules):
            if not isinstance(rule, Rule):
                raise TypeError(f"Expected `rules[{i}]` to be a Rule, but got {type(rule).__name__}.")

    @classmethod
    def from_rules(
        cls, rules: Sequence[Rule], X: ArrayLike, target: MaskLike, *, target_name: str = "target"
    ) -> RuleSet:
        """Build a rule set and measure it on ``(X, target)``."""
        rules = tuple(rules)
        metrics = cls(rules, 0, 0.0, 0.0).evaluate(X, target)
        return cls(rules, metrics.support, metrics.confidence, metrics.fitness, target_name=target_name)

    def __len__(self) -> int:
        return len(self.rules)

    def optimum_text(self, precision: int = 3) -> str | None:
        """What this rule set's fitness means beside :attr:`optimum`, the best fitness on the search's coarse grid
        (``None`` when not computed); above it, the search's polished cuts found more than the grid can express.

        Example:
            >>> RuleSet((), 10, 0.9, 0.78, optimum=0.76).optimum_text()
            "fitness 0.780, so the search's polished cuts beat the best rule set on the coarse grid (0.760)"
            >>> RuleSet((), 10, 0.9, 0.74, optimum=0.76).optimum_text()
            'fitness 0.740, below the best rule set on the coarse grid (0.760)'
        """
        if self.optimum is None:
            return None
        fit, opt = f"{self.fitness:.{precision}f}", f"{self.optimum:.{precision}f}"
        if self.fitness > self.optimum:
            return f"fitness {fit}, so the search's polished cuts beat the best rule set on the coarse grid ({opt})"
        if self.fitness == self.optimum:
            return f"fitness {fit}, as good as the best rule set on the coarse grid"
        return f"fitness {fit}, below the best rule set on the coarse grid ({opt})"

    @property
    def features(self) -> tuple[int, ...]:
        """The feature indices of the rules, in the rules' order."""
        return tuple(r.feature for r in self.rules)

    def mask(self, X: ArrayLike) -> torch.Tensor:
        """Boolean (N,) tensor of the rows satisfying every rule."""
        if not self.rules:
            n = X.shape[0]
            device = X.device if isinstance(X, torch.Tensor) else "cpu"
            return torch.ones(n, dtype=torch.bool, device=device)
        return functools.reduce(torch.Tensor.logical_and_, (rule.mask(X) for rule in self.rules))

    def evaluate(self, X: ArrayLike, target: MaskLike) -> RuleMetrics:
        """Support, confidence and fitness of this rule set on any data (e.g. a test split); ``target`` is a mask
        of booleans (or 0/1 numbers), one per row of ``X``, as :func:`torch_amore.extract_rules` takes it."""
        mask = self.mask(X)  # a TypeError naming `X` for what is not a matrix
        if not isinstance(target, torch.Tensor):  # a pandas Series by the index of a DataFrame X
            target = align_rows(target, X, "target")
        target = to_mask(target, mask.shape[0], "target")
        return rule_metrics(mask, target.to(mask.device))

    def with_units(self, scale: Sequence[float] | None = None, offset: Sequence[float] | None = None) -> RuleSet:
        """A copy whose rules print in original units; ``scale``/``offset`` are indexed by feature."""
        rules = tuple(
            replace(
                r,
                scale=float(scale[r.feature]) if scale is not None else r.scale,
                offset=float(offset[r.feature]) if offset is not None else r.offset,
            )
            for r in self.rules
        )
        return replace(self, rules=rules)

    def renumbered(self, where: Mapping[int, int] | Sequence[int]) -> RuleSet:
        """A copy whose rules' feature indices are mapped through ``where`` (e.g. into and out of a copy of the
        columns the rules use); everything else kept.

        Example:
            >>> from torch_amore.rules.rule import Rule
            >>> rs = RuleSet((Rule(7, "x7", low=0.5), Rule(2, "x2", high=1.0)), 10, 0.9, 0.4)
            >>> rs.renumbered({7: 1, 2: 0}).features, rs.renumbered({7: 1, 2: 0}).renumbered([2, 7]) == rs
            ((1, 0), True)
        """
        return replace(self, rules=tuple(replace(r, feature=where[r.feature]) for r in self.rules))

    def format(self, precision: int | None = None) -> str:
        """``IF <rules> THEN <target>  (support=..., confidence=..., fitness=...)``, bounds as :meth:`Rule.format`
        prints them (``precision`` changes nothing)."""
        del precision
        cond = " AND ".join(r.format() for r in self.rules) if self.rules else "TRUE"
        evidence = evidence_text(self)  # held-out numbers, p-value, stability: when computed
        return (
            f"IF {cond} THEN {self.target_name}  (support={self.support}, confidence={self.confidence:.3f}, "
            f"fitness={self.fitness:.3f}{'; ' + evidence if evidence else ''})"
        )

    def __str__(self) -> str:
        return self.format()

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict with a ``format_version`` and the ``torch_amore_version`` that wrote it;
        :meth:`from_dict` gives back an equal rule set (ratios and target name included)."""
        out = {
            **S.version_fields(),
            "rules": [r.to_dict() for r in self.rules],
            "support": int(self.support),
            "confidence": float(self.confidence),
            "fitness": float(self.fitness),
            "ratios": [float(r) for r in self.ratios],
            "target_name": self.target_name,
        }
        for f in _extra_fields():  # optional fields (e.g. added by a strategy) travel as they are
            value = getattr(self, f.name)
            out[f.name] = value.to_dict() if isinstance(value, HeldOut) else value
        return out

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as a JSON string (``kwargs`` go to :func:`json.dumps`, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), **kwargs)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, n_features: int | None = None) -> RuleSet:
        """The rule set written by :meth:`to_dict` (files without ``format_version`` too), every field checked: a
        ``ValueError`` names the bad field's path (``rules[0].feature``).

        Example:
            >>> RuleSet.from_dict({"rules": [{"feature": 0, "name": "x", "low": 0.5}], "support": -5,
            ...                    "confidence": 1.0, "fitness": 1.0})
            Traceback (most recent call last):
            ...
            torch_amore.data.fields.FieldError: Invalid `support`: expected an integer >= 0, but got -5.
        """
        data = S.expect_mapping(data)
        extra = {f.name: f for f in _extra_fields()}
        optional = ("ratios", "target_name", "format_version", "torch_amore_version", *extra)
        S.expect_keys(data, ("rules", "support", "confidence", "fitness"), optional)
        S.expect_format_version(data)
        if "torch_amore_version" in data:
            S.expect_str(data["torch_amore_version"], "torch_amore_version")
        rules = S.load_items(data["rules"], lambda r: Rule.from_dict(r, n_features=n_features), "rules")
        ratios = S.load_items(data.get("ratios", []), lambda r: S.expect_float(r, "", low=0.0, finite=False), "ratios")
        kwargs = {name: _extra_value(data[name], name) for name in extra if name in data}
        return cls(
            rules=tuple(rules),
            support=S.expect_int(data["support"], "support", low=0),
            confidence=S.expect_float(data["confidence"], "confidence", low=0.0, high=1.0),
            fitness=S.expect_float(data["fitness"], "fitness", high=1.0),
            ratios=tuple(ratios),
            target_name=S.expect_str(data.get("target_name", "target"), "target_name"),
            **kwargs,
        )

    @classmethod
    def from_json(cls, text: str, *, n_features: int | None = None) -> RuleSet:
        """The rule set in a JSON string written by :meth:`to_json` (checked as by :meth:`from_dict`)."""
        return cls.from_dict(S.parse_json(text), n_features=n_features)


_CORE_FIELDS = ("rules", "support", "confidence", "fitness", "ratios", "target_name")


def _extra_fields() -> list[Any]:
    """RuleSet's optional dataclass fields beyond the core ones (each has a default)."""
    return [f for f in fields(RuleSet) if f.name not in _CORE_FIELDS]


#: The bounds of the optional numeric fields: ``p_value`` and ``stability`` are shares, ``optimum`` a fitness.
_EXTRA_BOUNDS = {"p_value": (0.0, 1.0), "stability": (0.0, 1.0), "optimum": (-math.inf, 1.0)}


def _extra_value(value: Any, path: str) -> Any:
    """An optional field's value, ``None`` or: the held-out numbers' dict for ``held_out``; a finite number within
    its bounds for ``p_value`` and ``stability`` ([0, 1]) and ``optimum`` (<= 1, a fitness); for any other field, a
    string or a finite number."""
    if value is None:
        return None
    if path == "held_out":
        with S.at_path(path):
            return HeldOut.from_dict(value)
    if path in _EXTRA_BOUNDS:
        low, high = _EXTRA_BOUNDS[path]
        return S.expect_float(value, path, low=low, high=high)
    if isinstance(value, str):
        return value
    return S.expect_float(value, path)


def load_rule_sets(items: Any, *, n_features: int | None = None, path: str = "rule_sets") -> list[RuleSet]:
    """A list of rule sets from their :meth:`RuleSet.to_dict` dicts (e.g. a ``rules.json`` written by the CLI),
    every field checked: a ``ValueError`` names the bad field's path, ``rule_sets[2].rules[0].feature``.

    Example:
        >>> rs = RuleSet((Rule(0, "x", low=0.5),), support=3, confidence=1.0, fitness=0.5)
        >>> load_rule_sets([rs.to_dict()]) == [rs]
        True
        >>> bad = rs.to_dict()
        >>> bad["rules"][0]["feature"] = 1.9
        >>> load_rule_sets([rs.to_dict(), bad])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torch_amore.data.fields.FieldError: Invalid `rule_sets[1].rules[0].feature`: expected an integer...
    """
    return S.load_items(items, lambda d: RuleSet.from_dict(d, n_features=n_features), path)
