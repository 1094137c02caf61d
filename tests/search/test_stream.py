"""Streamed extraction (torch_amore.search.stream): the same rule lists as the in-memory search on the concatenated
batches, for every strategy, batch size and kind of source."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from batch_sources import batches_of
from torch.utils.data import DataLoader, TensorDataset

from torch_amore import SearchOptions, extract_rules
from torch_amore.search.extract import prepare
from torch_amore.search.stream import prepare_stream

ROOT = Path(__file__).resolve().parents[2]
TYPES = ["float", "int", "cat", "cat", "float"]


def mixed_data(n: int = 600, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Floats with NaN, integers, a 0/1 category and a 4-valued category with NaN; a target on three of them."""
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, 5, generator=g)
    X[:, 1] = torch.randint(0, 20, (n,), generator=g).float()
    X[:, 2] = torch.randint(0, 2, (n,), generator=g).float()
    X[:, 3] = torch.randint(0, 4, (n,), generator=g).float()
    X[torch.rand(n, generator=g) < 0.1, 0] = math.nan
    X[torch.rand(n, generator=g) < 0.05, 3] = math.nan
    target = ((X[:, 0] > 0.5) & (X[:, 1] < 12)) | (X[:, 3] == 2)
    return X, target


def assert_same(got, expected):
    """Rule for rule: the same rules, counts and metrics, text and grid optimum."""
    assert len(expected) > 0
    assert got == expected
    assert [str(rs) for rs in got] == [str(rs) for rs in expected]
    assert [rs.optimum for rs in got] == [rs.optimum for rs in expected]


@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
@pytest.mark.parametrize("sizes", [1, 7, 4096, [3, 50, 1, 128, 17]])
def test_same_rules_as_in_memory(strategy, sizes):
    X, target = mixed_data()
    kw = dict(strategy=strategy, feature_types=TYPES, min_support=30, max_length=2)
    expected = extract_rules(X, target, **kw)
    assert_same(extract_rules(batches_of(X, target, sizes), **kw), expected)


def test_polish_a_rule_set_at_a_time_gives_the_same_rules(monkeypatch):
    """The streamed polish takes a few rule sets at a time (their masks' bytes bounded): here one at a time."""
    import torch_amore.search.stream as stream

    X, target = mixed_data(900, seed=4)
    kw = dict(feature_types=TYPES, min_support=30, max_length=3, min_confidence=0.7)
    expected = extract_rules(X, target, **kw)
    groups = []
    original = stream.StreamExtractor.polish_on

    def spy(self, rule_sets, *args, **kwargs):
        groups.append(len(rule_sets))
        return original(self, rule_sets, *args, **kwargs)

    monkeypatch.setattr(stream, "POLISH_MASK_BYTES", 1)
    monkeypatch.setattr(stream.StreamExtractor, "polish_on", spy)
    assert_same(extract_rules(batches_of(X, target, 128), **kw), expected)
    assert len(groups) >= 2 and set(groups) == {1}


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_same_rules_inferred_types_units_and_options(strategy):
    """Types inferred in original units, a feature subset, names, min_confidence, float64 numpy batches."""
    X, target = mixed_data(900, seed=1)
    X = X.double()
    kw = dict(strategy=strategy, min_support=0.05, max_length=3, feature_scale=[2.0, 1.0, 1.0, 1.0, 10.0],
              feature_offset=[1.0, 0.0, 0.0, 0.0, -3.0], features=[0, 1, 3, 4], min_confidence=0.6,
              feature_names=list("abcde"))  # fmt: skip
    expected = extract_rules(X, target, **kw)
    source = batches_of(X.numpy(), target.numpy(), [64, 200])
    assert_same(extract_rules(source, **kw), expected)


def test_local_rules_and_top_k():
    X, target = mixed_data(700, seed=2)
    kw = dict(strategy="paper", feature_types=TYPES, min_support=20, top_k=5, local_x=X[int(torch.nonzero(target)[0])])
    expected = extract_rules(X, target, **kw)
    assert_same(extract_rules(batches_of(X, target, 33), **kw), expected)


def test_dataloader_and_dataset_sources():
    X, target = mixed_data(800, seed=3)
    expected = extract_rules(X, target, feature_types=TYPES, min_support=40)
    loader = DataLoader(TensorDataset(X, target), batch_size=100, shuffle=False)
    assert_same(extract_rules(loader, feature_types=TYPES, min_support=40), expected)
    assert_same(extract_rules(TensorDataset(X, target), feature_types=TYPES, min_support=40), expected)


