"""Every field of ``SearchOptions`` reaches every entry point (issue 38, item 4): ``extract_rules``, ``explain``, the
Lightning callback, ``search_hyperparameters`` and the command line take each one under its own name, and the
options the search runs with hold the value given. A field added to ``SearchOptions`` is checked here at once; it
needs only a value in ``VALUES`` (the test says so when it has none)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

import torch_amore as ta
from torch_amore.cli.commands import build_parser
from torch_amore.search.options import SearchOptions

N_FEATURES = 4

#: a valid value other than the default, for each field, and how the command line writes it
VALUES = {
    "max_length": (1, "1"),
    "min_support": (25, "25"),
    "n_grids": (6, "6"),
    "bin_strategy": ("quantile", "quantile"),
    "top_k": (2, "2"),
    "strategy": ("paper", "paper"),
    "min_confidence": (0.25, "0.25"),
    "beam_width": (3, "3"),
    "feature_types": (("float",) * N_FEATURES, ",".join(["float"] * N_FEATURES)),
    "feature_scale": ((2.0,) * N_FEATURES, ",".join(["2"] * N_FEATURES)),
    "feature_offset": ((1.0,) * N_FEATURES, ",".join(["1"] * N_FEATURES)),
    "progress": (True, None),  # a flag without a value
    "exact_budget": (10**9, str(10**9)),
    "optimum_budget": (0, "0"),
    "min_gain": (0.0, "0"),
    "holdout": (0.3, "0.3"),
    "permutations": (4, "4"),
    "stability": (2, "2"),
    "seed": (3, "3"),
    "level": (0.9, "0.9"),
}
#: the fields that ask for evidence: the search runs through search.significance (seed and level only tune it)
EVIDENCE = ("holdout", "permutations", "stability")
FIELDS = SearchOptions.names()


def test_every_field_has_a_test_value():
    assert set(VALUES) == set(FIELDS), "give the new field of SearchOptions a value in VALUES"
    defaults = SearchOptions()
    for name, (value, _) in VALUES.items():
        assert getattr(SearchOptions(**{name: value}), name) != getattr(defaults, name), name


def _data():
    X = torch.rand(300, N_FEATURES, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return X, X[:, 0] > 0.6


@pytest.mark.parametrize("name", FIELDS)
def test_extract_rules_takes_it(name, monkeypatch):
    seen = _spy_on_evidence(monkeypatch) if name in EVIDENCE else _spy_on_search(monkeypatch)
    X, target = _data()
    ta.extract_rules(X, target, **{name: VALUES[name][0]})
    assert getattr(seen["options"], name) == VALUES[name][0]


@pytest.mark.parametrize("name", FIELDS)
def test_explain_takes_it(name):
    X, _ = _data()
    model = nn.Linear(N_FEATURES, 2).double()  # class 1 where x0 > 0.6
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.0] * N_FEATURES, [1.0] + [0.0] * (N_FEATURES - 1)]))
        model.bias.copy_(torch.tensor([0.0, -0.6]))
    explanation = ta.RegionalRuleExplainer(model).explain(X, 1, stream=False, **{name: VALUES[name][0]})
    assert explanation.params[name] == _as_param(VALUES[name][0])


@pytest.mark.parametrize("name", FIELDS)
def test_the_callback_takes_it(name):
    pytest.importorskip("pytorch_lightning")
    callback = ta.RegionalRuleExtractor(target=1, **{name: VALUES[name][0]})
    assert getattr(callback.options, name) == VALUES[name][0]


@pytest.mark.parametrize("name", FIELDS)
def test_search_hyperparameters_takes_it(name, monkeypatch, capsys):
    seen = _spy_on_search(monkeypatch)
    X, target = _data()
    grid = {"bin_strategies": "uniform", "n_grids": 6, "min_supports": 30}
    if name in EVIDENCE:  # taken, and refused with the reason: its own choice of a setting is not in the p-values
        with pytest.raises(ValueError, match="search_hyperparameters does not compute"):
            ta.search_hyperparameters(X, target, **grid, **{name: VALUES[name][0]})
        return
    if name in ("n_grids", "min_support", "bin_strategy"):  # the grid's own arguments set these per setting
        grid = {"bin_strategies": "quantile", "n_grids": 6, "min_supports": 25}
        ta.search_hyperparameters(X, target, **grid)
        if name == "min_support":
            assert seen["min_support"] == 25
        else:
            assert getattr(seen["options"], name) == {"n_grids": 6, "bin_strategy": "quantile"}[name]
        return
    ta.search_hyperparameters(X, target, **grid, **{name: VALUES[name][0]})
    if name == "progress":  # one bar over the settings, not one per search
        assert "hyperparameter settings" in capsys.readouterr().err
        return
    assert getattr(seen["options"], name) == VALUES[name][0]


@pytest.mark.parametrize("name", FIELDS)
def test_the_command_line_takes_it(name):
    flag = "--" + name.replace("_", "-")
    text = VALUES[name][1]
    args = build_parser().parse_args(["rules", "data.csv", "--target", "y == 1", flag, *([text] if text else [])])
    value = getattr(args, name)
    expected = VALUES[name][0]
    if isinstance(expected, tuple):  # a per-feature spec: one value per feature
        assert tuple(value) == expected
    else:
        assert value == expected


def _spy_on_search(monkeypatch) -> dict:
    """Records the options (and the min_support count) that the extractor searches with."""
    from torch_amore.search.extractor import Extractor

    seen: dict = {}
    original = Extractor.extract

    def extract(self, options, *, min_support, local_codes=None):
        seen["options"], seen["min_support"] = options, min_support
        return original(self, options, min_support=min_support, local_codes=local_codes)

    monkeypatch.setattr(Extractor, "extract", extract)
    return seen


def _spy_on_evidence(monkeypatch) -> dict:
    """Records the options that the search with evidence (held-out rows, permutations, half-samples) is given."""
    from torch_amore.search import significance

    seen: dict = {}
    original = significance.extract_with_evidence

    def extract_with_evidence(X, target, options, **kwargs):
        seen["options"] = options
        return original(X, target, options, **kwargs)

    monkeypatch.setattr(significance, "extract_with_evidence", extract_with_evidence)
    return seen


def _as_param(value):
    """An option's value as the explanation's JSON-safe parameters hold it."""
    return list(value) if isinstance(value, tuple) else value


def test_the_fields_are_the_dataclass_fields():
    assert FIELDS == tuple(f.name for f in dataclasses.fields(SearchOptions))
