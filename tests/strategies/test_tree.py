"""The rule tree's level pipeline: candidate intervals against a literal Algorithm 4-5, counting passes against
per-feature bincounts (in many chunks), and the host syncs and tensor operations of a level (torch.profiler)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from torch_amore.grids import intervals, ratios
from torch_amore.grids.binning import bin_features
from torch_amore.grids.intervals import candidate_intervals
from torch_amore.grids.ratios import grid_counts, group_grid_counts, node_grid_counts
from torch_amore.strategies.tree import grow_tree

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from naive_amore import _numeric_candidates  # noqa: E402

SYNCS = {"aten::_local_scalar_dense", "aten::nonzero", "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive"}


def _ratio(a: int, b: int, t: int, n: int) -> float:
    return (a * n) / (b * t) if b > 0 else -1.0


def _literal(tot: list[int], tgt: list[int], t: int, n: int, s_min: int, local: int | None = None) -> set:
    """Algorithms 4-5 read literally on one row of counts: {(g_low, g_high, hits, support)}; with ``local``, only
    intervals containing that grid, else the expansion from its own segment that stops once the support suffices."""
    G = len(tot)
    if not any(tot):
        return set()
    ratio = [_ratio(a, b, t, n) for a, b in zip(tgt, tot)]
    owner = []
    for g in range(G):
        left = next((k for k in range(g, -1, -1) if tot[k]), None)
        right = next((k for k in range(g, G) if tot[k]), None)
        take_left = left is not None and (right is None or ratio[left] >= ratio[right])
        owner.append(g if tot[g] else (left if take_left else right))
    segs: list[list[int]] = []  # first grid, last grid, hits, count
    for g in range(G):
        o = owner[g]
        if segs and (o == owner[g - 1] or tgt[owner[g - 1]] * tot[o] == tgt[o] * tot[owner[g - 1]]):
            segs[-1][1] = g
            if o != owner[g - 1]:
                segs[-1][2] += tgt[o]
                segs[-1][3] += tot[o]
        else:
            segs.append([g, g, tgt[o], tot[o]])
    S = len(segs)
    sr = [_ratio(s[2], s[3], t, n) for s in segs]

    def expand(p: int, stop_when_enough: bool) -> tuple | None:
        lo = hi = p
        a, b = segs[p][2], segs[p][3]
        while (b < s_min or a * n > b * t) and not (lo == 0 and hi == S - 1):
            r_left = sr[lo - 1] if lo > 0 else -1.0
            r_right = sr[hi + 1] if hi < S - 1 else -1.0
            take_left = lo > 0 and (hi == S - 1 or r_left >= r_right)
            if b >= s_min and (stop_when_enough or (r_left if take_left else r_right) < _ratio(a, b, t, n)):
                break
            lo, hi = (lo - 1, hi) if take_left else (lo, hi + 1)
            k = lo if take_left else hi
            a, b = a + segs[k][2], b + segs[k][3]
        if b >= s_min and a * n > b * t and not (lo == 0 and hi == S - 1):
            return (segs[lo][0], segs[hi][1], a, b)
        return None

    peaks = [
        s
        for s in range(S)
        if S >= 2
        and sr[s] > (sr[s - 1] if s > 0 else -2.0)
        and sr[s] > (sr[s + 1] if s < S - 1 else -2.0)
        and segs[s][2] * n > segs[s][3] * t
    ]
    found = {c for c in (expand(p, False) for p in peaks) if c is not None}
    if local is None:
        return found
    found = {c for c in found if c[0] <= local <= c[1]}
    if not found:
        own = next(k for k, s in enumerate(segs) if s[0] <= local <= s[1])
        extra = expand(own, True)
        found = {extra} if extra is not None else set()
    return found


def _random_rows(g: torch.Generator, n_rows: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Count tables with many empty grids and ties (small counts)."""
    tot = torch.randint(0, 7, (n_rows, width), generator=g) * (torch.rand(n_rows, width, generator=g) < 0.7)
    tgt = (tot * torch.rand(n_rows, width, generator=g)).round().long()
    return tot, tgt


def _as_sets(c, n_rows: int) -> list[set]:
    out = [set() for _ in range(n_rows)]
    for f, lo, hi, a, b in zip(
        c.feature.tolist(), c.g_low.tolist(), c.g_high.tolist(), c.hits.tolist(), c.support.tolist()
    ):
        assert (lo, hi, a, b) not in out[f]  # no duplicates
        out[f].add((lo, hi, a, b))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("many_grids", [False, True])
