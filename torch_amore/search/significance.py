"""Rules that hold beyond the sample: :func:`extract_rules` with ``holdout``, ``holdout_rows``, ``permutations`` or
``stability`` (:func:`extract_with_evidence`).

* **Held-out numbers** (``holdout=f`` or ``holdout_rows=``): the search sees only the other rows (a fractional
  ``min_support`` is of those rows); every returned rule set gets ``held_out``
  (:class:`torch_amore.rules.held_out.HeldOut`: support, confidence, fitness, lift, a Clopper-Pearson interval at
  ``level`` and a one-sided exact binomial p-value against the held-out base rate, Holm-adjusted over the rule sets
  returned). The split is stratified by the target and seeded (:mod:`torch_amore.search.evidence_split`).
* **Search-aware p-value** (``permutations=P``): the same search, with the same options and grids, on P seeded
  permutations of the target over the searched rows (permutation ``k`` is
  :func:`torch_amore.search.evidence_split.permutation_order` of ``seed`` and ``k``); the best fitness of each is the
  null distribution, and a rule set of fitness ``f`` gets ``p_value = (1 + #{null >= f}) / (P + 1)``, the
  Westfall-Young max-statistic p-value, family-wise over everything the search compared. The permutations' searches
  take the grid codes, fine grids and counts of all rows of the search on the real target
  (:class:`torch_amore.search.null_search.NullSearch`): one binning per call.
* **Stability** (``stability=B``): B seeded, stratified half-samples of the searched rows are searched again (a count
  ``min_support`` scaled to the half); ``stability`` is the share of them in whose first ``len(result)`` rule sets
  one selects nearly the same rows of the data as the rule set (all rows, held-out ones included; Jaccard >=
  :data:`STABILITY_JACCARD`).

When none of the rule sets stands out at ``1 - level``, one ``UserWarning`` says so
(:func:`torch_amore.rules.evidence.warn_noise`).

In a sharded (DDP) run the rows are numbered globally, the shards concatenated in rank order: the held-out split, the
permutations and the half-samples are drawn over all ranks' rows (every rank gathers the target once and draws the
same), each rank searches its part, and the counts are summed over the ranks, so every rank gets the numbers of one
process on the concatenated data. ``holdout_rows`` are each rank's own rows (a rank's part may hold none or all of
them). A source of batches (streamed data) refuses these options.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.threads import caller_threads, side_by_side
from torch_amore.data import arguments as A
from torch_amore.data import memory as M
from torch_amore.data import validation as V
from torch_amore.data.held_rows import aligned_holdout_rows, resolve_holdout_rows
from torch_amore.data.stream_source import is_source
from torch_amore.rules.evidence import warn_noise
from torch_amore.rules.held_out import held_out_metrics
from torch_amore.rules.rules import RuleSet
from torch_amore.search.evidence_split import half_sample, holdout_mask, permutation_order
from torch_amore.search.extract import search_converted, search_plan
from torch_amore.search.extractor import Extractor
from torch_amore.search.null_search import NullSearch
from torch_amore.search.options import SearchOptions
from torch_amore.search.plan import SearchPlan

__all__ = [
    "SIDE_MEMORY_SHARE",
    "NoHeldOutSplit",
    "STABILITY_JACCARD",
    "extract_with_evidence",
    "permutation_p_values",
    "side_workers",
    "stability_shares",
]

#: Two rule sets select "nearly the same rows" when the Jaccard index of their masks is at least this.
STABILITY_JACCARD = 0.8

#: The searches of the evidence that run side by side take at most this share of the available memory (2 GiB where
#: it is unknown), each :attr:`torch_amore.search.plan.SearchPlan.search_bytes`.
SIDE_MEMORY_SHARE = 0.5
_UNKNOWN_MEMORY = 2 << 30


def side_workers(n_searches: int, plan: SearchPlan, device: torch.device) -> int:
    """How many of ``n_searches`` searches of ``plan`` run side by side
    (:func:`torch_amore._utils.threads.side_by_side`): the caller's CPU threads (at most the CPUs the process may
    run on), at most as many as :data:`SIDE_MEMORY_SHARE` of the available memory holds (each search's
    :attr:`SearchPlan.search_bytes`); one on other devices and in a sharded run.

    Example:
        >>> plan = SearchPlan.make(1000, 4, SearchOptions())
        >>> 1 <= side_workers(99, plan, torch.device("cpu")) <= torch.get_num_threads()
        True
    """
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    workers = min(n_searches, caller_threads(), cpus)  # (torch counts the machine's cores, not the process's)
    if workers < 2 or device.type != "cpu" or D.is_sharded():
        return 1
    free, _ = M.available_memory("cpu")
    budget = _UNKNOWN_MEMORY if free is None else int(SIDE_MEMORY_SHARE * free)
    return max(1, min(workers, budget // max(1, plan.search_bytes)))


def _refuse(X: Any, codes_dir: str | None) -> None:
    """What the evidence does not support, refused before any work."""
    if is_source(X) or codes_dir is not None:
        raise ValueError(
            "`holdout`, `holdout_rows`, `permutations` and `stability` are not supported with a source of batches "
            "(streamed data, or codes on disk): they split, permute and resample the target over the rows by their "
            "global index and search again, which needs every row's target at once, while a streamed search reads "
            "its rows in passes. Extract from an (N, F) X in memory (one process, or one shard per DDP rank), or "
            "set them to None / 0."
        )


class _Rows:
    """This process's rows among all rows by global index: in a sharded (DDP) run the shards concatenated in rank
    order (every rank holds the whole target, gathered once), else the rows themselves."""

    def __init__(self, target: torch.Tensor) -> None:
        self.target, self.start = D.all_gather_rows(target)
        self.n_local = target.shape[0]

    def local(self, values: torch.Tensor) -> torch.Tensor:
        """This process's part of per-row ``values`` of all rows."""
        return values[self.start : self.start + self.n_local]

    def local_index(self, rows: np.ndarray) -> torch.Tensor:
        """This process's rows among the sorted global row indices ``rows``, as indices of its own rows."""
        mine = rows[(rows >= self.start) & (rows < self.start + self.n_local)] - self.start
        return torch.from_numpy(mine).to(self.target.device)


