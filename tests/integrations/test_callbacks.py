"""RegionalRuleExtractor: the rules of a Lightning run equal extract_rules on the same inputs, computed by hand."""

from __future__ import annotations

import csv
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")

import torch  # noqa: E402
from lightning_task import (  # noqa: E402
    EXTRACTORS,
    BreastCancerModule,
    ScaledModule,
    breast_cancer,
    loaders,
    raw_loaders,
)
from rule_compare import assert_rule_sets_close  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from torch_amore import (  # noqa: E402
    RegionalExplanation,
    RegionalRuleExtractor,
    Rule,
    RuleSet,
    SearchOptions,
    extract_rules,
)
from torch_amore._utils import distributed as D  # noqa: E402
from torch_amore.integrations.lightning_batches import LightningBatches  # noqa: E402
from torch_amore.model.batches import split_batch  # noqa: E402

TASK = Path(__file__).resolve().parents[1] / "lightning_task.py"


_RULE_SET_KEYS = ("rules", "support", "confidence", "fitness", "ratios", "target_name")


def _stored(state: dict) -> list[dict]:
    """The rule sets of a checkpointed explanation without the per-rule-set statistics the explanation adds."""
    return [{k: d[k] for k in _RULE_SET_KEYS if k in d} for d in state["explanation"]["rule_sets"]]


def _plain(rule_sets) -> list[dict]:
    """``to_dict()`` of each rule set without the format and library versions."""
    return [{k: v for k, v in rs.to_dict().items() if k in _RULE_SET_KEYS} for rs in rule_sets]


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def trainer(root: Path, callbacks, loggers=False, **kw) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=kw.pop("max_epochs", 1), default_root_dir=root, callbacks=callbacks,
        logger=loggers, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
        log_every_n_steps=1, enable_checkpointing=kw.pop("enable_checkpointing", False), **kw,
    )  # fmt: skip


def split_data(dl: DataLoader) -> tuple[torch.Tensor, torch.Tensor]:
    """All rows of a loader's dataset, in dataset order."""
    return dl.dataset.tensors


@torch.no_grad()
def by_hand(model: nn.Module, X: torch.Tensor, target: int, layer: int | None = None, **options):
    """Subgroup and rules computed without the callback: the module's net on ``X`` (batches of 64, as the loaders),
    ``argmax == target``, rules on the inputs or on ``model.net[: layer + 1]``'s activations."""
    model.eval()
    outputs = torch.cat([model.net(x) for x in X.split(64)])
    mask = outputs.argmax(1) == target
    feats = X if layer is None else torch.cat([model.net[: layer + 1](x) for x in X.split(64)])
    names = [f"{'feature' if layer is None else 'z'}_{i}" for i in range(feats.shape[1])]
    feats = feats.float() if feats.dtype == torch.bfloat16 else feats
    return feats, mask, extract_rules(feats, mask, feature_names=names, **options)


