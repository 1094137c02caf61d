"""A small LightningModule on scikit-learn's breast-cancer data, shared by the callback tests.

Run as a script it trains one epoch with :class:`torch_amore.RegionalRuleExtractor` callbacks and saves the final
weights, so that a test can launch it under ``Trainer(devices=2, strategy="ddp")`` (Lightning re-runs the script for
rank 1) and compare the rules with a single process on the same weights::

    python tests/lightning_task.py --root OUT --devices 2 --strategy ddp [--accelerator gpu]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytorch_lightning as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

#: The extractors of the script: (file stem, callback options).
EXTRACTORS = {
    "inputs_uniform": dict(target=1, data="val", bin_strategy="uniform", n_grids=8, min_support=0.05),
    "hidden_quantile": dict(target=0, data="train", layer="net.1", bin_strategy="quantile", n_grids=6, min_support=30),
    "inputs_kmeans": dict(target=1, data="val", bin_strategy="kmeans", n_grids=5, min_support=0.1, max_length=1),
    # rows of the validation dataset held out by position (under DDP each rank's share of them)
    "inputs_held": dict(target=1, data="val", n_grids=6, min_support=10, holdout_rows=list(range(1, 169, 4))),
}


def breast_cancer() -> tuple[torch.Tensor, torch.Tensor]:
    """Standardised float32 features (569, 30) and labels (scikit-learn ships the data; nothing is downloaded)."""
    from sklearn.datasets import load_breast_cancer

    X, y = load_breast_cancer(return_X_y=True)
    X = torch.tensor(X, dtype=torch.float32)
    X = (X - X.mean(0)) / X.std(0)
    return X, torch.tensor(y, dtype=torch.long)


class BreastCancerModule(pl.LightningModule):
    """An MLP classifier that also tracks a fixed rule set with torchmetrics during validation."""

    def __init__(self, seed: int = 0, rule_set=None) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(30, 16), nn.ReLU(), nn.Linear(16, 2))
        self.rule_metrics = None
        if rule_set is not None:
            from torch_amore import RuleSetMetrics

            self.rule_metrics = RuleSetMetrics(rule_set, prefix="val_rule/")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", nn.functional.cross_entropy(logits, y))
        if self.rule_metrics is not None:
            self.rule_metrics.update(x, logits.argmax(1) == 1)
            self.log_dict(self.rule_metrics)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


class ScaledModule(BreastCancerModule):
    """The same MLP fed raw-scale features (x * 100 + 500) that it standardises in ``on_after_batch_transfer``, as
    GPU-side preprocessing does; it counts its training steps (the callback's checks must come before the first)."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__(seed)
        self.register_buffer("mean", torch.tensor(500.0))
        self.register_buffer("scale", torch.tensor(100.0))
        self.steps = 0

    def on_after_batch_transfer(self, batch, dataloader_idx):
        x, y = batch
        return (x - self.mean) / self.scale, y

    def training_step(self, batch, batch_idx):
        self.steps += 1
        return super().training_step(batch, batch_idx)


def raw_loaders(batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    """:func:`loaders` on raw-scale features ``x * 100 + 500`` (the rows and their order unchanged)."""
    train_dl, val_dl = loaders(batch_size)
    for dl in (train_dl, val_dl):
        x, y = dl.dataset.tensors
        dl.dataset.tensors = (x * 100 + 500, y)
    return train_dl, val_dl


def loaders(batch_size: int = 64) -> tuple[DataLoader, DataLoader]:
    X, y = breast_cancer()
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(X.shape[0], generator=g)
    train, val = perm[:400], perm[400:]
    train_dl = DataLoader(TensorDataset(X[train], y[train]), batch_size=batch_size, shuffle=True, generator=g)
    val_dl = DataLoader(TensorDataset(X[val], y[val]), batch_size=batch_size)
    return train_dl, val_dl


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--root", required=True)
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--strategy", default="auto")
    parser.add_argument("--accelerator", default="cpu", help="cpu, or gpu (tests/test_cuda.py's DDP run)")
    args = parser.parse_args()

    from torch_amore import RegionalRuleExtractor

    torch.set_num_threads(1)
    root = Path(args.root)
    callbacks = [RegionalRuleExtractor(**opts, filename=name) for name, opts in EXTRACTORS.items()]
    trainer = pl.Trainer(
        accelerator=args.accelerator, devices=args.devices, strategy=args.strategy, max_epochs=1, default_root_dir=root,
        callbacks=callbacks, enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        logger=pl.loggers.CSVLogger(root), num_sanity_val_steps=0,
    )  # fmt: skip
    model = BreastCancerModule()
    train_dl, val_dl = loaders()
    trainer.fit(model, train_dl, val_dl)
    log_dir = trainer.log_dir  # a collective call under DDP: every rank asks
    if trainer.is_global_zero:
        torch.save(model.state_dict(), root / "model.pt")
        (root / "log_dir.txt").write_text(str(log_dir))
    if torch.distributed.is_initialized():  # else gloo's threads may outlive the interpreter: SIGABRT at exit
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
