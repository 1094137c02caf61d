"""torch_amore.report.distinct: near-duplicate rule sets (row Jaccard >= 0.9) collapsed into the fitter one; the default
tables of an explanation on the diabetes and Tox21 data hold no such pair and no negative fitness (issue 17, acc. 1)."""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

import torch_amore
from torch_amore import RegionalExplanation, Rule, RuleSet
from torch_amore.report.distinct import distinct_rule_sets, duplicate_of, row_jaccard
from torch_amore.report.html import explanation_html

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"


def jaccard(a, b) -> float:
    """Literal Jaccard index of two row masks (numpy sets), 1 for two empty masks."""
    a, b = set(np.flatnonzero(np.asarray(a))), set(np.flatnonzero(np.asarray(b)))
    return 1.0 if not a | b else len(a & b) / len(a | b)


def check_distinct_table(shown, every, X, *, min_fitness=0.0):
    """No pair of shown rule sets with Jaccard >= 0.9, no fitness below min_fitness, and every rule set left out is
    a near-duplicate of a shown fitter one or has a low fitness. Returns the number of near-duplicates left out."""
    masks = {id(rs): rs.mask(X).cpu().numpy() for rs in every}
    for a, b in itertools.combinations(shown, 2):
        assert jaccard(masks[id(a)], masks[id(b)]) < 0.9, (str(a), str(b))
    assert all(rs.fitness >= min_fitness for rs in shown)
    fits = [rs.fitness for rs in shown]
    assert fits == sorted(fits, reverse=True)
    dropped = 0
    for rs in every:
        if rs in shown:
            continue
        twins = [k for k in shown if jaccard(masks[id(rs)], masks[id(k)]) >= 0.9 and k.fitness >= rs.fitness]
        assert twins or rs.fitness < min_fitness, str(rs)
        dropped += bool(twins)
    return dropped


def rows_of_table(text: str) -> list[tuple[int, float, float, str]]:
    """(support, confidence, fitness, rule text) of each row printed by RegionalExplanation.format."""
    rows = []
    for line in text.splitlines():
        # columns: #, support, confidence, fitness, lift, recall, rule set
        m = re.match(r"^\s+\d+\s+(\d+)\s+([-\d.]+)\s+([-\d.]+)\s+[-\d.]+\s+[-\d.]+\s+(.+)$", line)
        if m:
            rows.append((int(m[1]), float(m[2]), float(m[3]), m[4]))
    return rows


# --------------------------------------------------------------------------------------------------- the function
def test_row_jaccard_matches_the_literal_definition():
    g = torch.Generator().manual_seed(0)
    for _ in range(20):
        a, b = torch.rand(30, generator=g) > 0.5, torch.rand(30, generator=g) > 0.3
        assert row_jaccard(a, b) == pytest.approx(jaccard(a.numpy(), b.numpy()))
    empty = torch.zeros(5, dtype=torch.bool)
    assert row_jaccard(empty, empty) == 1.0


def _random_rule_sets(seed: int):
    """Random intervals on three features, each also with a jittered copy (bounds moved by up to 0.02): some copies
    cover nearly the same rows, others (narrow intervals) do not."""
    g = np.random.default_rng(seed)
    X = torch.from_numpy(g.random((300, 3)))
    target = X[:, 0] + 0.3 * X[:, 1] > 0.8
    rule_sets = []
    for _ in range(15):
        j, k = g.integers(0, 3), g.integers(0, 3)
        lo, width, lo2 = g.random() * 0.8, 0.05 + g.random() * 0.6, g.random() * 0.5
        two = g.random() < 0.4 and k != j
        for jitter in (0.0, g.uniform(-0.02, 0.02)):
            hi = lo + width + jitter
            rules = [Rule(int(j), f"x{j}", low=lo - jitter, high=hi if hi < 1 else math.inf)]
            if two:
                rules.append(Rule(int(k), f"x{k}", low=lo2 + jitter))
            rule_sets.append(RuleSet.from_rules(rules, X, target))
    return X, torch_amore.search.extractor.sort_rule_sets(rule_sets)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_rule_sets_are_distinct_and_each_dropped_one_has_a_fitter_twin(seed):
    X, rule_sets = _random_rule_sets(seed)
    shown = distinct_rule_sets(rule_sets, X, min_fitness=0.0)
    assert 0 < len(shown) < len(rule_sets)
    dropped = check_distinct_table(shown, rule_sets, X)
    assert dropped > 0  # the random lists do hold near-duplicates: the test exercises the collapse
    # without min_fitness, only near-duplicates go; min_fitness then removes the rows below it
    every = distinct_rule_sets(rule_sets, X)
    assert check_distinct_table(every, rule_sets, X, min_fitness=-math.inf) == len(rule_sets) - len(every)
    assert shown == [rs for rs in every if rs.fitness >= 0]
    assert distinct_rule_sets(rule_sets, X, max_rules=2) == every[:2]