def test_fit_writes_logs_and_reloads_rules(tmp_path, caplog):
    caplog.set_level("INFO")
    tracked = RuleSet((Rule(6, "feature_6", high=0.0),), support=0, confidence=0.0, fitness=0.0)
    model = BreastCancerModule(rule_set=tracked)
    callback = RegionalRuleExtractor(target=1, data="val", n_grids=8, min_support=0.05)
    csv_logger = pl.loggers.CSVLogger(tmp_path, name="csv")
    tb_logger = pl.loggers.TensorBoardLogger(tmp_path, name="tb")
    t = trainer(tmp_path, [callback], [csv_logger, tb_logger])
    t.fit(model, *loaders())
    log_dir = Path(t.log_dir)
    assert callback.filename == "rules_val_inputs_target1"

    # files in the log directory; the JSON reloads to the same rules (equal masks on the data)
    stem = log_dir / callback.filename
    assert stem.with_suffix(".json").is_file() and stem.with_suffix(".txt").is_file()
    explanation = callback.explanation
    assert explanation is not None and len(explanation) > 0
    loaded = RegionalExplanation.from_json(stem.with_suffix(".json"))
    X = explanation.features_matrix
    assert len(loaded) == len(explanation)
    for mine, theirs in zip(explanation.rule_sets, loaded.rule_sets):
        assert torch.equal(mine.mask(X), theirs.mask(X))
    text = stem.with_suffix(".txt").read_text()
    assert all(" AND ".join(r.format() for r in rs.rules) in text for rs in explanation.rule_sets)

    # the rules are extract_rules' on the trained model's validation rows, and the criteria recount by hand
    Xv, _ = split_data(loaders()[1])
    feats, predicted, direct = by_hand(model, Xv, 1, n_grids=8, min_support=0.05)
    assert_rule_sets_close(explanation.rule_sets, direct)
    assert explanation.params["subgroup_size"] == int(predicted.sum()) and explanation.params["n_samples"] == 169
    best = explanation.best
    mask = best.mask(Xv)
    assert best.support == int(mask.sum())
    assert math.isclose(best.fitness, (2 * int((mask & predicted).sum()) - int(mask.sum())) / int(predicted.sum()))
    assert callback.last_epoch == 0 and callback.last_step == t.global_step == 7

    # the best rule set's metrics reach the CSV logger once, at the last epoch ...
    p = callback.log_prefix
    rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get(f"{p}fitness")]
    assert len(rows) == 1 and int(rows[0]["epoch"]) == 0
    assert float(rows[0][f"{p}support"]) == best.support
    assert math.isclose(float(rows[0][f"{p}confidence"]), best.confidence, rel_tol=1e-6)  # logged as float32
    assert math.isclose(float(rows[0][f"{p}fitness"]), best.fitness, rel_tol=1e-6)
    assert float(rows[0][f"{p}n_rule_sets"]) == len(explanation)
    # ... beside the torchmetrics rule metrics of validation_step, equal to counts on the whole validation split
    val_rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get("val_rule/fitness")]
    tmask = tracked.mask(Xv)
    hits, covered, n_t = int((tmask & predicted).sum()), int(tmask.sum()), int(predicted.sum())
    assert float(val_rows[-1]["val_rule/support"]) == covered
    assert math.isclose(float(val_rows[-1]["val_rule/fitness"]), (2 * hits - covered) / n_t, rel_tol=1e-6)

    # ... and to TensorBoard: scalars, the rule table as text and as a figure
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tb_logger.log_dir), size_guidance={"tensors": 0, "scalars": 0, "images": 0})
    events.Reload()
    assert math.isclose(events.Scalars(f"{p}fitness")[-1].value, best.fitness, rel_tol=1e-6)
    text_tags = [tag for tag in events.Tags()["tensors"] if tag.startswith(f"{p}rules")]
    assert text_tags
    assert best.rules[0].format() in events.Tensors(text_tags[0])[-1].tensor_proto.string_val[0].decode()
    assert sorted(events.Tags()["images"]) == [f"{p}best_rule_set", f"{p}table"]
    # progress lines on rank zero
    err = caplog.text
    assert f"RegionalRuleExtractor {callback.filename!r}: explaining the val data (epoch 0)" in err
    assert f"{len(explanation)} rule sets on 169 rows" in err


def test_batch_hooks_and_every_search_option_reach_the_rules(tmp_path):
    """A module standardising in on_after_batch_transfer: the rules are on the standardised inputs (as the model sees
    them), printed in raw units through feature_scale/feature_offset, with every search option passed on."""
    model = ScaledModule()
    options = SearchOptions(n_grids=8, strategy="paper", min_support=20)
    callback = RegionalRuleExtractor(
        target=1, options=options, max_length=2, min_confidence=0.8, beam_width=3, feature_scale=[100.0] * 30,
        feature_offset=[500.0] * 30, min_gain=0.02,
    )  # fmt: skip
    t = trainer(tmp_path, [callback])
    raw_train, raw_val = raw_loaders()
    t.fit(model, raw_train, raw_val)
    assert callback.options == options.replace(min_confidence=0.8, beam_width=3, feature_scale=[100.0] * 30,
                                               feature_offset=[500.0] * 30, min_gain=0.02)  # fmt: skip
    Xraw, _ = split_data(raw_val)
    Xn = (Xraw - 500.0) / 100.0  # the hook's arithmetic, element by element
    explanation = callback.explanation
    assert torch.equal(explanation.features_matrix, Xn)
    _, mask, direct = by_hand(model, Xn, 1, options=callback.options)
    assert explanation.params["subgroup_size"] == int(mask.sum())
    assert direct and all(rs.confidence >= 0.8 for rs in direct)
    assert_rule_sets_close(explanation.rule_sets, direct)
    # printed in raw units: a bound b on the standardised feature reads b * 100 + 500
    rule = explanation.best.rules[0]
    bound = rule.high if math.isfinite(rule.high) else rule.low
    assert 50 < bound * 100 + 500 < 5000


