"""The Lightning callback with ``concepts=``: in memory and streamed, its rules are those of ``explain`` on the same
weights and rows; a basis fitted on the data is fitted on each extraction and kept on the explanation."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pl = pytest.importorskip("pytorch_lightning")

import torch  # noqa: E402
from concept_bases import TopDirections  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

from torch_amore import RegionalExplanation, RegionalRuleExplainer, RegionalRuleExtractor  # noqa: E402

D = 8


class Rotated(pl.LightningModule):
    """``z = R x`` and a logit reading ``(z_0 + z_1) / sqrt(2)``; training leaves it as it is (learning rate 0)."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        R, _ = torch.linalg.qr(torch.randn(D, D, generator=g))
        self.net = nn.Sequential(nn.Linear(D, D, bias=False), nn.Linear(D, 1, bias=False))
        with torch.no_grad():
            self.net[0].weight.copy_(R)
            self.net[1].weight.copy_(directions()[:, 0].reshape(1, D))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.binary_cross_entropy_with_logits(self(x)[:, 0], y.float())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def directions() -> torch.Tensor:
    W = torch.zeros(D, 2)
    W[0, 0] = W[1, 0] = W[0, 1] = 1 / math.sqrt(2)
    W[1, 1] = -1 / math.sqrt(2)
    return W


def loader(n: int = 600) -> DataLoader:
    X = torch.randn(n, D, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        y = (Rotated()(X)[:, 0] > 0).long()  # the labels the model predicts
    return DataLoader(TensorDataset(X, y), batch_size=100)


def fit(root: Path, callbacks) -> Rotated:
    module = Rotated()
    pl.Trainer(
        accelerator="cpu", devices=1, max_epochs=1, default_root_dir=root, callbacks=callbacks, logger=False,
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, enable_checkpointing=False,
        limit_val_batches=0,
    ).fit(module, loader())  # fmt: skip
    return module


KW = dict(target=1, layer="net.0", max_length=2, min_support=0.05, n_grids=8)


def test_callback_rules_over_directions_equal_explain(tmp_path):
    names = ["read", "unread"]
    kw = dict(data=loader(), concepts=directions(), concept_names=names, **KW)
    mem = RegionalRuleExtractor(filename="mem", stream=False, **kw)
    streamed = RegionalRuleExtractor(filename="str", stream=True, **kw)
    module = fit(tmp_path, [mem, streamed])
    X = loader().dataset.tensors[0]
    explained = RegionalRuleExplainer(module, layer="net.0", concepts=directions(), concept_names=names).explain(
        X, 1, max_length=2, min_support=0.05, n_grids=8, progress=False
    )
    want = [str(rs) for rs in explained.rule_sets]
    assert want and explained.best.rules[0].name == "read"
    assert [str(rs) for rs in mem.explanation.rule_sets] == want
    assert [str(rs) for rs in streamed.explanation.rule_sets] == want
    for cb in (mem, streamed):
        assert cb.explanation.params["concepts"]["kind"] == "directions"
        restored = RegionalExplanation.from_json(next(tmp_path.rglob(f"{cb.filename}.json")))
        assert restored.concepts is not None and restored.concepts.names == names
        metrics = cb.evaluate(module, X)
        assert [m.support for m in metrics] == [rs.support for rs in cb.explanation.rule_sets]


def test_a_fitted_basis_is_fitted_per_extraction_in_memory_and_on_the_first_rows_streamed(tmp_path, monkeypatch):
    from torch_amore.explain import concept_space

    monkeypatch.setattr(concept_space, "FIT_ROWS", 250)
    template = TopDirections(2)
    mem = RegionalRuleExtractor(filename="mem", data=loader(), stream=False, concepts=template, **KW)
    streamed = RegionalRuleExtractor(filename="str", data=loader(), stream=True, concepts=template, **KW)
    fit(tmp_path, [mem, streamed])
    assert not template.fitted  # each extraction fits its own copy
    assert mem.explanation.concepts.fitted_on == 600 and streamed.explanation.concepts.fitted_on == 250
    assert mem.explanation.params["concepts"]["reconstruction_error"] == {"fvu": 0.5, "mse": 0.25}
    assert "concepts: top-directions, K=2, reconstruction error (FVU) 0.5" in str(mem.explanation)


def test_bad_callback_concepts_fail_at_construction_or_on_one_sample(tmp_path):
    with pytest.raises(ValueError, match="`layer`"):
        RegionalRuleExtractor(target=1, concepts=directions())
    with pytest.raises(ValueError, match="separate `features` matrix"):
        RegionalRuleExtractor(target=1, layer="net.0", concepts=directions(), features=torch.zeros(10, 3))
    wrong = RegionalRuleExtractor(filename="wrong", data=loader(), concepts=torch.eye(5)[:, :2], **KW)
    with pytest.raises(ValueError, match="5 units.*the layer has 8"):
        fit(tmp_path, [wrong])


def test_callback_selects_concepts(tmp_path):
    kw = dict(data=loader(), concepts=directions(), concept_names=["read", "unread"], **KW)
    selecting = RegionalRuleExtractor(filename="sel", stream=False, select_features={"n_steps": 8}, **kw)
    fit(tmp_path, [selecting])
    assert set(selecting.explanation.selection.features) <= {0, 1} and 0 in selecting.explanation.selection.features
    assert selecting.explanation.best.rules[0].name == "read"


class Halves(nn.Module):
    """An encoder module of the user's own: the concepts are the two halves' sums, decoded back evenly."""

    def forward(self, a: torch.Tensor) -> torch.Tensor:
        return torch.stack([a[:, : D // 2].sum(1), a[:, D // 2 :].sum(1)], 1)

    def decode(self, c: torch.Tensor) -> torch.Tensor:
        return torch.cat([c[:, :1].expand(-1, D // 2), c[:, 1:].expand(-1, D // 2)], 1) / (D // 2)


def test_a_checkpoint_with_the_users_encoder_module_restores(tmp_path):
    """Loading imports nothing a file names: the callback restores an explanation whose basis is the user's own
    ``nn.Module`` by the class of its own basis (a state saved from one callback restored into a fresh one)."""
    encoder = Halves()
    cb = RegionalRuleExtractor(data=loader(), concepts={"encode": encoder, "decode": encoder.decode}, **KW)
    fit(tmp_path, [cb])
    state = cb.state_dict()
    fresh = RegionalRuleExtractor(data=loader(), concepts={"encode": Halves(), "decode": Halves().decode}, **KW)
    fresh.load_state_dict(state)
    assert [str(rs) for rs in fresh.explanation.rule_sets] == [str(rs) for rs in cb.explanation.rule_sets]
    assert isinstance(fresh.explanation.concepts.encoder, Halves)
    X = torch.randn(5, D, generator=torch.Generator().manual_seed(3))
    assert torch.allclose(fresh.explanation.concepts.encode(X), encoder(X))