def test_prepare_stores_the_in_memory_codes():
    """The codes, target and grids of prepare(source) equal those of prepare(X); the fine codes those of fine()."""
    X, target = mixed_data(500, seed=4)
    mem = prepare(X, target)
    streamed = prepare(batches_of(X, target, 7))
    assert torch.equal(streamed.binned.codes, mem.binned.codes)
    assert torch.equal(streamed.target, mem.target)
    assert torch.equal(streamed.binned.thresholds, mem.binned.thresholds)
    n_fine = streamed._fine_binned.n_grids
    assert torch.equal(streamed.fine(n_fine).codes_t, mem.fine(n_fine).codes_t)


def test_prepare_takes_the_column_keywords_in_memory_and_streamed():
    """features, feature_names and target_name reach the extractor on both paths; an unknown keyword is refused."""
    X, target = mixed_data(500, seed=6)
    names = ["v", "w", "x", "y", "z"]
    for data in ((X, target), (batches_of(X, target, 7), None)):
        ex = prepare(*data, features=[0, 3], feature_names=names, target_name="sick")
        assert (ex.names, ex.target_name) == (names, "sick")
        rule_sets = ex.extract(SearchOptions(), min_support=25)
        assert rule_sets, "the target is tied to the searched columns"
        assert {rule.name for rs in rule_sets for rule in rs.rules} <= {"v", "y"}  # only the searched columns
        assert all(rs.target_name == "sick" for rs in rule_sets)
        with pytest.raises(TypeError, match=r"^prepare\(\) got an unexpected keyword argument 'feature_name'$"):
            prepare(*data, feature_name=names)


def test_passes_read_only_what_they_need():
    """paper and exact read the source twice (facts, codes); min_gain adds one pass (the masks of the rules of the rule
    sets of two or more conditions) and the same-mask check one; the beam adds the polish."""
    X, target = mixed_data(600, seed=5)
    calls = []

    def source():
        calls.append(1)
        return iter([(X[i : i + 100], target[i : i + 100]) for i in range(0, 600, 100)])

    extract_rules(source, strategy="paper", feature_types=TYPES, min_support=30, min_gain=0)
    assert len(calls) == 2
    calls.clear()
    extract_rules(source, strategy="paper", feature_types=TYPES, min_support=30)
    assert 3 <= len(calls) <= 4
    calls.clear()
    extract_rules(source, strategy="beam", feature_types=TYPES, min_support=30, min_gain=0)
    assert 3 <= len(calls) <= 4
    calls.clear()
    extract_rules(source, strategy="beam", feature_types=TYPES, min_support=30)
    assert 4 <= len(calls) <= 5


@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
@pytest.mark.parametrize("sizes", [7, [3, 50, 1, 128, 17]])
def test_min_gain_prunes_from_the_batches_without_gathering_columns(strategy, sizes, monkeypatch):
    """The min_gain pass packs the rules' masks batch by batch: no column is gathered (only the beam's polish gathers
    its columns), and the rule lists are those of the in-memory search."""
    import torch_amore.search.stream as stream

    X, target = mixed_data(800, seed=9)
    kw = dict(strategy=strategy, feature_types=TYPES, min_support=30, max_length=3, min_gain=0.01)
    expected = extract_rules(X, target, **kw)
    pruned = []
    original_prune = stream.prune_rule_sets_batches

    def spy(rule_sets, *args, **kwargs):
        out = original_prune(rule_sets, *args, **kwargs)
        pruned.extend((len(a.rules), len(b.rules)) for a, b in zip(rule_sets, out))
        return out

    original_gather = stream.StreamExtractor.gather

    def polish_only(self, cols, what):
        assert what.startswith("polish"), f"gathered {cols} for {what}"
        return original_gather(self, cols, what)

    monkeypatch.setattr(stream, "prune_rule_sets_batches", spy)
    monkeypatch.setattr(stream.StreamExtractor, "gather", polish_only)
    assert_same(extract_rules(batches_of(X, target, sizes), **kw), expected)
    assert any(before >= 2 for before, _ in pruned)  # rule sets to prune came to the pass


@pytest.mark.skipif(not (ROOT.parent / "shared" / "data" / "diabetes_paper_task.npz").exists(),
                    reason="the shared data folder is not there")  # fmt: skip