@pytest.mark.parametrize(
    "precision, dtype", [("bf16-true", torch.bfloat16), ("64-true", torch.float64), ("bf16-mixed", torch.float32)]
)
def test_precision_plugins_convert_the_inputs_and_run_the_forward(tmp_path, precision, dtype):
    model = ScaledModule()
    callback = RegionalRuleExtractor(target=1, n_grids=6, min_support=20)
    t = trainer(tmp_path, [callback], pl.loggers.CSVLogger(tmp_path), precision=precision)
    raw_train, raw_val = raw_loaders()
    t.fit(model, raw_train, raw_val)
    assert (Path(t.log_dir) / f"{callback.filename}.json").is_file()
    assert next(model.parameters()).dtype == dtype
    Xraw, _ = split_data(raw_val)
    Xn = (Xraw.to(dtype) - torch.tensor(500.0, dtype=dtype)) / torch.tensor(100.0, dtype=dtype)
    explanation = callback.explanation
    assert torch.equal(explanation.features_matrix, Xn.float() if dtype == torch.bfloat16 else Xn)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16-mixed")
    with autocast:  # the forward under autocast, as in validation_step
        _, mask, _ = by_hand(model, Xn, 1)
    assert explanation.params["subgroup_size"] == int(mask.sum())
    assert_rule_sets_close(explanation.rule_sets, extract_rules(explanation.features_matrix, mask, n_grids=6,
                                                                min_support=20))  # fmt: skip


