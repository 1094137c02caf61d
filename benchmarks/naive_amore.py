"""A literal, loop-based AMORE: for every feature and every grid, mask the data and count.

This is the paper's pseudo-code (Algorithms 2-5) read literally, with the same conventions as torch_amore (grid
``g`` holds ``edges[g] <= x < edges[g + 1]``, first grid open below, last open above; ties broken the same way). It
serves two purposes: the baseline of ``bench_extract.py`` and an independent reference in the tests. It is slow on
purpose: one pass over the data per grid, and interval ratios re-counted from the data during expansion.
"""

from __future__ import annotations

import math

import torch


def _in_interval(col: torch.Tensor, low: float, high: float) -> torch.Tensor:
    m = ~torch.isnan(col)
    if low > -math.inf:
        m &= col >= low
    if high < math.inf:
        m &= col < high
    return m


def _count(mask: torch.Tensor, target: torch.Tensor) -> tuple[int, int]:
    return int(mask.sum()), int((mask & target).sum())


def _gt_one(a: int, b: int, t: int, n: int) -> bool:
    return b > 0 and a * n > b * t


def _ratio(a: int, b: int, t: int, n: int) -> float:
    return (a * n) / (b * t) if b > 0 else -1.0


def _numeric_candidates(col, parent, target, edges, n, t, s_min):
    G = len(edges) - 1
    bounds = [(edges[g] if g > 0 else -math.inf, edges[g + 1] if g < G - 1 else math.inf) for g in range(G)]
    counts = []
    for low, high in bounds:  # one pass over the data per grid
        counts.append(_count(parent & _in_interval(col, low, high), target))
    # empty grids join the nearest non-empty neighbour with the higher ratio (left on ties)
    nonempty = [c[0] > 0 for c in counts]
    if not any(nonempty):
        return []
    ratio = [_ratio(a, b, t, n) for b, a in counts]
    owner = []
    for g in range(G):
        if nonempty[g]:
            owner.append(g)
            continue
        left = next((k for k in range(g - 1, -1, -1) if nonempty[k]), None)
        right = next((k for k in range(g + 1, G) if nonempty[k]), None)
        if right is None or (left is not None and ratio[left] >= ratio[right]):
            owner.append(left)
        else:
            owner.append(right)
    # consecutive grids with identical ratios merge
    segs: list[list[int]] = []  # [first grid, last grid, count, hits]
    for g in range(G):
        o = owner[g]
        if segs:
            prev_o = owner[g - 1]
            b1, a1 = counts[prev_o]
            b2, a2 = counts[o]
            if o == prev_o or a1 * b2 == a2 * b1:
                segs[-1][1] = g
                if o != prev_o:
                    segs[-1][2] += b2
                    segs[-1][3] += a2
                continue
        b, a = counts[o]
        segs.append([g, g, b, a])
    S = len(segs)
    seg_ratio = [_ratio(s[3], s[2], t, n) for s in segs]
    peaks = []
    if S >= 2:
        for s in range(S):
            left = seg_ratio[s - 1] if s > 0 else -2.0
            right = seg_ratio[s + 1] if s < S - 1 else -2.0
            if seg_ratio[s] > left and seg_ratio[s] > right and _gt_one(segs[s][3], segs[s][2], t, n):
                peaks.append(s)
    out = {}
    for p in peaks:
        lo, hi = p, p
        b, a = segs[p][2], segs[p][3]
        while b < s_min or _gt_one(a, b, t, n):
            r = _ratio(a, b, t, n)
            r_left = seg_ratio[lo - 1] if lo > 0 else -1.0
            r_right = seg_ratio[hi + 1] if hi < S - 1 else -1.0
            if lo == 0 and hi == S - 1:
                break
            take_left = lo > 0 and (hi == S - 1 or r_left >= r_right)
            m_r = r_left if take_left else r_right
            if b >= s_min and m_r < r:
                break
            lo, hi = (lo - 1, hi) if take_left else (lo, hi + 1)
            low = bounds[segs[lo][0]][0]
            high = bounds[segs[hi][1]][1]
            b, a = _count(parent & _in_interval(col, low, high), target)  # re-count from the data
        if b >= s_min and _gt_one(a, b, t, n) and not (lo == 0 and hi == S - 1):
            low, high = bounds[segs[lo][0]][0], bounds[segs[hi][1]][1]
            out.setdefault((low, high), (a, b, segs[lo][0], segs[hi][1]))
    return [(low, high, None, a, b, g0, g1) for (low, high), (a, b, g0, g1) in out.items()]


def naive_extract(X, target, *, edges, is_cat, max_length, min_support, top_k):
    """Rule sets as ``(rules, support, hits)``, where rules is a tuple of ``(feature, low, high, value)``.

    Args:
        X: (N, F) float64 tensor. target: (N,) bool tensor.
        edges: per feature the list of grid edges (numeric features) or ``None`` (categorical).
        is_cat: per feature whether it is categorical.
    """
    N, F = X.shape
    results: dict[frozenset, tuple] = {}

    def node(parent, path, used):
        n, t = _count(parent, target)
        if t == 0 or t == n:
            return
        cands = []
        for f in range(F):
            if f in used:
                continue
            col = X[:, f]
            if is_cat[f]:
                values = torch.unique(col[~torch.isnan(col)]).tolist()
                non_missing = int((parent & ~torch.isnan(col)).sum())
                for v in values:
                    b, a = _count(parent & (col == v), target)
                    if b >= min_support and _gt_one(a, b, t, n) and b < non_missing:
                        cands.append((f, -math.inf, math.inf, v, a, b, values.index(v), values.index(v)))
            else:
                for low, high, v, a, b, g0, g1 in _numeric_candidates(col, parent, target, edges[f], n, t, min_support):
                    cands.append((f, low, high, v, a, b, g0, g1))
        cands.sort(key=lambda c: (-_ratio(c[4], c[5], t, n), -c[5], c[0], c[6], c[7]))
        for f, low, high, v, a, b, _, _ in cands[:top_k]:
            new_path = path + ((f, low, high, v),)
            key = frozenset(new_path)
            results.setdefault(key, (new_path, b, a))
            if len(new_path) < max_length:
                col = X[:, f]
                m = (col == v) if v is not None else _in_interval(col, low, high)
                node(parent & m, new_path, used | {f})

    node(torch.ones(N, dtype=torch.bool), (), frozenset())
    return list(results.values())


def uniform_edges(X: torch.Tensor, n_grids: int) -> list[list[float]]:
    """Equal-width edges per column from its non-missing min and max (float64)."""
    out = []
    for f in range(X.shape[1]):
        col = X[:, f].double()
        col = col[~torch.isnan(col)]
        lo, hi = float(col.min()), float(col.max())
        out.append([lo + (hi - lo) * (k / n_grids) if k < n_grids else hi for k in range(n_grids + 1)])
    return out