def test_candidate_intervals_match_the_literal_algorithm_row_by_row(seed, many_grids, monkeypatch):
    if many_grids:  # the path of many grids: only the peaks are expanded, in blocks of starts
        monkeypatch.setattr(intervals, "_FEW_SEGMENTS", 2)
        monkeypatch.setattr(intervals, "_EXPANSION_BUDGET", 16)
    g = torch.Generator().manual_seed(seed)
    n_rows, width = 300, int(torch.randint(3, 12, (1,), generator=g))
    tot, tgt = _random_rows(g, n_rows, width)
    missing = torch.randint(1, 5, (n_rows,), generator=g)  # the node's target samples missing this feature
    n_target = tgt.sum(1) + missing
    n_samples = tot.sum(1) + missing + torch.randint(0, 60, (n_rows,), generator=g)
    s_min = int(torch.randint(1, 15, (1,), generator=g))
    local = torch.randint(-1, width, (n_rows,), generator=g)
    yes = torch.ones(n_rows, dtype=torch.bool)
    args = (tot, tgt, torch.full((n_rows,), width), ~yes, yes, s_min, n_target, n_samples)
    plain, near = _as_sets(candidate_intervals(*args), n_rows), _as_sets(candidate_intervals(*args, local), n_rows)
    n_found = 0
    for r in range(n_rows):
        t, n = int(n_target[r]), int(n_samples[r])
        expected = _literal(tot[r].tolist(), tgt[r].tolist(), t, n, s_min)
        assert plain[r] == expected
        lc = int(local[r])
        assert near[r] == (_literal(tot[r].tolist(), tgt[r].tolist(), t, n, s_min, lc) if lc >= 0 else set())
        n_found += len(expected)
    assert n_found > 5


def test_candidate_intervals_match_the_literal_data_loop():
    """On samples, against benchmarks/naive_amore.py (its counts come from masks over the data)."""
    g = torch.Generator().manual_seed(7)
    checked = 0
    for _ in range(40):
        width = int(torch.randint(2, 10, (1,), generator=g))
        n = int(torch.randint(30, 200, (1,), generator=g))
        x = torch.randint(0, width, (n,), generator=g).double() + 0.5  # grid g holds g + 0.5
        target = torch.rand(n, generator=g) < torch.rand(width, generator=g)[x.long()]
        t = int(target.sum())
        if t in (0, n):
            continue
        s_min = int(torch.randint(1, 40, (1,), generator=g))
        ref = _numeric_candidates(
            x, torch.ones(n, dtype=torch.bool), target, [float(k) for k in range(width + 1)], n, t, s_min
        )
        tot = torch.bincount(x.long(), minlength=width)[None]
        tgt = torch.bincount(x.long()[target], minlength=width)[None]
        c = candidate_intervals(
            tot, tgt, torch.tensor([width]), torch.tensor([False]), torch.tensor([True]), s_min, t, n
        )
        assert _as_sets(c, 1)[0] == {(g0, g1, a, b) for _, _, _, a, b, g0, g1 in ref}
        for a, b, r in zip(c.hits.tolist(), c.support.tolist(), c.ratio.tolist()):
            assert r == (a * n) / (b * t)  # the float the literal implementation ranks by
        checked += len(ref)
    assert checked > 5


def test_expansion_in_row_chunks_equals_one_pass(monkeypatch):
    g = torch.Generator().manual_seed(3)
    tot, tgt = _random_rows(g, 200, 9)
    yes = torch.ones(200, dtype=torch.bool)
    args = (tot, tgt, torch.full((200,), 9), ~yes, yes, 8, tgt.sum(1) + 5, tot.sum(1) + 20)
    local = torch.randint(-1, 9, (200,), generator=g)
    whole, whole_local = candidate_intervals(*args), candidate_intervals(*args, local)
    monkeypatch.setattr(intervals, "_EXPANSION_BUDGET", 50)  # a few rows per chunk
    chunked, chunked_local = candidate_intervals(*args), candidate_intervals(*args, local)
    assert len(whole) > 10 and len(whole_local) > 10
    for name in ("feature", "g_low", "g_high", "hits", "support", "ratio"):
        assert torch.equal(getattr(whole, name), getattr(chunked, name))
        assert torch.equal(getattr(whole_local, name), getattr(chunked_local, name))


