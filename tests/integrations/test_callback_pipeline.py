"""The callback takes the explainer's path (issue 38): its rules equal ``explain``'s on the same batches, in memory
and streamed, and one extraction resolves the ``min_support`` count, the capped ``max_length`` and the searched
features once (``tests/spies.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")

import torch  # noqa: E402
from lightning_task import BreastCancerModule, loaders  # noqa: E402
from spies import Spies  # noqa: E402

from torch_amore import RegionalRuleExplainer, RegionalRuleExtractor  # noqa: E402


def fit(root: Path, callbacks) -> BreastCancerModule:
    module = BreastCancerModule()
    pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, default_root_dir=root, callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
    ).fit(module, *loaders())  # fmt: skip
    return module


def listed(explanation) -> list:
    return [(rs.rules, rs.support, rs.confidence, rs.fitness) for rs in explanation.rule_sets]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("layer", [None, "net.1"])
def test_the_callback_finds_the_rules_of_explain_on_the_same_batches(tmp_path, layer, stream):
    options = dict(n_grids=6, min_support=10, max_length=2, strategy="beam")
    callback = RegionalRuleExtractor(target=1, layer=layer, stream=stream, filename="cb", **options)
    module = fit(tmp_path, [callback])  # explains the validation data with the final weights
    val_x = torch.cat([x for x, _ in loaders()[1]])
    explainer = RegionalRuleExplainer(module, layer=layer)
    explanation = explainer.explain(val_x, 1, stream=stream, batch_size=64, progress=False, **options)
    assert callback.explanation.params.get("stream", False) == stream == explanation.params.get("stream", False)
    assert callback.explanation.rule_sets
    assert listed(callback.explanation) == listed(explanation)
    assert torch.equal(callback.explanation.subgroup.cpu(), explanation.subgroup.cpu())
    assert callback.explanation.params["min_support_count"] == explanation.params["min_support_count"]


@pytest.mark.parametrize("stream", [False, True])
def test_one_extraction_of_the_callback_resolves_each_once(tmp_path, monkeypatch, stream):
    callback = RegionalRuleExtractor(target=1, stream=stream, filename="cb", n_grids=6, min_support=0.05, max_length=9)
    spies = Spies(monkeypatch)
    fit(tmp_path, [callback])
    assert callback.explanation.rule_sets
    counts = spies.count()
    conversions = counts.pop("conversion")
    assert counts == {"min_support": 1, "max_length": 1, "alignment": 0, "features": 1}
    if stream:  # each pass converts each of the 3 validation batches (169 rows by 64) once
        assert conversions > 0 and conversions % 3 == 0
    else:
        assert conversions == 1
