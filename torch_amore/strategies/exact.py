"""The ``"exact"`` search strategy: the provably best rule sets on the search's grid.

The beam and paper strategies are heuristics. This strategy enumerates, implicitly, every rule set of at most
``max_length`` conditions on the grid the user chose (``n_grids``, ``bin_strategy``) and returns the ``top_k`` of
highest fitness with at least ``min_support`` samples, so a user knows how far a heuristic result is from the best
rule set the grid can express.

The family searched
-------------------
A condition on a numeric feature is any interval of consecutive grids, a condition on a categorical feature any single
category. Empty grids are merged into their neighbours first (they only give other names to the same samples), and a
condition covering every grid that holds a sample (no condition at all) is left out. A rule set is one condition on
each of 1 to ``max_length`` distinct features, and counts only when it is *tight* (each interval's first and last
grid hold a sample of the rule set: shrinking it would change the samples) and *non-idle* (dropping any condition
would add samples). Every set of samples a box of grids can select is thereby reached by exactly one rule set per set
of features. Ties in fitness go to the smaller feature indices, then the smaller grids.

How
---
* ``max_length <= 2``: the target and non-target counts of every pair of features on their two grids (2-D
  histograms, built in chunks by ``bincount`` or, for small grids, one one-hot matrix product; summed across DDP
  ranks) give every rectangle's counts by 2-D prefix sums. For each pair and each interval of the first feature the
  best interval of the second (a maximum-subarray problem with a support constraint, solved for all rows at once with
  ``cummin`` + ``searchsorted``) bounds what that row can reach; only the rows whose bound reaches the ``top_k``-th
  best value found so far are enumerated in full (in batches, best bound first). Where a cheaper bound (the sum of
  the second feature's grids of positive value) leaves many rows, the :data:`_PROBE` rows of highest cheap bound are
  enumerated first: the value they reach prunes most of the others before their exact bounds are computed. No
  Python loop over pairs or cuts; a few host syncs per chunk of pairs.
* ``max_length = 3``: branch and bound. Every tight rectangle of two features is a node; adding a condition can only
  drop samples, so a rule set's fitness never exceeds its target count / ``|target|`` (the optimistic estimate,
  ``rules.metrics.fitness_bound``), and nodes are expanded best estimate first, in batches, only while their estimate
  reaches the ``top_k``-th best value found. The work is capped by ``exact_budget``: when the cap is hit, a warning
  says so and the result carries the best estimate not explored (:attr:`ExactResult.bound`).

The work is estimated up front at every ``max_length`` (:func:`torch_amore.strategies.exact_cost.estimate_cost`, in
grid-cell updates) and a search over ``exact_budget`` is refused with the estimate and how to narrow it (fewer
``features``, fewer ``n_grids``); at ``max_length`` 3 the branch and bound gets the budget left and stops, saying so,
if it runs out.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from torch_amore._utils import distributed as D
from torch_amore.grids.binning import Binned
from torch_amore.grids.pair_counts import ExactGrid, PairCounts, compress
from torch_amore.grids.ratios import group_grid_counts
from torch_amore.rules.metrics import fitness_bound, fitness_value, recall
from torch_amore.strategies.best_interval import packed_keys
from torch_amore.strategies.exact_cost import check_budget, pair_count

#: Value of an infeasible rule set (values are ``2 * hits - support``, integers far from it).
_NEG = -(1 << 62)
#: Elements of the temporary tables handled at once.
_CHUNK = 1 << 22
#: Prune by the optimistic estimates (tests switch it off to show that pruning never changes the answer).
_PRUNE = True
#: Rows (pair, interval of its first feature) of highest cheap bound that :func:`_pairs` enumerates in full before it
#: bounds the others: the best pairs usually lie among them, and the bar they raise prunes most of the rest.
_PROBE = 64


def _bar(kth: int) -> int:
    """The value a branch's optimistic estimate must reach to be explored."""
    return kth if _PRUNE else _NEG


