"""Search quality on the small rows of benchmarks/bench_quality.py: the default (beam) strategy's best fitness is at
least that of the paper's search, of a depth-matched decision tree and (when installed) of pysubgroup's beam search,
less 0.005. Every fitness is recomputed here from the rule sets' masks (the tree's from its own decision paths)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.tree import DecisionTreeClassifier

import torch_amore as ta

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
TOLERANCE = 0.005


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


tasks = _load("_tasks")
bench = _load("bench_quality")

ROWS = ("diabetes_l1", "diabetes_l3", "box_small", "multimode")


@pytest.fixture(scope="module", params=ROWS)
def task(request):
    if request.param.startswith("diabetes") and not (tasks.DATA / "diabetes_paper_task.npz").exists():
        pytest.skip(f"shared data not found in {tasks.DATA}")
    return tasks.TASKS[request.param]()


def recomputed_fitness(rule_set: ta.RuleSet, task) -> float:
    """Fitness from the rule set's mask, after checking its constraints and reported metrics."""
    X, target = torch.from_numpy(task.X), torch.from_numpy(task.target)
    mask = rule_set.mask(X)
    support, hits = int(mask.sum()), int((mask & target).sum())
    assert support >= task.min_support and len(rule_set) <= task.max_length
    assert len(set(rule_set.features)) == len(rule_set)
    fitness = (2 * hits - support) / int(target.sum())
    assert rule_set.support == support
    assert rule_set.confidence == pytest.approx(hits / support)
    assert rule_set.fitness == pytest.approx(fitness)
    return fitness


def tree_fitness(task, min_confidence: float = 0.0) -> float:
    """Best fitness over the non-root nodes of scikit-learn's tree (those at least ``min_confidence`` confident), from
    its decision paths; -inf when no node is confident enough."""
    clf = DecisionTreeClassifier(max_depth=task.max_length, min_samples_leaf=task.min_support, random_state=0)
    clf.fit(task.X, task.target)
    paths = clf.decision_path(task.X).toarray().astype(bool)[:, 1:]
    hits, support = (paths & task.target[:, None]).sum(0), paths.sum(0)
    fitness = (2 * hits - support) / task.target.sum()
    confident = hits >= min_confidence * support
    return float(fitness[confident].max()) if confident.any() else -np.inf


def extract(task, strategy: str, min_confidence: float | None = None) -> list[ta.RuleSet]:
    return ta.extract_rules(
        task.X, task.target, max_length=task.max_length, min_support=task.min_support, n_grids=task.n_grids,
        bin_strategy=task.bin_strategy, feature_types=task.feature_types, strategy=strategy,
        min_confidence=min_confidence,
    )  # fmt: skip


@pytest.fixture(scope="module")
def beam_fitness(task) -> float:
    rule_sets = extract(task, "beam")
    for rs in rule_sets[:5]:
        recomputed_fitness(rs, task)
    return recomputed_fitness(rule_sets[0], task)


@pytest.mark.slow
def test_beam_is_at_least_the_paper_search(task, beam_fitness):
    paper = extract(task, "paper")
    assert paper, "the paper strategy found no rule set"
    assert beam_fitness >= recomputed_fitness(paper[0], task) - TOLERANCE


@pytest.mark.slow
def test_beam_is_at_least_the_decision_tree(task, beam_fitness):
    assert beam_fitness >= tree_fitness(task) - TOLERANCE


@pytest.mark.slow
def test_beam_is_at_least_pysubgroup(task, beam_fitness):
    if not bench.pysubgroup_available():
        pytest.skip("pysubgroup (a benchmark-only dependency) is not installed")
    result = bench.run_pysubgroup(task)
    assert result.rule_set is not None
    assert beam_fitness >= recomputed_fitness(result.rule_set, task) - TOLERANCE


@pytest.mark.slow
def test_min_confidence_is_at_least_the_confident_tree_nodes(task):
    """With min_confidence the beam is steered to confident rule sets: its best is at least as fit as the tree's best
    node of that confidence."""
    best_tree = tree_fitness(task, min_confidence=0.9)
    if best_tree == -np.inf:
        pytest.skip("no node of the tree is confident enough")
    rule_sets = extract(task, "beam", min_confidence=0.9)
    assert rule_sets and all(rs.confidence >= 0.9 for rs in rule_sets)
    X, target = torch.from_numpy(task.X), torch.from_numpy(task.target)
    mask = rule_sets[0].mask(X)
    assert int((mask & target).sum()) >= 0.9 * int(mask.sum())
    assert recomputed_fitness(rule_sets[0], task) >= best_tree - TOLERANCE


def test_planted_regions_are_found():
    """The synthetic rows are what they claim: the beam strategy's best rule set covers the planted box."""
    task = tasks.TASKS["box_small"]()
    box = task.planted["box"]
    best = extract(task, "beam")[0]
    assert sorted(best.features) == sorted(box)
    for rule in best.rules:
        lo, hi = box[rule.feature]
        assert abs(rule.low - lo) < 0.1 and abs(rule.high - hi) < 0.1
    inside = np.ones(len(task.X), dtype=bool)
    for f, (lo, hi) in box.items():
        inside &= (task.X[:, f] >= lo) & (task.X[:, f] < hi)
    assert task.target[inside].mean() > 0.8 > 0.1 > task.target[~inside].mean()