@pytest.mark.parametrize("pass_bytes", [1 << 27, 64, 4096])
def test_counting_passes_match_per_feature_bincounts(monkeypatch, pass_bytes):
    monkeypatch.setattr(ratios, "_PASS_BYTES", pass_bytes)
    g = torch.Generator().manual_seed(1)
    n, F, B = 500, 13, 7
    codes = torch.randint(0, B + 1, (n, F), generator=g).to(torch.uint8)  # B: missing
    rows = torch.randint(0, n, (800,), generator=g)  # repeats: a sample may be in several groups
    groups = torch.randint(0, 4, (800,), generator=g)

    def literal(r):
        return torch.stack([torch.bincount(codes[r, f].long(), minlength=B + 1)[:B] for f in range(F)])

    assert torch.equal(grid_counts(codes, None, B), literal(torch.arange(n)))
    assert torch.equal(grid_counts(codes, rows[:50], B), literal(rows[:50]))
    per_group = torch.stack([literal(rows[groups == k]) for k in range(4)])
    assert torch.equal(node_grid_counts(codes, rows, groups, 4, B), per_group)
    assert torch.equal(group_grid_counts(codes.T.contiguous().short(), rows, groups, 4, B), per_group)


def _tree_task():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(3000, 6, generator=g, dtype=torch.float64)
    X[:, 5] = torch.floor(X[:, 5] * 4)
    target = ((X[:, 0] > 0.4) & (X[:, 1] < 0.7) & (X[:, 5] != 2)) ^ (torch.rand(3000, generator=g) < 0.1)
    b = bin_features(X, list(range(6)), ["float"] * 5 + ["cat"], n_grids=10)
    root = (grid_counts(b.codes, None, b.n_bins_max), grid_counts(b.codes, torch.nonzero(target)[:, 0], b.n_bins_max))
    return b, target, root


@pytest.mark.parametrize("max_length", [1, 3, 4])
def test_grow_tree_waits_on_the_device_at_most_twice_per_level(monkeypatch, max_length):
    """Per level one transfer of the chosen candidates (``tolist``) and, below the last level, one selection of the
    children's rows (``nonzero``); no other host sync. Tensor operations stay a fixed number per level."""
    b, target, root = _tree_task()
    n_target = int(target.sum())

    def run():
        return grow_tree(b, target, root, n_target, max_length=max_length, min_support=30, top_k=3)

    run()
    transfers = []
    original = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: transfers.append(t.shape) or original(t))
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        chosen = run()
    events = [e for e in prof.events() if e.name.startswith("aten::")]
    syncs = [e.name for e in events if e.name in SYNCS]
    top_level = [e for e in events if e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::")]
    assert max(len(c.steps) for c in chosen) == max_length  # every level was grown
    assert len(transfers) == max_length
    assert syncs == ["aten::nonzero"] * (max_length - 1)
    assert len(top_level) <= 280 * max_length  # about 260 a level here (numeric and categorical features)


def test_grow_tree_deeper_levels_follow_the_depth_first_numbering():
    """Children are numbered rank by rank on the device; the candidates still come level by level in depth-first
    order, each node's ranks in decreasing ratio, and paths, counts and ratios match masks recomputed from codes."""
    b, target, root = _tree_task()
    codes = b.codes.long()
    chosen = grow_tree(b, target, root, int(target.sum()), max_length=4, min_support=20, top_k=3)
    assert max(len(c.path) for c in chosen) == 3
    assert chosen == sorted(chosen, key=lambda c: (len(c.path), c.path, c.rank))
    by_path = {c.path + (c.rank,): c for c in chosen}

    def mask_of(steps):
        mask = torch.ones(len(target), dtype=torch.bool)
        for j, lo, hi, _ in steps:
            mask &= (codes[:, j] >= lo) & (codes[:, j] <= hi)
        return mask

    for c in chosen:
        mask, parent = mask_of(c.steps), mask_of(c.steps[:-1])
        assert (c.support, c.hits) == (int(mask.sum()), int((mask & target).sum()))
        n, t = int(parent.sum()), int((parent & target).sum())
        assert c.steps[-1][3] == (c.hits * n) / (c.support * t) > 1
        if c.path:
            assert by_path[c.path].steps == c.steps[:-1]
        if c.rank:
            assert by_path[c.path + (c.rank - 1,)].steps[-1][3] >= c.steps[-1][3]
