"""Beam and paper results carry the grid's optimum (issue 19, criterion 2), checked against a literal brute force."""

from __future__ import annotations

import json
import math

import pandas as pd
import pytest
import torch
from grid_brute import brute_force, mixed_data

import torch_amore as ta
from torch_amore.cli.commands import main
from torch_amore.grids.binning import bin_features
from torch_amore.strategies.exact_cost import estimate_cost


def _brute_optimum(X, target, kinds, max_length, min_support, n_grids=6):
    b = bin_features(X, list(range(X.shape[1])), kinds, n_grids=n_grids, bin_strategy="quantile")
    hits, support, _ = brute_force(b, target, max_length, min_support, top_k=1)[0]
    return (2 * hits - support) / int(target.sum())


@pytest.mark.parametrize("strategy", ["beam", "paper"])
@pytest.mark.parametrize("max_length", [1, 2])
@pytest.mark.parametrize("min_support", [1, 20, 60])
def test_results_carry_the_brute_force_optimum(strategy, max_length, min_support):
    X, target, kinds = mixed_data(0)
    want = _brute_optimum(X, target, kinds, max_length, min_support)
    found = ta.extract_rules(X, target, max_length=max_length, min_support=min_support, n_grids=6,
                             bin_strategy="quantile", feature_types=kinds, strategy=strategy)  # fmt: skip
    assert found
    assert all(rs.optimum == pytest.approx(want, abs=1e-12) for rs in found)
    if strategy == "beam":  # the exact search's best rule set is one of the beam's candidates
        assert found[0].fitness >= want - 1e-12
        best = found[0]
        mask = best.mask(X)
        hits, support = int((mask & target).sum()), int(mask.sum())  # recomputed from the rules
        assert (support, hits) == (best.support, round(best.confidence * best.support))
        assert best.fitness == pytest.approx((2 * hits - support) / int(target.sum()))


def test_no_optimum_when_unaffordable_or_switched_off():
    X, target, kinds = mixed_data(1)
    common = dict(min_support=20, n_grids=6, bin_strategy="quantile", feature_types=kinds)
    assert all(rs.optimum is None for rs in ta.extract_rules(X, target, max_length=3, **common))
    assert all(rs.optimum is None for rs in ta.extract_rules(X, target, max_length=2, optimum_budget=0, **common))
    cost = estimate_cost(X.shape[0], X.shape[1], 6, 2)
    just_under = ta.extract_rules(X, target, max_length=2, optimum_budget=cost - 1, **common)
    at_cost = ta.extract_rules(X, target, max_length=2, optimum_budget=cost, **common)
    assert all(rs.optimum is None for rs in just_under)
    assert all(rs.optimum is not None for rs in at_cost)
    local = ta.extract_rules(X, target, max_length=2, local_x=X[0], **common)
    assert all(rs.optimum is None for rs in local)  # local rules answer another question
    with pytest.raises(ValueError, match="optimum_budget"):
        ta.SearchOptions(optimum_budget=-1)
    with pytest.raises(TypeError, match="optimum_budget"):
        ta.SearchOptions(optimum_budget=1e8)


def test_optimum_text_compares_with_the_fitness():
    X, target, kinds = mixed_data(0)
    found = ta.extract_rules(X, target, max_length=2, min_support=20, n_grids=6, bin_strategy="quantile",
                             feature_types=kinds, strategy="paper")  # fmt: skip
    best = found[0]
    assert best.fitness < best.optimum  # the paper's greedy tree stops short of the grid's optimum here
    assert best.optimum_text() == (
        f"fitness {best.fitness:.3f}, below the best rule set on the coarse grid ({best.optimum:.3f})"
    )
    exact = ta.extract_rules(X, target, max_length=2, min_support=20, n_grids=6, bin_strategy="quantile",
                             feature_types=kinds, strategy="exact")  # fmt: skip
    assert exact[0].optimum_text() == f"fitness {exact[0].fitness:.3f}, as good as the best rule set on the coarse grid"


class _Zeros(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.zeros(x.shape[0], 2)


def test_dataframe_table_report_and_json_show_the_optimum(tmp_path):
    X, target, kinds = mixed_data(0)
    df = pd.DataFrame(X.numpy(), columns=["a", "b", "c", "d"])
    explainer = ta.RegionalRuleExplainer(_Zeros())  # the subgroup is given as a mask; outputs only need to be finite
    explanation = explainer.explain(df, target, max_length=2, min_support=20, n_grids=6, bin_strategy="quantile",
                                    feature_types=kinds)  # fmt: skip
    want = _brute_optimum(X, target, kinds, 2, 20)
    frame = explanation.to_dataframe()
    assert len(frame) and frame["optimum"].tolist() == pytest.approx([want] * len(frame))
    assert f"best: {explanation.best.optimum_text()}" in explanation.format()
    html_text = explanation.to_html(tmp_path / "r.html").read_text()
    assert explanation.best.optimum_text() in html_text
    explanation.to_json(tmp_path / "r.json")
    saved = json.loads((tmp_path / "r.json").read_text())["rule_sets"]
    assert [r["optimum"] for r in saved] == pytest.approx([want] * len(saved))
    off = explainer.explain(df, target, max_length=2, min_support=20, optimum_budget=0)
    assert math.isnan(off.to_dataframe()["optimum"].iloc[0]) and "optimum" not in off.format()


def test_cli_prints_the_optimum(tmp_path, capsys):
    X, target, _ = mixed_data(0)
    df = pd.DataFrame(X.numpy(), columns=["a", "b", "c", "d"]).assign(label=target.numpy().astype(int))
    path = tmp_path / "d.csv"
    df.to_csv(path, index=False)
    assert main(["rules", str(path), "--target", "label == 1", "--min-support", "20"]) == 0
    out = capsys.readouterr().out
    best_line = [line for line in out.splitlines() if line.startswith("best: fitness")]
    assert len(best_line) == 1 and "on the coarse grid" in best_line[0]
    assert main(["rules", str(path), "--target", "label == 1", "--min-support", "20", "--optimum-budget", "0"]) == 0
    assert "best: fitness" not in capsys.readouterr().out
