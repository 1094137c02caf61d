"""Streamed explanations: RegionalRuleExplainer.explain(..., stream=True / "auto") gives the rules of the in-memory
path, with the activations and the subgroup computed batch by batch in the same forward pass."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from torch_amore import RegionalRuleExplainer
from torch_amore.explain import stream_explain as SE


class SmallCNN(nn.Module):
    """A conv layer, pooled to an 8-d latent layer, then 3 classes (random weights, seeded)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.conv = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x))


@pytest.fixture(scope="module")
def task():
    g = torch.Generator().manual_seed(1)
    images = torch.rand(1200, 1, 8, 8, generator=g) * torch.rand(1200, 1, 1, 1, generator=g)
    model = SmallCNN()
    with torch.no_grad():  # logits spread over the three classes
        latent = model.conv(images)
        model.head.weight.mul_(1 / latent.std(0).clamp(min=1e-6))
        model.head.bias.sub_(model(images).mean(0))
    labels = torch.arange(1200) % 3
    return model, images, labels


def assert_same(streamed, in_memory):
    assert in_memory.rule_sets
    assert streamed.rule_sets == in_memory.rule_sets
    assert [str(rs) for rs in streamed.rule_sets] == [str(rs) for rs in in_memory.rule_sets]
    assert torch.equal(streamed.subgroup, in_memory.subgroup)
    assert streamed.feature_names == in_memory.feature_names
    assert streamed.features_matrix is None and in_memory.features_matrix is not None


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_latent_layer_of_a_cnn(task, strategy):
    model, images, _ = task
    explainer = RegionalRuleExplainer(model, "conv")
    kw = dict(strategy=strategy, min_support=60, batch_size=100, progress=False)
    in_memory = explainer.explain(images, 2, stream=False, **kw)
    assert_same(explainer.explain(images, 2, stream=True, **kw), in_memory)


def test_dataloader_callable_and_range_targets(task):
    model, images, labels = task
    explainer = RegionalRuleExplainer(model, model.conv)
    loader = DataLoader(TensorDataset(images, labels), batch_size=128, shuffle=False)
    torch.manual_seed(0)  # the head below, whatever ran before
    one = nn.Sequential(model, nn.Linear(3, 1))  # a range needs a single output
    with torch.no_grad():
        middle = float(one(images).median())  # the range holds about half the samples
    for target in (lambda out: out[:, 0] > out[:, 1], (middle, None)):
        if isinstance(target, tuple):
            explainer = RegionalRuleExplainer(one, "0.conv")
        in_memory = explainer.explain(loader, target, min_support=50, stream=False)
        assert_same(explainer.explain(loader, target, min_support=50, stream=True), in_memory)


def test_auto_streams_under_a_small_memory_limit(task, monkeypatch):
    model, images, _ = task
    explainer = RegionalRuleExplainer(model, "conv")
    in_memory = explainer.explain(images, 1, min_support=60, stream="auto")  # fits: the in-memory path
    assert in_memory.features_matrix is not None
    # 1,200 x 8 float32 exceed half of it
    monkeypatch.setattr(SE.M, "available_memory", lambda device: (1000, "a test limit"))
    monkeypatch.setattr(SE, "_said", set())
    with pytest.warns(UserWarning, match=r"stream='auto'.*\(1200, 8\).*exceed 50%"):
        streamed = explainer.explain(images, 1, min_support=60, stream="auto")
    assert_same(streamed, in_memory)


def test_stream_refuses_what_it_cannot_do(task):
    model, images, _ = task
    explainer = RegionalRuleExplainer(model, "conv")
    with pytest.raises(ValueError, match=r"no threshold='roc'.*stream=False"):
        explainer.explain(images, 1, threshold="roc", labels=torch.arange(1200) % 2, stream=True)
    with pytest.raises(ValueError, match=r"no a mask `target`"):
        explainer.explain(images, torch.arange(1200) % 2 == 0, stream=True)
    pd = pytest.importorskip("pandas")
    with pytest.raises(ValueError, match=r"no a mask `target`"):  # a pandas Series is a mask too
        explainer.explain(images, pd.Series((torch.arange(1200) % 2 == 0).numpy()), stream=True)
    with pytest.raises(ValueError, match="True, False or 'auto'"):
        explainer.explain(images, 1, stream="yes")
    shuffled = DataLoader(TensorDataset(images), batch_size=64, shuffle=True)
    with pytest.raises(ValueError, match="shuffle"):
        explainer.explain(shuffled, 1, stream=True)


@pytest.mark.parametrize("stream", [False, "auto", True])
def test_nan_outputs_are_counted_over_the_samples_that_give_them(task, stream):
    """NaN outputs are reported by the pass that runs the model over the samples (not by the one-sample probe of
    stream='auto'): how many samples give NaN, of which rows, and the first one's index among all samples."""
    model, images, _ = task
    poisoned = images.clone()
    if stream is True:  # batches of 64: the batch of rows 64..127 holds the first two
        poisoned[[70, 75, 300]] = float("nan")
        expected = (
            r"^Expected finite model outputs, but 2 of the 64 samples 64\.\.127 give NaN \(first at sample 70\)\.$"
        )
    else:  # the first sample too, which the probe runs alone
        poisoned[[0, 70, 75, 300]] = float("nan")
        expected = r"^Expected finite model outputs, but 4 of 1200 samples give NaN \(first at sample 0\)\.$"
    explainer = RegionalRuleExplainer(model, "conv")
    with pytest.raises(ValueError, match=expected):
        explainer.explain(poisoned, 1, min_support=60, stream=stream, batch_size=64)
