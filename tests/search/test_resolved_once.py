"""Convert and resolve once (issue 38, criterion 2): for one call of ``extract_rules``, of an in-memory and a streamed
``explain``, the data's conversion, the ``min_support`` count, the capped ``max_length``, the row alignment and the
feature resolution each happen once. Spies wrap the functions that compute them, wherever the package holds them;
the callback's calls are counted in ``tests/integrations/test_callback_pipeline.py``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
from spies import Spies
from torch import nn

import torch_amore as ta


def _data(n: int = 400):
    g = torch.Generator().manual_seed(0)
    X = torch.rand(n, 4, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0.6) & (X[:, 2] < 0.5)


def _model() -> nn.Module:
    """Two outputs: class 1 where x0 > 0.6 and x2 < 0.5 (up to the margin of the logits)."""
    model = nn.Linear(4, 2).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.0, 0, 0, 0], [1.0, 0, -1.0, 0]]))
        model.bias.copy_(torch.tensor([0.0, -0.1]))
    return model


ONCE = {"conversion": 1, "min_support": 1, "max_length": 1, "alignment": 1, "features": 1}


@pytest.mark.parametrize("min_support", [None, 0.05, 30])
def test_extract_rules_resolves_each_once(monkeypatch, min_support):
    X, target = _data()
    frame = pd.DataFrame(X.numpy(), columns=list("abcd"), index=np.arange(400)[::-1])
    series = pd.Series(target.numpy(), index=frame.index)
    spies = Spies(monkeypatch)
    rule_sets = ta.extract_rules(frame, series, min_support=min_support, max_length=9, features=[0, 2, 3])
    assert rule_sets
    assert spies.count() == ONCE


def test_extract_rules_with_evidence_resolves_each_once(monkeypatch):
    """Held-out rows and permutations: one conversion and one plan of the searched rows, which the permuted searches
    take (no second conversion, feature resolution or ``min_support`` count)."""
    X, target = _data()
    frame = pd.DataFrame(X.numpy(), columns=list("abcd"), index=np.arange(400)[::-1])
    series = pd.Series(target.numpy(), index=frame.index)
    spies = Spies(monkeypatch)
    options = {"min_support": 30, "max_length": 9, "features": [0, 2, 3], "holdout": 0.25, "permutations": 3}
    rule_sets = ta.extract_rules(frame, series, **options)
    assert rule_sets and rule_sets[0].p_value is not None and rule_sets[0].held_out is not None
    assert spies.count() == ONCE


@pytest.mark.parametrize("min_support", [None, 40])
def test_in_memory_explain_resolves_each_once(monkeypatch, min_support):
    X, _ = _data()
    explainer = ta.RegionalRuleExplainer(_model())
    spies = Spies(monkeypatch)
    explanation = explainer.explain(X, 1, min_support=min_support, max_length=9, stream=False, progress=False)
    assert explanation.rule_sets
    assert spies.count() == {**ONCE, "alignment": 0}  # tensors: no index to align
    # the count it reports is the one it searched with: every rule set holds at least that many rows
    assert min(rs.support for rs in explanation.rule_sets) >= explanation.params["min_support_count"]


@pytest.mark.parametrize("min_support", [None, 40])
def test_streamed_explain_resolves_each_once(monkeypatch, min_support):
    """Streaming keeps no matrix: each pass converts each of its batches once (7 batches of 64 rows); the plan of
    the facts pass holds the rest."""
    X, _ = _data()
    explainer = ta.RegionalRuleExplainer(_model())
    spies = Spies(monkeypatch)
    explanation = explainer.explain(X, 1, min_support=min_support, max_length=9, stream=True, batch_size=64)
    assert explanation.rule_sets and explanation.params["stream"]
    counts = spies.count()
    conversions = counts.pop("conversion")
    assert conversions > 0 and conversions % 7 == 0
    assert counts == {"min_support": 1, "max_length": 1, "alignment": 0, "features": 1}


def test_explain_with_dataframe_inputs_aligns_the_labels_once(monkeypatch):
    """A DataFrame is converted once for the model; its flattened rows, the rules' feature matrix, once more (a
    tensor: checked, not copied). Labels given as a Series are aligned by the frame's index once."""
    X, target = _data()
    frame = pd.DataFrame(X.numpy(), columns=list("abcd"), index=np.arange(400)[::-1])
    labels = pd.Series(target.numpy().astype(int), index=frame.index)
    spies = Spies(monkeypatch)
    explainer = ta.RegionalRuleExplainer(_model())
    explanation = explainer.explain(frame, 1, labels=labels, threshold="roc", stream=False, max_length=9)
    assert explanation.rule_sets
    assert spies.count() == {**ONCE, "conversion": 2, "alignment": 2}  # the target (a class: as is) and the labels
