"""RegionalRuleExtractor: mistakes that once surfaced only at the extraction after the last epoch fail before the
first training step (or at construction), the rows a DataLoader yields are the rows explained, and a subgroup too
small for a held-out split is kept as an empty explanation instead of stopping the run."""

from __future__ import annotations

import csv
import math
import warnings
from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import (  # noqa: E402
    BatchSampler,
    DataLoader,
    Dataset,
    SequentialSampler,
    Subset,
    SubsetRandomSampler,
    TensorDataset,
)

from torch_amore import RegionalRuleExtractor  # noqa: E402

N, BATCH = 300, 64
BATCHES = math.ceil(N / BATCH)  # training batches per epoch


def data() -> tuple[torch.Tensor, torch.Tensor]:
    X = torch.randn(N, 4, generator=torch.Generator().manual_seed(0))
    return X, (X[:, 0] + X[:, 1] > 0).long()


class Tiny(pl.LightningModule):
    """A 4-16-2 MLP trained with cross entropy; ``steps`` counts its training steps."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
        self.lr, self.steps = lr, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def _xy(self, batch):
        return batch

    def training_step(self, batch, batch_idx):
        self.steps += 1
        x, y = self._xy(batch)
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = self._xy(batch)
        self.log("val_loss", nn.functional.cross_entropy(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class _Dicts(Dataset):
    def __init__(self) -> None:
        self.X, self.y = data()

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict:
        return {"x": self.X[i], "y": self.y[i]}


class DictTiny(Tiny):
    """Dict batches; ``forward`` takes the tensor or the whole batch."""

    def forward(self, x):
        return self.net(x["x"] if isinstance(x, dict) else x)

    def _xy(self, batch):
        return batch["x"], batch["y"]


def loaders(dataset: Dataset | None = None) -> tuple[DataLoader, DataLoader]:
    dataset = dataset if dataset is not None else TensorDataset(*data())
    return DataLoader(dataset, batch_size=BATCH), DataLoader(dataset, batch_size=BATCH)


def trainer(root: Path, callbacks, logger=False, **kw) -> pl.Trainer:
    return pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=kw.pop("max_epochs", 3), default_root_dir=root, callbacks=callbacks,
        logger=logger, enable_progress_bar=False, enable_model_summary=False,
        enable_checkpointing=kw.pop("enable_checkpointing", False),
        num_sanity_val_steps=kw.pop("num_sanity_val_steps", 0), log_every_n_steps=1, **kw,
    )  # fmt: skip


@torch.no_grad()
def predicted(model: Tiny, X: torch.Tensor, cls: int = 1) -> torch.Tensor:
    model.eval()
    return model.net(X).argmax(1) == cls


# --- 1. argument mistakes: on the first batch, before the first training step ------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(target=5), ValueError, "Expected `target` < 2 (the number of model outputs), but got 5."),
        (dict(target=(0.0, None)), ValueError, "Expected a single model output per sample for a (low, high) `target`"),
        (dict(feature_names=list("abc")), ValueError, "Expected `feature_names` to have 4 entries (columns of X), but"),
        (dict(feature_scale=[2.0] * 3), ValueError, "Expected `feature_scale` to have 4 entries (columns of X), but"),
        (dict(features=[0, 10]), ValueError, "Expected `features` indices in [0, 3], but got [10]."),
        (dict(layer="net.1", feature_names=["z"]), ValueError, "Expected `feature_names` to have 16 entries"),
        (dict(forward_kwargs={"bogus": 1}), TypeError, "unexpected keyword argument 'bogus'"),
        (dict(label_key=7, threshold="roc"), ValueError, "Expected `label_key` 7 to select an element of each batch"),
        (dict(data="train", features=[0, 10]), ValueError, "Expected `features` indices in [0, 3], but got [10]."),
        (dict(features=torch.rand(N, 3), feature_names=["a", "b"]), ValueError, "`feature_names` to have 3 entries"),
    ],
)
@pytest.mark.parametrize("sanity", [0, 2])
def test_argument_mistakes_fail_on_the_first_batch_before_training(tmp_path, kwargs, error, message, sanity):
    """The extraction's own message, before a training step (with a sanity check or without: the validation loader
    is loaded before ``on_train_start`` when the first epoch validates)."""
    model = Tiny()
    callback = RegionalRuleExtractor(**{"target": 1, **kwargs})
    t = trainer(tmp_path, [callback], num_sanity_val_steps=sanity)
    with pytest.raises(error) as info:
        t.fit(model, *loaders())
    assert message in str(info.value)
    assert model.steps == 0 and t.global_step == 0 and callback.explanation is None


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(), ValueError, "Expected `input_key` to say which element of the dict batches is the model input"),
        (dict(input_key=lambda b: b), TypeError, "Expected tensor model inputs to build rules on them"),
    ],
)
def test_dict_batches_without_a_usable_input_key_fail_before_training(tmp_path, kwargs, error, message):
    model = DictTiny()
    t = trainer(tmp_path, [RegionalRuleExtractor(target=1, **kwargs)])
    with pytest.raises(error, match=message):
        t.fit(model, *loaders(_Dicts()))
    assert model.steps == 0
    # with the input's key the same batches explain
    callback = RegionalRuleExtractor(target=1, input_key="x", n_grids=4)
    trainer(tmp_path, [callback], max_epochs=1).fit(DictTiny(), *loaders(_Dicts()))
    assert callback.explanation.params["n_samples"] == N


def test_the_validation_split_is_checked_at_its_first_validation_when_it_is_loaded_no_earlier(tmp_path):
    """With ``check_val_every_n_epoch=2`` and no sanity check, Lightning loads the validation split at the first
    validation (after two epochs), not after the last epoch."""
    model = Tiny()
    t = trainer(tmp_path, [RegionalRuleExtractor(target=5)], max_epochs=6, check_val_every_n_epoch=2)
    with pytest.raises(ValueError, match="Expected `target` < 2"):
        t.fit(model, *loaders())
    assert model.steps == 2 * BATCHES


def test_the_first_batch_check_runs_the_model_in_eval_mode_without_gradients_and_restores_its_mode(tmp_path):
    seen = []

    class Watched(Tiny):
        def forward(self, x):
            seen.append((self.training, torch.is_grad_enabled()))
            return super().forward(x)

    class Modes(pl.Callback):
        def on_train_start(self, trainer, pl_module):  # after the extractor's own on_train_start
            seen.append(("after", pl_module.training))

    model = Watched()
    trainer(tmp_path, [RegionalRuleExtractor(target=1, n_grids=4), Modes()], max_epochs=1).fit(model, *loaders())
    assert seen[0] == (False, False) and seen[1] == ("after", True)


@pytest.mark.parametrize(
    "verify, error, message",
    [
        ({"n_controls": -1}, ValueError, "Expected `n_controls` to be an integer >= 0, but got -1."),
        ({"level": 5}, ValueError, "Expected `level` to be a number in (0, 1) such as 0.95, but got 5."),
        ({"batch_size": 0}, ValueError, "Expected `batch_size` to be an integer >= 1, but got 0."),
        ({"seed": "x"}, TypeError, "Expected `seed` to be an integer >= 0, but got 'x'."),
        ({"rule_sets": 0}, ValueError, "Expected `rule_sets` to be an integer >= 1, but got 0."),
        ({"method": "clmap"}, ValueError, "Expected `method` to be one of"),
        ({"progress": "no"}, TypeError, "progress"),
    ],
)
def test_verify_option_values_fail_at_construction(verify, error, message):
    with pytest.raises(error) as info:
        RegionalRuleExtractor(target=1, verify=verify)
    assert message in str(info.value)
    RegionalRuleExtractor(target=1, verify={"n_controls": 0, "level": 0.9, "batch_size": 1, "seed": 0, "rule_sets": 2})


# --- 2. the rows of a DataLoader: its sampler and drop_last --------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda ds: DataLoader(ds, batch_size=50, sampler=SubsetRandomSampler(range(200, 260))),
        lambda ds: DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(range(50)), 10, drop_last=False)),
        lambda ds: DataLoader(ds, batch_sampler=[list(range(0, 50)), list(range(50, 100))]),
    ],
)
def test_a_loader_that_reads_other_rows_than_its_dataset_is_refused_at_construction(make):
    with pytest.raises(ValueError) as info:
        RegionalRuleExtractor(target=1, data=make(TensorDataset(*data())))
    assert "DataLoader(Subset(dataset, rows)" in str(info.value)


@pytest.mark.parametrize(
    "make, rows",
    [
        (lambda ds: DataLoader(Subset(ds, range(200, 260)), batch_size=50), range(200, 260)),  # the advice
        (lambda ds: DataLoader(Subset(ds, range(256)), batch_size=100, drop_last=True), range(200)),
        (lambda ds: DataLoader(ds, batch_size=64, shuffle=True), range(N)),  # every row, in dataset order
        (lambda ds: DataLoader(ds, batch_sampler=BatchSampler(SequentialSampler(ds), 128, drop_last=True)), range(256)),
    ],
)
def test_the_rows_a_loader_yields_are_the_rows_explained(tmp_path, make, rows):
    X, y = data()
    model = Tiny()
    callback = RegionalRuleExtractor(target=1, data=make(TensorDataset(X, y)), n_grids=4, min_support=5)
    trainer(tmp_path, [callback], max_epochs=1).fit(model, *loaders())
    explanation, Xr = callback.explanation, X[list(rows)]
    assert explanation.params["n_samples"] == len(rows)
    assert explanation.params["subgroup_size"] == int(predicted(model, Xr).sum())
    assert torch.equal(explanation.features_matrix, Xr)
    best = explanation.best
    assert best.support == int(best.mask(Xr).sum())


def test_a_validation_loader_with_a_sampler_is_refused_before_training(tmp_path):
    model = Tiny()
    X, y = data()
    val = DataLoader(TensorDataset(X, y), batch_size=50, sampler=SubsetRandomSampler(range(200, 260)))
    with pytest.raises(ValueError, match="Expected the 'val' DataLoader to read every row of its dataset once"):
        trainer(tmp_path, [RegionalRuleExtractor(target=1)]).fit(model, loaders()[0], val)
    assert model.steps == 0


# --- 3. data="test" with a monitor, or with every_n_val_epochs ------------------------------------------------------


@pytest.mark.parametrize("monitor", [pl.callbacks.EarlyStopping, pl.callbacks.ModelCheckpoint])
def test_a_monitor_of_a_test_extractors_metric_is_refused_when_fitting_starts(tmp_path, monitor):
    model = Tiny()
    callback = RegionalRuleExtractor(target=1, data="test")
    watch = monitor(monitor="rules_test_inputs_target1/fitness", mode="max")
    with pytest.raises(ValueError, match=r"with data='test': the test split is explained on trainer.test only"):
        trainer(tmp_path, [callback, watch], enable_checkpointing=True).fit(model, *loaders())
    assert model.steps == 0


def test_every_n_val_epochs_with_test_data_is_refused_at_construction():
    with pytest.raises(ValueError, match="Expected no `every_n_val_epochs` with data='test'"):
        RegionalRuleExtractor(target=1, data="test", every_n_val_epochs=2)


# --- 4. a subgroup too small for a held-out split --------------------------------------------------------------------


def _one_row(out: torch.Tensor) -> torch.Tensor:
    """The subgroup of the single row with the largest first output."""
    return out[:, 0] >= out[:, 0].max()


@pytest.mark.parametrize("held", [dict(holdout=0.3), dict(holdout_rows=list(range(0, N, 3)))])
def test_a_subgroup_of_one_row_with_held_out_rows_warns_and_keeps_no_rule_sets(tmp_path, held):
    model = Tiny()
    callback = RegionalRuleExtractor(target=_one_row, every_n_val_epochs=1, n_grids=4, **held)
    logger = pl.loggers.CSVLogger(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t = trainer(tmp_path, [callback], logger, max_epochs=2)
        t.fit(model, *loaders())
    assert model.steps == 2 * BATCHES  # training went on
    reasons = [str(w.message) for w in caught if "held-out rows" in str(w.message)]
    assert len(reasons) == 2 and all(w.category is UserWarning for w in caught if "held-out rows" in str(w.message))
    explanation = callback.explanation
    assert explanation.rule_sets == [] and "Expected target rows both among the held-out rows" in explanation.message
    assert explanation.params["subgroup_size"] == 1 and explanation.params["n_samples"] == N
    with torch.no_grad():
        model.eval()
        assert explanation.subgroup.tolist() == _one_row(model.net(data()[0])).tolist()
    rows = [r for r in csv.DictReader(open(Path(t.log_dir) / "metrics.csv")) if r.get(f"{callback.log_prefix}fitness")]
    assert len(rows) == 2
    for row in rows:
        assert math.isnan(float(row[f"{callback.log_prefix}fitness"]))
        assert math.isnan(float(row[f"{callback.log_prefix}held_out_confidence"]))
        assert float(row[f"{callback.log_prefix}n_rule_sets"]) == 0.0


# --- 5. which rows the numbers are of, and one dtype ------------------------------------------------------------------


def test_the_progress_line_names_the_rows_searched(tmp_path, caplog):
    caplog.set_level("INFO")
    model = Tiny()
    callback = RegionalRuleExtractor(target=1, holdout=0.3, n_grids=4, min_support=0.1)
    trainer(tmp_path, [callback], max_epochs=1).fit(model, *loaders())
    size = int(predicted(model, data()[0]).sum())
    searched = N - round(0.3 * size) - round(0.3 * (N - size))  # a stratified split: round(0.3 k) of each side
    assert f"rule sets on {searched} of {N} rows searched" in caplog.text
    assert callback.explanation.params["min_support_count"] == -(-searched // 10)  # 0.1 of the rows searched


def test_metrics_logged_from_on_train_end_are_float32_like_those_of_the_loops(tmp_path):
    model = Tiny()
    callback = RegionalRuleExtractor(target=1, n_grids=4)
    stop = pl.callbacks.EarlyStopping(monitor="val_loss", min_delta=10.0, patience=0)  # stops after epoch 1
    t = trainer(tmp_path, [callback, stop], pl.loggers.CSVLogger(tmp_path), max_epochs=5)
    t.fit(model, *loaders())
    assert t.current_epoch == 2  # the extraction was on_train_end's
    row = next(
        r for r in csv.DictReader(open(Path(t.log_dir) / "metrics.csv")) if r.get(f"{callback.log_prefix}fitness")
    )
    best = callback.explanation.best
    assert float(np.float32(best.fitness)) != best.fitness  # float32 and float64 differ on this value
    for name in ("support", "confidence", "fitness", "n_rule_sets"):
        value = len(callback.explanation) if name == "n_rule_sets" else getattr(best, name)
        assert float(row[f"{callback.log_prefix}{name}"]) == float(np.float32(value))