class NoHeldOutSplit(ValueError):
    """The held-out rows or the rows left to search hold no target row, or no other row: the subgroup (or the rest)
    is too small for the split. A ``ValueError``; the Lightning callback keeps an explanation without rule sets."""


def _held_rows(target: torch.Tensor, options: SearchOptions, holdout_rows: Any) -> torch.Tensor | None:
    """The held-out rows' mask (on the target's device), or ``None``; both parts must hold target rows and others.
    A fraction is drawn over all rows by global index (:class:`_Rows`); ``holdout_rows`` are this process's."""
    if holdout_rows is not None and options.holdout is not None:
        raise ValueError("Expected either `holdout` (a fraction) or `holdout_rows` (the rows), not both.")
    if holdout_rows is not None:
        held = resolve_holdout_rows(holdout_rows, target.shape[0]).to(target.device)
    elif options.holdout is not None:
        rows = _Rows(target)
        held = rows.local(holdout_mask(rows.target, options.holdout, options.seed))
    else:
        return None
    parts = [side & part for side in (target, ~target) for part in (held, ~held)]
    counts = D.all_reduce_sum(torch.stack([p.sum() for p in parts])).tolist()  # over all ranks' rows
    for (n_held, n_rest), what in zip((counts[:2], counts[2:]), ("target rows", "rows outside the target")):
        if n_held == 0 or n_rest == 0:
            part = "held-out rows" if n_held == 0 else "rows left to search"
            given = "`holdout_rows`" if holdout_rows is not None else f"`holdout={options.holdout:g}`"
            hint = "hold out other rows or more of them"
            if holdout_rows is None:  # a fraction
                hint = "it holds out round(holdout * n) of each class's n rows (half to even): pick another `holdout`"
                if n_held + n_rest == 1:
                    hint = f"there is one of the {what} in all, which no split puts on both sides"
            raise NoHeldOutSplit(
                f"Expected {what} both among the held-out rows and among the rows searched, but the {part} hold "
                f"none ({n_held} held out, {n_rest} searched) with {given}: {hint}."
            )
    return held