def test_result_does_not_depend_on_the_input_order():
    X, rule_sets = _random_rule_sets(3)
    expected = distinct_rule_sets(rule_sets, X)
    for seed in range(4):
        perm = np.random.default_rng(seed).permutation(len(rule_sets))
        assert distinct_rule_sets([rule_sets[i] for i in perm], X) == expected
    rep = duplicate_of(rule_sets, X)
    assert all(rep[rep[i]] == rep[i] for i in range(len(rule_sets)))  # representatives represent themselves


def test_without_data_rule_sets_on_the_same_features_and_sides_collapse():
    a = RuleSet((Rule(0, "bmi", low=52.44, high=87.0),), 502, 0.315, 0.2)
    b = RuleSet((Rule(0, "bmi", low=52.2, high=88.76),), 522, 0.314, 0.1)
    c = RuleSet((Rule(0, "bmi", low=20.0, high=30.0),), 900, 0.2, 0.05)  # same feature, no overlap
    d = RuleSet((Rule(0, "bmi", low=52.0),), 600, 0.3, 0.04)  # overlaps, but open above
    assert duplicate_of([a, b, c, d]) == [0, 0, 2, 3]
    assert distinct_rule_sets([b, a, c, d]) == [a, c, d]
    # supports of 414 and 695 rows: their rows' Jaccard index is at most 414 / 695 < 0.9, so no near-duplicates
    e = RuleSet((Rule(0, "bmi", low=60.0, high=87.0),), 414, 0.4, 0.3)
    f = RuleSet((Rule(0, "bmi", low=55.0, high=88.0),), 695, 0.35, 0.2)
    assert 414 / 695 < 0.9 and duplicate_of([e, f]) == [0, 1]
    assert duplicate_of([e, f], max_jaccard=0.5) == [0, 0]


