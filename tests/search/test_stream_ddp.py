"""Streamed extraction under DDP: two gloo processes, each streaming its shard, give the rules of one process."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo_ranks import spawn_ranks

import torch_amore as ta
from torch_amore.search import stream as stream_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "utils"))
from test_distributed import TYPES, mixed_data, shard_rows  # noqa: E402

COMMON = dict(max_length=2, min_support=0.04, n_grids=8, top_k=3)
CASES = {
    "uniform-paper": dict(strategy="paper", feature_types=TYPES),
    "uniform-exact": dict(strategy="exact", feature_types=TYPES),
    "uniform-beam": dict(strategy="beam", feature_types=TYPES),
    "uniform-beam-inferred": dict(strategy="beam"),
    "quantile-paper": dict(strategy="paper", bin_strategy="quantile", feature_types=TYPES),
    "kmeans-beam": dict(strategy="beam", bin_strategy="kmeans", feature_types=TYPES),
}

DISK_CASES = {
    "disk-paper": dict(strategy="paper", feature_types=TYPES, max_length=3),
    "disk-beam": dict(strategy="beam", feature_types=TYPES),
}


def source(X, target, step):
    return lambda: iter([(X[i : i + step], target[i : i + step]) for i in range(0, len(X), step)])


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        X, target = mixed_data()
        rows = shard_rows(X, "skewed")[rank]
        out = {}
        for name, kw in CASES.items():
            found = ta.extract_rules(source(X[rows], target[rows], 7 if rank else 64), **COMMON, **kw)
            out[name] = [rs.to_dict() for rs in found]
        stream_module.ROW_CHUNK = 16  # codes on disk: the ranks count their shards in different numbers of chunks
        for name, kw in DISK_CASES.items():
            batches = source(X[rows], target[rows], 7 if rank else 64)
            found = ta.extract_rules(batches, codes_dir=out_dir, **{**COMMON, **kw})
            out[name] = [rs.to_dict() for rs in found]
        try:
            ta.extract_rules(source(X[rows], target[rows], 50) if rank == 0 else (lambda: iter([])), **COMMON)
        except ValueError as err:
            out["empty"] = str(err)
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    tmp = tmp_path_factory.mktemp("ddp_stream")
    return spawn_ranks(_worker, 2, tmp, timeout=300)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_two_gloo_ranks_streaming_give_the_single_process_rules(ranks, name):
    """Each rank streams its shard; the rules equal one process on the concatenated shards (in memory for uniform
    and k-means grids; streamed for quantile grids, whose sketch is merged exactly)."""
    X, target = mixed_data()
    whole = torch.cat(shard_rows(X, "skewed"))
    kw = {**COMMON, **CASES[name]}
    if not name.startswith("quantile"):
        expected = ta.extract_rules(X[whole], target[whole], **kw)
    else:
        expected = ta.extract_rules(source(X[whole], target[whole], 100), **kw)
    expected = [rs.to_dict() for rs in expected]
    assert expected
    assert ranks[0][name] == expected
    assert ranks[1][name] == expected


@pytest.mark.slow
@pytest.mark.parametrize("name", list(DISK_CASES))
def test_two_gloo_ranks_with_codes_on_disk_give_the_single_process_rules(ranks, name):
    """Codes on disk, counted 16 rows at a time: ranks with different numbers of chunks meet in the same collectives
    (one reduction per count), and the rules equal one process in memory."""
    X, target = mixed_data()
    whole = torch.cat(shard_rows(X, "skewed"))
    expected = [rs.to_dict() for rs in ta.extract_rules(X[whole], target[whole], **{**COMMON, **DISK_CASES[name]})]
    assert expected
    assert ranks[0][name] == expected
    assert ranks[1][name] == expected


@pytest.mark.slow
def test_an_empty_shard_fails_on_every_rank(ranks):
    assert "on another rank" in ranks[0]["empty"]
    assert "yielded none on rank 1" in ranks[1]["empty"]