class _NoForward(pl.LightningModule):
    """A module without ``forward`` or ``validation_step``; it counts its training steps."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(30, 4), nn.ReLU(), nn.Linear(4, 2))
        self.steps = 0

    def training_step(self, batch, batch_idx):
        self.steps += 1
        x, y = batch
        return nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class _NoValidationStep(_NoForward):
    def forward(self, x):
        return self.net(x)


@pytest.mark.parametrize(
    "make, kwargs, fit_val, error, match",
    [
        (ScaledModule, dict(layer="net.9"), True, ValueError, "submodule"),
        (ScaledModule, dict(data="val"), False, ValueError, "validation split"),
        (_NoValidationStep, dict(data="val"), True, ValueError, "validation split"),
        (_NoForward, dict(data="train"), True, TypeError, "forward"),
        (ScaledModule, dict(filename="same"), True, ValueError, "distinct `filename`s"),
        (ScaledModule, dict(data="train", holdout_rows=[1, 400]), True, ValueError, r"indices in \[0, 400\)"),
        (ScaledModule, dict(data="train", features=torch.rand(300, 2)), True, ValueError, r"explained dataset \(400\)"),
    ],
)
def test_mistakes_fail_before_the_first_training_step(tmp_path, make, kwargs, fit_val, error, match):
    model = make()
    callbacks = [RegionalRuleExtractor(target=1, **kwargs)]
    if kwargs.get("filename"):
        callbacks.append(RegionalRuleExtractor(target=0, filename="same"))
    train_dl, val_dl = raw_loaders()
    with pytest.raises(error, match=match):
        trainer(tmp_path, callbacks).fit(model, train_dl, val_dl if fit_val else None)
    assert model.steps == 0


@pytest.mark.parametrize("second", [dict(), dict(min_support=30), dict(options=SearchOptions(n_grids=4))])
def test_two_extractors_with_one_default_name_are_refused_when_the_trainer_is_made(tmp_path, second):
    """Same target, layer and data: the same default file name and checkpoint key, whatever the search options."""
    first, other = RegionalRuleExtractor(target=1), RegionalRuleExtractor(target=1, **second)
    assert first.filename == other.filename  # the name both would write
    with pytest.raises(ValueError, match="filename=") as info:
        trainer(tmp_path, [first, other])
    assert repr(first.filename) in str(info.value) and "RegionalRuleExtractor" in str(info.value)
    renamed = RegionalRuleExtractor(target=1, filename="second", **second)
    t = trainer(tmp_path, [first, renamed])  # told apart by a file name: accepted
    assert [c for c in t.callbacks if isinstance(c, RegionalRuleExtractor)] == [first, renamed]


def test_a_module_on_the_meta_device_is_refused_before_training(tmp_path):
    model = ScaledModule().to("meta")  # shapes only: the single-device strategy cannot move it
    assert next(model.parameters()).is_meta
    train_dl, val_dl = raw_loaders()
    with pytest.raises(Exception) as info:  # noqa: PT011 (Lightning's teardown then fails to move the module too)
        trainer(tmp_path, [RegionalRuleExtractor(target=1)]).fit(model, train_dl, val_dl)
    chain, error = [], info.value
    while error is not None:
        chain.append(error)
        error = error.__context__
    ours = [e for e in chain if isinstance(e, ValueError) and "'meta'" in str(e)]
    assert ours and "ScaledModule" in str(ours[0]) and "net.0.weight" in str(ours[0]), chain
    assert model.steps == 0


def test_two_extractors_keep_both_results_and_the_last_checkpoint_holds_them(tmp_path):
    model = BreastCancerModule()
    extractors = [RegionalRuleExtractor(target=c, n_grids=6) for c in (0, 1)]
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
    t = trainer(tmp_path, [*extractors, checkpoint], pl.loggers.CSVLogger(tmp_path), max_epochs=2,
                enable_checkpointing=True)  # fmt: skip
    train_dl, val_dl = loaders()
    t.fit(model, train_dl, val_dl)
    log_dir = Path(t.log_dir)
    rows = read_csv(log_dir / "metrics.csv")
    assert {e.filename for e in extractors} == {"rules_val_inputs_target0", "rules_val_inputs_target1"}
    for e in extractors:
        saved = RegionalExplanation.from_json(log_dir / f"{e.filename}.json")
        assert [rs.to_dict() for rs in saved.rule_sets] == [rs.to_dict() for rs in e.explanation.rule_sets]
        assert [float(r[f"{e.log_prefix}fitness"]) for r in rows if r.get(f"{e.log_prefix}fitness")] == [
            pytest.approx(e.explanation.best.fitness)
        ]
    assert extractors[0].explanation.params["subgroup_size"] + extractors[1].explanation.params["subgroup_size"] == 169

    # last.ckpt (written by ModelCheckpoint after the last validation) holds the end-of-training explanations
    ckpt = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=True)
    X_new = breast_cancer()[0][:300] * 1.1  # new data: rows the model never saw in this form
    for e in extractors:
        state = ckpt["callbacks"][e.state_key]
        assert state["last_epoch"] == 1 and state["last_step"] == t.global_step
        restored = RegionalRuleExtractor(target=e.target, n_grids=6)
        restored.load_state_dict(state)
        assert [rs.to_dict() for rs in restored.explanation.rule_sets] == [
            rs.to_dict() for rs in e.explanation.rule_sets
        ]
        # the restored explanation evaluates on new data through the restored module
        module = BreastCancerModule(seed=1)
        module.load_state_dict(ckpt["state_dict"])
        metrics = restored.evaluate(module, X_new)
        with torch.no_grad():
            predicted = module(X_new).argmax(1) == e.target
        assert len(metrics) == len(restored.explanation)
        for rs, m in zip(restored.explanation.rule_sets, metrics):
            covered = rs.mask(X_new)
            hits = int((covered & predicted).sum())
            assert m.support == int(covered.sum())
            assert math.isclose(m.fitness, (2 * hits - int(covered.sum())) / int(predicted.sum()), abs_tol=1e-12)


def test_every_n_val_epochs_counts_validation_epochs_and_feeds_model_checkpoint(tmp_path):
    model = BreastCancerModule()
    callback = RegionalRuleExtractor(
        target=0, data="train", layer="net.1", bin_strategy="quantile", n_grids=5, min_support=40,
        every_n_val_epochs=2, at_train_end=False, filename="hidden",
    )  # fmt: skip
    best = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", monitor="hidden/fitness", mode="max")
    t = trainer(tmp_path, [callback, best], pl.loggers.CSVLogger(tmp_path), max_epochs=4, enable_checkpointing=True)
    t.fit(model, *loaders())
    assert callback.last_epoch == 3
    rows = [r for r in read_csv(Path(t.log_dir) / "metrics.csv") if r.get("hidden/fitness")]
    logged = [(int(r["epoch"]), float(r["hidden/fitness"])) for r in rows]
    extracted = {epoch: value for epoch, value in logged if not math.isnan(value)}
    assert sorted(extracted) == [1, 3]  # validation epochs 2 and 4
    assert sorted(epoch for epoch, value in logged if math.isnan(value)) == [0, 2]  # placeholders for the monitor
    assert float(best.best_model_score) == pytest.approx(max(extracted.values()))
    kept = torch.load(best.best_model_path, weights_only=True)["callbacks"][callback.state_key]
    assert kept["last_epoch"] == max(extracted, key=extracted.get)
    # rules on the hidden layer over all 400 training rows, in dataset order (the train loader shuffles)
    X_train, _ = split_data(loaders()[0])
    _, _, direct = by_hand(model, X_train, 0, layer=1, bin_strategy="quantile", n_grids=5, min_support=40)
    assert_rule_sets_close(callback.explanation.rule_sets, direct)
    assert callback.explanation.params["n_samples"] == 400

    # validating every 2nd training epoch: the 2nd validation epoch is training epoch 3
    callback = RegionalRuleExtractor(target=0, data="train", every_n_val_epochs=2, at_train_end=False)
    t = trainer(tmp_path / "b", [callback], max_epochs=4, check_val_every_n_epoch=2)
    t.fit(BreastCancerModule(), *loaders())
    assert callback.last_epoch == 3 and callback.state_dict()["val_epochs"] == 2


def test_trainer_test_explains_the_test_split(tmp_path, caplog):
    """With the evidence options: the best rule set's held-out confidence and p-values reach the logged metrics and
    the progress line, which starts with the verdict."""
    model = BreastCancerModule()
    model.test_step = model.validation_step
    evidence = {"holdout": 0.3, "permutations": 4}
    callback = RegionalRuleExtractor(target=1, data="test", n_grids=6, **evidence)
    t = trainer(tmp_path, [callback], pl.loggers.CSVLogger(tmp_path))
    train_dl, test_dl = loaders()
    t.fit(model, train_dl)
    assert callback.explanation is None  # nothing to explain during fit
    with caplog.at_level("INFO"):
        results = t.test(model, test_dl, verbose=False)
    best = callback.explanation.best
    p = callback.log_prefix
    assert results[0][f"{p}fitness"] == pytest.approx(best.fitness)
    assert (Path(t.log_dir) / "rules_test_inputs_target1.json").is_file()
    _, mask, direct = by_hand(model, split_data(test_dl)[0], 1, n_grids=6, **evidence)
    assert_rule_sets_close(callback.explanation.rule_sets, direct)
    # the held-out numbers recounted on the held-out rows of the same seeded split
    from torch_amore.search.evidence_split import holdout_mask

    X = split_data(test_dl)[0]
    covered = best.mask(X) & holdout_mask(mask, 0.3, seed=0)
    assert results[0][f"{p}held_out_confidence"] == pytest.approx(int((covered & mask).sum()) / int(covered.sum()))
    assert results[0][f"{p}held_out_p_value"] == pytest.approx(best.held_out.p_value)
    assert results[0][f"{p}p_value"] == pytest.approx(best.p_value) and best.p_value == direct[0].p_value
    n, beat = len(direct), sum(rs.p_value <= 0.05 for rs in direct)
    verdict = f"verdict: {beat} of {n} rule sets beat the search on shuffled targets at 0.05, 4 permutations"
    line = next(r.getMessage() for r in caplog.records if "rule sets on" in r.getMessage())
    assert verdict in line and f"held out: confidence={best.held_out.confidence:.3f}" in line


def test_held_out_rows_of_the_dataset_give_the_numbers_of_extract_rules(tmp_path):
    """``holdout_rows`` (positions of the validation dataset's rows): the rule sets and held-out numbers of
    extract_rules with those rows held out, the logged held-out confidence recounted from the best rule set's mask;
    with ``limit_val_batches``, the positions among the rows explained."""
    model = BreastCancerModule()
    X = split_data(loaders()[1])[0]
    positions = list(range(1, len(X), 4))  # every fourth row
    held = torch.zeros(len(X), dtype=torch.bool)
    held[positions] = True
    opts = dict(target=1, n_grids=6, min_support=5, holdout_rows=positions)
    callback, limited = RegionalRuleExtractor(**opts), RegionalRuleExtractor(**opts, filename="limited")
    t = trainer(tmp_path, [callback], pl.loggers.CSVLogger(tmp_path))
    t.fit(model, *loaders())
    _, mask, direct = by_hand(model, X, 1, n_grids=6, min_support=5, holdout_rows=held)
    got = callback.explanation.rule_sets
    assert direct and all(rs.held_out is not None for rs in direct)
    assert_rule_sets_close(got, direct)
    assert [rs.held_out for rs in got] == [rs.held_out for rs in direct]
    best = got[0]
    covered = best.mask(X) & held
    assert best.held_out.support == int(covered.sum())
    confidence = int((covered & mask).sum()) / int(covered.sum())
    assert best.held_out.confidence == pytest.approx(confidence)
    logged = t.callback_metrics[f"{callback.log_prefix}held_out_confidence"]
    assert float(logged) == pytest.approx(confidence, rel=1e-6)
    assert callback.explanation.params["held_out_rows"] == len(positions)

    model = BreastCancerModule()
    trainer(tmp_path / "limited", [limited], limit_val_batches=1).fit(model, *loaders())
    assert limited.explanation.params["n_samples"] == 64
    _, _, direct = by_hand(model, X[:64], 1, n_grids=6, min_support=5, holdout_rows=held[:64])
    assert direct and [rs.held_out for rs in limited.explanation.rule_sets] == [rs.held_out for rs in direct]
    assert limited.explanation.params["held_out_rows"] == int(held[:64].sum())


def test_limit_val_batches_and_fast_dev_run_are_honoured(tmp_path):
    model = BreastCancerModule()
    callback = RegionalRuleExtractor(target=1, n_grids=6, min_support=5)
    trainer(tmp_path, [callback], limit_val_batches=1).fit(model, *loaders())
    assert callback.explanation.params["n_samples"] == 64
    _, _, direct = by_hand(model, split_data(loaders()[1])[0][:64], 1, n_grids=6, min_support=5)
    assert_rule_sets_close(callback.explanation.rule_sets, direct)

    callback = RegionalRuleExtractor(target=1, n_grids=6, min_support=5)
    pl.Trainer(accelerator="cpu", fast_dev_run=True, callbacks=[callback], default_root_dir=tmp_path,
               enable_progress_bar=False, enable_model_summary=False).fit(BreastCancerModule(), *loaders())  # fmt: skip
    assert callback.explanation.params["n_samples"] == 64 and callback.last_step == 1


def test_batch_splitting_and_mode_restoring():
    model = nn.Sequential(nn.Linear(3, 2), nn.Dropout(0.5))
    model.train()
    model[0].eval()  # a mixed-mode module: each submodule's own flag comes back
    pl_module = _NoValidationStep()
    pl_module.net = model
    batches = [torch.ones(4, 3), torch.zeros(2, 3)]
    out = LightningBatches(None, pl_module, batches).collect(model[0], "net.0", collect_inputs=True)
    assert out.outputs.shape == (6, 2) and torch.equal(out.activations, out.outputs)  # dropout off in eval mode
    assert torch.equal(out.inputs, torch.cat(batches)) and out.labels is None
    assert pl_module.training and model.training and not model[0].training and model[1].training
    with pytest.raises(ValueError, match="input_key"):
        split_batch({"x": 1})
    with pytest.raises(ValueError, match="'z'"):
        split_batch({"x": 1}, input_key="z")


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(data="predict"), ValueError),
        (dict(filename="a/b"), ValueError),
        (dict(every_n_val_epochs=0), ValueError),
        (dict(min_support=1.5), ValueError),
        (dict(min_support="5%"), TypeError),
        (dict(bin_strategy="median"), ValueError),
        (dict(strategy="greedy"), ValueError),
        (dict(min_confidence=1.5), ValueError),
        (dict(layer=3), TypeError),
        (dict(threshold=2.0), ValueError),
        (dict(min_suport=10), TypeError),
        (dict(forward_kwargs=[1]), TypeError),
        (dict(holdout_rows=[0.5, 1.5]), TypeError),
        (dict(holdout_rows="rows"), TypeError),
        (dict(holdout_rows=torch.zeros(2, 2, dtype=torch.bool)), ValueError),
        (dict(holdout_rows=[0, 1], holdout=0.3), ValueError),
        (dict(select_features={"n_step": 3}), TypeError),  # select_features' options, checked now
        (dict(select_features={"n_steps": 0}), ValueError),
        (dict(features=[-1, 2]), ValueError),
        (dict(at_train_end="no"), TypeError),  # a string would read as True
        (dict(html="yes"), TypeError),
        (dict(log_figures=None), TypeError),
        (dict(target=1.5), TypeError),  # no class index: refused at the first extraction, after training
        (dict(target="1"), TypeError),
        (dict(target=[0, 1, 2]), TypeError),  # Captum's per-sample indices
        (dict(feature_names=["a", "a", "b", "c"]), ValueError),
        (dict(input_key=3.5), TypeError),
        (dict(label_key=[]), TypeError),
    ],
)
def test_bad_options_raise_at_construction(kwargs, error):
    with pytest.raises(error):
        RegionalRuleExtractor(**{"target": 1, **kwargs})


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (
            dict(target=torch.zeros(50, dtype=torch.bool)),
            "`target` to have one row per row of the explained dataset (100)",
        ),
        (
            dict(target=1, features=torch.rand(50, 2)),
            "`features` to have one row per row of the explained dataset (100)",
        ),
        (dict(target=1, holdout_rows=torch.zeros(50, dtype=torch.bool)), "`holdout_rows` of length 100"),
        (dict(target=1, holdout_rows=[3, 150]), "`holdout_rows` indices in [0, 100)"),
    ],
)
def test_rows_that_do_not_fit_a_dataloaders_dataset_fail_at_construction(kwargs, words):
    """With ``data`` a DataLoader over a sized dataset, a mask target, a features matrix or held-out rows of
    another number of rows fail when the callback is made, not at the first extraction after training."""
    loader = DataLoader(TensorDataset(torch.rand(100, 3), torch.zeros(100)), batch_size=10)
    with pytest.raises(ValueError) as info:
        RegionalRuleExtractor(data=loader, **kwargs)
    assert words in str(info.value)
    fits = dict(target=torch.arange(100) < 30, features=torch.rand(100, 2), holdout_rows=[3, 99])
    RegionalRuleExtractor(data=loader, **fits)  # the same arguments of the dataset's rows


def test_a_dirpath_that_cannot_hold_the_files_fails_at_construction(tmp_path):
    """Not at the first extraction after training, where the files are written."""
    a_file = tmp_path / "rules.txt"
    a_file.write_text("not a folder")
    for where in (a_file, a_file / "below"):
        with pytest.raises(ValueError, match="to be a folder, but .*rules.txt' is a file"):
            RegionalRuleExtractor(target=1, dirpath=where)
    with pytest.raises(TypeError, match="`dirpath` to be a folder path"):
        RegionalRuleExtractor(target=1, dirpath=5)
    assert RegionalRuleExtractor(target=1, dirpath=tmp_path / "new" / "deeper").dirpath == tmp_path / "new" / "deeper"
    assert not (tmp_path / "new").exists()  # made at the first extraction, not here


@pytest.mark.parametrize("names", ["abc", 5, torch.tensor([[1, 2]])])
def test_feature_names_that_are_no_sequence_of_names_are_refused_by_name_at_construction(names):
    with pytest.raises(TypeError, match="Expected `feature_names` to be a sequence of strings"):
        RegionalRuleExtractor(target=1, feature_names=names)


def test_roc_and_feature_selection_are_refused_under_ddp(monkeypatch):
    monkeypatch.setattr(D, "is_sharded", lambda: True)
    model = BreastCancerModule()
    for kwargs in (dict(threshold="roc"), dict(select_features=True)):
        callback = RegionalRuleExtractor(target=1, **kwargs)
        with pytest.raises(ValueError, match="DDP"):
            callback.extract(None, model)


@pytest.mark.slow
def test_ddp_two_processes_give_the_single_process_rules(tmp_path):
    """Trainer(devices=2, strategy="ddp") relaunches the script for rank 1; the rules of the four extractors
    (inputs/uniform, hidden layer/quantile, inputs/kmeans, inputs with held-out rows) equal one process's on the same
    final weights, and so do the held-out numbers.
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
    model.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True))
    train_dl, val_dl = loaders()
    for name, opts in EXTRACTORS.items():
        opts = dict(opts)
        target, data, layer = opts.pop("target"), opts.pop("data"), opts.pop("layer", None)
        X, _ = split_data(train_dl if data == "train" else val_dl)
        feats, mask, single = by_hand(model, X, target, layer=None if layer is None else 1, **opts)
        ddp = RegionalExplanation.from_json(log_dir / f"{name}.json")
        assert single, name
        assert_rule_sets_close(ddp.rule_sets, single)
        assert ddp.params["n_samples"] == X.shape[0] and ddp.params["world_size"] == 2
        assert ddp.params["subgroup_size"] == int(mask.sum())
        for a, b in zip(ddp.rule_sets, single):
            assert torch.equal(a.mask(feats), b.mask(feats))
            if "holdout_rows" in opts:  # the held-out numbers of one process on the rows held out of the dataset
                assert a.held_out.support == b.held_out.support
                assert a.held_out.confidence == pytest.approx(b.held_out.confidence)
                assert a.held_out.p_value == pytest.approx(b.held_out.p_value)
    rows = [r for r in read_csv(log_dir / "metrics.csv") if r.get("inputs_uniform/fitness")]
    assert len(rows) == 1  # logged once (rank 0), not once per rank


