"""RegionalExplanation: the rules of :class:`torch_amore.RegionalRuleExplainer` and what they were extracted on."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

import numpy as np
import torch

from torch_amore._version import __version__
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.explain.explanation_text import explanation_table_html, format_explanation, searched_counts
from torch_amore.explain.loading import (
    DERIVED_COLUMNS,
    _basis_dict,
    _json_safe,
    _load_fields,
)
from torch_amore.explain.units import scaler_units
from torch_amore.model.input_shape import check_new_data, check_width
from torch_amore.report.distinct import MAX_JACCARD, distinct_rule_sets
from torch_amore.report.html import write_html
from torch_amore.rules import serialization as S
from torch_amore.rules.caveats import at_base_rate, confidence_interval
from torch_amore.rules.evidence_columns import evidence_record
from torch_amore.rules.metrics import RuleMetrics, hits_of_rates, lift, recall
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.engine import VerifyArgs, verify

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack

_FORMAT = "torch_amore.RegionalExplanation"
#: Version of the JSON layout written by :meth:`RegionalExplanation.to_dict` (versions 1 and 2 are read too).
FORMAT_VERSION = 3


class RunArgs(TypedDict, total=False):
    """How ``evaluate`` and ``verify`` run the model over new data, as in ``explain`` (by default ``progress=False``,
    the others ``explain``'s)."""

    batch_size: int | None
    progress: bool
    input_key: Any
    additional_forward_args: Any
    forward_kwargs: dict[str, Any] | None


@dataclass(repr=False)
class RegionalExplanation(Sequence[RuleSet]):
    """Rule sets describing a subgroup of a model's predictions, best fitness first (a sequence of them: ``len``,
    indexing, iteration, ``in``).

    Args:
        rule_sets: candidate rule sets sorted by fitness (best first); empty when nothing qualifies.
        subgroup: boolean (N,) mask of the explained subgroup on every row explained, held-out rows included
            (``None`` after :meth:`from_json`).
        threshold: the probability threshold that defined the subgroup (``None`` for argmax, masks, ranges).
        features: indices of the features the search used.
        feature_names: names of all D features.
        params: extraction parameters and data facts (``n_samples``, ``subgroup_size``, ``layer``, ...).
        features_matrix: the (N, D) features of every row explained (``None`` after :meth:`from_json`). With
            ``holdout`` or ``holdout_rows`` it holds the held-out rows too: the search saw only the others, on which
            the rule sets' support, confidence and fitness are measured (``holdout``'s rows are
            :func:`torch_amore.search.evidence_split.holdout_mask` of ``subgroup``, ``params["holdout"]`` and
            ``params["seed"]``).
        sample: for local rules, the sample's feature vector (D,).
        message: why the result is empty, when it is.
        selection: the ``FeatureSelection`` when ``select_features=True`` was used.
        verification: the last :meth:`verify` result (a :class:`~torch_amore.verify.verification.Verification`), if any.
        concepts: the :class:`~torch_amore.concepts.ConceptBasis` whose concept activations the rules are on
            (``None``: rules on units or inputs); ``params["concepts"]`` describes it (kind, K, reconstruction error).

    Example:
        >>> import torch
        >>> from torch_amore import Rule, RuleSet
        >>> X = torch.tensor([[0.1], [0.6], [0.7], [0.9]])
        >>> subgroup = torch.tensor([False, False, True, True])
        >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, subgroup, target_name="predicted 1")
        >>> explanation = RegionalExplanation([rs], subgroup, 0.5, [0], ["x"], {"n_samples": 4, "subgroup_size": 2})
        >>> print(explanation)
        Regional rules for predicted 1 (subgroup: 2 of 4 samples, threshold 0.5)
           #  support  confidence  fitness    lift  recall  rule set
           1        2       1.000    1.000   2.000*  1.000  x >= 0.65
          lift: confidence / base rate 0.500 (1: no better than all rows); recall: share of the subgroup covered
          *: the confidence's 95% interval contains the base rate (not measurably above all rows)
        >>> explanation
        RegionalExplanation(target='predicted 1', rule_sets=1, best_fitness=1.000, subgroup=2/4)
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
    verification: Any = field(default=None, repr=False, compare=False)
    concepts: Any = field(default=None, repr=False, compare=False)

    @property
    def best(self) -> RuleSet | None:
        """The rule set with the highest fitness (``None`` when there is none)."""
        return self.rule_sets[0] if self.rule_sets else None

    def __len__(self) -> int:
        return len(self.rule_sets)

    def __getitem__(self, index: int) -> RuleSet:  # iteration, ``in``, ``index`` and ``count`` from ``Sequence``
        return self.rule_sets[index]

    @property
    def target_name(self) -> str:
        """The subgroup's name in the printed rules (e.g. ``"predicted 7"``)."""
        if self.rule_sets:
            return self.rule_sets[0].target_name
        return str(self.params.get("target_name", "target"))

    def __repr__(self) -> str:
        best = "None" if self.best is None else f"{self.best.fitness:.3f}"
        n, size = self.params.get("n_samples"), self.params.get("subgroup_size")
        facts = f", subgroup={size}/{n}" if n is not None and size is not None else ""
        local = ", local=True" if self.sample is not None else ""
        return (
            f"{type(self).__name__}(target={self.target_name!r}, rule_sets={len(self.rule_sets)}, "
            f"best_fitness={best}{facts}{local})"
        )

    @property
    def base_rate(self) -> float | None:
        """The subgroup's share of the samples the search saw, which its rule sets' confidence is measured on (all of
        them, less those held out by ``holdout`` or ``holdout_rows``; ``None`` when unknown).

        Example:
            >>> held = {"held_out_rows": 50, "held_out_subgroup": 5}  # searched: 15 of the subgroup's 20, 50 rows
            >>> RegionalExplanation([], None, None, [], [], {"n_samples": 100, "subgroup_size": 20, **held}).base_rate
            0.3
        """
        rows, size = searched_counts(self.params)
        if rows is None:  # how many rows were held out is not known (a file written before): all rows
            rows, size = self.params.get("n_samples"), self.params.get("subgroup_size")
        return size / rows if rows and size is not None else None

    def stats(self, rule_set: RuleSet) -> dict[str, Any]:
        """A rule set's support, confidence and fitness with its lift, recall (of the subgroup rows the search saw),
        the base rate, whether its fitness is positive, the 95 % Wilson interval of its confidence and whether that
        interval contains the base rate (NaN where the sizes are unknown).

        ``rule_set`` must be one of this explanation's :attr:`rule_sets` (or equal to one, e.g. read back from JSON);
        another explanation's would be measured against this subgroup's base rate, so it is a ``ValueError`` (as in
        :meth:`verify`), and anything but a :class:`~torch_amore.RuleSet` a ``TypeError``.

        Example:
            >>> import torch
            >>> from torch_amore import Rule, RuleSet
            >>> X, subgroup = torch.tensor([[0.1], [0.6], [0.7], [0.9]]), torch.tensor([False, False, True, True])
            >>> rs = RuleSet.from_rules([Rule(0, "x", low=0.65)], X, subgroup)
            >>> explanation = RegionalExplanation([rs], subgroup, 0.5, [0], ["x"], {"n_samples": 4, "subgroup_size": 2})
            >>> explanation.stats(rs)["lift"]
            2.0
            >>> explanation.stats(RuleSet.from_rules([Rule(0, "x", low=0.5)], X, subgroup))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: Expected a rule set of this explanation, but 'IF x >= 0.5 THEN ...' is not one of its rule sets.
        """
        if not isinstance(rule_set, RuleSet):
            raise TypeError(
                f"Expected `rule_set` to be a RuleSet of this explanation, but got {type(rule_set).__name__}."
            )
        own = self.rule_sets  # the same object (a cheap scan first), or an equal one, as verify accepts
        if not any(rs is rule_set for rs in own) and rule_set not in own:
            raise ValueError(
                f"Expected a rule set of this explanation, but {rule_set.format()!r} is not one of its rule sets."
            )
        size, base = searched_counts(self.params)[1], self.base_rate
        hits = hits_of_rates(rule_set.confidence, rule_set.support)
        low, high = confidence_interval(rule_set)
        return {
            "support": rule_set.support,
            "confidence": rule_set.confidence,
            "fitness": rule_set.fitness,
            "lift": lift(rule_set.confidence, base),
            "recall": recall(hits, size) if size else float("nan"),
            "base_rate": base if base is not None else float("nan"),
            "positive_fitness": rule_set.fitness > 0,
            "confidence_low": low,
            "confidence_high": high,
            "at_base_rate": at_base_rate(rule_set, base),
        }

    def shown(self, include_negative: bool = False, *, distinct: bool = True) -> list[tuple[int, RuleSet]]:
        """(1-based position, rule set) of the rule sets the default tables show: near-duplicates collapsed
        (:meth:`distinct`; unless ``distinct=False``) and only positive fitness (unless ``include_negative``)."""
        kept = {id(rs) for rs in self.distinct(min_fitness=None)} if distinct else None
        return [
            (i, rs)
            for i, rs in enumerate(self.rule_sets, 1)
            if (include_negative or rs.fitness > 0) and (kept is None or id(rs) in kept)
        ]

    def with_units(
        self, scale: Sequence[float] | None = None, offset: Sequence[float] | None = None, *, scaler: Any = None
    ) -> RegionalExplanation:
        """A copy whose rules print in original units: ``raw = x * scale + offset`` per feature, or the inverse of a
        fitted scikit-learn ``scaler``. Bounds, masks and metrics are unchanged (give the units to ``explain`` for
        cuts that read short in them)."""
        if scaler is not None:
            if scale is not None or offset is not None:
                raise ValueError("Expected either `scaler` or `scale`/`offset`, not both.")
            scale, offset = scaler_units(scaler, len(self.feature_names))
        for values, name in ((scale, "scale"), (offset, "offset")):
            if values is not None and len(values) != len(self.feature_names):
                raise ValueError(
                    f"Expected `{name}` to have {len(self.feature_names)} entries (one per feature), got {len(values)}."
                )
        rule_sets = [rs.with_units(scale, offset) for rs in self.rule_sets]
        return replace(self, rule_sets=rule_sets)

    def distinct(self, *, max_jaccard: float = MAX_JACCARD, min_fitness: float | None = 0.0) -> list[RuleSet]:
        """Near-duplicates (covered rows with a Jaccard index >= ``max_jaccard``) collapsed into the fitter one and,
        by default, no negative fitness (:func:`torch_amore.report.distinct_rule_sets`)."""
        X = self.features_matrix
        return distinct_rule_sets(self.rule_sets, X, max_jaccard=max_jaccard, min_fitness=min_fitness)

    def format(
        self, max_rows: int | None = 10, precision: int = 3, *, include_negative: bool = False, distinct: bool = True
    ) -> str:
        """A readable table of the first ``max_rows`` rule sets (``None``: all) of :meth:`shown`; ``#`` is the
        position in :attr:`rule_sets`, and ``*`` flags a confidence interval that contains the base rate."""
        if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 0):
            raise ValueError(f"Expected `max_rows` to be an int >= 0 or None, but got {max_rows!r}.")
        return format_explanation(self, max_rows, precision, include_negative=include_negative, distinct=distinct)

    def __str__(self) -> str:
        return self.format()

    def _repr_html_(self) -> str:
        return explanation_table_html(self)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict of everything but the data (each rule set with its :meth:`stats`)."""
        selection = getattr(self.selection, "to_dict", None)
        return {
            "format": _FORMAT,
            "format_version": FORMAT_VERSION,
            "library_version": __version__,
            "rule_sets": [
                {"position": i, **rs.to_dict(), **_json_safe(self.stats(rs))} for i, rs in enumerate(self.rule_sets, 1)
            ],
            "threshold": self.threshold,
            "features": [int(f) for f in self.features],
            "feature_names": list(self.feature_names),
            "params": _json_safe(self.params),
            "sample": None if self.sample is None else [float(v) for v in self.sample.tolist()],
            "message": self.message,
            "selection": _json_safe(selection()) if callable(selection) else None,
            "verification": None if self.verification is None else self.verification.to_dict(),
            **({} if self.concepts is None else {"concepts": _basis_dict(self.concepts)}),
        }

    @classmethod
    def from_dict(
        cls, data: Any, *, explainer: Any = None, modules: Any = None, classes: Any = None
    ) -> RegionalExplanation:
        """The explanation written by :meth:`to_dict`, every field checked: a bad one raises
        :class:`~torch_amore.data.fields.FieldError` (a ``ValueError``) naming its path.

        Nothing is imported or built by a name the file holds: a concept basis's saved ``nn.Module`` (an encoder's)
        is one of torch.nn's module classes or one of ``classes``.

        Args:
            data: the dict from :meth:`to_dict`.
            explainer: for :meth:`evaluate` on model inputs.
            modules: instances (or functions that build them) of saved ``nn.Module`` s that need constructor
                arguments, by class path or index, as in :meth:`torch_amore.concepts.ConceptBasis.from_dict`.
            classes: your ``nn.Module`` classes the basis may name (e.g. ``classes=[MySAE]``), built with no
                arguments and given their saved ``state_dict``.

        Example:
            >>> RegionalExplanation.from_dict({"format": "torch_amore.RegionalExplanation", "format_version": 3})
            Traceback (most recent call last):
            ...
            torch_amore.data.fields.FieldError: Invalid `rule_sets`: this required key is missing.
        """
        data = S.expect_mapping(data)
        if data.get("format") != _FORMAT:
            raise S.FieldError(
                "format",
                f"expected {_FORMAT!r} (a dict written by RegionalExplanation.to_dict), but got "
                f"{data.get('format')!r}.",
            )
        key = "format_version" if "format_version" in data else "version"
        version = data.get(key)
        if isinstance(version, bool) or version not in (1, 2, FORMAT_VERSION):
            raise S.FieldError(key, f"expected format_version 1, 2 or {FORMAT_VERSION}, but got {version!r}.")
        return cls(subgroup=None, explainer=explainer, **_load_fields(data, modules, classes))

    def to_json(self, path: str | Path) -> None:
        """Write the explanation (without the data) to a JSON file; :meth:`from_json` reads it back."""
        Path(path).write_text(json.dumps(self.to_dict(), indent=2))

    @classmethod
    def from_json(
        cls, path: str | Path, *, explainer: Any = None, modules: Any = None, classes: Any = None
    ) -> RegionalExplanation:
        """Read an explanation written by :meth:`to_json` (``explainer``, ``modules`` and ``classes`` as in
        :meth:`from_dict`); text that is not JSON raises :class:`~torch_amore.data.fields.FieldError`, as a
        malformed field does.

        A concept basis whose encoder is your own ``nn.Module`` loads only when you pass its class: nothing named in
        the file is imported, e.g. ``RegionalExplanation.from_json("rules.json", classes=[MySAE])``.
        """
        return cls.from_dict(
            S.parse_json(Path(path).read_bytes()), explainer=explainer, modules=modules, classes=classes
        )

    def to_html(self, path: str | Path, **kwargs: Any) -> Path:
        """Write a self-contained HTML report (rule table, figures, options, version); see
        :func:`torch_amore.report.html.write_html` for the options (``figures``, ``held_out``, ``title``, ...)."""
        return write_html(self, path, **kwargs)

    def to_dataframe(self, *, include_negative: bool = False, distinct: bool = True) -> Any:
        """A pandas DataFrame with one row per rule set of :meth:`shown`: the rule text, its length, features, the
        columns of :meth:`stats`, the grid's ``optimum`` (NaN when not computed) and the evidence computed
        (:func:`~torch_amore.rules.evidence_columns.evidence_record`); the index ``#`` is the position in
        :attr:`rule_sets`."""
        import pandas as pd

        rows = self.shown(include_negative, distinct=distinct)
        records = [
            {
                "rule_set": " AND ".join(r.format() for r in rs.rules),
                "length": len(rs),
                "features": tuple(r.name for r in rs.rules),
                **self.stats(rs),
                "optimum": float("nan") if rs.optimum is None else rs.optimum,
                **evidence_record(rs, self.rule_sets),
            }
            for _, rs in rows
        ]
        columns = [
            "rule_set",
            "length",
            "features",
            "support",
            "confidence",
            "fitness",
            "optimum",
            *DERIVED_COLUMNS,
            *(evidence_record(self.rule_sets[0], self.rule_sets) if self.rule_sets else ()),
        ]
        return pd.DataFrame(records, columns=columns, index=pd.Index([i for i, _ in rows], name="#"))

    def evaluate(
        self,
        inputs: Any,
        target: Any = None,
        *,
        labels: Any = None,
        features: Any = None,
        label_key: Any = None,
        **run: Unpack[RunArgs],
    ) -> list[RuleMetrics]:
        """Support, confidence and fitness of every rule set on new data (e.g. a test split), through the model,
        layer, target definition and threshold (not re-fitted) of ``explain``. Without an explainer (e.g. after
        :meth:`from_json`), ``inputs`` is the (N, D) feature matrix and ``target`` a boolean mask.

        Args:
            inputs: data as accepted by :meth:`RegionalRuleExplainer.explain` (or a feature matrix, see above).
            target: the subgroup definition; default: the one used in ``explain`` (required if that was a mask).
            labels: true labels (unused unless a callable target needs them through the batches).
            features: the separate (N, F) feature matrix of the new data, when the rules were built on one.
            batch_size, progress, input_key, label_key: as in ``explain`` (defaults: the same).
            additional_forward_args, forward_kwargs: extra model arguments for the new data (default: those of
                ``explain``, unless they had one entry per sample there).

        Returns:
            One :class:`~torch_amore.RuleMetrics` per rule set, in the order of :attr:`rule_sets`.
        """
        run = A.keyword_args(run, RunArgs, "RegionalExplanation.evaluate")
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
            matrix = features if features is not None else inputs
            target = V.align_rows(target, matrix, "target", "features" if features is not None else "inputs")
            check_width(matrix, "inputs", n_features=len(self.feature_names))
            X, _ = V.to_tensor_2d(matrix, "inputs")
            if callable(target) or not hasattr(target, "__len__"):
                raise TypeError("Expected a boolean mask `target` when evaluating without an explainer (on a matrix).")
            mask = _mask(target, X.shape[0])
            return [rs.evaluate(X, mask.to(X.device)) for rs in self.rule_sets]
        source, shape = self.params.get("source"), self.params.get("input_shape")
        check_new_data(inputs, features, source=source, n_features=len(self.feature_names), input_shape=shape)
        from torch_amore.explain.evaluation import evaluate_with_model  # it imports this module

        return evaluate_with_model(
            self.explainer,
            self,
            inputs,
            target,
            labels=labels,
            features=features,
            batch_size=run["batch_size"] if run["batch_size"] is not None else opts.get("batch_size", 256),
            progress=bool(run["progress"]),
            input_key=run["input_key"] if run["input_key"] is not None else opts.get("input_key"),
            label_key=label_key if label_key is not None else opts.get("label_key"),
            model_args=(run["additional_forward_args"], run["forward_kwargs"]),
        )

    def verify(
        self,
        inputs: Any,
        *,
        rule_sets: int | RuleSet | Sequence[RuleSet] = 5,
        method: str = "resample",
        n_controls: int = 10,
        level: float = 0.95,
        seed: int = 0,
        target: Any = None,
        model: Any = None,
        **run: Unpack[RunArgs],
    ) -> Any:
        """Check by intervention whether the model uses the rule sets' units: sufficiency and necessity of each rule
        set and of a random-unit control, with intervals. The result is kept on :attr:`verification` and returned.

        Args:
            inputs: the samples, as accepted by ``explain`` (the explained data or new data).
            rule_sets: the number k of rule sets to verify (the first k the table shows), or rule sets of this
                explanation.
            method: how the units are replaced: ``"resample"`` (from a donor sample satisfying / violating the rule
                set), ``"clamp"`` (nearest observed value inside / outside each interval) or ``"mean"`` (donors' mean).
            n_controls: control draws, each replacing as many random units of the layer the same way (0: none).
            level: confidence level of the intervals.
            seed: seed of the donors and the control draws.
            target: the target on the model outputs (default: that of ``explain``).
            model: the explained model, needed when the explanation has no explainer (read from JSON, callback).
            batch_size, progress, input_key, additional_forward_args, forward_kwargs: as in ``explain``.

        Returns:
            A :class:`~torch_amore.verify.verification.Verification` (``to_frame()`` gives a DataFrame).
        """
        run = A.keyword_args(run, RunArgs, "RegionalExplanation.verify")
        args = VerifyArgs(
            rule_sets=rule_sets,
            method=method,
            n_controls=n_controls,
            level=level,
            seed=seed,
            target=target,
            model=model,
            **{**run, "progress": bool(run["progress"])},
        )
        self.verification = verify(self, inputs, args)
        return self.verification


def _mask(target: Any, n: int) -> torch.Tensor:
    mask = torch.as_tensor(np.asarray(target)) if not isinstance(target, torch.Tensor) else target
    mask = mask.reshape(-1)
    if mask.dtype != torch.bool:
        raise TypeError(f"Expected a boolean mask `target`, but got dtype {mask.dtype}.")
    if mask.shape[0] != n:
        raise ValueError(f"Expected `target` to have one entry per sample ({n}), but got {mask.shape[0]}.")
    return mask
