"""SearchOptions: one validated options object for every entry point; plain keywords give the same rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import torch_amore as ta
from torch_amore import SearchOptions


def _task() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    X = torch.rand(800, 3, generator=g, dtype=torch.float64)
    return X, (X[:, 0] > 0.6) & (X[:, 1] < 0.4)


def test_options_object_equals_keywords():
    X, target = _task()
    kw = dict(max_length=2, min_support=40, n_grids=6, strategy="paper", top_k=2)
    by_keywords = ta.extract_rules(X, target, **kw)
    assert by_keywords
    assert ta.extract_rules(X, target, options=SearchOptions(**kw)) == by_keywords
    # keywords override the object's fields
    assert ta.extract_rules(X, target, options=SearchOptions(max_length=1), **{**kw, "max_length": 2}) == by_keywords


def test_unknown_option_names_it_and_suggests():
    X, target = _task()
    with pytest.raises(TypeError, match=r"'min_suport'.*did you mean 'min_support'"):
        ta.extract_rules(X, target, min_suport=50)
    with pytest.raises(TypeError, match="'colour'"):
        SearchOptions.resolve(None, colour="red")


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"max_length": 0}, ValueError, "max_length"),
        ({"max_length": 2.0}, TypeError, "max_length"),
        ({"min_support": 1.0}, ValueError, "min_support"),
        ({"min_support": 0}, ValueError, "min_support"),
        ({"min_support": "5%"}, TypeError, "min_support"),
        ({"min_confidence": "high"}, TypeError, "min_confidence"),
        ({"min_confidence": 1.5}, ValueError, "min_confidence"),
        ({"strategy": "greedy"}, ValueError, "strategy"),
        ({"bin_strategy": "log"}, ValueError, "bin_strategy"),
        ({"feature_types": "float"}, TypeError, "feature_types"),
        ({"feature_types": ["float", "real"]}, ValueError, "feature_types"),
        ({"feature_scale": [1.0, 0.0]}, ValueError, "feature_scale"),
        ({"feature_offset": [1.0, float("nan")]}, ValueError, "feature_offset"),
        ({"progress": "yes"}, TypeError, "progress"),
    ],
)
def test_bad_option_values_name_the_option(kwargs, error, name):
    with pytest.raises(error, match=f"`{name}`"):
        SearchOptions(**kwargs)


def test_float_min_support_is_a_fraction_of_the_samples():
    X, target = _task()
    best = ta.extract_rules(X, target, max_length=1, min_support=0.25, strategy="paper")
    assert best and min(rs.support for rs in best) >= 200  # ceil(0.25 * 800)
    with pytest.raises(ValueError, match=r"pass the int 1\b"):
        ta.extract_rules(X, target, min_support=1.0)


def test_to_dict_round_trips_and_is_json_safe():
    import json

    options = SearchOptions(max_length=3, feature_scale=(2.0, 1.0, 1.0), feature_types=["float", "int", "cat"])
    data = json.loads(json.dumps(options.to_dict()))
    assert SearchOptions(**data) == options


def test_search_hyperparameters_takes_the_same_options():
    X, target = _task()
    options = SearchOptions(max_length=2, min_support=40, n_grids=6, strategy="beam", beam_width=3)
    result = ta.search_hyperparameters(
        X, target, options=options, bin_strategies="uniform", n_grids=6, min_supports=40, confidence_lower_bound=0.0
    )
    direct = ta.extract_rules(X, target, options=options)
    assert result.best == direct[0]  # bound 0: the fittest rule set of the one setting


ODD_VALUES = {
    "two numbers (tensor)": torch.tensor([0.3, 0.4]),
    "two numbers (numpy)": np.array([0.3, 0.2]),
    "one number (0-d tensor)": torch.tensor(0.3),
    "a dict": {"a": 1},
    "an object": object(),
    "a complex number": 1 + 2j,
}


@pytest.mark.parametrize("value", ODD_VALUES.values(), ids=ODD_VALUES.keys())
@pytest.mark.parametrize("field", SearchOptions.names())
def test_every_field_refuses_odd_values_by_name_or_takes_them(field, value):
    # an odd value for any field is either a valid value or refused by a TypeError/ValueError that names the field
    # (not numpy's or torch's own message about truth values, iteration or scalar conversion)
    try:
        SearchOptions(**{field: value})
    except (TypeError, ValueError) as err:
        assert f"`{field}`" in str(err), str(err)
