"""The permutations' searches (NullSearch: codes, grids, counts of all rows and readable rules made once for every
target) against a literal loop of extract_rules on the permuted targets: the same rule sets, so the same best fitness
and the same p-values, for max_length 1 to 3, NaN, integer and categorical columns, a layer wider than the pair
seeds' feature count, and the three strategies."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from torch_amore import extract_rules
from torch_amore.search import null_search
from torch_amore.search.evidence_split import permutation_order
from torch_amore.search.null_search import NullSearch
from torch_amore.search.options import SearchOptions
from torch_amore.search.plan import SearchPlan
from torch_amore.strategies import all_rows
from torch_amore.strategies.seeding import SEED_FEATURES

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def mixed(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Floats with NaNs, integers 0..9 and 0/1 categories; a weak box on a float and an integer column."""
    rng = np.random.default_rng([seed, 3])
    floats = rng.standard_normal((n, 3))
    floats[rng.random((n, 3)) < 0.05] = np.nan
    X = np.concatenate([floats, rng.integers(0, 10, (n, 2)), rng.integers(0, 2, (n, 2))], axis=1)
    inside = (X[:, 0] > 0.3) & (X[:, 3] < 5)
    u = rng.random(n)
    return torch.from_numpy(X), torch.from_numpy(np.where(inside, u < 0.5, u < 0.15))