@pytest.mark.slow
def test_the_docs_training_script_runs_and_writes_what_it_says(tmp_path, monkeypatch, capsys):
    doc = (Path(__file__).parents[2] / "docs" / "lightning.md").read_text()
    script = doc.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_lightning"}
    exec(compile(script, "docs/lightning.md", "exec"), namespace)
    log_dir = tmp_path / "logs" / "lightning_logs" / "version_0"
    stem = namespace["extractor"].filename
    for name in (f"{stem}.json", f"{stem}.txt", "metrics.csv"):
        assert (log_dir / name).is_file(), name
    explanation = namespace["extractor"].explanation
    assert capsys.readouterr().out.strip().endswith(str(explanation).strip().splitlines()[-1].strip())
    rows = read_csv(log_dir / "metrics.csv")
    assert any(r.get(f"{stem}/fitness") for r in rows) and sum(bool(r.get("val_rule/fitness")) for r in rows) == 3
    loaded = RegionalExplanation.from_json(log_dir / f"{stem}.json")
    assert [rs.to_dict() for rs in loaded.rule_sets] == [rs.to_dict() for rs in explanation.rule_sets]
    assert list((tmp_path / "logs" / "tb" / "version_0").glob("events.*"))
    ckpt = torch.load(next((log_dir / "checkpoints").glob("*.ckpt")), weights_only=True)
    state = ckpt["callbacks"][namespace["extractor"].state_key]
    assert _stored(state) == _plain(explanation.rule_sets)


