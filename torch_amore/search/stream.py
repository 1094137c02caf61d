"""Rules from a source of batches larger than memory: the search on each value's grid code.

:func:`prepare_stream` reads a re-iterable source of ``(X_batch, target_batch)`` (:mod:`torch_amore.data.stream_source`)
in passes: first the exact column facts, the target's count and declared categories (so uniform grids equal the
in-memory ones; quantile and k-means grids come from :mod:`torch_amore.grids.stream_sketch`), then each value's grid
code, column-major, with per (feature, grid) the smallest and largest observed value. A pass holds one batch; with
codes on disk, freed heap pages and the codes' mapped pages are handed back as it goes, so what stays resident does
not grow with the rows.

The strategies then count their nodes from the codes a chunk of rows at a time (:mod:`torch_amore.grids.box_counts`);
the polish, pruning by ``min_gain`` and the same-mask check each read the source once more. The rule lists equal
those of the in-memory search on the concatenated batches.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any

import torch

from torch_amore._utils import distributed as D
from torch_amore._utils.progress import progress_bar
from torch_amore._utils.transfer import tensor_on
from torch_amore.data import arguments as A
from torch_amore.data import validation as V
from torch_amore.data.column_stats import (
    ColumnStats,
    accumulate_facts,
    chunk_facts,
    chunk_len,
    finish_facts,
    original_units,
    work_dtype,
)
from torch_amore.data.stream_disk import DiskCodes
from torch_amore.data.stream_source import BatchSource
from torch_amore.grids.binning import Binned, encode_features
from torch_amore.grids.box_counts import ROW_CHUNK
from torch_amore.grids.edges import codes_from_thresholds
from torch_amore.grids.fine_grid import FineBinned, default_n_fine, fine_binning
from torch_amore.rules.masks import all_along, drop_same_mask, rule_set_masks
from torch_amore.rules.pruning import prune_rule_sets_batches
from torch_amore.rules.rules import RuleSet
from torch_amore.search.extractor import Extractor
from torch_amore.search.options import SearchOptions
from torch_amore.search.plan import SearchPlan
from torch_amore.search.readable import ReadableRules
from torch_amore.strategies.polish import SortedColumns

__all__ = ["StreamExtractor", "prepare_stream"]


#: Values of a batch taken at once by the passes: their temporaries (a few float64 or int64 copies) stay near
#: 4 MiB each whatever the batch size, small enough that the C library's heap holds few of them between pieces.
_PIECE = 1 << 19


class _Facts:
    """What pass 1 gathers: the column facts, the target's count and declared categories' distinct values."""

    def __init__(self, width: int, device: torch.device, units: tuple | None, cat_cols: list[int]) -> None:
        self.acc = self.raw_acc = None
        self.units = None
        if units is not None:
            self.units = tuple(tensor_on(v, dtype=torch.float64, device=device) for v in units)
        self.n_target = torch.zeros((), dtype=torch.int64, device=device)
        self.cat_cols = cat_cols
        self.distinct = [torch.empty(0, dtype=work_dtype(device), device=device) for _ in cat_cols]
        self.width, self.device = width, device

    def update(self, X: torch.Tensor, target: torch.Tensor) -> None:
        for part, t in zip(*(v.split(chunk_len(X.shape[0], X.shape[1], _PIECE)) for v in (X, target))):
            self._update(part, t)

    def _update(self, X: torch.Tensor, target: torch.Tensor) -> None:
        self.acc = accumulate_facts(self.acc, chunk_facts(X, torch.empty_like(X), True))
        if self.units is not None:
            raw = original_units(X, *self.units)
            self.raw_acc = accumulate_facts(self.raw_acc, chunk_facts(raw, torch.empty_like(raw), True))
        self.n_target += target.sum()
        for i, c in enumerate(self.cat_cols):
            if self.distinct[i].numel() <= V.MAX_CATEGORIES:  # beyond: an error anyway (too many categories)
                vals = X[:, c].to(self.distinct[i].dtype)
                self.distinct[i] = torch.unique(torch.cat([self.distinct[i], vals[~torch.isnan(vals)]]))

    def stats(self) -> ColumnStats:
        """The facts over all rows (and all ranks of a DDP run)."""
        accs = [self.acc] if self.units is None else [self.acc, self.raw_acc]
        return finish_facts(accs, self.width, work_dtype(self.device), self.device, True)


def _facts_pass(src: BatchSource, options: SearchOptions, progress: bool) -> tuple[_Facts, Any]:
    """Pass 1; returns the facts and the resolved (scale, offset, given feature types)."""
    facts = resolved = None
    bar = progress_bar(progress, desc="column facts", unit="rows")
    for X, target in src.batches("first (column facts)"):
        if facts is None:
            resolved = _resolve_columns(options, X)
            scale, offset, given = resolved
            in_units = given is None and (any(s != 1.0 for s in scale) or any(o != 0.0 for o in offset))
            cats = [] if given is None else [c for c, k in enumerate(given) if k == "cat"]
            facts = _Facts(X.shape[1], X.device, (scale, offset) if in_units else None, cats)
        facts.update(X, target)
        bar.update(X.shape[0])
        del X, target  # freed before the source makes the next batch
    bar.close()
    return facts, resolved


def _resolve_columns(options: SearchOptions, X: torch.Tensor) -> tuple[list[float], list[float], list[str] | None]:
    n_features = X.shape[1]
    scale = A.resolve_affine(options.feature_scale, "feature_scale", n_features, 1.0)
    offset = A.resolve_affine(options.feature_offset, "feature_offset", n_features, 0.0)
    given = None if options.feature_types is None else A.resolve_feature_types(options.feature_types, X[:0])
    return scale, offset, given


def _check_facts(facts: _Facts, stats: ColumnStats, columns: list[int], scale: list, offset: list, n_all: int) -> None:
    """The checks of :func:`torch_amore.search.extract.prepare` on the streamed facts."""
    host = stats.fetch()
    if any(host.has_inf):
        col = host.has_inf.index(True)
        raise ValueError(
            f"Expected `X` to hold finite values (NaN marks a missing value), but column {col} holds +-inf; replace "
            "it in the batches, e.g. X_batch.nan_to_num(posinf=..., neginf=...)."
        )
    n_features = len(host.lo)
    lo, hi = [host.lo[c] for c in columns], [host.hi[c] for c in columns]
    A.check_observed(lo, columns, n_features)
    A.check_range(lo, hi, [host.overflow[c] for c in columns], columns)
    A.check_units([host.spread[c] for c in columns], columns, scale, offset)
    n_t = int(D.all_reduce_sum(facts.n_target))
    if n_t == 0:
        raise ValueError("Expected `target` to select at least one sample, but the subgroup is empty.")
    if n_t == n_all:
        raise ValueError(
            f"Expected `target` to leave some samples out, but it covers all {n_all} samples: every rule would have "
            "ratio 1."
        )


def _stub(facts: _Facts, dtype: torch.dtype) -> torch.Tensor:
    """A few rows standing in for X where the binning reads values: NaN, except the distinct values of the
    declared categorical columns (what :func:`torch_amore.grids.binning.bin_features` collects from them)."""
    rows = max([1] + [d.numel() for d in facts.distinct])
    stub = torch.full((rows, facts.width), math.nan, dtype=dtype, device=facts.device)
    for c, d in zip(facts.cat_cols, facts.distinct):
        stub[: d.numel(), c] = d.to(dtype)
    return stub


class _Codes:
    """What pass 2 stores: the codes of the base (and fine) binning, the target, and per binning the extremes of the
    observed values per (feature, grid)."""

    def __init__(self, n: int, binned: Binned, fine: FineBinned | None, dtype: torch.dtype, disk: DiskCodes) -> None:
        device = binned.codes.device
        n_feat = len(binned.columns)
        self.binned, self.fine, self.disk = binned, fine, disk
        self.codes = disk.empty((n, n_feat), binned.codes.dtype, device)
        self.codes_t = None if fine is None else disk.empty((n_feat, n), torch.int16, device)
        self.target = disk.empty((n,), torch.bool, device)
        self.extremes = {"base": _no_extremes(n_feat, binned.n_bins_max + 1, dtype, device)}
        if fine is not None:
            self.extremes["fine"] = _no_extremes(n_feat, fine.n_bins_max + 1, dtype, device)
        self.offsets = {k: torch.arange(n_feat, device=device) * lo.shape[1] for k, (lo, _) in self.extremes.items()}
        self.rows = 0

    def update(self, X: torch.Tensor, target: torch.Tensor) -> None:
        """Store the codes of a batch, piece by piece; the pieces share their scratch (the codes, an int64 index and
        the fine codes' float work), freed with the batch."""
        step = chunk_len(X.shape[0], X.shape[1], _PIECE)
        rows, n_feat, device = min(step, X.shape[0]), len(self.binned.columns), X.device
        scratch = {
            "codes": torch.empty((rows, n_feat), dtype=self.codes.dtype, device=device),
            "index": torch.empty((rows, n_feat), dtype=torch.int64, device=device),
        }
        if self.fine is not None:
            scratch["fine"] = torch.empty((n_feat, rows), dtype=torch.int16, device=device)
            scratch["work"] = torch.empty((rows, n_feat), dtype=work_dtype(device), device=device)
        for part, t in zip(X.split(step), target.split(step)):
            self._update(part, t, scratch)

    def _update(self, X: torch.Tensor, target: torch.Tensor, scratch: dict[str, torch.Tensor]) -> None:
        n = X.shape[0]
        r0, r1 = self.rows, self.rows + n
        b = self.binned
        sub = X if b.columns == list(range(X.shape[1])) else X[:, b.columns]
        codes = scratch["codes"][:n]  # made in memory, then stored: the stored ones are never read back
        codes_from_thresholds(sub, b.thresholds, codes, b.n_bins_max)
        self.codes[r0:r1] = codes
        self.target[r0:r1] = target
        self._extend("base", codes, sub, scratch["index"])
        if self.fine is not None:
            fine_t = scratch["fine"][:, :n]
            self.fine.write_codes(sub, b, codes, fine_t, scratch["work"][:n])
            self.codes_t[:, r0:r1] = fine_t
            self._extend("fine", fine_t.T, sub, scratch["index"])
        self.rows = r1
        self.disk.trim()  # on disk: the pages just written leave the resident set

    def _extend(self, key: str, codes: torch.Tensor, sub: torch.Tensor, index: torch.Tensor) -> None:
        """Fold the values ``sub`` (n, F') into the extremes per (feature, cell) ``codes`` (n, F'); ``index``: int64
        scratch of at least n rows."""
        lows, highs = self.extremes[key]
        idx = torch.add(codes, self.offsets[key], out=index[: codes.shape[0]]).view(-1)
        values = sub.contiguous().view(-1)
        lows.view(-1).scatter_reduce_(0, idx, values, "amin")
        highs.view(-1).scatter_reduce_(0, idx, values, "amax")


def _no_extremes(n_feat: int, width: int, dtype: torch.dtype, device: torch.device) -> tuple:
    inf = torch.full((n_feat, width), math.inf, dtype=dtype, device=device)
    return inf, -inf


def prepare_stream(
    source: Any,
    options: SearchOptions | None = None,
    *,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    target_name: str = "target",
    name_prefix: str = "feature",
    codes_dir: str | os.PathLike | None = None,
    local_x: Any = None,
    counted: tuple[int, int | None] | None = None,
) -> StreamExtractor:
    """:func:`torch_amore.search.extract.prepare` for a source of batches: an extractor searching on the codes
    (``codes_dir``: in memory-mapped files of a fresh folder there, removed by :meth:`StreamExtractor.close`), whose
    :attr:`StreamExtractor.plan` comes from the first pass.

    Example:
        >>> import torch
        >>> X = torch.rand(1000, 3, generator=torch.Generator().manual_seed(0))
        >>> t = (X[:, 0] > 0.7) & (X[:, 2] < 0.5)
        >>> ex = prepare_stream(lambda: ((X[i : i + 128], t[i : i + 128]) for i in range(0, 1000, 128)))
        >>> ex.binned.codes.shape, ex.binned.codes.dtype, ex.n_total_target
        (torch.Size([1000, 3]), torch.uint8, 156)
    """
    o = SearchOptions() if options is None else options
    src = source if isinstance(source, BatchSource) else BatchSource(source)
    src.trim = True  # the heap's free pages handed back after each batch (the resident memory: codes and one pass)
    facts, (scale, offset, given) = _facts_pass(src, o, o.progress)
    stats = facts.stats()
    n_features = src.width
    if feature_names is None:
        feature_names = [f"{name_prefix}_{i}" for i in range(n_features)]
    # a bad `min_support` (or an exact search over its budget) is an error before the second pass
    plan = SearchPlan.make(
        src.rows,
        n_features,
        o,
        features=features,
        feature_names=feature_names,
        local_x=local_x,
        target_name=target_name,
        counted=counted,
    )
    columns, n_all = list(plan.columns), plan.n_rows
    _check_facts(facts, stats, columns, scale, offset, n_all)
    host = stats.fetch()
    types = given if given is not None else (host.units or host).kinds()
    kinds = [types[c] for c in columns]
    binned = encode_features(_stub(facts, src.dtype), columns, kinds, o.n_grids, "uniform", stats, host)
    if o.bin_strategy != "uniform":
        from torch_amore.grids.stream_sketch import sketch_thresholds

        sketch_thresholds(src, binned, o.bin_strategy, o.progress)
    fine = fine_binning(_stub(facts, src.dtype), binned, default_n_fine(n_all)) if o.strategy == "beam" else None
    disk = DiskCodes(codes_dir)
    try:
        store = _Codes(src.rows, binned, fine, src.dtype, disk)
        bar = progress_bar(o.progress, desc="codes", unit="rows", total=src.rows)
        for X, target in src.batches("codes"):
            store.update(X, target)
            bar.update(X.shape[0])
            del X, target  # freed before the source makes the next batch
        bar.close()
    except BaseException:
        disk.close()
        raise
    extractor = StreamExtractor(store, src, list(plan.names), scale, offset, target_name=target_name, disk=disk)
    extractor.progress, extractor.plan = o.progress, plan
    return extractor


class _StreamReadable(ReadableRules):
    """:class:`ReadableRules` whose observed neighbours come from the extremes stored in pass 2."""

    def __init__(
        self, extremes: dict, stub: torch.Tensor, names: Sequence[str], scale: Sequence[float], offset: Sequence[float]
    ) -> None:
        super().__init__(stub, names, scale, offset)  # ``stub``: X's dtype and device, no rows
        self.extremes = extremes
        if D.is_sharded():  # reduced over the shards of a DDP run once
            self.extremes = {k: (D.all_reduce_min(lo), D.all_reduce_max(hi)) for k, (lo, hi) in extremes.items()}

    def _neighbours(self, binned: Binned, edges: list[tuple[int, int]]) -> torch.Tensor:
        lows, highs = self.extremes["fine" if isinstance(binned, FineBinned) else "base"]
        dt = binned.thresholds.dtype
        feats = sorted({j for j, _ in edges})
        row = {j: r for r, j in enumerate(feats)}
        at = tensor_on(feats, device=lows.device)
        lows, highs = lows.index_select(0, at)[:, :-1].to(dt), highs.index_select(0, at)[:, :-1].to(dt)
        above = lows.flip(1).cummin(1).values.flip(1)  # the smallest value in grids >= g
        below = highs.cummax(1).values  # the largest value in grids <= g
        r = tensor_on([row[j] for j, _ in edges], device=lows.device)
        g = tensor_on([g for _, g in edges], device=lows.device)
        return torch.stack([below[r, g - 1], above[r, g]])


POLISH_MASK_BYTES = 1 << 24  #: Bytes of the rules' masks the streamed polish holds at once (a byte per rule and row).


class StreamExtractor(Extractor):
    """The search of :func:`torch_amore.search.extract.extract_rules` on codes stored by :func:`prepare_stream`; the
    steps that need observed values read the source again (the polish, pruning by ``min_gain``, the same-mask check)."""

    def __init__(
        self,
        store: _Codes,
        source: BatchSource,
        names: Sequence[str],
        scale: Sequence[float],
        offset: Sequence[float],
        target_name: str = "target",
        disk: DiskCodes | None = None,
    ) -> None:
        self.disk = disk
        self.row_chunk = ROW_CHUNK  # no row lists (8 bytes a row per node: more than the codes), in memory or on disk
        binned = replace(store.binned, codes=store.codes, codes_t=None)
        super().__init__(binned, store.target, names, scale, offset, target_name=target_name)
        self.source = source
        self._fine_binned = None
        if store.fine is not None:
            self._fine_binned = replace(store.fine, codes=store.codes_t.T, codes_t=store.codes_t, _known={})
        self.progress = False  # progress bars of the later passes (set by :func:`prepare_stream`)
        stub = torch.empty((0, source.width), dtype=source.dtype, device=source.device)
        self.readable = _StreamReadable(store.extremes, stub, self.names, self.scale, self.offset)

    def close(self) -> None:
        """Remove the codes' files, when they are on disk (the extractor is not to be used after)."""
        if self.disk is not None:
            self.disk.close()

    def fine(self, n_fine: int) -> Binned:
        """The beam's fine binning, stored in pass 2 (only for ``n_fine`` of :func:`default_n_fine`)."""
        fb = self._fine_binned
        if fb is None or fb.n_grids != n_fine:
            raise ValueError(
                f"Expected the fine grids stored while streaming ({None if fb is None else fb.n_grids} cells), but "
                f"the search asks for {n_fine}; streamed extraction supports the default n_fine."
            )
        return fb

    def gather(self, cols: list[int], what: str) -> torch.Tensor:
        """(N, len(cols)) the columns ``cols`` of the source, in its dtype, from one pass."""
        out = torch.empty((self.source.rows, len(cols)), dtype=self.source.dtype, device=self.source.device)
        at = tensor_on(cols, device=self.source.device)
        r0 = 0
        for X, _ in self._pass_of(what)():
            out[r0 : r0 + X.shape[0]] = X.index_select(1, at)
            r0 += X.shape[0]
        return out

    def polish_goals(self, rule_sets: list[RuleSet], min_support: int, goals: list[float | None]) -> list[RuleSet]:
        """:meth:`Extractor.polish` on the values of the rule sets' features, gathered in one pass (with codes on disk,
        sorted and scanned in bounded memory)."""
        cols = sorted({r.feature for rs in rule_sets for r in rs.rules})
        X = self.gather(cols, f"polish ({len(cols)} columns)")
        where = {c: i for i, c in enumerate(cols)}
        columns = None if self.row_chunk is None else SortedColumns(X, self.target, row_chunk=self.row_chunk)
        moved = [rs.renumbered(where) for rs in rule_sets]
        # a few rule sets at a time (each rule set's polish is its own): a byte per row for each of their rules
        depth = max(1, max(len(rs.rules) for rs in moved))
        per = max(1, POLISH_MASK_BYTES // max(1, X.shape[0] * depth))
        out = []
        for i in range(0, len(moved), per):
            out += self.polish_on(moved[i : i + per], X, min_support, goals[i : i + per], columns=columns)
        return [rs.renumbered(cols) for rs in out]

    def prune(self, rule_sets: list[RuleSet], options: SearchOptions) -> list[RuleSet]:
        """:func:`torch_amore.rules.pruning.prune_rule_sets_batches` on the source (one pass, when a rule set has two
        conditions or more: each rule's mask packed a bit a row, no columns gathered)."""
        return prune_rule_sets_batches(
            rule_sets,
            self._pass_of("min_gain"),
            self.n_total_target,
            min_gain=options.min_gain,
            min_confidence=options.min_confidence,
            device=self.source.device,
        )

    def _pass_of(self, what: str) -> Callable[[], Iterator[tuple[torch.Tensor, torch.Tensor]]]:
        """A zero-argument callable: one pass over the source's batches, with its progress bar."""

        def batches() -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
            bar = progress_bar(self.progress, desc=what, unit="rows", total=self.source.rows)
            for X, target in self.source.batches(what):
                yield X, target
                bar.update(X.shape[0])
                del X, target  # not held while the source makes the next batch
            bar.close()

        return batches

    def drop_same_mask(self, rule_sets: list[RuleSet]) -> list[RuleSet]:
        """:func:`torch_amore.rules.masks.drop_same_mask`, the masks compared batch by batch (one pass, when any two
        rule sets on the same or nested features share support and confidence)."""
        return drop_same_mask(rule_sets, None, compare=self._same_masks)

    def _same_masks(self, chosen: list[RuleSet], later: torch.Tensor, earlier: torch.Tensor) -> list[bool]:
        device = self.source.device
        later, earlier = later.to(device), earlier.to(device)
        equal = torch.ones(len(later), dtype=torch.bool, device=device)
        for X, _ in self._pass_of("same-mask check")():
            masks = rule_set_masks(chosen, X)
            equal &= all_along(masks[later] == masks[earlier], 1)
        return D.all_ranks(equal).tolist()


def extract_stream(
    source: Any,
    options: SearchOptions,
    *,
    features: Sequence[int] | None = None,
    feature_names: Sequence[str] | None = None,
    local_x: Any = None,
    target_name: str = "target",
    codes_dir: str | os.PathLike | None = None,
) -> list[RuleSet]:
    """:func:`torch_amore.search.extract.extract_rules` for a source of batches (``options`` resolved already): the same
    rule lists as the in-memory search on the concatenated batches.

    Example:
        >>> import torch
        >>> X = torch.rand(1000, 3, generator=torch.Generator().manual_seed(0))
        >>> t = (X[:, 0] > 0.7) & (X[:, 2] < 0.5)
        >>> batches = lambda: ((X[i : i + 100], t[i : i + 100]) for i in range(0, 1000, 100))
        >>> print(extract_stream(batches, SearchOptions(min_support=50))[0])
        IF feature_0 >= 0.7 AND feature_2 < 0.5 THEN target  (support=156, confidence=1.000, fitness=1.000)
    """
    from torch_amore.search.extractor import search_scope

    with search_scope("cpu"):  # one thread for small operations, no autograd bookkeeping
        extractor = prepare_stream(
            source,
            options,
            features=features,
            feature_names=feature_names,
            target_name=target_name,
            codes_dir=codes_dir,
            local_x=local_x,
        )
        try:
            return search_stream(extractor)[0]
        finally:
            extractor.close()


def search_stream(extractor: StreamExtractor) -> tuple[list[RuleSet], int]:
    """The search of :func:`extract_stream` on a prepared extractor, as its plan says: the rule sets
    (``min_confidence`` filtered) and the ``min_support`` count they were searched with."""
    from torch_amore.search.extractor import search_scope

    plan = extractor.plan
    options = plan.options
    with search_scope("cpu"):
        local = plan.local_x
        local_codes = extractor.binned.encode_sample(local) if local is not None else None
        min_s = plan.support_count(extractor.n_total_target)
        rule_sets = extractor.extract(options, min_support=min_s, local_codes=local_codes)
    if options.min_confidence is not None:
        rule_sets = [rs for rs in rule_sets if rs.confidence >= options.min_confidence]
    return rule_sets, min_s