def wide(n: int, f: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """ReLU-Gaussian columns (more than the pair seeds pair), a box on columns 5 and 40 with label noise."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, f, generator=g).relu_()
    t = (X[:, 5] > 0.5) & (X[:, 40] < 0.8)
    return X, t ^ (torch.rand(n, generator=g) < 0.1)


def literal_best(X: torch.Tensor, t: torch.Tensor, **kwargs) -> float:
    found = extract_rules(X, t, **kwargs)
    return found[0].fitness if found else -math.inf


def permuted(t: torch.Tensor, seed: int, k: int) -> torch.Tensor:
    return t[torch.from_numpy(np.random.default_rng([seed, 1, k]).permutation(len(t)))]


@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_permutations_find_what_extract_rules_finds_on_mixed_columns(max_length, seed):
    X, t = mixed(900, seed)
    kw = {"max_length": max_length, "min_support": 40, "n_grids": 8}
    null = NullSearch(X, t, SearchOptions(**kw))
    for k in range(3):
        tk = permuted(t, seed, k)
        literal = extract_rules(X, tk, **kw)
        assert null.search(tk) == literal  # every rule set, in order, with its metrics
        assert null.best_fitness(tk) == literal[0].fitness


@pytest.mark.parametrize("strategy", ["beam", "paper", "exact"])
def test_the_three_strategies_on_permuted_targets(strategy):
    X, t = mixed(700, 2)
    kw = {"max_length": 2, "min_support": 30, "n_grids": 6, "strategy": strategy}
    null = NullSearch(X, t, SearchOptions(**kw))
    for k in range(2):
        tk = permuted(t, 5, k)
        assert null.search(tk) == extract_rules(X, tk, **kw)


@pytest.mark.parametrize(("max_length", "cell_features"), [(2, None), (3, None), (2, 1)])
def test_a_layer_wider_than_the_seed_features_shares_the_pair_and_cell_counts(max_length, cell_features, monkeypatch):
    X, t = wide(1500, SEED_FEATURES + 16, 0)
    if cell_features is not None:  # room for one feature's seed cells: the other seeds are counted as ever
        cells = 5 * X.shape[1] * 256 * 4  # SEED_GRIDS cells x F x W int32 counts (W: 256 fine grids at 1,500 rows)
        monkeypatch.setattr(all_rows, "CELL_BYTES", cell_features * cells)
        monkeypatch.setattr(null_search, "KEPT_COLUMN_BYTES", 7 * X.shape[0])  # and one sorted column
    kw = {"max_length": max_length, "optimum_budget": 0}  # no grid optimum: the pair seeds run
    null = NullSearch(X, t, SearchOptions(**kw))
    for k in range(3):
        tk = permuted(t, 0, k)
        assert null.search(tk) == extract_rules(X, tk, **kw)
    shared = next(iter(null.base.__dict__["_all_rows"].values()))
    assert shared._grams  # the pairs' counts of all rows were made once and read
    assert len(shared._cells) == (cell_features or len(shared._cells)) and shared._cells  # and the seeds' cells
    kept = len(null.base.__dict__["_sorted"])  # the polish's sorted columns, as many as there is room for
    assert kept <= cell_features if cell_features else kept > 0


@pytest.mark.parametrize("seed", [0, 4])
def test_p_values_equal_the_literal_loop_on_a_wider_layer(seed):
    X, t = wide(1200, 80, seed)
    P, kw = 6, {"max_length": 2, "min_support": 60, "optimum_budget": 0}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = extract_rules(X, t, permutations=P, seed=seed, **kw)
    null = [literal_best(X, t[torch.from_numpy(permutation_order(len(t), seed, k))], **kw) for k in range(P)]
    assert [rs.p_value for rs in found] == [(1 + sum(f >= rs.fitness for f in null)) / (P + 1) for rs in found]


def test_kept_readable_rules_equal_those_made_afresh():
    # the permutations' readable rules keep each feature's observed neighbours of its grid edges: the rules of any
    # conditions, on the coarse and the fine grids, called again and again, are those made afresh
    from torch_amore.grids.fine_grid import fine_binning
    from torch_amore.search.readable import ReadableRules

    X, t = mixed(600, 3)
    null = NullSearch(X, t, SearchOptions(max_length=2, min_support=30, n_grids=8))
    base = null.base
    fresh = ReadableRules(base.X, base.names, base.scale, base.offset)
    g = torch.Generator().manual_seed(0)
    for binned in (base.binned, fine_binning(base.X, base.binned, 256)):
        n_feat, n_bins = len(binned.columns), binned.n_bins.tolist()
        for _ in range(4):
            conds = []
            for j in torch.randint(0, n_feat, (8,), generator=g).tolist():
                lo, hi = sorted(torch.randint(0, n_bins[j], (2,), generator=g).tolist())
                cond = (j, lo, lo if binned.kinds[j] == "cat" else hi)
                try:
                    fresh.rules(binned, [cond])
                except ValueError:  # grids holding no value: no rule (the search never asks for one)
                    continue
                conds.append(cond)
            assert len(conds) > 2
            assert null.readable.rules(binned, conds) == fresh.rules(binned, conds)
    assert null.readable._edges  # the neighbours were kept


@pytest.mark.parametrize("strategy", ["beam", "paper"])
def test_the_permutations_take_the_searchs_own_binning(strategy, monkeypatch):
    # one binning per call: the permutations' searches read the codes, fine grids and counts of all rows of the
    # search on the real target, and find what searches on codes made afresh find
    from torch_amore.grids import binning
    from torch_amore.search import extract

    X, t = mixed(500, 5)
    kw = {"max_length": 2, "min_support": 25, "strategy": strategy}
    P = 5
    fresh = NullSearch(X, t, SearchOptions(**kw))
    made = []
    original = binning.encode_features

    def counted(*args, **kwargs):
        made.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(extract, "encode_features", counted)
    found = extract_rules(X, t, permutations=P, seed=2, **kw)
    assert len(made) == 1
    assert found and found[0].p_value is not None
    plan = SearchPlan.make(X.shape[0], X.shape[1], SearchOptions(**kw))
    _, _, searched = extract.search_plan(X, t, plan)
    sorted_by_polish = searched.__dict__.get("_columns")  # the beam's polish sorts columns; the paper's tree has none
    polished = set() if sorted_by_polish is None else set(sorted_by_polish.sorted_tables())
    reused = NullSearch(X, t, plan.options, plan=plan, base=searched)
    assert len(made) == 2  # the search above, and no binning for the searches that reuse its extractor
    assert (strategy == "paper" or polished) and set(searched.__dict__.get("_sorted", {})) == polished
    assert "_columns" not in searched.__dict__
    for k in range(P):
        tk = t[torch.from_numpy(permutation_order(len(t), 2, k))]
        assert repr(reused.search(tk)) == repr(fresh.search(tk))