def test_early_stopping_explains_in_on_train_end_and_the_checkpoint_after_fit_holds_it(tmp_path):
    model = BreastCancerModule()
    callback = RegionalRuleExtractor(target=1, n_grids=6)
    stop = pl.callbacks.EarlyStopping(monitor="val_loss", min_delta=10.0, patience=0)  # stops after epoch 1
    t = trainer(tmp_path, [callback, stop], pl.loggers.CSVLogger(tmp_path), max_epochs=5)
    t.fit(model, *loaders())
    assert t.current_epoch == 2 and callback.last_epoch == 1 and callback.last_step == t.global_step == 14
    rows = [r for r in read_csv(Path(t.log_dir) / "metrics.csv") if r.get(f"{callback.log_prefix}fitness")]
    assert [int(r["step"]) for r in rows] == [14]  # logged once, straight to the logger
    t.save_checkpoint(tmp_path / "after_fit.ckpt")
    state = torch.load(tmp_path / "after_fit.ckpt", weights_only=True)["callbacks"][callback.state_key]
    assert _stored(state) == _plain(callback.explanation.rule_sets)
    _, _, direct = by_hand(model, split_data(loaders()[1])[0], 1, n_grids=6)
    assert_rule_sets_close(callback.explanation.rule_sets, direct)


