"""RegionalExplanation: the result of :class:`torch_amore.RegionalRuleExplainer` — rules plus what they were
extracted on, convertible to text, HTML, JSON and a DataFrame, and measurable on new data."""

from __future__ import annotations

import html
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from torch_amore.distinct import MAX_JACCARD, distinct_rule_sets
from torch_amore.metrics import RuleMetrics
from torch_amore.rules import RuleSet

_FORMAT = "torch_amore.RegionalExplanation"
_VERSION = 1


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return repr(value)


@dataclass
class RegionalExplanation:
    """Rule sets describing a subgroup of a model's predictions, best fitness first.

    Args:
        rule_sets: candidate rule sets sorted by fitness (best first); empty when nothing qualifies.
        subgroup: boolean (N,) mask of the explained subgroup on the data the rules were extracted on (``None`` after
            :meth:`from_json`).
        threshold: the probability threshold that defined the subgroup (``None`` for argmax, masks, ranges).
        features: indices of the features the search used.
        feature_names: names of all D features.
        params: extraction parameters and data facts (``n_samples``, ``subgroup_size``, ``layer``, ...).
        features_matrix: the (N, D) tensor the rules were extracted on (``None`` after :meth:`from_json`).
        sample: for local rules, the sample's feature vector (D,).
        message: why the result is empty, when it is.
        selection: the ``FeatureSelection`` when ``select_features=True`` was used.

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
        >>> subgroup = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, subgroup, target_name="predicted 1")
        >>> explanation = RegionalExplanation([rs], subgroup, 0.5, [0], ["x"], {"n_samples": 4, "subgroup_size": 2})
        >>> print(explanation)
        Regional rules for predicted 1 (subgroup: 2 of 4 samples, threshold 0.5)
           #  support  confidence  fitness  rule set
           1        2       1.000    1.000  x >= 0.65
        >>> explanation.evaluate(X, target=subgroup)[0]
        RuleMetrics(support=2, confidence=1.0, fitness=1.0)
    """

    rule_sets: list[RuleSet]
    subgroup: torch.Tensor | None
    threshold: float | None
    features: list[int]
    feature_names: list[str]
    params: dict[str, Any] = field(default_factory=dict)
    features_matrix: torch.Tensor | None = field(default=None, repr=False)
    sample: torch.Tensor | None = field(default=None, repr=False)
    message: str = ""
    selection: Any = field(default=None, repr=False)
    explainer: Any = field(default=None, repr=False, compare=False)
    data_options: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    # ---------------------------------------------------------------------------------------------------------------
    @property
    def best(self) -> RuleSet | None:
        """The rule set with the highest fitness (``None`` when there is none)."""
        return self.rule_sets[0] if self.rule_sets else None

    def __len__(self) -> int:
        return len(self.rule_sets)

    def __iter__(self) -> Iterator[RuleSet]:
        return iter(self.rule_sets)

    def __getitem__(self, index: int) -> RuleSet:
        return self.rule_sets[index]

    @property
    def target_name(self) -> str:
        if self.rule_sets:
            return self.rule_sets[0].target_name
        return str(self.params.get("target_name", "target"))

    # ---------------------------------------------------------------------------------------------------------------
    def _header(self) -> str:
        n, size = self.params.get("n_samples"), self.params.get("subgroup_size")
        facts = []
        if n is not None and size is not None:
            facts.append(f"subgroup: {size} of {n} samples")
        if self.params.get("layer") is not None:
            where = "input of" if self.params.get("layer_input") else "layer"
            facts.append(f"{where} {self.params['layer']}")
        if self.threshold is not None:
            facts.append(f"threshold {self.threshold:.4g}")
        kind = "Local rules" if self.sample is not None or self.params.get("local") else "Regional rules"
        return f"{kind} for {self.target_name}" + (f" ({', '.join(facts)})" if facts else "")

    def distinct(self, *, max_jaccard: float = MAX_JACCARD, min_fitness: float | None = 0.0) -> list[RuleSet]:
        """The rule sets of the default tables: near-duplicates collapsed into the fitter one (covered rows with a
        Jaccard index >= ``max_jaccard``) and, by default, no negative fitness; see :mod:`torch_amore.distinct`.
        :attr:`rule_sets` keeps the full list."""
        X = self.features_matrix
        return distinct_rule_sets(self.rule_sets, X, max_jaccard=max_jaccard, min_fitness=min_fitness)

    def _table(self, distinct: bool) -> list[RuleSet]:
        return self.distinct() if distinct else list(self.rule_sets)

    def format(self, max_rows: int = 10, precision: int = 3, *, distinct: bool = True) -> str:
        """A readable table of the first ``max_rows`` rule sets; ``distinct=False`` lists every rule set found."""
        lines = [self._header()]
        if not self.rule_sets:
            lines.append("  (no rule sets) " + self.message if self.message else "  (no rule sets)")
            return "\n".join(lines)
        shown = self._table(distinct)
        lines.append(f"  {'#':>2}  {'support':>7}  {'confidence':>10}  {'fitness':>7}  rule set")
        for i, rs in enumerate(shown[:max_rows], 1):
            cond = " AND ".join(r.format(precision) for r in rs.rules)
            lines.append(f"  {i:>2}  {rs.support:>7}  {rs.confidence:>10.3f}  {rs.fitness:>7.3f}  {cond}")
        if len(shown) > max_rows:
            lines.append(f"  ... {len(shown) - max_rows} more")
        if len(shown) < len(self.rule_sets):
            lines.append(f"  ({len(self.rule_sets) - len(shown)} near-duplicate or negative-fitness rule sets not "
                         f"shown; format(distinct=False) lists all {len(self.rule_sets)})")  # fmt: skip
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{i}</td><td>{rs.support}</td><td>{rs.confidence:.3f}</td><td>{rs.fitness:.3f}</td>"
            f"<td>{html.escape(' AND '.join(r.format() for r in rs.rules))}</td></tr>"
            for i, rs in enumerate(self._table(True)[:20], 1)
        )
        empty = f"<p>{html.escape(self.message or 'No rule sets.')}</p>" if not self.rule_sets else ""
        return (
            f"<div><p><b>{html.escape(self._header())}</b></p>{empty}"
            "<table><thead><tr><th>#</th><th>support</th><th>confidence</th><th>fitness</th><th>rule set</th></tr>"
            f"</thead><tbody>{rows}</tbody></table></div>"
        )

    # ---------------------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (rules, threshold, features, names, parameters; not the data)."""
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "rule_sets": [rs.to_dict() for rs in self.rule_sets],
            "threshold": self.threshold,
            "features": [int(f) for f in self.features],
            "feature_names": list(self.feature_names),
            "params": _json_safe(self.params),
            "sample": None if self.sample is None else [float(v) for v in self.sample.tolist()],
            "message": self.message,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, explainer: Any = None) -> RegionalExplanation:
        if data.get("format") != _FORMAT:
            raise ValueError(
                f"Expected a dict written by RegionalExplanation.to_dict, but got format {data.get('format')!r}."
            )
        sample = data.get("sample")
        return cls(
            rule_sets=[RuleSet.from_dict(r) for r in data["rule_sets"]],
            subgroup=None,
            threshold=None if data.get("threshold") is None else float(data["threshold"]),
            features=[int(f) for f in data.get("features", [])],
            feature_names=[str(n) for n in data.get("feature_names", [])],
            params=dict(data.get("params", {})),
            sample=None if sample is None else torch.tensor(sample, dtype=torch.float64),
            message=str(data.get("message", "")),
            explainer=explainer,
        )

    def to_json(self, path: str | Path) -> None:
        """Write the explanation (without the data) to a JSON file; :meth:`from_json` reads it back."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def from_json(cls, path: str | Path, *, explainer: Any = None) -> RegionalExplanation:
        """Read an explanation written by :meth:`to_json`; pass the ``explainer`` to :meth:`evaluate` through it."""
        return cls.from_dict(json.loads(Path(path).read_text()), explainer=explainer)

    def to_html(self, path: str | Path, **kwargs: Any) -> Path:
        """Write a self-contained HTML report (rule table, figures, options, version); see
        :func:`torch_amore.report.write_html` for the options (``figures``, ``held_out``, ``title``, ...)."""
        from torch_amore.report import write_html

        return write_html(self, path, **kwargs)

    def to_dataframe(self, *, distinct: bool = True) -> Any:
        """A pandas DataFrame with one row per rule set: the rule text, its length, features and metrics.

        ``distinct=True`` (default) gives the rows of :meth:`distinct`; ``False`` every rule set in :attr:`rule_sets`.
        """
        import pandas as pd

        rule_sets = self._table(distinct)
        return pd.DataFrame(
            {
                "rule_set": [" AND ".join(r.format() for r in rs.rules) for rs in rule_sets],
                "length": [len(rs) for rs in rule_sets],
                "features": [tuple(r.name for r in rs.rules) for rs in rule_sets],
                "support": [rs.support for rs in rule_sets],
                "confidence": [rs.confidence for rs in rule_sets],
                "fitness": [rs.fitness for rs in rule_sets],
            }
        )

    # ---------------------------------------------------------------------------------------------------------------
    def evaluate(
        self,
        inputs: Any,
        target: Any = None,
        *,
        labels: Any = None,
        features: Any = None,
        batch_size: int | None = None,
        progress: bool = False,
        input_key: Any = None,
        label_key: Any = None,
        **forward_kwargs: Any,
    ) -> list[RuleMetrics]:
        """Support, confidence and fitness of every rule set on new data (e.g. a test split).

        The new data go through the same path as in ``explain``: the model (and layer) of the explainer, the same
        target definition and the same probability threshold (not re-fitted). Without an explainer (e.g. after
        :meth:`from_json`), ``inputs`` is the (N, D) feature matrix and ``target`` a boolean mask.

        Args:
            inputs: data as accepted by :meth:`RegionalRuleExplainer.explain` (or a feature matrix, see above).
            target: the subgroup definition; default: the one used in ``explain`` (required if that was a mask).
            labels: true labels (unused unless a callable target needs them through the batches).
            features: the separate (N, F) feature matrix of the new data, when the rules were built on one.
            batch_size, progress, input_key, label_key, forward_kwargs: as in ``explain`` (defaults: the same).

        Returns:
            One :class:`~torch_amore.RuleMetrics` per rule set, in the order of :attr:`rule_sets`.
        """
        from torch_amore import _validation as V

        opts = self.data_options
        if target is None:
            target = opts.get("target")
        if target is None:  # after from_json: a class index or a [low, high] range is stored in params
            stored = self.params.get("target")
            if isinstance(stored, int) and not isinstance(stored, bool):
                target = stored
            elif isinstance(stored, list) and len(stored) == 2:
                target = tuple(stored)
        if target is None:
            raise ValueError(
                "Expected `target` (a mask or the target definition) to evaluate on new data, but got None."
            )
        if self.explainer is None:
            X, _ = V.to_tensor_2d(features if features is not None else inputs, "inputs")
            if callable(target) or not hasattr(target, "__len__"):
                raise TypeError("Expected a boolean mask `target` when evaluating without an explainer (on a matrix).")
            mask = _mask(target, X.shape[0])
            return [rs.evaluate(X, mask.to(X.device)) for rs in self.rule_sets]
        return self.explainer._evaluate(
            self,
            inputs,
            target,
            labels=labels,
            features=features,
            batch_size=batch_size or opts.get("batch_size", 256),
            progress=progress,
            input_key=input_key if input_key is not None else opts.get("input_key"),
            label_key=label_key if label_key is not None else opts.get("label_key"),
            forward_kwargs=forward_kwargs or opts.get("forward_kwargs", {}),
        )


def _mask(target: Any, n: int) -> torch.Tensor:
    mask = torch.as_tensor(np.asarray(target)) if not isinstance(target, torch.Tensor) else target
    mask = mask.reshape(-1)
    if mask.dtype != torch.bool:
        raise TypeError(f"Expected a boolean mask `target`, but got dtype {mask.dtype}.")
    if mask.shape[0] != n:
        raise ValueError(f"Expected `target` to have one entry per sample ({n}), but got {mask.shape[0]}.")
    return mask
