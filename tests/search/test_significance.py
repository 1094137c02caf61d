"""The evidence of extract_rules (issue 40), recomputed independently: held-out numbers from masks with
scipy.stats.binomtest and a literal Holm loop, the search-aware p-value from a literal loop of extract_rules on the
replayed permuted targets, stability from a literal loop over the half-samples, seeded repeats and the noise warning."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import binomtest

from torch_amore import extract_rules
from torch_amore.search.evidence_split import half_sample, holdout_mask

# a weak box does not always pass Holm over every returned rule set; the warning itself is tested below
pytestmark = pytest.mark.filterwarnings("ignore:None of the:UserWarning")

OPTS = {"max_length": 2, "min_support": 30, "n_grids": 8}


def weak_box(n: int = 800, f: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A box on features 0 and 1 with confidence 0.45 inside, base rate 0.15 outside: several rule sets, p-values
    that differ."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, f, generator=g, dtype=torch.float64)
    inside = (X[:, 0] > 0.7) & (X[:, 1] < 0.4)
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return X, torch.where(inside, u < 0.45, u < 0.15)


def noise(n: int = 800, f: int = 4, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, f, generator=g, dtype=torch.float64), torch.rand(n, generator=g) < 0.1


def literal_holm(p: list[float]) -> list[float]:
    order = sorted(range(len(p)), key=lambda i: p[i])
    out, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def test_held_out_numbers_from_masks():
    X, t = weak_box()
    held = torch.zeros(len(t), dtype=torch.bool)
    held[torch.arange(0, len(t), 3)] = True  # every third row
    found = extract_rules(X, t, holdout_rows=held, level=0.9, **OPTS)
    assert len(found) >= 2
    assert found == extract_rules(X[~held], t[~held], **OPTS)  # the search saw only the other rows
    Xh, th = X[held], t[held]
    rate = float(th.sum()) / len(th)
    raw = []
    for rs in found:
        m = rs.mask(Xh)
        s, h = int(m.sum()), int((m & th).sum())
        ho = rs.held_out
        assert ho.support == s and ho.base_rate == pytest.approx(rate)
        assert ho.confidence == pytest.approx(h / s if s else 0.0)
        assert ho.fitness == pytest.approx((h - (s - h)) / int(th.sum()))
        assert ho.lift == pytest.approx((h / s) / rate)
        ci = binomtest(h, s).proportion_ci(confidence_level=0.9, method="exact")
        assert ho.confidence_interval == pytest.approx((ci.low, ci.high), abs=1e-9)
        p = binomtest(h, s, rate, alternative="greater").pvalue
        assert ho.raw_p_value == pytest.approx(p, rel=1e-9)
        raw.append(p)
    for rs, adjusted in zip(found, literal_holm(raw)):
        assert rs.held_out.p_value == pytest.approx(adjusted, rel=1e-9)


def test_holdout_fraction_is_stratified_and_index_rows_match_the_mask():
    X, t = weak_box()
    held = holdout_mask(t, 0.3, seed=4)
    assert int((held & t).sum()) == round(0.3 * int(t.sum()))
    assert int((held & ~t).sum()) == round(0.3 * int((~t).sum()))
    by_fraction = extract_rules(X, t, holdout=0.3, seed=4, **OPTS)
    by_index = extract_rules(X, t, holdout_rows=torch.nonzero(held).flatten().numpy(), **OPTS)
    assert by_fraction == by_index
    assert [rs.held_out for rs in by_fraction] == [rs.held_out for rs in by_index]


@pytest.mark.parametrize("strategy", ["beam", "paper", "exact"])
def test_permutation_p_value_is_a_literal_loop_of_extract_rules(strategy):
    X, t = weak_box()
    P, seed = 9, 3
    found = extract_rules(X, t, permutations=P, seed=seed, strategy=strategy, **OPTS)
    assert len(found) >= 2
    null = []
    for k in range(P):  # the documented draw: default_rng([seed, 1, k]).permutation(n)
        order = torch.from_numpy(np.random.default_rng([seed, 1, k]).permutation(len(t)))
        again = extract_rules(X, t[order], strategy=strategy, **OPTS)
        null.append(again[0].fitness if again else -math.inf)
    for rs in found:
        assert rs.p_value == (1 + sum(f >= rs.fitness for f in null)) / (P + 1)
    assert min(rs.p_value for rs in found) == 1 / (P + 1)
    assert strategy == "exact" or len({rs.p_value for rs in found}) >= 2  # exact: its top_k=3 all beat the null


def test_permutations_see_only_the_searched_rows():
    X, t = weak_box()
    P = 4
    found = extract_rules(X, t, holdout=0.25, permutations=P, **OPTS)
    keep = ~holdout_mask(t, 0.25, seed=0)
    Xs, ts = X[keep], t[keep]
    null = []
    for k in range(P):
        order = torch.from_numpy(np.random.default_rng([0, 1, k]).permutation(len(ts)))
        null.append(extract_rules(Xs, ts[order], **OPTS)[0].fitness)
    assert [rs.p_value for rs in found] == [(1 + sum(f >= rs.fitness for f in null)) / (P + 1) for rs in found]


def test_stability_is_a_literal_loop_over_half_samples():
    X, t = weak_box()
    B = 4
    found = extract_rules(X, t, stability=B, seed=1, **OPTS)
    masks = [rs.mask(X) for rs in found]
    hits = [0] * len(found)
    for b in range(B):
        rows = torch.from_numpy(half_sample(t, 1, b))
        assert abs(len(rows) - len(t) / 2) <= 1 and int(t[rows].sum()) == round(int(t.sum()) / 2)
        half = dict(OPTS, min_support=math.ceil(OPTS["min_support"] * len(rows) / len(t)))
        other = [rs.mask(X) for rs in extract_rules(X[rows], t[rows], **half)[: len(found)]]
        for i, m in enumerate(masks):
            jac = [int((m & o).sum()) / int((m | o).sum()) for o in other]
            hits[i] += any(j >= 0.8 for j in jac)
    assert [rs.stability for rs in found] == [h / B for h in hits]
    assert any(0 < rs.stability for rs in found)


def test_stability_with_holdout_searches_halves_of_the_searched_rows_and_compares_on_all_rows():
    X, t = weak_box()
    B = 2
    found = extract_rules(X, t, stability=B, holdout=0.25, seed=2, **OPTS)
    keep = ~holdout_mask(t, 0.25, seed=2)
    Xs, ts = X[keep], t[keep]
    hits = [0] * len(found)
    for b in range(B):
        rows = torch.from_numpy(half_sample(ts, 2, b))
        half = dict(OPTS, min_support=math.ceil(OPTS["min_support"] * len(rows) / len(ts)))
        other = [rs.mask(X) for rs in extract_rules(Xs[rows], ts[rows], **half)[: len(found)]]
        for i, rs in enumerate(found):
            m = rs.mask(X)  # all rows, held-out ones included
            hits[i] += any(int((m & o).sum()) / int((m | o).sum()) >= 0.8 for o in other)
    assert len(found) >= 2 and [rs.stability for rs in found] == [h / B for h in hits]


def test_seeded_runs_repeat_exactly_and_seeds_matter():
    X, t = weak_box()
    kw = dict(OPTS, holdout=0.3, permutations=5, stability=2)
    one, two = extract_rules(X, t, seed=7, **kw), extract_rules(X, t, seed=7, **kw)
    fields = [(rs.held_out, rs.p_value, rs.stability) for rs in one]
    assert fields == [(rs.held_out, rs.p_value, rs.stability) for rs in two] and one == two
    other = extract_rules(X, t, seed=8, **kw)
    assert [(rs.held_out, rs.rules) for rs in other] != [(rs.held_out, rs.rules) for rs in one]


def test_evidence_fields_do_not_change_equality_and_are_none_when_not_asked():
    X, t = weak_box()
    plain = extract_rules(X, t, **OPTS)
    assert all(rs.held_out is None and rs.p_value is None and rs.stability is None for rs in plain)
    tested = extract_rules(X, t, permutations=2, **OPTS)
    assert tested == plain  # compare=False: same rules and metrics


def test_noise_warns_once_and_prints_the_numbers():
    X, t = noise()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = extract_rules(X, t, permutations=9, holdout=0.3, **OPTS)
    noisy = [w for w in caught if "not distinguishable from what the search finds in noise" in str(w.message)]
    assert len(noisy) == 1 and noisy[0].category is UserWarning
    assert noisy[0].filename == __file__  # points at the caller
    assert all(rs.p_value > 0.05 for rs in found)
    text = str(found[0])
    assert "held out: confidence=" in text and "95% CI" in text and "search-aware p=" in text


def test_a_planted_box_beats_the_null_without_warning():
    g = torch.Generator().manual_seed(2)
    X = torch.rand(1500, 4, generator=g, dtype=torch.float64)
    inside = (X[:, 0] > 0.7) & (X[:, 1] < 0.5)
    t = torch.where(inside, torch.rand(1500, generator=g) < 0.8, torch.rand(1500, generator=g) < 0.1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        best = extract_rules(X, t, permutations=19, holdout=0.3, **OPTS)[0]
        few = extract_rules(X, t, permutations=9, **OPTS)[0]  # 1 / 10 > 0.05: too few to call it noise
    assert best.p_value == 0.05 and few.p_value == 0.1 and best.held_out.p_value < 1e-6
    assert best.held_out.confidence_interval[0] <= best.held_out.confidence <= best.held_out.confidence_interval[1]


def test_calibration_on_noise_within_a_binomial_tolerance():
    """Under the null both p-values are valid: Pr(p <= 0.2) <= 0.2. 24 small noise data sets, P = 4: the counts stay
    below the 99.9 % quantile of Binomial(24, 0.2)."""
    from scipy.stats import binom

    n_sets, P = 24, 4
    perm = held = evaluated = 0
    for seed in range(n_sets):
        X, t = noise(n=400, f=3, seed=100 + seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            best = extract_rules(X, t, permutations=P, holdout=0.3, seed=seed, max_length=2, min_support=20)
        if best:
            evaluated += 1
            perm += best[0].p_value <= 0.2
            held += min(rs.held_out.p_value for rs in best) <= 0.2
    assert evaluated == n_sets
    limit = binom.ppf(0.999, n_sets, 0.2)
    assert perm <= limit and held <= limit, (perm, held, limit)


def test_near_masks_match_the_literal_jaccard_loop():
    # the half-samples' comparison in one batch: every pair's Jaccard index against a literal loop, with masks that
    # select no row (two of them: index 1) and pairs exactly at the threshold (4 shared of 5 rows: 0.8)
    from torch_amore.search.significance import STABILITY_JACCARD, _near

    g = torch.Generator().manual_seed(3)
    masks = torch.rand(9, 50, generator=g) < torch.linspace(0.0, 0.9, 9)[:, None]
    others = torch.rand(6, 50, generator=g) < torch.linspace(0.0, 0.9, 6)[:, None]
    masks[1] = others[1] = False
    masks[2] = others[2] = False
    masks[2, :5], others[2, :4] = True, True  # 4 / 5
    masks[3] = others[5]
    literal = []
    for m in masks:
        jac = [int((m & o).sum()) / int((m | o).sum()) if bool((m | o).any()) else 1.0 for o in others]
        literal.append(any(j >= STABILITY_JACCARD for j in jac))
    assert _near(masks, others).tolist() == literal
    assert literal[0] and literal[2] and literal[3] and not all(literal)


def test_a_boolean_series_of_held_out_rows_goes_by_its_index_like_the_target():
    # a DataFrame X and a Series target pair by index; a boolean Series holdout_rows does too (the same labels in
    # another order hold out the same rows), while its labels must be X's
    import pandas as pd

    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.random((400, 3)), columns=list("abc"), index=np.arange(400)[::-1])
    t = pd.Series(X["a"].to_numpy() > 0.7, index=X.index)
    held = pd.Series(X.index < 100, index=X.index)  # the rows labelled 0..99: the last 100 rows of X
    kw = {"max_length": 1, "min_support": 20}
    by_order = extract_rules(X, t, holdout_rows=held, **kw)
    shuffled = extract_rules(X, t, holdout_rows=held.sample(frac=1, random_state=1), **kw)
    by_position = extract_rules(X, t, holdout_rows=np.arange(300, 400), **kw)
    assert by_order == shuffled == by_position
    assert [rs.held_out for rs in by_order] == [rs.held_out for rs in shuffled] == [rs.held_out for rs in by_position]
    with pytest.raises(ValueError, match="holdout_rows"):
        extract_rules(X, t, holdout_rows=pd.Series(held.to_numpy(), index=np.arange(1000, 1400)), **kw)


def test_the_searches_side_by_side_give_the_numbers_of_one_after_the_other(monkeypatch):
    """The permutations' and half-samples' searches on three threads side by side: the same p-values, stability and
    held-out numbers as one after the other (each search is deterministic and shares only what does not depend on
    the target)."""
    import threading

    import torch_amore.search.significance as S
    from torch_amore.search.null_search import NullSearch

    X, t = weak_box()
    kw = {"permutations": 9, "stability": 4, "holdout": 0.25, "seed": 2, **OPTS}
    monkeypatch.setattr(S, "side_workers", lambda *args: 1)
    one = extract_rules(X, t, **kw)
    monkeypatch.setattr(S, "side_workers", lambda *args: 3)
    names = set()
    best_fitness = NullSearch.best_fitness
    monkeypatch.setattr(
        NullSearch, "best_fitness", lambda self, t: names.add(threading.current_thread().name) or best_fitness(self, t)
    )
    three = extract_rules(X, t, **kw)
    assert len(names) >= 2 and all(n.startswith("torch_amore_side") for n in names)
    summary = [(rs.rules, rs.fitness, rs.p_value, rs.stability, rs.held_out) for rs in one]
    assert summary == [(rs.rules, rs.fitness, rs.p_value, rs.stability, rs.held_out) for rs in three]
    assert all(rs.p_value is not None and rs.stability is not None for rs in one)


def test_side_workers_are_the_callers_threads_within_the_memory(monkeypatch):
    import torch_amore.search.significance as S
    from torch_amore.search.options import SearchOptions
    from torch_amore.search.plan import SearchPlan

    plan = SearchPlan.make(10_000, 16, SearchOptions())
    each = S.M.search_memory(10_000, 16, 10)  # the default options' search on these rows
    assert plan.search_bytes == each
    cpu = torch.device("cpu")
    monkeypatch.setattr(S, "caller_threads", lambda: 8)
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(S.M, "available_memory", lambda device: (100 * each, "test"))
    assert S.side_workers(99, plan, cpu) == 8
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert S.side_workers(99, plan, cpu) == 2  # torch's count of the machine's cores, the process on two of them
    monkeypatch.setattr(S.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert S.side_workers(5, plan, cpu) == 5  # no more than the searches
    assert S.side_workers(99, plan, torch.device("cuda")) == 1  # one device: one after the other
    monkeypatch.setattr(S.M, "available_memory", lambda device: (int(6.5 * each), "test"))
    assert S.side_workers(99, plan, cpu) == 3  # half of the memory holds three
    monkeypatch.setattr(S.M, "available_memory", lambda device: (each, "test"))
    assert S.side_workers(99, plan, cpu) == 1
    monkeypatch.setattr(S.D, "is_sharded", lambda: True)
    monkeypatch.setattr(S.M, "available_memory", lambda device: (100 * each, "test"))
    assert S.side_workers(99, plan, cpu) == 1