@dataclass
class ExactResult:
    """The best rule sets on the grid.

    Attributes:
        boxes: ``(hits, support, conditions)`` best first; a condition is ``(feature, g_low, g_high)`` in the original
            grids of the :class:`~torch_amore.grids.binning.Binned` searched (``feature`` indexes its searched
            features).
        complete: whether the search was exhaustive (False when ``exact_budget`` stopped it).
        bound: an upper bound on the value ``2 * hits - support`` of every rule set not examined (``None`` when
            complete).
        shorter: for each shorter ``max_length`` (1, then 2), the ``boxes`` a search at that length returns: the
            pool before the longer rule sets joined it (always complete).
    """

    boxes: list[tuple[int, int, tuple[tuple[int, int, int], ...]]]
    complete: bool = True
    bound: int | None = None
    shorter: list[list[tuple[int, int, tuple[tuple[int, int, int], ...]]]] = field(default_factory=list)


def intervals(n_max: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every interval of grids ``s..e-1`` as prefix indices ``(s, e)``, ``0 <= s < e <= n_max``, in order."""
    s, e = torch.triu_indices(n_max + 1, n_max + 1, 1, device=device)
    return s, e


def valid_intervals(grid: ExactGrid, feats: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """(len(feats), n_intervals) which intervals are conditions of each feature: within its grids, not all of them,
    a single category for a categorical feature."""
    nb = grid.n_bins[feats][:, None]
    cat = grid.is_cat[feats][:, None]
    return (e <= nb) & ~((s == 0) & (e == nb)) & (~cat | (e == s + 1))


# ------------------------------------------------------------------------------------------------------- the pool


def _rank(pool: torch.Tensor, top_k: int, spans: tuple[int, int, int] | None = None) -> torch.Tensor:
    """The ``top_k`` rows of ``pool`` (value, hits, support, then (feature, s, e) per condition, -1 unused): highest
    value, then smaller features, then smaller cuts. ``spans``: (samples, features, grids) bounding the columns, when
    known: the keys are then packed into as few int64 keys as fit (one sort instead of one per key)."""
    if pool.shape[0] == 0:
        return pool
    n_cond = (pool.shape[1] - 3) // 3
    keys = [-pool[:, 0]] + [pool[:, 3 + 3 * c] for c in range(n_cond)]
    keys += [pool[:, 4 + 3 * c + d] for c in range(n_cond) for d in (0, 1)]
    if spans is not None:
        n_rows, n_feat, n_max = spans
        bounds = [(-n_rows, n_rows)] + [(-1, n_feat)] * n_cond + [(-1, n_max + 1)] * (2 * n_cond)
        keys = packed_keys([(key, lo, hi) for key, (lo, hi) in zip(keys, bounds)])
    order = torch.arange(pool.shape[0], device=pool.device)
    for key in reversed(keys):
        order = order[torch.argsort(key[order], stable=True)]
    return pool[order[:top_k]]


def _merge(
    pool: torch.Tensor, new: torch.Tensor, top_k: int, spans: tuple[int, int, int] | None = None
) -> tuple[torch.Tensor, int]:
    """The ``top_k`` best of both, and the value a rule set must reach to enter (``_NEG`` while fewer)."""
    pool = _rank(torch.cat([pool, new]), top_k, spans)
    kth = int(pool[top_k - 1, 0]) if pool.shape[0] >= top_k else _NEG
    return pool, kth


def _rows(
    values: torch.Tensor, hits: torch.Tensor, support: torch.Tensor, conds: list[torch.Tensor], n_cond: int
) -> torch.Tensor:
    """Pool rows from flat tensors; ``conds`` holds a (feature, s, e) triple of tensors per condition."""
    fill = torch.full_like(values, -1)
    cols = [values, hits, support] + conds + [fill] * (3 * n_cond - len(conds))
    return torch.stack(cols, 1)


# ----------------------------------------------------------------------------------------------------- singles


def _singles(grid: ExactGrid, s: torch.Tensor, e: torch.Tensor, min_support: int):
    """(F, n_intervals) support, hits, value (``_NEG`` where no condition or too small)."""
    feats = torch.arange(grid.n_bins.numel(), device=s.device)
    sup = grid.cb[:, e] - grid.cb[:, s]
    hits = grid.ct[:, e] - grid.ct[:, s]
    ok = valid_intervals(grid, feats, s, e) & (sup >= min_support)
    return sup, hits, torch.where(ok, fitness_value(hits, sup), torch.full_like(sup, _NEG))


# ------------------------------------------------------------------------------------------------------- pairs


def _row_bounds(cb: torch.Tensor, ct: torch.Tensor, min_support: int) -> torch.Tensor:
    """For rows of cumulative counts over a feature's grids, the best value ``2 * hits - support`` of any interval
    with ``support >= min_support`` (a relaxation: no interval is excluded), ``_NEG`` when none."""
    pw = fitness_value(ct, cb)
    last = torch.searchsorted(cb, cb - min_support, right=True) - 1  # the last start leaving min_support samples
    run_min = torch.cummin(pw, 1).values.gather(1, last.clamp(min=0))
    best = (pw - run_min).masked_fill_(last < 0, torch.iinfo(pw.dtype).min).amax(1).long()
    return best.masked_fill_(best == torch.iinfo(pw.dtype).min, _NEG)


@dataclass
class _Context:
    grid: ExactGrid
    s: torch.Tensor
    e: torch.Tensor
    sup1: torch.Tensor  # (F, nI) single supports
    hits1: torch.Tensor
    val1: torch.Tensor
    valid: torch.Tensor  # (F, nI)
    min_support: int
    top_k: int
    n_cond: int
    spans: tuple[int, int, int] | None = None  # bounds of the pool's columns (see :func:`_rank`)


def _pair_candidates(ctx: _Context, ctot, ctgt, p, i, j, k, kth: int) -> torch.Tensor:
    """Every tight, non-idle rule set of the rows ``(pair p, interval i of j)`` reaching ``kth``, as pool rows."""
    s, e = ctx.s, ctx.e
    sj, ej = s[i], e[i]
    cbk = _interval_rows(ctot, p, sj, ej).long()  # (R, W) cumulative over k's grids
    ctk = _interval_rows(ctgt, p, sj, ej).long()
    face_lo = _interval_rows(ctot, p, sj, sj + 1)  # the rows of j's first grid
    face_hi = _interval_rows(ctot, p, ej - 1, ej)
    sup = cbk[:, e] - cbk[:, s]
    hits = ctk[:, e] - ctk[:, s]
    value = fitness_value(hits, sup)
    ok = ctx.valid[k] & (sup >= ctx.min_support) & (value >= kth)
    ok &= (sup < ctx.sup1[j, i][:, None]) & (sup < ctx.sup1[k])  # non-idle
    ok &= (cbk[:, s + 1] - cbk[:, s] > 0) & (cbk[:, e] - cbk[:, e - 1] > 0)  # tight on k
    ok &= (face_lo[:, e] - face_lo[:, s] > 0) & (face_hi[:, e] - face_hi[:, s] > 0)  # tight on j
    rr, ik = torch.nonzero(ok, as_tuple=True)
    first, second = (j[rr], sj[rr], ej[rr]), (k[rr], s[ik], e[ik])
    swap = first[0] > second[0]  # the smaller feature first
    conds = [torch.where(swap, b, a) for a, b in zip(first, second)] + [
        torch.where(swap, a, b) for a, b in zip(first, second)
    ]
    return _rows(value[rr, ik], hits[rr, ik], sup[rr, ik], conds, ctx.n_cond)


def _interval_rows(c: torch.Tensor, p: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``c[p, e] - c[p, s]`` for cumulative 2-D counts ``c`` (P, W, W): per entry, the cumulative counts over the
    second feature's grids of the samples in the first feature's grids ``s..e-1``. Rows taken from the flattened
    counts by one index each (faster on CPU than indexing two dimensions, or than ``index_select``)."""
    flat = c.reshape(-1, c.shape[2])
    base = p * c.shape[1]
    return flat[base + e] - flat[base + s]


def _promising_order(val1: torch.Tensor) -> torch.Tensor:
    """The features, those with the best single conditions first: their pairs come first, so that the first chunk
    raises the bar that prunes the rest (the result does not depend on the order)."""
    return torch.argsort(-val1.amax(1), stable=True)


def _pairs(ctx: _Context, counts: PairCounts, pool: torch.Tensor, kth: int, keep: bool):
    """Add the best pairs to ``pool``; returns (pool, kth, all cumulative counts if ``keep``)."""
    grid = ctx.grid
    n_feat = grid.n_bins.numel()
    device = ctx.s.device
    # the triples' search indexes the kept counts by pair: then the plain order
    order = torch.arange(n_feat, device=device) if keep else _promising_order(ctx.val1)
    n_pairs = pair_count(n_feat)
    n_int, w = ctx.s.numel(), grid.n_max + 1
    per = max(1, min(_CHUNK // (w * w), _CHUNK // max(1, grid.n_rows)))  # same on every DDP rank
    kept = []
    alive = ctx.valid & (ctx.sup1 >= ctx.min_support)
    # a small first chunk of promising pairs lifts kth early; when every pair fits one chunk, one pass counts them all
    first = per if keep or n_pairs <= per else max(1, min(per, 64))
    starts = [0] + list(range(first, n_pairs, per))
    for p0, p1 in zip(starts, starts[1:] + [n_pairs]):
        j_c, k_c, ctot, ctgt = counts.prefix(order, p0, p1)
        if keep:
            kept.append((ctot, ctgt))
        row_ok = alive[j_c] & (fitness_bound(ctx.hits1[j_c]) >= _bar(kth))  # optimistic: a pair has at most j's hits
        p, i = torch.nonzero(row_ok, as_tuple=True)
        # a cheap bound first (the sum of the grids of positive value, from the per-grid values 2 * hits - support
        # cumulated over j's grids only), then the exact row bound on the rows it keeps
        cell_value = fitness_value(ctgt.diff(dim=2), ctot.diff(dim=2))  # (P, W + 1, W)
        gain = _interval_rows(cell_value, p, ctx.s[i], ctx.e[i]).clamp_(min=0).sum(1)
        hopeful = torch.nonzero(gain >= _bar(kth), as_tuple=True)[0]
        if _PRUNE and hopeful.numel() > 4 * _PROBE:  # many: those of highest gain first, to raise kth before bounds
            probe = hopeful[torch.topk(gain[hopeful], _PROBE, sorted=False).indices]
            new = _pair_candidates(ctx, ctot, ctgt, p[probe], i[probe], j_c[p[probe]], k_c[p[probe]], kth)
            pool, kth = _merge(pool, new, ctx.top_k, ctx.spans)
            gain[probe] = torch.iinfo(gain.dtype).min  # enumerated in full: never again
            hopeful = torch.nonzero(gain >= _bar(kth), as_tuple=True)[0]
        if not hopeful.numel():  # (its length is known on the host: nonzero synchronised)
            continue
        p, i = p[hopeful], i[hopeful]
        cb_rows, ct_rows = (_interval_rows(c, p, ctx.s[i], ctx.e[i]) for c in (ctot, ctgt))  # (R, W) over k's grids
        bounds = _row_bounds(cb_rows, ct_rows, ctx.min_support)
        best = torch.argsort(bounds, descending=True, stable=True)
        p, i, bounds = p[best], i[best], bounds[best]
        batch, start = 64, 0  # small first: the best rows usually hold the winners, and lift kth for the rest
        while start < p.numel() and int(bounds[start]) >= _bar(kth):
            pb, ib = p[start : start + batch], i[start : start + batch]
            new = _pair_candidates(ctx, ctot, ctgt, pb, ib, j_c[pb], k_c[pb], kth)
            pool, kth = _merge(pool, new, ctx.top_k, ctx.spans)
            start += batch
            batch = min(4 * batch, max(1, _CHUNK // (4 * n_int)))
    all_counts = None
    if keep and kept:
        all_counts = (torch.cat([c[0] for c in kept]), torch.cat([c[1] for c in kept]))
    return pool, kth, all_counts


# ------------------------------------------------------------------------------------------------------ triples


def _pair_index(j: torch.Tensor, k: torch.Tensor, n_feat: int) -> torch.Tensor:
    """Index of the pair ``(j, k)``, ``j < k``, in ``torch.triu_indices(n_feat, n_feat, 1)`` order."""
    return j * n_feat - j * (j + 1) // 2 + (k - j - 1)


def _nodes(ctx: _Context, ctot: torch.Tensor, ctgt: torch.Tensor, kth: int):
    """Tight rectangles of every pair with support >= min_support and hits >= kth, best hits first, as
    (hits, support, pair, interval of j, interval of k)."""
    n_int = ctx.s.numel()
    n_feat = ctx.grid.n_bins.numel()
    jj, kk = torch.triu_indices(n_feat, n_feat, 1, device=ctx.s.device)
    s, e = ctx.s, ctx.e
    sa, ea, sb, eb = s[:, None], e[:, None], s[None, :], e[None, :]
    per = max(1, _CHUNK // (n_int * n_int))
    out = []
    faces = ((sa, sa + 1, sb, eb), (ea - 1, ea, sb, eb), (sa, ea, sb, sb + 1), (sa, ea, eb - 1, eb))
    for p0 in range(0, jj.numel(), per):
        j, k = jj[p0 : p0 + per], kk[p0 : p0 + per]
        cp = ctot[p0 : p0 + per]
        sup = _rect_batch(cp, sa, ea, sb, eb).long()
        hits = _rect_batch(ctgt[p0 : p0 + per], sa, ea, sb, eb).long()
        ok = ctx.valid[j][:, :, None] & ctx.valid[k][:, None, :] & (sup >= ctx.min_support) & (hits >= _bar(kth))
        for a0, a1, b0, b1 in faces:
            ok &= _rect_batch(cp, a0, a1, b0, b1) > 0  # tight
        q, ia, ib = torch.nonzero(ok, as_tuple=True)
        out.append(torch.stack([hits[q, ia, ib], sup[q, ia, ib], q + p0, ia, ib], 1))
    nodes = torch.cat(out) if out else torch.zeros(0, 5, dtype=torch.long, device=ctx.s.device)
    order = torch.argsort(-nodes[:, 0], stable=True)
    return nodes[order]


def _rect_batch(c: torch.Tensor, a0, a1, b0, b1) -> torch.Tensor:
    """Counts of the rectangles ``[a0, a1) x [b0, b1)`` (broadcast index tensors) of every pair of ``c`` (P, W, W)."""
    a0, a1, b0, b1 = (t.expand(torch.broadcast_shapes(a0.shape, b0.shape)) for t in (a0, a1, b0, b1))
    flat = c.reshape(c.shape[0], -1)
    w = c.shape[2]

    def at(a, b):
        return flat[:, (a * w + b).reshape(-1)].view(c.shape[0], *a.shape)

    return at(a1, b1) - at(a0, b1) - at(a1, b0) + at(a0, b0)


def _expand(ctx: _Context, nodes: torch.Tensor, target: torch.Tensor, ctot: torch.Tensor, kth: int) -> torch.Tensor:
    """Every tight, non-idle triple ``node AND feature m`` (``m`` after the node's features) reaching ``kth``."""
    grid, s, e = ctx.grid, ctx.s, ctx.e
    n_feat, device = grid.n_bins.numel(), s.device
    jj, kk = torch.triu_indices(n_feat, n_feat, 1, device=device)
    p, ia, ib = nodes[:, 2], nodes[:, 3], nodes[:, 4]
    j, k = jj[p], kk[p]
    sj, ej, sk, ek = s[ia], e[ia], s[ib], e[ib]
    cj, ck = grid.codes_t[j], grid.codes_t[k]  # (G, N)
    in_j = (cj >= sj[:, None]) & (cj < ej[:, None])
    in_k = (ck >= sk[:, None]) & (ck < ek[:, None])
    node = in_j & in_k
    groups = torch.stack(
        [
            node,
            node & (cj == sj[:, None]),
            node & (cj == ej[:, None] - 1),
            node & (ck == sk[:, None]),
            node & (ck == ek[:, None] - 1),
        ]
    )
    n_groups = groups.shape[0] * groups.shape[1]
    g, rows = torch.nonzero(groups.view(n_groups, -1), as_tuple=True)
    tot = group_grid_counts(grid.codes_t, rows, g, n_groups, grid.n_max)
    is_t = target[rows]
    tgt = group_grid_counts(grid.codes_t, rows[is_t], g[is_t], n_groups, grid.n_max)
    zero = torch.zeros(*tot.shape[:2], 1, dtype=torch.long, device=device)
    cb = torch.cat([zero, tot.cumsum(2)], 2).view(5, nodes.shape[0], n_feat, -1)  # (5, G, F, W)
    ct = torch.cat([zero, tgt.cumsum(2)], 2).view(5, nodes.shape[0], n_feat, -1)

    def span(c):
        return c[..., e] - c[..., s]  # (..., F, nI)

    sup, hits = span(cb[0]), span(ct[0])
    value = fitness_value(hits, sup)
    m = torch.arange(n_feat, device=device)
    ok = ctx.valid[None] & (m[None, :, None] > k[:, None, None]) & (sup >= ctx.min_support) & (value >= kth)
    ok &= sup < nodes[:, 1][:, None, None]  # the third condition drops samples
    ok &= (cb[0][..., s + 1] - cb[0][..., s] > 0) & (cb[0][..., e] - cb[0][..., e - 1] > 0)  # tight on m
    for face in range(1, 5):
        ok &= span(cb[face]) > 0  # tight on j and k
    # non-idle j and k: the rectangles (k, m) and (j, m) alone hold more samples
    mm = m.clamp(min=0)
    for a, sa, ea in ((k, sk, ek), (j, sj, ej)):
        pi = _pair_index(a[:, None], mm[None, :], n_feat).clamp(0, ctot.shape[0] - 1)  # (G, F), valid where m > a
        ok &= sup < _two_d(ctot[pi], sa, ea, s, e)
    g_i, f_i, i_i = torch.nonzero(ok, as_tuple=True)
    conds = [j[g_i], sj[g_i], ej[g_i], k[g_i], sk[g_i], ek[g_i], f_i, s[i_i], e[i_i]]
    return _rows(value[g_i, f_i, i_i], hits[g_i, f_i, i_i], sup[g_i, f_i, i_i], conds, ctx.n_cond)


def _two_d(c: torch.Tensor, sa: torch.Tensor, ea: torch.Tensor, s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """``c`` (G, F, W, W): counts of ``[sa_g, ea_g) x [s_i, e_i)`` per node ``g``, feature and interval i."""
    g = torch.arange(c.shape[0], device=c.device)
    band = c[g, :, ea] - c[g, :, sa]  # (G, F, W): cumulative over the second feature's grids
    return band[..., e] - band[..., s]


def _triples(ctx, nodes, target, ctot, pool, kth, budget_left: int):
    """Branch and bound over ``nodes`` (best estimate first); returns (pool, kth, complete, bound)."""
    grid = ctx.grid
    n_feat = grid.n_bins.numel()
    per_node = n_feat * ctx.s.numel() * 8
    batch = max(1, min(256, _CHUNK // per_node))
    spent, start = 0, 0
    estimate = fitness_bound(nodes[:, 0])  # of the node and of every triple below it
    n_nodes = nodes.shape[0]
    while start < n_nodes:
        top = int(estimate[start])
        if top < _bar(kth):
            return pool, kth, True, None
        part = nodes[start : start + batch]
        cost = int(part[:, 1].sum()) * n_feat * 5 + part.shape[0] * per_node
        if spent + cost > budget_left:
            return pool, kth, False, top
        spent += cost
        new = _expand(ctx, part, target, ctot, kth)
        pool, kth = _merge(pool, new, ctx.top_k, ctx.spans)
        start += batch
    return pool, kth, True, None


# -------------------------------------------------------------------------------------------------- the search


def exact_search(
    binned: Binned,
    target: torch.Tensor,
    *,
    max_length: int,
    min_support: int,
    top_k: int,
    budget: int,
    grid_counts: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> ExactResult:
    """The ``top_k`` best rule sets of at most ``max_length`` (1 to 3) conditions on ``binned``'s grid
    (``grid_counts``: its per-grid counts of all and of the target samples, when the caller has them already).

    Raises ``ValueError`` before any heavy work when ``max_length > 3`` or when the estimated work
    (:func:`torch_amore.strategies.exact_cost.estimate_cost`) exceeds ``budget``.

    Example:
        >>> import torch
        >>> from torch_amore.grids.binning import bin_features
        >>> X = torch.arange(8, dtype=torch.float64)[:, None]
        >>> b = bin_features(X, [0], ["float"], n_grids=4)
        >>> r = exact_search(b, X[:, 0] >= 4, max_length=1, min_support=1, top_k=1, budget=10**6)
        >>> r.boxes
        [(4, 4, ((0, 2, 3),))]
    """
    n_feat = binned.codes.shape[1]
    n_rows = D.global_count(binned.codes.shape[0])
    cost = check_budget(n_rows, n_feat, binned.n_bins_max, max_length, budget)
    grid = compress(binned, target, grid_counts, recode=max_length >= 2)
    n_target = int(D.all_reduce_sum(target.sum()))
    device = grid.codes_t.device
    s, e = intervals(grid.n_max, device)
    sup1, hits1, val1 = _singles(grid, s, e, min_support)
    feats = torch.arange(n_feat, device=device)
    valid = valid_intervals(grid, feats, s, e)
    ctx = _Context(grid, s, e, sup1, hits1, val1, valid, min_support, top_k, max_length, (n_rows, n_feat, grid.n_max))
    f_i, i_i = torch.nonzero(val1 > _NEG, as_tuple=True)
    pool = _rows(val1[f_i, i_i], hits1[f_i, i_i], sup1[f_i, i_i], [f_i, s[i_i], e[i_i]], max_length)
    pool, kth = _merge(pool[:0], pool, top_k, ctx.spans)
    complete, bound = True, None
    pools = [pool]  # the pool after each length: what a search at that max_length returns
    if max_length >= 2 and n_feat >= 2:
        counts = PairCounts(grid, target)
        pool, kth, kept = _pairs(ctx, counts, pool, kth, keep=max_length >= 3)
        del counts  # its scratch (reordered codes, index buffer) is not needed by the triples
        pools.append(pool)
        if max_length >= 3 and n_feat >= 3:
            nodes = _nodes(ctx, kept[0], kept[1], kth)
            pool, kth, complete, bound = _triples(ctx, nodes, target, kept[0], pool, kth, budget - cost)
    orig = grid.orig.tolist()

    def boxes_of(rows: torch.Tensor) -> list[tuple[int, int, tuple[tuple[int, int, int], ...]]]:
        out = []
        for row in rows.tolist():
            conds = []
            for c in range(max_length):
                f, a, b = row[3 + 3 * c : 6 + 3 * c]
                if f >= 0:
                    conds.append((f, orig[f][a], orig[f][b - 1]))
            out.append((row[1], row[2], tuple(conds)))
        return out

    boxes = boxes_of(pool)
    shorter = [boxes_of(p) for p in pools[: max_length - 1]]
    if not complete:
        warnings.warn(
            f"strategy='exact' stopped at `exact_budget`={budget:.2e}: rule sets with at most "
            f"{bound:,} target samples are unexplored (fitness <= {recall(bound, n_target):.4f} "
            "bound); raise `exact_budget` or narrow the search (`features=`, `n_grids`).",
            RuntimeWarning,
            stacklevel=3,
        )
    return ExactResult(boxes, complete, bound, shorter)
