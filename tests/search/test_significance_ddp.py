"""The evidence of extract_rules in a sharded (DDP) run: two gloo ranks holding uneven shards get the held-out numbers,
search-aware p-values and stability of one process on the concatenated data (the rows numbered globally, shards in
rank order), and the p-values equal a literal loop of extract_rules on the permuted concatenated targets."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist
from gloo_ranks import spawn_ranks

from torch_amore import extract_rules
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


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        X, t = data()
        rows = shards(len(t))[rank]
        found = extract_rules(X[rows], t[rows], **EVIDENCE, **OPTS)
        torch.save(summary(found), Path(out_dir) / f"rank{rank}.pt")
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
    assert ranks[0] == single
    assert ranks[1] == single


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
    assert [p for _, _, p, _, _ in ranks[0]] == [
        (1 + sum(f >= fit for f in null)) / (P + 1) for _, fit, _, _, _ in ranks[0]
    ]