def _held_out(found: Sequence[RuleSet], X: torch.Tensor, target: torch.Tensor, level: float) -> list:
    """:func:`torch_amore.rules.held_out.held_out_metrics` of ``found`` on the held-out rows ``X`` (all ranks'
    held-out rows in a sharded run)."""
    masks, _ = D.all_gather_rows(torch.stack([rs.mask(X) for rs in found], 1).to(target.device))
    target, _ = D.all_gather_rows(target)
    return held_out_metrics(list(masks.T), target, level)


def extract_with_evidence(
    X: Any,
    target: Any,
    options: SearchOptions,
    *,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: Any = None,
    target_name: str = "target",
    codes_dir: str | None = None,
    holdout_rows: Any = None,
) -> tuple[list[RuleSet], int]:
    """:func:`torch_amore.extract_rules` with the evidence ``options`` asks for (see the module's docstring): the rule
    sets of the search on the rows not held out, each with ``held_out``, ``p_value`` and ``stability`` where
    computed (``None`` otherwise), and the ``min_support`` count that search used (of the rows searched, which the
    explainer's ``params`` report).

    Example:
        >>> import torch
        >>> from torch_amore import extract_rules
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(2000, 3, generator=g)
        >>> target = (X[:, 0] > 0.7) & (torch.rand(2000, generator=g) < 0.8)
        >>> best = extract_rules(X, target, min_support=50, holdout=0.3, permutations=19)[0]
        >>> best.p_value, best.held_out.p_value < 1e-6
        (0.05, True)
    """
    _refuse(X, codes_dir)
    if target is None:
        raise TypeError("Expected `target`, the (N,) boolean subgroup of the rows of X, but got None.")
    holdout_rows = aligned_holdout_rows(holdout_rows, X)  # a boolean Series by the index of a DataFrame X
    X_t, target, frame_names = V.converted(X, target)  # the one conversion of the data
    target_t = V.to_target(target, X_t.shape[0], X_t.device)
    names = A.resolve_names(feature_names, frame_names, X_t.shape[1])
    held = _held_rows(target_t, options, holdout_rows)
    Xs, ts = (X_t, target_t) if held is None else (X_t[~held], target_t[~held])
    plain = options.replace(holdout=None, permutations=0, stability=0)
    columns = A.resolve_features(features, Xs.shape[1])
    M.check_search_memory(Xs, plain, None if features is None else columns)
    named = {"features": features, "columns": columns, "feature_names": names, "local_x": local_x}
    named["frame_names"] = frame_names  # a pandas Series local_x by its labels, X's columns
    found, plan, min_count, searched = search_converted(Xs, ts, plain, target_name=target_name, **named)  # one plan
    changes: list[dict[str, Any]] = [{} for _ in found]
    if found and options.permutations:
        for c, p in zip(changes, permutation_p_values(Xs, ts, found, plan, options, base=searched)):
            c["p_value"] = p
    if found and options.stability:
        shares = stability_shares(Xs, ts, found, plan, options, masks_on=X_t)
        for c, s in zip(changes, shares):
            c["stability"] = s
    if found and held is not None:
        for c, h in zip(changes, _held_out(found, X_t[held], target_t[held], options.level)):
            c["held_out"] = h
    out = [replace(rs, **c) for rs, c in zip(found, changes)]
    warn_noise(out, alpha=1.0 - options.level, permutations=options.permutations, stacklevel=3)
    return out, min_count


def null_fitness(
    X: torch.Tensor, target: torch.Tensor, plan: SearchPlan, options: SearchOptions, *, base: Extractor | None = None
) -> list[float]:
    """The best fitness of the search ``plan`` on each of the ``options.permutations`` permutations of ``target``
    seeded by ``options.seed`` (:func:`torch_amore.search.evidence_split.permutation_order`; ``-inf`` where a search
    returns nothing). ``base``: the :class:`Extractor` of ``plan``'s search on ``target``, whose codes and grids the
    permutations' searches take (else they are made again)."""
    permutations, seed = options.permutations, options.seed
    bar = progress_bar(options.progress, total=permutations, desc="permutations")  # one bar, not one per search
    rows = _Rows(target)  # in a sharded run, permutations of all ranks' rows: each rank searches its part
    workers = side_workers(permutations, plan, X.device)
    with warnings.catch_warnings():  # the search's own warnings were given by the search on the real target
        warnings.simplefilter("ignore")
        quiet = replace(plan.options, progress=False)
        null = NullSearch(X, target, quiet, plan=replace(plan, options=quiet), base=base)

        def best(k: int) -> float:
            order = torch.from_numpy(permutation_order(rows.target.shape[0], seed, k)).to(target.device)
            return null.best_fitness(rows.local(rows.target[order]))

        out = []
        for fitness in side_by_side(best, range(permutations), workers):
            out.append(fitness)
            bar.update(1)
    bar.close()
    return out


