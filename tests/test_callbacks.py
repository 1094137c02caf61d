"""RegionalRuleExtractor in real Lightning runs: files, logged metrics, checkpoints, and DDP equal to one process."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pl = pytest.importorskip("pytorch_lightning")
pytest.importorskip("sklearn")

from lightning_task import EXTRACTORS, BreastCancerModule, breast_cancer, loaders  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from torch_amore import (  # noqa: E402
    RegionalExplanation,
    RegionalRuleExplainer,
    RegionalRuleExtractor,
    Rule,
    RuleSet,
)
from torch_amore import distributed as D  # noqa: E402

TASK = Path(__file__).with_name("lightning_task.py")


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def trainer(root: Path, callbacks, loggers, **kw) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=kw.pop("max_epochs", 1), default_root_dir=root, callbacks=callbacks,
        logger=loggers, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        log_every_n_steps=1, **kw,
    )  # fmt: skip


def val_data() -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.cat([b[0] for b in loaders()[1]])
    y = torch.cat([b[1] for b in loaders()[1]])
    return X, y


def same_rule_sets(a: list[RuleSet], b: list[RuleSet]) -> bool:
    return [r.to_dict() for r in a] == [r.to_dict() for r in b]


def test_fit_writes_logs_and_reloads_rules(tmp_path):
    tracked = RuleSet((Rule(6, "feature_6", high=0.0),), support=0, confidence=0.0, fitness=0.0)
    model = BreastCancerModule(rule_set=tracked)
    callback = RegionalRuleExtractor(target=1, data="val", n_grids=8, min_support=0.05)
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="csv")
    tb_logger = pl.loggers.TensorBoardLogger(tmp_path, name="tb")
    t = trainer(tmp_path, [callback], [csv_logger, tb_logger])
    t.fit(model, *loaders())
    log_dir = Path(t.log_dir)
    assert log_dir == Path(csv_logger.log_dir)

    # files in the log directory; the JSON reloads to the same rules (equal masks on the data)
    assert (log_dir / "rules.json").is_file() and (log_dir / "rules.txt").is_file()
    explanation = callback.explanation
    assert explanation is not None and len(explanation) > 0
    loaded = RegionalExplanation.from_json(log_dir / "rules.json")
    X = explanation.features_matrix
    assert len(loaded) == len(explanation)
    for mine, theirs in zip(explanation.rule_sets, loaded.rule_sets):
        assert torch.equal(mine.mask(X), theirs.mask(X))
    text = (log_dir / "rules.txt").read_text()
    assert all(" AND ".join(r.format() for r in rs.rules) in text for rs in explanation.rule_sets)

    # the rules are those of the explainer run on the trained model over the validation rows, in one process
    Xv, _ = val_data()
    direct = RegionalRuleExplainer(model).explain(Xv, 1, n_grids=8, min_support=0.05, progress=False)
    assert same_rule_sets(direct.rule_sets, explanation.rule_sets)
    predicted = model(Xv).argmax(1) == 1
    best = explanation.best
    mask = best.mask(Xv)
    assert best.support == int(mask.sum())
    assert math.isclose(best.fitness, (2 * int((mask & predicted).sum()) - int(mask.sum())) / int(predicted.sum()))

    # the best rule set's metrics reach the CSV logger...
    rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get("rules/fitness")]
    assert len(rows) == 1
    assert float(rows[0]["rules/support"]) == best.support
    assert math.isclose(float(rows[0]["rules/confidence"]), best.confidence)
    assert math.isclose(float(rows[0]["rules/fitness"]), best.fitness)
    assert float(rows[0]["rules/n_rule_sets"]) == len(explanation)
    # ... with the torchmetrics rule metrics of validation_step, equal to counts on the whole validation split
    val_rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get("val_rule/fitness")]
    tmask = tracked.mask(Xv)
    hits, covered, n_t = int((tmask & predicted).sum()), int(tmask.sum()), int(predicted.sum())
    assert float(val_rows[-1]["val_rule/support"]) == covered
    assert math.isclose(float(val_rows[-1]["val_rule/confidence"]), hits / covered, rel_tol=1e-6)
    assert math.isclose(float(val_rows[-1]["val_rule/fitness"]), (2 * hits - covered) / n_t, rel_tol=1e-6)

    # ... and to TensorBoard, scalars and the rule text
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb_logger.log_dir), size_guidance={"tensors": 0, "scalars": 0}).Reload()
    assert math.isclose(events.Scalars("rules/fitness")[-1].value, best.fitness, rel_tol=1e-6)
    text_tags = [tag for tag in events.Tags()["tensors"] if tag.startswith("rules/rules")]
    assert text_tags
    logged = events.Tensors(text_tags[0])[-1].tensor_proto.string_val[0].decode()
    assert best.rules[0].format() in logged


def test_every_n_val_epochs_logs_through_lightning_and_checkpoints_state(tmp_path):
    model = BreastCancerModule()
    callback = RegionalRuleExtractor(
        target=0, data="train", layer="net.1", bin_strategy="quantile", n_grids=5, min_support=40,
        every_n_val_epochs=1, on_fit_end=False, filename="hidden",
    )  # fmt: skip
    t = trainer(tmp_path, [callback], pl.loggers.CSVLogger(tmp_path), max_epochs=2)
    t.fit(model, *loaders())
    assert callback.last_epoch == 1
    best = callback.explanation.best
    assert math.isclose(float(t.callback_metrics["hidden/fitness"]), best.fitness, rel_tol=1e-6)
    rows = [r for r in read_csv(Path(t.log_dir) / "metrics.csv") if r.get("hidden/fitness")]
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    # rules on the hidden layer over all 400 training rows, in dataset order (the train loader shuffles)
    train_ds = loaders()[0].dataset
    direct = RegionalRuleExplainer(model, "net.1").explain(
        DataLoader(train_ds, batch_size=64), 0, bin_strategy="quantile", n_grids=5, min_support=40, progress=False
    )
    assert same_rule_sets(direct.rule_sets, callback.explanation.rule_sets)
    assert callback.explanation.params["n_samples"] == len(train_ds)

    # the state travels in checkpoints under a key naming the target, so several extractors coexist
    path = tmp_path / "last.ckpt"
    t.save_checkpoint(path)
    state = torch.load(path, weights_only=False)["callbacks"]
    other = RegionalRuleExtractor(target=1, data="train", layer="net.1", filename="hidden")
    assert callback.state_key in state and other.state_key != callback.state_key
    fresh = RegionalRuleExtractor(target=0, data="train", layer="net.1", filename="hidden")
    fresh.load_state_dict(state[fresh.state_key])
    assert fresh.last_epoch == 1
    assert same_rule_sets(fresh.explanation.rule_sets, callback.explanation.rule_sets)


@pytest.mark.slow
def test_ddp_two_processes_give_the_single_process_rules(tmp_path):
    """Trainer(devices=2, strategy="ddp") relaunches the script for rank 1; the rules of the three extractors
    (inputs/uniform, hidden layer/quantile, inputs/kmeans) equal one process's on the same final weights.
    """
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "PYTHONWARNINGS": "ignore"}
    run = subprocess.run(
        [sys.executable, str(TASK), "--root", str(tmp_path), "--devices", "2", "--strategy", "ddp"],
        capture_output=True, text=True, timeout=240, env=env, cwd=TASK.parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    assert "GLOBAL_RANK: 1" in run.stdout + run.stderr  # two processes really ran
    log_dir = Path((tmp_path / "log_dir.txt").read_text())
    model = BreastCancerModule()
    model.load_state_dict(torch.load(tmp_path / "model.pt"))
    train_dl, val_dl = loaders()
    X_all, _ = breast_cancer()
    for name, opts in EXTRACTORS.items():
        opts = dict(opts)
        target, data, layer = opts.pop("target"), opts.pop("data"), opts.pop("layer", None)
        dataset = (train_dl if data == "train" else val_dl).dataset
        single = RegionalRuleExplainer(model, layer).explain(
            DataLoader(dataset, batch_size=64), target, progress=False, **opts
        )
        ddp = RegionalExplanation.from_json(log_dir / f"{name}.json")
        assert single.rule_sets, name
        assert same_rule_sets(ddp.rule_sets, single.rule_sets), name
        assert ddp.params["n_samples"] == len(dataset) and ddp.params["world_size"] == 2
        assert ddp.params["subgroup_size"] == int(single.subgroup.sum())
        X = single.features_matrix
        for a, b in zip(ddp.rule_sets, single.rule_sets):
            assert torch.equal(a.mask(X), b.mask(X))
    assert X_all.shape[0] == 569
    rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get("inputs_uniform/fitness")]
    assert len(rows) == 1  # logged once (rank 0), not once per rank


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(data="test"), ValueError),
        (dict(filename="a/b"), ValueError),
        (dict(every_n_val_epochs=0), ValueError),
        (dict(min_support=1.5), ValueError),
        (dict(min_support="5%"), TypeError),
        (dict(bin_strategy="median"), ValueError),
        (dict(layer=3), TypeError),
    ],
)
def test_bad_options_raise_at_construction(kwargs, error):
    with pytest.raises(error):
        RegionalRuleExtractor(target=1, **kwargs)


def test_roc_and_feature_selection_are_refused_under_ddp(monkeypatch, tmp_path):
    monkeypatch.setattr(D, "is_sharded", lambda: True)
    model = BreastCancerModule()
    for kwargs in (dict(threshold="roc"), dict(select_features=True)):
        callback = RegionalRuleExtractor(target=1, **kwargs)
        with pytest.raises(ValueError, match="DDP"):
            callback.extract(None, model)


@pytest.mark.slow
def test_the_docs_training_script_runs_and_writes_what_it_says(tmp_path, monkeypatch, capsys):
    doc = (Path(__file__).parents[1] / "docs" / "lightning.md").read_text()
    script = doc.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_lightning"}
    exec(compile(script, "docs/lightning.md", "exec"), namespace)
    log_dir = tmp_path / "logs" / "lightning_logs" / "version_0"
    for name in ("rules.json", "rules.txt", "metrics.csv"):
        assert (log_dir / name).is_file(), name
    explanation = namespace["extractor"].explanation
    assert capsys.readouterr().out.strip().endswith(str(explanation).strip().splitlines()[-1].strip())
    rows = read_csv(log_dir / "metrics.csv")
    assert any(r.get("rules/fitness") for r in rows) and sum(bool(r.get("val_rule/fitness")) for r in rows) == 3
    loaded = RegionalExplanation.from_json(log_dir / "rules.json")
    assert [rs.to_dict() for rs in loaded.rule_sets] == [rs.to_dict() for rs in explanation.rule_sets]
    assert list((tmp_path / "logs" / "tb" / "version_0").glob("events.*"))
