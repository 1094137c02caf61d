"""examples/quickstart.py: its decision tree is fitted on the rows the search saw, and both methods are measured on
the same rows (the searched ones, the held-out ones, the test digits), as the printout says."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import torch_amore
from torch_amore import RegionalRuleExplainer

SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "quickstart.py"


def _module():
    spec = importlib.util.spec_from_file_location("quickstart_example", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _line(name: str, support: int, hits: int, n_target: int) -> str:
    """A metrics line of the printout, from counts: confidence hits / support, fitness (in - out) / subgroup."""
    fitness = (2 * hits - support) / n_target
    return f"{name:>13}:   support={support}, confidence={hits / support:.3f}, fitness={fitness:.3f}"


@pytest.mark.slow
def test_the_tree_is_fitted_and_both_are_measured_on_the_same_rows(tmp_path, monkeypatch, capsys):
    pytest.importorskip("sklearn")
    pytest.importorskip("matplotlib")
    module = _module()
    explained, trees = [], []
    explain, tree_rules = RegionalRuleExplainer.explain, torch_amore.decision_tree_rules

    def spy_explain(self, *args, **kwargs):
        explained.append(explain(self, *args, **kwargs))
        return explained[-1]

    def spy_tree(X, target, **kwargs):
        trees.append((X, target, tree_rules(X, target, **kwargs)))
        return trees[-1][2]

    monkeypatch.setattr(RegionalRuleExplainer, "explain", spy_explain)
    monkeypatch.setattr(torch_amore, "decision_tree_rules", spy_tree)
    module.main(["--out", str(tmp_path / "pixels.png")])
    out = capsys.readouterr().out

    explanation = explained[0]  # "predicts 7" (then the random subgroup)
    ((X_tree, target_tree, found),) = trees
    z, subgroup, best = explanation.features_matrix, explanation.subgroup, explanation.best
    n, size = len(subgroup), int(subgroup.sum())
    n_held = round(0.3 * size) + round(0.3 * (n - size))  # holdout=0.3: 30 % of each side, Python's round
    searched, held_target = n - n_held, round(0.3 * size)
    # the tree saw rows of the explanation, as many as the search saw, and exactly the searched rows: the best rule
    # set's counts there are those the search reports, and on the other rows those it reports as held out
    assert X_tree.shape == (searched, z.shape[1]) and int(target_tree.sum()) == size - held_target
    assert bool((X_tree[:, None] == z[None]).all(-1).any(1).all())
    covered = best.mask(X_tree)
    assert int(covered.sum()) == best.support
    assert int((covered & target_tree).sum()) == round(best.confidence * best.support)
    assert int(best.mask(z).sum()) - best.support == best.held_out.support

    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("Next to a decision tree of the same depth"))
    assert f"(min_samples_leaf={explanation.params['min_support_count']}, " in lines[head]
    assert lines[head].endswith(f"fitted on the same {searched} training digits the search saw:")
    assert lines[head + 1] == (
        f"each rule line's numbers are on those {searched}; below it, on the {n_held} training digits both held out "
        "and on the 447 test digits"
    )
    for at, name, rs in ((head + 2, "AMORE", best), (head + 5, "decision tree", found[0])):
        assert lines[at] == f"{name:>13}: {rs}"  # its numbers: on the searched rows
        on_all, on_searched = rs.mask(z), rs.mask(X_tree)
        support = int(on_all.sum()) - int(on_searched.sum())  # the held-out rows: all less the searched
        hits = int((on_all & subgroup).sum()) - int((on_searched & target_tree).sum())
        assert lines[at + 1] == _line("held out", support, hits, held_target)
        assert lines[at + 2].startswith("  test digits:   support=")
    assert f"held out: confidence={best.held_out.confidence:.3f} " in lines[head + 2]
