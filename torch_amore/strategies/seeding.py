"""Seeds for the beam strategy: the best pairs of features on a coarse grid, found by one-hot matrix products.

A beam that ranks single conditions by their own fitness drops conditions that are weak alone but strong together
(two one-sided cuts on a latent layer, say). Before the beam's second length, the 2-D target and non-target counts of
*every* pair of features on a coarse equal-frequency grid (``SEED_GRIDS`` cells per feature, cut from the fine grid's
histogram: no sort) come from one-hot matrix products (:func:`torch_amore.grids.pair_counts.pair_histograms`); every
rectangle of every pair is scored by fitness, and the conditions of the best ``n_pairs`` pairs join the beam
(:meth:`torch_amore.strategies.beam.BeamSearch.run`'s ``seeds``), where refinement on the fine grid sharpens them. The
exact search (:mod:`torch_amore.strategies.exact`) proves what this finds on its grid; here only a good start is wanted,
so
the
rectangles need not be tight. The default strategy seeds only searches for rule sets of two conditions
(``max_length=2``: longer ones it crowds).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch

from torch_amore._utils import counting
from torch_amore._utils import distributed as D
from torch_amore.grids.fine_grid import FineBinned
from torch_amore.grids.pair_counts import pair_histograms
from torch_amore.rules.metrics import base_rate, fitness_value

if TYPE_CHECKING:
    from torch_amore.strategies.all_rows import AllRows

#: Equal-frequency cells per numeric feature of the seed search.
SEED_GRIDS = 5
#: Features whose pairs the seed search scores: those with the best one-sided condition by weighted relative
#: accuracy (hits - base rate x support: broad regions of high lift, the halves of a good pair).
SEED_FEATURES = 64
#: The seed search runs when N x F (its histogram pass) is at most this.
SEED_BUDGET = 1 << 26
#: Values (features x rows) counted at once: bounded working memory.
_CHUNK = 1 << 22


def seed_affordable(n_rows: int, n_features: int) -> bool:
    """Whether :func:`pair_seeds` runs on data of this size (see :data:`SEED_BUDGET`).

    Example:
        >>> seed_affordable(10_000, 128), seed_affordable(100_000, 1_000)
        (True, False)
    """
    return n_features >= 2 and n_rows * n_features <= SEED_BUDGET


def _fine_counts(codes_t: torch.Tensor, width: int, target_rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(F, W) counts of all and of the target samples (``target_rows``) per fine grid of ``codes_t`` (F, N), over all
    DDP ranks; features in chunks of about :data:`_CHUNK` values (bounded memory)."""
    n_feat, n = codes_t.shape
    device = codes_t.device
    offsets = torch.arange(n_feat, dtype=torch.int32, device=device)[:, None] * (width + 1)
    every = torch.zeros(n_feat * (width + 1), dtype=torch.long, device=device)
    hits = torch.zeros_like(every)
    step = max(1, _CHUNK // max(1, n))
    for f0 in range(0, n_feat, step):
        f1 = min(n_feat, f0 + step)
        # int32 indices: half the traffic of int64, and bincount takes them
        idx = torch.add(codes_t[f0:f1], offsets[f0:f1] - f0 * (width + 1))
        size = (f1 - f0) * (width + 1)
        part = slice(f0 * (width + 1), f1 * (width + 1))
        every[part] = counting.bincount(idx.reshape(-1), size)
        hits[part] = counting.bincount(idx.index_select(1, target_rows).reshape(-1), size)
    return tuple(D.all_reduce_sum(c.view(n_feat, width + 1)[:, :width].contiguous()) for c in (every, hits))


def _promising(
    counts: torch.Tensor, hits: torch.Tensor, n_keep: int, others: torch.Tensor | None = None
) -> torch.Tensor:
    """The ``n_keep`` features (rows of ``counts``) whose best one-sided condition has the highest hits - rate x
    support; the rate from the largest counts of these features and of ``others`` ((2, F') non-missing samples and
    target samples of the other features), if given."""
    cb, ct = counts.cumsum(1).double(), hits.cumsum(1).double()
    total, t_total = cb[:, -1:], ct[:, -1:]
    n_max, t_max = total.max(), t_total.max()
    if others is not None and others.shape[1]:
        n_max, t_max = torch.maximum(n_max, others[0].max().double()), torch.maximum(t_max, others[1].max().double())
    rate = base_rate(t_max, n_max)  # on the device: no host sync
    below = ct - rate * cb  # x < cut
    above = (t_total - ct) - rate * (total - cb)  # x >= cut
    score = torch.maximum(below, above).amax(1)
    return torch.sort(torch.argsort(-score, stable=True)[:n_keep]).values


def _coarse_lut(counts: torch.Tensor, n_coarse: int) -> torch.Tensor:
    """(F, W + 1) coarse cell of every fine cell of numeric features (non-decreasing; ``n_coarse`` for missing
    values)."""
    cum = counts.cumsum(1)
    total = cum[:, -1:].clamp(min=1)
    mid = 2 * cum - counts  # twice the rank of each cell's middle sample
    lut = torch.div(mid * n_coarse, 2 * total, rounding_mode="floor").clamp(max=n_coarse - 1)
    return torch.cat([lut, torch.full_like(lut[:, :1], n_coarse)], 1)


def _counts(
    numeric_codes: torch.Tensor,
    width: int,
    t_rows: torch.Tensor,
    numeric_t: torch.Tensor,
    all_rows: AllRows | None,
    target_counts: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(F', W) counts of all and of the target rows per fine grid of the numeric features: counted, or read from
    ``all_rows`` and ``target_counts`` (the same integers)."""
    if all_rows is None:
        return _fine_counts(numeric_codes, width, t_rows)
    return all_rows.counts[numeric_t], target_counts[numeric_t]


@functools.lru_cache(maxsize=8)
def _in_rectangle(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(G G, nI nI) 0/1: whether each cell of a pair of features lies in each rectangle (``G`` = :data:`SEED_GRIDS`,
    the ``nI`` ranges of :func:`torch.triu_indices`), cached."""
    s, e = torch.triu_indices(SEED_GRIDS + 1, SEED_GRIDS + 1, 1, device=device)
    cells = torch.arange(SEED_GRIDS, device=device)
    inside = ((cells >= s[:, None]) & (cells < e[:, None])).to(dtype)  # (nI, G)
    return torch.einsum("ai,bj->ijab", inside, inside).reshape(SEED_GRIDS**2, -1)


def rectangle_counts(h: torch.Tensor, *, exact32: bool = False) -> torch.Tensor:
    """(P, nI, nI) counts of every rectangle of the (P, G, G) 2-D cell counts ``h`` (``G`` = :data:`SEED_GRIDS`): a
    range of cells of each feature, ``nI`` ranges per feature (``s < e`` of :func:`torch.triu_indices`), in ``h``'s
    dtype: one matrix product with the cells' membership, in float32 with ``exact32`` (every count below 2**24) on
    the CPU, else float64 (sums of nonnegative integers, none above the total: exact; a GPU may multiply float32 in
    TF32, which rounds counts above 2**11).

    Example:
        >>> h = torch.zeros(1, SEED_GRIDS, SEED_GRIDS, dtype=torch.long)
        >>> h[0, 0, 0], h[0, 1, 2] = 3, 4
        >>> rectangle_counts(h).amax().item(), rectangle_counts(h)[0, 0, 0].item()  # all cells; cell (0, 0)
        (7, 3)
    """
    n_int = SEED_GRIDS * (SEED_GRIDS + 1) // 2
    dt = torch.float32 if exact32 and h.device.type == "cpu" else torch.float64
    out = h.reshape(h.shape[0], -1).to(dt) @ _in_rectangle(dt, h.device)
    return out.view(h.shape[0], n_int, n_int).to(h.dtype)


def pair_seeds(
    fine: FineBinned,
    target: torch.Tensor,
    min_support: int,
    n_pairs: int,
    *,
    all_rows: AllRows | None = None,
    target_counts: torch.Tensor | None = None,
) -> list[tuple[tuple[int, int, int], tuple[int, int, int]]]:
    """Pairs of conditions ``(feature, g_low, g_high)`` on ``fine``'s grids: the best coarse rectangles of the
    ``n_pairs`` pairs of numeric features (among the :data:`SEED_FEATURES` most promising) whose best rectangle
    (support >= ``min_support``, a proper interval on both) has the highest fitness.

    ``all_rows`` (:class:`torch_amore.strategies.all_rows.AllRows` of ``fine``) gives the counts of all
    rows instead of counting them, and ``target_counts`` (with it: the (F, W) target rows per fine grid) those of the
    target: the same seeds.

    Example:
        >>> import torch
        >>> from torch_amore.grids.fine_grid import fine_binning
        >>> from torch_amore.grids.binning import bin_features
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(3000, 4, generator=g, dtype=torch.float64)
        >>> target = (X[:, 1] < 0.33) & (X[:, 3] > 0.67)
        >>> fine = fine_binning(X, bin_features(X, [0, 1, 2, 3], ["float"] * 4), 256)
        >>> [[j for j, _, _ in pair] for pair in pair_seeds(fine, target, 50, 1)]
        [[1, 3]]
    """
    # categorical features never seed: only the numeric ones are counted and paired (a one-hot-heavy table has few)
    numeric_ids = [j for j, cat in enumerate(fine.is_cat_host) if not cat]
    if len(numeric_ids) < 2:
        return []
    device = fine.codes_t.device
    numeric_t = torch.tensor(numeric_ids, device=device)
    numeric_codes = fine.codes_t if len(numeric_ids) == len(fine.is_cat_host) else fine.codes_t[numeric_t]
    t_rows = torch.nonzero(target, as_tuple=True)[0]
    counts, hits = _counts(numeric_codes, fine.n_bins_max, t_rows, numeric_t, all_rows, target_counts)
    others = None  # the ranking's base rate counts every feature (moot where every numeric feature is kept)
    if SEED_FEATURES < len(numeric_ids) < len(fine.is_cat_host):
        cats = torch.tensor([j for j, cat in enumerate(fine.is_cat_host) if cat], device=device)
        present = fine.codes_t[cats] < fine.n_bins_max  # not missing
        others = D.all_reduce_sum(torch.stack([present.sum(1), present.index_select(1, t_rows).sum(1)]))
    rows_kept = _promising(counts, hits, SEED_FEATURES, others)  # rows of ``numeric_codes``, increasing
    feats = numeric_t[rows_kept]
    codes_t = numeric_codes[rows_kept]
    n_feat = codes_t.shape[0]
    full_lut = _coarse_lut(counts, SEED_GRIDS)  # of all rows' counts: independent of the target
    lut = full_lut[rows_kept]
    exact32 = D.global_count(codes_t.shape[1]) < (1 << 24)
    jj, kk = torch.triu_indices(n_feat, n_feat, 1, device=device)
    every = None if all_rows is None else all_rows.pair_supports(tuple(numeric_ids), full_lut, exact32)
    if every is None:  # the 2-D counts of all and of the target rows in the coarse cells of the kept features
        grams = [pair_histograms(codes_t, lut, SEED_GRIDS, c, exact32=exact32) for c in (None, t_rows)]
        pairs = (D.all_reduce_sum(g)[jj, :, kk, :] for g in grams)  # (P, G, G) of each pair
        sup, hits = (rectangle_counts(g, exact32=exact32) for g in pairs)
    else:  # all rows' rectangles of every numeric pair, made once (those of the kept pairs); the target's counted
        a, b, m = rows_kept[jj], rows_kept[kk], len(numeric_ids)
        sup = every.index_select(0, a * (2 * m - a - 1) // 2 + b - a - 1)  # triu_indices' order of (a, b)
        gram = D.all_reduce_sum(pair_histograms(codes_t, lut, SEED_GRIDS, t_rows, exact32=exact32))
        hits = rectangle_counts(gram[jj, :, kk, :], exact32=exact32)
    s, e = torch.triu_indices(SEED_GRIDS + 1, SEED_GRIDS + 1, 1, device=device)
    proper = ~((s == 0) & (e == SEED_GRIDS))  # a cell range short of everything
    improper = ~(proper[:, None] & proper[None, :])  # (nI, nI)
    value = fitness_value(hits, sup).masked_fill_((sup < min_support) | improper, -(1 << 62)).flatten(1)
    best, arg = value.max(1)
    order = torch.argsort(-best, stable=True)[:n_pairs]
    n_int = s.numel()
    pick = arg[order]
    rows = torch.stack([jj[order], kk[order]], 1)  # (P, 2) rows of ``feats``
    ranges = torch.stack([pick // n_int, pick % n_int], 1)  # (P, 2) coarse interval of each
    # the first and last fine cell of each coarse range: the cells before it, counted on the non-decreasing lut
    # (numeric features: their ``n_fine`` grids)
    cells_of = lut[rows][:, :, : fine.n_grids]  # (P, 2, n_fine)
    lo = (cells_of < s[ranges][..., None]).sum(2)
    hi = (cells_of < e[ranges][..., None]).sum(2) - 1
    found = (best[order] > -(1 << 62)).long()
    table = torch.stack([found, feats[rows[:, 0]], lo[:, 0], hi[:, 0], feats[rows[:, 1]], lo[:, 1], hi[:, 1]], 1)
    out = []
    for ok, j, lo_j, hi_j, k, lo_k, hi_k in table.tolist():  # with the target rows, the two host syncs
        if ok:
            out.append(((j, lo_j, hi_j), (k, lo_k, hi_k)))
    return out
