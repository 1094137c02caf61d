"""The evidence of extract_rules in a sharded (DDP) run: two gloo ranks holding uneven shards get the held-out numbers,
search-aware p-values and stability of one process on the concatenated data (the rows numbered globally, shards in
rank order), and the p-values equal a literal loop of extract_rules on the permuted concatenated targets. With
``holdout_rows``, each rank gives its own rows: extract_rules and the explainer then get the numbers of one process
given the concatenated rows, also where one rank's part holds none or all of its rows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from gloo_ranks import spawn_ranks
from torch import nn

from torch_amore import RegionalRuleExplainer, extract_rules
from torch_amore.search.evidence_split import holdout_mask

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EVIDENCE = {"holdout": 0.3, "permutations": 5, "stability": 2, "seed": 3}
OPTS = {"max_length": 2, "min_support": 25, "n_grids": 6, "optimum_budget": 0}  # no grid optimum: pair seeds run


def data(n: int = 700) -> tuple[torch.Tensor, torch.Tensor]:
    """A weak box on floats, with an integer column and missing values."""
    g = torch.Generator().manual_seed(4)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    X[:, 2] = torch.randint(0, 8, (n,), generator=g).double()
    X[torch.rand(n, generator=g) < 0.05, 3] = float("nan")
    u = torch.rand(n, generator=g, dtype=torch.float64)
    return X, torch.where((X[:, 0] > 0.6) & (X[:, 2] < 4), u < 0.55, u < 0.15)


def shards(n: int) -> list[torch.Tensor]:
    """Rank 0 holds 300 rows, rank 1 the other 400."""
    return [torch.arange(300), torch.arange(300, n)]


def summary(found) -> list[tuple]:
    return [(rs.rules, rs.fitness, rs.p_value, rs.stability, rs.held_out) for rs in found]


def held_rows(n: int) -> torch.Tensor:
    """The rows a caller holds out: every fourth, from row 1."""
    return torch.arange(n) % 4 == 1


def held_on_rank0(n: int) -> torch.Tensor:
    """Rows held out of rank 0's shard only: rank 1's part holds none of them (allowed: the parts are checked over
    all ranks)."""
    return held_rows(n) & (torch.arange(n) < 300)


class Score(nn.Module):
    """Class 1 where ``x_0 - 0.05 x_2 > 0.45`` (reads neither column 1 nor column 3, which holds NaN)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x[:, 0] - 0.05 * x[:, 2] - 0.45
        return torch.stack([-s, s], 1)


def given_rows(X: torch.Tensor, t: torch.Tensor, held: torch.Tensor) -> dict[str, list[tuple]]:
    """``holdout_rows`` through extract_rules and the explainer (with permutations: the search's null too)."""
    kw = {"holdout_rows": held, "permutations": 3, "seed": 3, **OPTS}
    explanation = RegionalRuleExplainer(Score()).explain(X, 1, **kw)
    return {"extract_rules": summary(extract_rules(X, t, **kw)), "explain": summary(explanation.rule_sets)}


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        X, t = data()
        rows = shards(len(t))[rank]
        found = extract_rules(X[rows], t[rows], **EVIDENCE, **OPTS)
        out = {"evidence": summary(found), "given": given_rows(X[rows], t[rows], held_rows(len(t))[rows])}
        out["one_rank"] = given_rows(X[rows], t[rows], held_on_rank0(len(t))[rows])
        all_of_rank1 = torch.arange(len(t)) >= 300  # rank 1 searches none of its rows
        out["all_of_rank1"] = summary(extract_rules(X[rows], t[rows], holdout_rows=all_of_rank1[rows], **OPTS))
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list:
    tmp = tmp_path_factory.mktemp("ddp_evidence")
    return spawn_ranks(_worker, 2, tmp, timeout=240)


def test_two_ranks_get_the_evidence_of_one_process(ranks):
    X, t = data()
    single = summary(extract_rules(X, t, **EVIDENCE, **OPTS))  # the shards concatenated are the rows in order
    assert single and all(p is not None for _, _, p, _, _ in single)
    assert ranks[0]["evidence"] == single
    assert ranks[1]["evidence"] == single


def test_each_ranks_own_held_out_rows_give_the_numbers_of_one_process(ranks):
    X, t = data()
    single = given_rows(X, t, held_rows(len(t)))
    for found in single.values():  # held-out numbers and p-values computed, not None
        assert found and all(p is not None and h is not None for _, _, p, _, h in found)
    with torch.no_grad():
        subgroup = Score()(X).argmax(1) == 1
    assert single["explain"] == summary(
        extract_rules(X, subgroup, holdout_rows=held_rows(len(t)), permutations=3, seed=3, **OPTS)
    )
    assert ranks[0]["given"] == single
    assert ranks[1]["given"] == single


def test_a_rank_holding_out_none_of_its_rows_gets_the_numbers_of_one_process(ranks):
    X, t = data()
    held = held_on_rank0(len(t))
    assert not held[300:].any() and held[:300].any()  # rank 1's part holds none
    single = given_rows(X, t, held)
    for found in single.values():
        assert found and all(p is not None and h is not None for _, _, p, _, h in found)
    assert ranks[0]["one_rank"] == single
    assert ranks[1]["one_rank"] == single
    all_of_rank1 = summary(extract_rules(X, t, holdout_rows=torch.arange(len(t)) >= 300, **OPTS))
    assert all_of_rank1 and all(h is not None for *_, h in all_of_rank1)
    assert ranks[0]["all_of_rank1"] == all_of_rank1
    assert ranks[1]["all_of_rank1"] == all_of_rank1


def test_the_sharded_p_values_are_a_literal_loop_over_global_rows(ranks):
    X, t = data()
    keep = ~holdout_mask(t, EVIDENCE["holdout"], EVIDENCE["seed"])
    Xs, ts = X[keep], t[keep]
    P, seed = EVIDENCE["permutations"], EVIDENCE["seed"]
    null = []
    for k in range(P):
        order = torch.from_numpy(np.random.default_rng([seed, 1, k]).permutation(len(ts)))
        again = extract_rules(Xs, ts[order], **OPTS)
        null.append(again[0].fitness if again else -math.inf)
    assert [p for _, _, p, _, _ in ranks[0]["evidence"]] == [
        (1 + sum(f >= fit for f in null)) / (P + 1) for _, fit, _, _, _ in ranks[0]["evidence"]
    ]