def permutation_p_values(
    X: torch.Tensor,
    target: torch.Tensor,
    found: Sequence[RuleSet],
    plan: SearchPlan,
    options: SearchOptions,
    *,
    base: Extractor | None = None,
) -> list[float]:
    """The search-aware p-value of each of ``found`` (found by the search ``plan``): ``(1 + #{null >= fitness}) /
    (permutations + 1)`` over :func:`null_fitness` (``permutations``, ``seed`` and ``progress`` of ``options``;
    ``base`` as there)."""
    null = null_fitness(X, target, plan, options, base=base)
    return [(1 + sum(f >= rs.fitness for f in null)) / (options.permutations + 1) for rs in found]


def _near(masks: torch.Tensor, others: torch.Tensor) -> torch.Tensor:
    """(R,) bool: whether each row mask of ``masks`` (R, N) has a Jaccard index >= :data:`STABILITY_JACCARD` with
    some row of ``others`` (R', N), over all ranks' rows (two masks of no row: 1). One pass per row of ``masks``,
    one reduction over the ranks, no host sync."""
    sizes = others.sum(1)
    shared = torch.stack([(m & others).sum(1) for m in masks])  # (R, R')
    union = masks.sum(1)[:, None] + sizes[None, :] - shared
    both = D.all_reduce_sum(torch.stack([shared, union]))
    jaccard = torch.where(both[1] > 0, both[0].double() / both[1].clamp(min=1).double(), 1.0)
    return (jaccard >= STABILITY_JACCARD).any(1)


def stability_shares(
    X: torch.Tensor,
    target: torch.Tensor,
    found: Sequence[RuleSet],
    plan: SearchPlan,
    options: SearchOptions,
    *,
    masks_on: torch.Tensor | None = None,
) -> list[float]:
    """For each of ``found`` (found by the search ``plan`` on the rows ``X``), the share of ``options.stability``
    half-samples of those rows seeded by ``options.seed`` (:func:`torch_amore.search.evidence_split.half_sample`) in
    whose first ``len(found)`` rule sets one selects nearly the same rows of ``masks_on`` (default ``X``;
    :func:`extract_with_evidence` passes all rows, held-out ones included) (Jaccard >= :data:`STABILITY_JACCARD`).
    Each half is searched with the plan on its rows (:meth:`SearchPlan.on_rows`): a count ``min_support`` is scaled
    to them (rounded up); a fraction or the default applies as it is."""
    n_halves, seed = options.stability, options.seed
    on = X if masks_on is None else masks_on
    masks = torch.stack([rs.mask(on) for rs in found])
    hits = torch.zeros(len(found), dtype=torch.long, device=masks.device)
    every = _Rows(target)  # in a sharded run, half-samples of all ranks' rows: each rank searches its part
    n = every.target.shape[0]
    bar = progress_bar(options.progress, total=n_halves, desc="half-samples")

    def search_half(b: int) -> list[RuleSet]:
        chosen = half_sample(every.target, seed, b)
        rows = every.local_index(chosen).to(X.device)
        half = replace(plan.options, progress=False)
        if isinstance(half.min_support, int):
            half = replace(half, min_support=max(1, math.ceil(half.min_support * len(chosen) / n)))
        return search_plan(X[rows], target[rows], plan.on_rows(len(chosen), half))[0][: len(found)]

    workers = side_workers(n_halves, plan, X.device)  # (the plan's memory on all rows: a bound)
    with warnings.catch_warnings():  # the search's own warnings were given by the search on all rows
        warnings.simplefilter("ignore")
        for again in side_by_side(search_half, range(n_halves), workers):
            if again:
                hits += _near(masks, torch.stack([rs.mask(on) for rs in again]))
            bar.update(1)
    bar.close()
    return [h / n_halves for h in hits.tolist()]
