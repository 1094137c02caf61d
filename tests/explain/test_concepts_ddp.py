"""Rules over a fitted concept basis under DDP: two gloo processes, each explaining its shard, fit the basis once (on
rank 0's rows, broadcast) and find the same rules, in memory and streamed."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
from gloo_ranks import spawn_ranks

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from concept_bases import TopDirections  # noqa: E402
from test_concepts import FAST, data, rotated_model  # noqa: E402

from torch_amore import RegionalRuleExplainer  # noqa: E402


def _worker(rank: int, world: int, init_file: str, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        model, _ = rotated_model()
        X = data(1200)[rank::world]
        out = {}
        for stream in (False, True):
            explainer = RegionalRuleExplainer(model, layer=model[0], concepts=TopDirections(2))
            explanation = explainer.explain(X if rank == 0 else X[:500], 1, stream=stream, batch_size=100, **FAST)
            out[stream] = {
                "W": explainer.concepts.W,
                "fitted_on": explainer.concepts.fitted_on,
                "rules": [str(rs) for rs in explanation.rule_sets],
            }
        torch.save(out, Path(out_dir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_a_fitted_basis_is_fitted_on_rank_0_and_shared(tmp_path):
    ranks = spawn_ranks(_worker, 2, tmp_path, timeout=300)
    model, _ = rotated_model()
    for stream in (False, True):
        zero, one = ranks[0][stream], ranks[1][stream]
        assert torch.equal(zero["W"], one["W"]) and zero["rules"] == one["rules"] and zero["rules"]
        assert zero["fitted_on"] == one["fitted_on"] == 600  # rank 0's rows (600 of 600 + 500)
        with torch.no_grad():  # rank 0's own fit on its rows
            want = TopDirections(2).fit(model[0](data(1200)[0::2])).W
        assert torch.allclose(zero["W"], want, atol=1e-5)
