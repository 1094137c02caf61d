"""Thread policy of the search: small operations on one thread, the caller's setting restored afterwards."""

from __future__ import annotations

import pytest
import torch

import torch_amore as ta
import torch_amore.tree as tree_module
from torch_amore.threads import PARALLEL_MIN_ELEMENTS, parallel_pass, search_threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _task():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(500, 3, generator=g, dtype=torch.float64)
    return X, X[:, 0] > 0.7


def test_search_runs_small_work_on_one_thread_and_restores(two_threads, monkeypatch):
    seen = []
    original = tree_module.candidate_table

    def spy(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return original(*args, **kwargs)

    monkeypatch.setattr(tree_module, "candidate_table", spy)
    X, target = _task()
    assert ta.extract_rules(X, target, max_length=2, min_support=20)
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == 2


def test_thread_count_restored_when_the_search_raises(two_threads):
    X, _ = _task()
    with pytest.raises(ValueError, match="target"):
        ta.extract_rules(X, torch.ones(500, dtype=torch.bool), min_support=20)  # raised inside the search block
    assert torch.get_num_threads() == 2


def test_large_passes_get_the_callers_threads(two_threads):
    with search_threads("cpu"):
        assert torch.get_num_threads() == 1
        with parallel_pass(PARALLEL_MIN_ELEMENTS):
            assert torch.get_num_threads() == 2
        with parallel_pass(PARALLEL_MIN_ELEMENTS - 1):
            assert torch.get_num_threads() == 1
        with search_threads("cpu"):  # re-entrant: the inner block does not take the 1 for the caller's count
            pass
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 2
    with parallel_pass(PARALLEL_MIN_ELEMENTS):  # outside a search: untouched
        assert torch.get_num_threads() == 2
