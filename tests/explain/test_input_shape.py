"""Shape mistakes named by the library: a mismatch between `inputs` and the model is a ValueError naming `inputs`, its
shape and what the model expects, raised on the first batch with torch's error chained; `evaluate` and `verify`
check new data's width before the model runs."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from torch_amore import RegionalRuleExplainer
from torch_amore.model.input_shape import call_model, first_layer

pytestmark = pytest.mark.filterwarnings("ignore:Rule sets may be useless")  # random models: fitness is not the point


def _mlp(width: int = 30) -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(width, 16), nn.ReLU(), nn.Linear(16, 2))


def _counted(model: nn.Module) -> list[int]:
    """A list that grows by one on every forward call of ``model``."""
    calls: list[int] = []
    model.register_forward_pre_hook(lambda module, args: calls.append(1))
    return calls


class MatMul(nn.Module):
    """A model without a layer that states its width: ``x @ w``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(width, 2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


@pytest.mark.parametrize("stream", [False, "auto"])
@pytest.mark.parametrize("columns", [None, 20])
def test_wrong_width_names_inputs_and_the_first_layer(stream: bool | str, columns: int | None) -> None:
    model = _mlp(30)
    X = torch.randn(300, 30)
    inputs = X[:, 0] if columns is None else X[:, :columns]  # a 1-D input, or 20 columns for a 30-input model
    calls = _counted(model)
    with pytest.raises(ValueError) as info:
        RegionalRuleExplainer(model).explain(inputs, 1, batch_size=100, stream=stream, progress=False)
    message = str(info.value)
    assert message.startswith("Expected `inputs` of shape (N, 30)")
    assert "Linear(in_features=30)" in message
    assert f"but got shape {tuple(inputs.shape)}" in message
    assert isinstance(info.value.__cause__, RuntimeError)  # torch's error chained
    assert str(info.value.__cause__) in message
    assert len(calls) == 1  # raised on the first batch
    assert ("A 1-D `inputs`" in message) == (inputs.ndim == 1)


def test_first_layer_is_read_in_registration_order() -> None:
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 4), nn.ReLU(), nn.Linear(4, 1))
    name, layer, first = first_layer(model)
    assert (name, layer is model[1], first) == ("1", True, False)
    with pytest.raises(
        ValueError, match=re.escape("with 12 values per sample (its Linear layer `1` has in_features=12)")
    ):
        call_model(model, torch.zeros(5, 2, 5))
    assert first_layer(nn.Sequential(nn.ReLU())) is None
    assert first_layer(nn.Sequential(nn.LazyLinear(3))) is None  # no width before it runs


def test_convolution_states_its_channels() -> None:
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten())
    with pytest.raises(ValueError) as info:
        call_model(model, torch.zeros(2, 1, 8, 8), inputs=torch.zeros(10, 1, 8, 8))
    message = str(info.value)
    assert "Expected `inputs` of shape (N, 3, ..., ...)" in message
    assert "Conv2d(in_channels=3)" in message
    assert "but got shape (10, 1, 8, 8) (a batch of shape (2, 1, 8, 8))" not in message  # same per-sample shape
    assert "but got shape (10, 1, 8, 8)" in message


def test_recurrent_layer_states_its_input_size() -> None:
    class Tagger(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = nn.GRU(5, 3, batch_first=True)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0][:, -1]

    with pytest.raises(ValueError) as info:
        call_model(Tagger(), torch.zeros(2, 7, 4))
    assert str(info.value).startswith("Expected `inputs` of shape (..., 5) (the model's first layer, `rnn`, is GRU(")
    assert "but got a batch of shape (2, 7, 4)" in str(info.value)


def test_a_later_batch_is_compared_with_the_accepted_ones() -> None:
    model = MatMul(30)
    batches = [torch.randn(8, 30), torch.randn(8, 20), torch.randn(8, 30)]
    calls = _counted(model)
    loader = DataLoader(batches, batch_size=None)
    with pytest.raises(ValueError) as info:
        RegionalRuleExplainer(model).explain(loader, 1, stream=False, progress=False)
    message = str(info.value)
    assert message.startswith("Expected `inputs` of a shape the model accepts")
    assert "the model accepted samples of shape (30,) in earlier batches" in message
    assert "a batch of shape (8, 20)" in message
    assert len(calls) == 2  # the accepted batch and the failing one, not the third


