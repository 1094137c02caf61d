"""The Lightning callback with ``stream=True`` or a forced ``stream="auto"``: the rules of the in-memory path."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")

import torch  # noqa: E402
from lightning_task import BreastCancerModule, loaders  # noqa: E402

from torch_amore import RegionalRuleExtractor  # noqa: E402
from torch_amore.explain import stream_explain as SE  # noqa: E402


def fit(root: Path, callbacks) -> None:
    pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, default_root_dir=root, callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
    ).fit(BreastCancerModule(), *loaders())  # fmt: skip


def assert_same(streamed, in_memory):
    assert in_memory.rule_sets
    assert streamed.rule_sets == in_memory.rule_sets
    assert [str(rs) for rs in streamed.rule_sets] == [str(rs) for rs in in_memory.rule_sets]
    assert torch.equal(streamed.subgroup, in_memory.subgroup)
    assert streamed.params["n_samples"] == in_memory.params["n_samples"]
    assert streamed.features_matrix is None and in_memory.features_matrix is not None


@pytest.mark.parametrize("layer", [None, "net.1"])
def test_stream_true_gives_the_in_memory_rules(tmp_path, layer):
    kw = dict(target=1, layer=layer, n_grids=6, min_support=10, strategy="beam")
    mem = RegionalRuleExtractor(filename="mem", stream=False, **kw)
    streamed = RegionalRuleExtractor(filename="streamed", stream=True, **kw)
    fit(tmp_path, [mem, streamed])  # both explain the same weights at the end of training
    assert_same(streamed.explanation, mem.explanation)
    assert (tmp_path / "streamed.json").is_file() or any(tmp_path.rglob("streamed.json"))


def test_auto_streams_under_a_small_memory_limit(tmp_path, monkeypatch):
    kw = dict(target=1, layer="net.1", n_grids=6, min_support=10)
    mem = RegionalRuleExtractor(filename="mem", stream=False, **kw)
    fit(tmp_path, [mem])
    auto = RegionalRuleExtractor(filename="auto", **kw)
    assert auto.stream == "auto"
    # 169 x 16 float32 exceed half of it
    monkeypatch.setattr(SE.M, "available_memory", lambda device: (1000, "a test limit"))
    monkeypatch.setattr(SE, "_said", set())
    with pytest.warns(UserWarning, match=r"stream='auto'.*\(169, 16\).*callback finds the rules"):
        fit(tmp_path, [auto])
    assert_same(auto.explanation, mem.explanation)


def test_a_bad_stream_value_fails_at_construction():
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        RegionalRuleExtractor(target=1, stream="always")


@pytest.mark.parametrize(
    "kwargs, names",
    [
        (dict(holdout=0.3), "`holdout`, `holdout_rows`"),
        (dict(holdout_rows=[0, 1]), "`holdout`, `holdout_rows`"),
        (dict(permutations=9), "`holdout`, `holdout_rows`, `permutations`"),
        (dict(threshold="roc"), "threshold='roc'"),
        (dict(select_features=True), "select_features=True"),
        (dict(target=torch.tensor([True, False])), "a mask `target`"),
    ],
)
def test_what_streaming_cannot_do_fails_at_construction_with_stream_true(kwargs, names):
    """Not after the training run, where the extraction would refuse it."""
    kwargs = {"target": 1, **kwargs}
    with pytest.raises(ValueError, match=f"Expected no {re.escape(names)}.*with stream=True"):
        RegionalRuleExtractor(stream=True, **kwargs)
    RegionalRuleExtractor(stream="auto", **kwargs)  # "auto" takes the in-memory path for them
