"""``max_length`` above the number of searched features is capped at that number with one warning (issue 28): a rule
set has at most one condition per feature, so nothing longer exists; no bogus memory estimate, the same rules."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import torch_amore as ta
from torch_amore.rules.metrics import rule_metrics

OPTS = dict(min_support=20, n_grids=6)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(600, 4, generator=g, dtype=torch.float64)
    return X, (X[:, 0] + X[:, 1] > 1.0) & (X[:, 3] > 0.2)


def _run(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = call()
    return out, [w for w in caught if "max_length" in str(w.message)]


def _check_metrics(rule_sets, X, target, n_searched):
    assert rule_sets
    for rs in rule_sets:
        assert len(rs.rules) <= n_searched and len({r.feature for r in rs.rules}) == len(rs.rules)
        m = rule_metrics(rs.mask(X), target)
        assert (m.support, m.confidence, m.fitness) == pytest.approx((rs.support, rs.confidence, rs.fitness))


@pytest.mark.parametrize("strategy", ["beam", "paper"])
@pytest.mark.parametrize("max_length", [5, 100, 10**9])
def test_a_longer_max_length_is_capped_with_one_warning(data, strategy, max_length):
    X, target = data
    full, said = _run(lambda: ta.extract_rules(X, target, max_length=4, strategy=strategy, **OPTS))
    assert said == []  # lengths up to the number of features run as asked
    got, said = _run(lambda: ta.extract_rules(X, target, max_length=max_length, strategy=strategy, **OPTS))
    assert len(said) == 1 and issubclass(said[0].category, UserWarning)
    assert f"max_length={max_length}" in str(said[0].message) and "4 searched features" in str(said[0].message)
    assert got == full  # the same search: no rule set can have a fifth condition
    _check_metrics(got, X, target, 4)


def test_every_length_up_to_the_feature_count_runs_without_a_warning(data):
    X, target = data
    for max_length in range(1, 5):
        got, said = _run(lambda m=max_length: ta.extract_rules(X, target, max_length=m, **OPTS))
        assert said == []
        _check_metrics(got, X, target, max_length)


def test_the_cap_counts_the_selected_features(data):
    X, target = data
    full, _ = _run(lambda: ta.extract_rules(X, target, max_length=2, features=[0, 3], **OPTS))
    got, said = _run(lambda: ta.extract_rules(X, target, max_length=3, features=[0, 3], **OPTS))
    assert len(said) == 1 and "2 searched features" in str(said[0].message)
    assert got == full
    assert {r.feature for rs in got for r in rs.rules} <= {0, 3}
    _check_metrics(got, X, target, 2)


def test_the_explainer_and_the_hyperparameter_search_say_it_once(data):
    X, target = data
    explainer = ta.RegionalRuleExplainer(nn.Identity())
    full = explainer.explain(X, target, max_length=4, progress=False, **OPTS)
    got, said = _run(lambda: explainer.explain(X, target, max_length=50, progress=False, **OPTS))
    assert len(said) == 1 and got.rule_sets == full.rule_sets
    result, said = _run(
        lambda: ta.search_hyperparameters(
            X, target, max_length=9, bin_strategies=["uniform"], min_supports=[20, 40], n_grids=[5, 8]
        )
    )
    assert len(said) == 1 and len(result.records) == 4  # four settings, one warning


def test_strategy_exact_refuses_a_capped_length_it_cannot_search(data):
    X, target = data
    X6 = torch.cat([X, X], 1)  # six features: capped at 6, above what the exact search takes
    with pytest.raises(ValueError, match="max_length"):
        _run(lambda: ta.extract_rules(X6, target, max_length=100, strategy="exact", **OPTS))


def test_the_default_max_length_on_a_single_feature_is_capped_silently(data):
    X, target = data
    one, said = _run(lambda: ta.extract_rules(X[:, :1], target, **OPTS))  # default max_length=2
    assert said == [] and one
    _check_metrics(one, X[:, :1], target, 1)
    _, said = _run(lambda: ta.extract_rules(X[:, :1], target, max_length=3, **OPTS))
    assert len(said) == 1 and "1 searched features" in str(said[0].message)


def test_a_source_of_batches_is_capped_like_a_tensor(data):
    X, target = data

    def source():
        return iter([(X[i : i + 100], target[i : i + 100]) for i in range(0, 600, 100)])

    capped, said = _run(lambda: ta.extract_rules(source, max_length=9, **OPTS))
    assert len(said) == 1 and "max_length=9" in str(said[0].message)
    expected, _ = _run(lambda: ta.extract_rules(X, target, max_length=4, **OPTS))
    _check_metrics(capped, X, target, 4)
    assert [str(rs) for rs in capped] == [str(rs) for rs in expected]