def test_separate_features_and_feature_selection(tmp_path):
    model = BreastCancerModule()
    Xv, _ = split_data(loaders()[1])
    descriptors = torch.stack([Xv[:, 0] * 2, Xv[:, 7] - Xv[:, 3], Xv[:, 27]], dim=1).double()
    on_matrix = RegionalRuleExtractor(target=1, features=descriptors, feature_names=["a", "b", "c"], n_grids=6)
    with pytest.raises(ValueError, match="one row per row of the explained dataset"):
        trainer(tmp_path, [RegionalRuleExtractor(target=1, features=descriptors[:-1])]).fit(model, *loaders())
    selected = RegionalRuleExtractor(
        target=1, select_features=dict(n_steps=4, n_test_per_class=10, max_length=2), n_grids=6, filename="selected"
    )
    trainer(tmp_path, [on_matrix, selected]).fit(model, *loaders())
    with torch.no_grad():
        mask = model(Xv).argmax(1) == 1
    assert on_matrix.explanation.params["source"] == "features"
    assert_rule_sets_close(
        on_matrix.explanation.rule_sets, extract_rules(descriptors, mask, n_grids=6, feature_names=list("abc"))
    )
    selection = selected.explanation.selection
    assert selection is not None and selected.explanation.features == sorted(selection.features)
    direct = extract_rules(Xv, mask, n_grids=6, features=selection.features,
                           feature_names=[f"feature_{i}" for i in range(30)])  # fmt: skip
    assert_rule_sets_close(selected.explanation.rule_sets, direct)