@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
def test_benchmark_task_diabetes(strategy):
    """The paper's diabetes task (70,000 x 15, benchmarks/_tasks.py) with uniform grids, in batches of 4,096."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from _tasks import diabetes
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    task = diabetes(1)
    X, target = torch.from_numpy(task.X), torch.from_numpy(task.target)
    kw = dict(strategy=strategy, max_length=2, min_support=task.min_support, n_grids=task.n_grids,
              feature_types=task.feature_types, feature_names=task.feature_names)  # fmt: skip
    expected = extract_rules(X, target, **kw)
    assert_same(extract_rules(batches_of(X, target, 4096), **kw), expected)


@pytest.mark.parametrize("task", ["box_small", "multimode"])
@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
def test_benchmark_tasks_planted(task, strategy):
    """The planted tasks of bench_quality (benchmarks/_tasks.py) with uniform grids, in batches of varying size."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import _tasks
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    t = _tasks.TASKS[task]()
    X, target = torch.from_numpy(t.X), torch.from_numpy(t.target)
    kw = dict(strategy=strategy, max_length=2, min_support=t.min_support, n_grids=t.n_grids)
    expected = extract_rules(X, target, **kw)
    assert_same(extract_rules(batches_of(X, target, [1000, 4096, 17]), **kw), expected)


def test_numpy_int_batches_become_float64():
    X, target = mixed_data(400, seed=6)
    Xi = np.nan_to_num(X.numpy(), nan=0.0).round().astype(np.int64) + (X[:, 1:2].numpy().astype(np.int64))
    expected = extract_rules(torch.from_numpy(Xi), target, min_support=20)
    assert_same(extract_rules(batches_of(Xi, target.numpy(), 50), min_support=20), expected)


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_codes_on_disk_same_rules_and_folder_removed(tmp_path, strategy, monkeypatch):
    """Codes in memory-mapped files: the same rules; the files existed during the search and are gone after."""
    X, target = mixed_data(700, seed=7)
    kw = dict(strategy=strategy, feature_types=TYPES, min_support=30)
    seen = []
    original = prepare_stream

    def spy(*args, **kwargs):
        extractor = original(*args, **kwargs)
        seen.append(sorted(p.name for p in extractor.disk.folder.iterdir()))
        return extractor

    monkeypatch.setattr("torch_amore.search.stream.prepare_stream", spy)
    got = extract_rules(batches_of(X, target, 64), codes_dir=tmp_path, **kw)
    assert_same(got, extract_rules(X, target, **kw))
    assert seen and len(seen[0]) == (3 if strategy == "beam" else 2)  # codes (+ fine codes) and the target
    assert list(tmp_path.iterdir()) == []


def test_codes_on_disk_removed_on_error(tmp_path):
    X, target = mixed_data(300, seed=8)
    calls = []

    def source():  # the polish pass (the third) yields fewer rows: an error after the codes were written
        calls.append(1)
        n = 300 if len(calls) < 3 else 200
        return iter([(X[i : i + 50], target[i : i + 50]) for i in range(0, n, 50)])

    with pytest.raises(ValueError, match="yield 300 rows on every pass"):
        extract_rules(source, codes_dir=tmp_path, strategy="beam", feature_types=TYPES, min_support=20)
    assert len(calls) == 3
    assert list(tmp_path.iterdir()) == []
    calls.clear()
    with pytest.raises(ValueError, match="existing folder"):
        extract_rules(source, codes_dir=tmp_path / "missing")
    with pytest.raises(TypeError, match=r"`codes_dir` to be a path \(str or os.PathLike\)"):
        extract_rules(source, codes_dir=3)
    assert calls == []  # both before the first pass
    with pytest.raises(ValueError, match="only with a source of batches"):
        extract_rules(X, target, codes_dir=tmp_path)


def test_a_list_of_batch_pairs_is_a_source():
    """A list of (X_batch, target_batch) pairs is re-iterable: it streams and gives the rules of the rows in memory
    (it was read as an in-memory X and refused for a missing target)."""
    X, target = mixed_data(300, seed=3)
    pairs = [(X[i : i + 64], target[i : i + 64]) for i in range(0, 300, 64)]
    kw = dict(feature_types=TYPES, min_support=20, max_length=2)
    assert_same(extract_rules(pairs, **kw), extract_rules(X, target, **kw))
    assert_same(extract_rules(tuple(pairs), **kw), extract_rules(X, target, **kw))
