"""The public :func:`extract_rules`: validate, bin, run the strategies, turn their results into rule sets.

The strategies (:mod:`torch_amore.strategies`: the paper's rule tree, the beam, the exact search) search the binned
features; their grid intervals become rules with readable bounds that select the same samples
(:mod:`torch_amore.search.readable`), rule sets selecting the same samples are kept once, and the result is sorted by
fitness, best first."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from torch_amore._utils.one_warning import OneWarning
from torch_amore._utils.threads import parallel_pass
from torch_amore._utils.typing import ArrayLike, MaskLike
from torch_amore.data import arguments as A
from torch_amore.data import memory as M
from torch_amore.data import validation as V
from torch_amore.data.column_stats import column_stats
from torch_amore.data.stream_disk import check_codes_dir
from torch_amore.data.stream_source import is_source
from torch_amore.grids.binning import encode_features
from torch_amore.rules.caveats import caveats
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extractor import Extractor, search_scope
from torch_amore.search.options import SearchOptions
from torch_amore.search.plan import SearchPlan

if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import Unpack


def _no_target(target: Any) -> None:
    if target is not None:
        raise ValueError(
            "Expected `target=None` with a source of batches: each batch carries its target, (X_batch, target_batch)."
        )


def prepare(
    X: ArrayLike | Any,
    target: MaskLike | None = None,
    options: SearchOptions | None = None,
    *,
    memory_checked: bool = False,
    **columns: Unpack[A.ColumnArgs],
) -> Extractor:
    """Validate the data arguments and bin the features: the part of :func:`extract_rules` that depends on neither
    ``min_support`` nor ``max_length``. ``X`` may be a source of batches with ``target=None``; ``columns`` as in
    :func:`extract_rules`; ``memory_checked``: the caller checked the memory the search needs."""
    options = SearchOptions() if options is None else options
    named = A.column_args(columns, "prepare")
    if is_source(X):  # batches larger than memory (:mod:`torch_amore.search.stream`)
        _no_target(target)
        from torch_amore.search.stream import prepare_stream

        return prepare_stream(X, options, **named)
    X, target, frame_names = V.converted(X, target)
    plan = SearchPlan.make(
        X.shape[0],
        X.shape[1],
        options,
        features=named["features"],
        feature_names=named["feature_names"],
        frame_names=frame_names,
        target_name=named["target_name"],
    )
    return bin_plan(X, target, plan, memory_checked=memory_checked)


def bin_plan(X: torch.Tensor, target: Any, plan: SearchPlan, *, memory_checked: bool = True) -> Extractor:
    """The converted ``X`` binned as ``plan`` says, with ``target`` as a mask: what the strategies search. The column
    facts come from one fused pass over ``X`` and one transfer to the host."""
    o, columns = plan.options, list(plan.columns)
    n, n_features = X.shape
    if not memory_checked:  # before the target's checks and the pass over X
        M.check_search_memory(X, o, columns)
    scale = A.resolve_affine(o.feature_scale, "feature_scale", n_features, 1.0)
    offset = A.resolve_affine(o.feature_offset, "feature_offset", n_features, 0.0)
    target_t = V.to_target(target, n, X.device)
    given = None if o.feature_types is None else A.resolve_feature_types(o.feature_types, X)
    # types are inferred in the user's units when feature_scale/feature_offset are given
    in_units = given is None and (any(s != 1.0 for s in scale) or any(v != 0.0 for v in offset))
    with parallel_pass(X.numel()):  # all columns: +-inf anywhere in X is an error
        stats = column_stats(X, units=(scale, offset) if in_units else None)
    facts = stats.fetch()
    V.check_finite(X, any_inf=any(facts.has_inf))
    lo, hi = [facts.lo[c] for c in columns], [facts.hi[c] for c in columns]
    A.check_observed(lo, columns, n_features)
    A.check_range(lo, hi, [facts.overflow[c] for c in columns], columns)
    A.check_units([facts.spread[c] for c in columns], columns, scale, offset)
    types = given if given is not None else (facts.units or facts).kinds()
    kinds = [types[c] for c in columns]
    with parallel_pass(X.numel()):
        binned = encode_features(
            X, columns, kinds, n_grids=o.n_grids, bin_strategy=o.bin_strategy, stats=stats, facts=facts
        )
    return Extractor(binned, target_t, list(plan.names), scale, offset, target_name=plan.target_name, X=X)


def search_plan(X: torch.Tensor, target: Any, plan: SearchPlan) -> tuple[list[RuleSet], int, Extractor]:
    """The rule sets of ``plan`` on the converted ``X`` (best fitness first, ``min_confidence`` applied), the
    ``min_support`` count they were searched with and the :class:`Extractor` that found them (its binning serves the
    searches of other targets on these rows, :class:`torch_amore.search.null_search.NullSearch`)."""
    with search_scope(X.device):  # one thread for small operations, no autograd bookkeeping
        extractor = bin_plan(X, target, plan)
        min_support = plan.support_count(extractor.n_total_target)
        local = plan.local_x
        local_codes = extractor.binned.encode_sample(local) if local is not None else None
        rule_sets = extractor.extract(plan.options, min_support=min_support, local_codes=local_codes)
    min_confidence = plan.options.min_confidence
    if min_confidence is not None:
        rule_sets = [rs for rs in rule_sets if rs.confidence >= min_confidence]
    return rule_sets, min_support, extractor


def search_warned(X: torch.Tensor, target: Any, plan: SearchPlan) -> tuple[list[RuleSet], int, Extractor]:
    """:func:`search_plan`, its caveats (:func:`torch_amore.rules.caveats.caveats`) added to the caller's one
    warning."""
    with OneWarning(stacklevel=5) as warned:
        rule_sets, min_support, extractor = search_plan(X, target, plan)
        local = plan.local_x is not None
        for kind, reason in caveats(
            rule_sets, plan.n_rows, extractor.n_total_target, min_count=min_support, local=local
        ):
            warned.add(reason, kind)
    return rule_sets, min_support, extractor


def extract_rules(
    X: ArrayLike | Any,
    target: MaskLike | None = None,
    *,
    options: SearchOptions | None = None,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: ArrayLike | None = None,
    target_name: str = "target",
    codes_dir: str | None = None,
    holdout_rows: ArrayLike | None = None,
    **search_options: Any,
) -> list[RuleSet]:
    """Regional rules for a target subgroup: conjunctions of at most ``max_length`` conditions with at least
    ``min_support`` samples, found by AMORE's probability-ratio search.

    Args:
        X: (N, F) features: a torch tensor (the search runs on its device), numpy array or pandas DataFrame (column
            names become feature names). NaN marks a missing value; it satisfies no rule. Or, for data larger than
            memory, a re-iterable source of ``(X_batch, target_batch)`` batches (a DataLoader without shuffling, a
            Dataset, or a callable returning a fresh iterator), with ``target=None``: the search then runs on each
            value's grid code (:mod:`torch_amore.search.stream`; docs/streaming.md).
        target: (N,) boolean subgroup, e.g. "the model predicts class c" (``None`` for a source of batches).
        options: a :class:`torch_amore.SearchOptions`; keyword arguments below override its fields.
        features: indices of the features to build rules from (e.g. ``select_features(...).features``).
        feature_names: names used when printing (default: DataFrame columns, else ``feature_{i}``).
        local_x: one sample (F,): only rules whose conditions contain it (local rules); may return ``[]`` when the
            sample is an outlier of the subgroup.
        target_name: name of the subgroup in printed rules.
        codes_dir: with a source of batches, keep the grid codes in memory-mapped files of a fresh folder inside this
            existing folder (removed afterwards, also on an error) rather than in memory.
        holdout_rows: rows held out of the search (a boolean (N,) mask or row positions; a boolean pandas Series
            by its index when X is a DataFrame, as ``target``): every returned rule set gets its numbers there,
            ``held_out`` (see ``holdout`` below and docs/trust.md).
        **search_options: any field of :class:`torch_amore.SearchOptions` (``max_length``, ``min_support``,
            ``strategy``, ``holdout``, ``permutations``, ...: its fields are documented there, once); an unknown name is
            a ``TypeError``.

    Returns:
        Rule sets sorted by fitness, best first. Their support, confidence and fitness are measured on ``(X, target)``.

    Example:
        >>> import torch
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(1000, 3, generator=g)
        >>> target = (X[:, 0] > 0.7) & (X[:, 2] < 0.5)
        >>> best = extract_rules(X, target, max_length=2, min_support=50, n_grids=10)[0]
        >>> print(best)
        IF feature_0 >= 0.7 AND feature_2 < 0.5 THEN target  (support=156, confidence=1.000, fitness=1.000)
        >>> paper = extract_rules(X, target, max_length=2, min_support=50, n_grids=10, strategy="paper")[0]
        >>> print(paper)  # the paper's ratio-driven tree stops at a narrower interval here
        IF feature_0 >= 0.899 AND feature_2 < 0.5 THEN target  (support=57, confidence=1.000, fitness=0.365)
    """
    options = SearchOptions.resolve(options, **search_options)
    named = {"features": features, "feature_names": feature_names, "local_x": local_x, "target_name": target_name}
    with OneWarning(stacklevel=2):  # every reason to warn (caveats included) in one UserWarning
        evidence = options.wants_evidence or holdout_rows is not None  # held-out numbers, p-values, stability
        source = is_source(X)  # batches larger than memory, read in passes
        if codes_dir is not None and source:  # before the first pass
            check_codes_dir(codes_dir)
        if not evidence and not source:  # (N, F) data in memory: the common case
            if codes_dir is not None:
                raise ValueError(
                    "Expected `codes_dir` only with a source of batches; X in memory needs no codes on disk."
                )
            if target is None:
                raise TypeError("Expected `target`, the (N,) boolean subgroup of the rows of X, but got None.")
            return extract_planned(X, target, options, **named)[0]
        if evidence:
            from torch_amore.search.significance import extract_with_evidence

            held = {"codes_dir": codes_dir, "holdout_rows": holdout_rows}
            return extract_with_evidence(X, target, options, **held, **named)[0]
        _no_target(target)  # batches larger than memory (:mod:`torch_amore.search.stream`)
        from torch_amore.search.stream import extract_stream

        return extract_stream(X, options, codes_dir=codes_dir, **named)


def extract_planned(
    X: ArrayLike,
    target: MaskLike,
    options: SearchOptions,
    *,
    features: Any = None,
    feature_names: Sequence[str] | None = None,
    local_x: ArrayLike | None = None,
    target_name: str = "target",
    counted: tuple[int, int | None] | None = None,
    holdout_rows: Any = None,
) -> tuple[list[RuleSet], SearchPlan, int, Extractor | None]:
    """:func:`extract_rules` on data in memory with checked ``options``, for the explainer and the callback: the rule
    sets, the plan and the ``min_support`` count they were searched with (and the extractor, see
    :func:`search_converted`). ``counted``: see :meth:`SearchPlan.make`.
    The caveats join the caller's one warning."""
    n_features = X.shape[1] if len(getattr(X, "shape", ())) == 2 else None  # for the memory check; else converted
    columns = None if n_features is None else A.resolve_features(features, n_features)
    M.check_search_memory(X, options, None if features is None else columns)  # before the conversion copies X
    X_t, target, frame_names = V.converted(X, target)  # a pandas Series target by its index when X is a DataFrame
    named = {"features": features, "columns": columns, "feature_names": feature_names, "frame_names": frame_names}
    return search_converted(
        X_t,
        target,
        options,
        local_x=local_x,
        target_name=target_name,
        counted=counted,
        holdout_rows=holdout_rows,
        **named,
    )


def search_converted(
    X: torch.Tensor, target: Any, options: SearchOptions, *, holdout_rows: Any = None, **plan_args: Any
) -> tuple[list[RuleSet], SearchPlan, int, Extractor | None]:
    """:func:`extract_planned` on the converted ``X``, with the plan made of ``plan_args`` once; also the
    :class:`Extractor` of the search (``None`` with evidence: its searches are several). ``holdout_rows``: see
    :func:`extract_rules`."""
    plan = SearchPlan.make(X.shape[0], X.shape[1], options, **plan_args)
    if not options.wants_evidence and holdout_rows is None:
        rule_sets, min_support, extractor = search_warned(X, target, plan)
        return rule_sets, plan, min_support, extractor
    with OneWarning(stacklevel=4):
        from torch_amore.search.significance import extract_with_evidence

        named = {
            "features": plan_args.get("features"),
            "feature_names": list(plan.names),
            "target_name": plan.target_name,
        }
        rule_sets, min_support = extract_with_evidence(  # local_x as the plan read it (a Series by its labels)
            X, target, options, local_x=plan.local_x, holdout_rows=holdout_rows, **named
        )
    return rule_sets, plan, min_support, None