def test_resuming_keeps_counting_validation_epochs(tmp_path):
    def run(max_epochs, ckpt_path=None):
        callback = RegionalRuleExtractor(target=1, n_grids=6, every_n_val_epochs=3, at_train_end=False)
        save = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)
        t = trainer(tmp_path, [callback, save], max_epochs=max_epochs, enable_checkpointing=True)
        t.fit(BreastCancerModule(), *loaders(), ckpt_path=ckpt_path)
        return callback

    first = run(2)
    assert first.explanation is None and first.state_dict()["val_epochs"] == 2
    resumed = run(4, ckpt_path=tmp_path / "ckpt" / "last.ckpt")
    assert resumed.state_dict()["val_epochs"] == 4
    assert resumed.last_epoch == 2  # the 3rd validation epoch overall, the 1st after resuming


def test_a_malformed_saved_state_is_a_field_error_naming_the_entry():
    from torch_amore.rules.serialization import FieldError

    callback = RegionalRuleExtractor(target=1)
    rs = RuleSet((Rule(0, "x", low=0.5),), support=3, confidence=1.0, fitness=0.5)
    good = {"explanation": RegionalExplanation([rs], None, None, [0], ["x"]).to_dict(), "last_epoch": 2,
            "last_step": 40, "val_epochs": 3}  # fmt: skip
    callback.load_state_dict(good)
    assert (callback.explanation.rule_sets, callback.last_epoch, callback.last_step) == ([rs], 2, 40)
    for key, value, path in (
        ("explanation", {**good["explanation"], "rule_sets": None}, "state_dict.explanation.rule_sets"),
        ("last_epoch", "2", "state_dict.last_epoch"),
        ("last_step", -1, "state_dict.last_step"),
        ("val_epochs", 1.5, "state_dict.val_epochs"),
    ):
        with pytest.raises(FieldError) as info:
            callback.load_state_dict({**good, key: value})
        assert info.value.path == path
    with pytest.raises(FieldError, match="JSON object"):
        callback.load_state_dict([1, 2])