def test_other_errors_inside_the_model_pass_unchanged() -> None:
    class Broken(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="^boom$"):
        RegionalRuleExplainer(Broken()).explain(torch.zeros(10, 3), 1, stream=False, progress=False)
    with pytest.raises(RuntimeError, match="^boom$"):  # the inputs fit the model's first layer
        call_model(nn.Sequential(nn.Linear(3, 2), Broken()), torch.zeros(4, 3))


def test_out_of_memory_is_no_shape_mistake() -> None:
    class Hungry(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            raise torch.OutOfMemoryError("out of memory; try setting max_split_size_mb, input size (4, 20)")

    with pytest.raises(torch.OutOfMemoryError):
        call_model(Hungry(), torch.zeros(4, 20), accepted=(30,))


@pytest.fixture(scope="module")
def explained() -> tuple[nn.Module, torch.Tensor, object]:
    model = _mlp(30)
    X = torch.randn(400, 30)
    return model, X, RegionalRuleExplainer(model).explain(X, 1, max_length=1, progress=False)


@pytest.mark.parametrize("verb", ["evaluate", "verify"])
@pytest.mark.parametrize("kind", ["tensor", "numpy", "frame"])
def test_evaluate_and_verify_check_the_width_before_the_model_runs(explained: tuple, verb: str, kind: str) -> None:
    model, X, explanation = explained
    data = X[:50, :29]
    if kind != "tensor":
        data = data.numpy()
    if kind == "frame":
        pd = pytest.importorskip("pandas")
        data = pd.DataFrame(data)
    calls = _counted(model)
    with pytest.raises(
        ValueError,
        match=re.escape("Expected `inputs` of shape (N, 30) like the explained samples, but got shape (50, 29)."),
    ):
        getattr(explanation, verb)(data)
    assert calls == []


def test_evaluate_without_explainer_checks_the_matrix_width(explained: tuple, tmp_path) -> None:
    _, X, explanation = explained
    explanation.to_json(tmp_path / "e.json")
    loaded = type(explanation).from_json(tmp_path / "e.json")
    mask = torch.arange(50) % 2 == 0
    message = "Expected `inputs` with 30 features per sample (those the rules were built on), but got shape (50, 29)"
    with pytest.raises(ValueError, match=re.escape(message)):
        loaded.evaluate(X[:50, :29], mask)
    assert len(loaded.evaluate(X[:50], mask)) == len(explanation.rule_sets)


def test_evaluate_checks_a_separate_feature_matrix() -> None:
    model = _mlp(30)
    X = torch.randn(300, 30)
    F = X[:, :5] * 2
    explanation = RegionalRuleExplainer(model).explain(X, 1, features=F, max_length=1, progress=False)
    calls = _counted(model)
    message = "Expected `features` with 5 features per sample (those the rules were built on), but got shape (40, 4)"
    with pytest.raises(ValueError, match=re.escape(message)):
        explanation.evaluate(X[:40], features=F[:40, :4])
    assert calls == []


def test_evaluate_on_a_layer_checks_the_sample_shape() -> None:
    model = _mlp(30)
    X = torch.randn(300, 30)
    explanation = RegionalRuleExplainer(model, layer="1").explain(X, 1, max_length=1, progress=False)
    calls = _counted(model)
    message = "Expected `inputs` of shape (N, 30) like the explained samples, but got shape (40, 3, 10)."
    with pytest.raises(ValueError, match=re.escape(message)):
        explanation.evaluate(X[:40].reshape(40, 3, 10))
    assert calls == []
    assert len(explanation.evaluate(X[:40])) == len(explanation.rule_sets)
    assert len(calls) == 1  # the right shape runs (one batch)