def test_a_streamed_explanation_says_its_hidden_rule_sets_are_alike_by_their_bounds():
    """A streamed explanation keeps no rows: its tables collapse rule sets by their bounds and say so, not by a
    Jaccard index they could not compute; an in-memory one of the same rule sets speaks of near-duplicates."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    X = torch.randn(2000, 4, generator=torch.Generator().manual_seed(1))
    explainer = torch_amore.RegionalRuleExplainer(model, layer="1")
    kw = dict(min_support=100, max_length=2)
    streamed = explainer.explain(X, 0, stream=True, **kw)
    in_memory = explainer.explain(X, 0, stream=False, **kw)
    assert streamed.rule_sets == in_memory.rule_sets and streamed.features_matrix is None
    hidden = [line for line in str(streamed).splitlines() if "not shown" in line]
    assert hidden and "alike by their bounds (no rows kept)" in hidden[0] and "near-duplicates" not in hidden[0]
    page = explanation_html(streamed, plot_rules=0)
    assert "alike bounds" in page and "Jaccard index" not in page
    memory_hidden = [line for line in str(in_memory).splitlines() if "not shown" in line]
    assert not memory_hidden or "alike by their bounds" not in memory_hidden[0]


def test_bad_arguments_are_named():
    rs = RuleSet((Rule(0, "x", low=1.0),), 1, 1.0, 1.0)
    with pytest.raises(ValueError, match="max_jaccard"):
        distinct_rule_sets([rs], max_jaccard=1.5)
    with pytest.raises(ValueError, match="max_rules"):
        distinct_rule_sets([rs], max_rules=-1)
    with pytest.raises(TypeError, match="rule_sets"):
        distinct_rule_sets(["x >= 1"])


# ----------------------------------------------------------------------------------- acceptance 1: real examples
def _explanation(X, target, rule_sets, names) -> RegionalExplanation:
    X = torch.as_tensor(np.asarray(X, dtype=np.float64))
    target = torch.as_tensor(np.asarray(target, dtype=bool))
    params = {"n_samples": X.shape[0], "subgroup_size": int(target.sum())}
    return RegionalExplanation(rule_sets, target, None, list(range(X.shape[1])), names, params, features_matrix=X)


def _check_default_tables(expl: RegionalExplanation) -> None:
    X = expl.features_matrix
    shown = expl.distinct()
    dropped = check_distinct_table(shown, expl.rule_sets, X)
    assert dropped > 0 or any(rs.fitness < 0 for rs in expl.rule_sets)  # the full list had something to hide
    # the printed table and the DataFrame show exactly these rule sets, with their numbers
    printed = rows_of_table(expl.format(max_rows=len(expl)))
    assert [p[3] for p in printed] == [" AND ".join(r.format() for r in rs.rules) for rs in shown]
    assert [p[0] for p in printed] == [rs.support for rs in shown]
    assert all(p[2] >= 0 for p in printed)
    df = expl.to_dataframe()
    assert df["support"].tolist() == [rs.support for rs in shown]
    assert df["fitness"].tolist() == [rs.fitness for rs in shown]
    assert len(expl.to_dataframe(distinct=False, include_negative=True)) == len(expl.rule_sets)


@pytest.mark.skipif(not (DATA / "diabetes_prediction_dataset.csv").exists(), reason="needs ../shared/data")
def test_diabetes_default_tables_are_distinct_and_non_negative():
    from torch_amore.cli.table import encode_features, read_table

    d = np.load(DATA / "diabetes_paper_task.npz", allow_pickle=False)
    names, types = [str(n) for n in d["feature_names"]], [str(t) for t in d["feature_types"]]
    found = torch_amore.extract_rules(
        d["X"], d["target"], max_length=2, min_support=500, feature_names=names, feature_types=types,
        feature_scale=d["raw_max"] - d["raw_min"], feature_offset=d["raw_min"], target_name="predicted diabetic",
    )  # fmt: skip
    _check_default_tables(_explanation(d["X"], d["target"], found, names))
    # the docs' command-line run ("diabetes == 1", max_length 2, min_support 500): near-duplicate bmi intervals and
    # negative fitness in the full list
    df = read_table(str(DATA / "diabetes_prediction_dataset.csv"))
    X, names, types = encode_features(df, exclude=["diabetes"], features=None, max_categories=100)
    target = df["diabetes"].to_numpy() == 1
    found = torch_amore.extract_rules(
        X, target, max_length=2, min_support=500, feature_names=names, feature_types=types
    )
    assert any(rs.fitness < 0 for rs in found)
    _check_default_tables(_explanation(X, target, found, names))


@pytest.mark.slow
@pytest.mark.skipif(not (DATA / "tox21.csv").exists(), reason="needs ../shared/data")
def test_tox21_default_tables_are_distinct_and_non_negative():
    """Tox21 NR-AR actives described by eight RDKit descriptors (those of the example's rules)."""
    pytest.importorskip("rdkit")
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors

    RDLogger.DisableLog("rdApp.*")
    names = ["MolWt", "MolLogP", "TPSA", "RingCount", "NumAliphaticCarbocycles", "NumAromaticRings", "NumHDonors",
             "FractionCSP3"]  # fmt: skip
    lines = (DATA / "tox21.csv").read_text().splitlines()
    header = [h.strip().lstrip("#") for h in lines[1].split(",")]
    col, smi = header.index("NR-AR"), header.index("smiles")
    rows, labels = [], []
    for line in lines[2:]:
        cells = line.split(",")
        mol = Chem.MolFromSmiles(cells[smi]) if cells[col] in ("0", "1") else None
        if mol is not None and mol.GetNumAtoms():
            rows.append([getattr(Descriptors, n)(mol) for n in names])
            labels.append(cells[col] == "1")
    X, target = np.asarray(rows), np.asarray(labels)
    found = torch_amore.extract_rules(X, target, max_length=2, min_support=100, n_grids=3, bin_strategy="kmeans",
                                      feature_names=names, target_name="NR-AR active")  # fmt: skip
    expl = _explanation(X, target, found, names)
    _check_default_tables(expl)
    assert len(expl.distinct()) < len(found)
