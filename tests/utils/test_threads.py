"""Thread policy of the search: small operations on one thread, the caller's setting restored afterwards; on small
data the rule tree beside the beam, with the one-thread result."""

from __future__ import annotations

import multiprocessing
import os
import threading

import pytest
import torch

import torch_amore as ta
import torch_amore.search.extractor as search_module
import torch_amore.strategies.tree as tree_module
from torch_amore._utils.threads import BESIDE_MAX_ELEMENTS, PARALLEL_MIN_ELEMENTS, beside, parallel_pass, search_threads


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(before)


def _record(monkeypatch, module, name: str, what) -> list:
    """Replace ``module.name`` by a wrapper that appends ``what()`` to the returned list at each call."""
    seen: list = []
    original = getattr(module, name)

    def spy(*args, **kwargs):
        seen.append(what())
        return original(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return seen


def _mixed_task(n: int = 6_000):
    g = torch.Generator().manual_seed(1)
    X = torch.randn(n, 8, generator=g)
    X[:, 1] = torch.randint(0, 4, (n,), generator=g).float()  # categorical
    X[:, 2] = X[:, 2].relu()
    X[::9, 0] = float("nan")
    target = ((X[:, 0].nan_to_num(0) > 0.3) & (X[:, 1] == 2)) | ((X[:, 2] > 0.5) & (X[:, 3] < 0))
    return X, target ^ (torch.rand(n, generator=g) < 0.05)


def _task():
    g = torch.Generator().manual_seed(0)
    X = torch.rand(500, 3, generator=g, dtype=torch.float64)
    return X, X[:, 0] > 0.7


def test_search_runs_small_work_on_one_thread_and_restores(two_threads, monkeypatch):
    seen = _record(monkeypatch, tree_module, "candidate_table", torch.get_num_threads)
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


def test_beside_runs_on_a_second_thread_inside_a_search_only(two_threads):
    def where() -> tuple[int, bool, bool, int]:
        return threading.get_ident(), torch.is_inference_mode_enabled(), torch.is_grad_enabled(), \
            torch.get_num_threads()  # fmt: skip

    main = threading.get_ident()
    assert beside(where, 10)()[0] == main  # outside a search: at once, on this thread
    with search_threads("cpu"), torch.inference_mode():
        ident, inference, grad, n_threads = beside(where, 10)()
        assert ident != main and inference and not grad and n_threads == 1  # the caller's modes, one torch thread
        assert beside(where, BESIDE_MAX_ELEMENTS + 1)()[0] == main  # large data: at once
    torch.set_num_threads(1)
    with search_threads("cpu"):
        assert beside(where, 10)()[0] == main  # one thread: at once


def test_beside_raises_what_the_function_raised_when_asked(two_threads):
    def fails() -> None:
        raise ValueError("from beside")

    with search_threads("cpu"):
        later = beside(fails, 10)
        with pytest.raises(ValueError, match="from beside"):
            later()


@pytest.mark.parametrize("max_length", [1, 2, 3])
@pytest.mark.parametrize("extra", [{}, {"min_confidence": 0.8}, {"bin_strategy": "quantile"}])
def test_the_tree_beside_the_beam_gives_the_one_thread_result(monkeypatch, max_length, extra):
    X, target = _mixed_task()
    kwargs = dict(max_length=max_length, min_support=60, feature_types=["float", "cat"] + ["float"] * 6, **extra)
    before = torch.get_num_threads()
    runs = _record(monkeypatch, search_module, "grow_tree", threading.get_ident)
    try:
        torch.set_num_threads(1)
        alone = ta.extract_rules(X, target, **kwargs)
        torch.set_num_threads(2)
        side_by_side = ta.extract_rules(X, target, **kwargs)
    finally:
        torch.set_num_threads(before)
    assert runs[0] == threading.get_ident() != runs[1]  # the second call ran the tree on the other thread
    assert [(rs.rules, rs.support, rs.fitness, rs.optimum) for rs in side_by_side] == \
        [(rs.rules, rs.support, rs.fitness, rs.optimum) for rs in alone]  # fmt: skip


def test_without_the_grid_optimum_the_beam_is_seeded_as_when_run_alone(monkeypatch):
    """At max_length 2 the beam skips its pair seeds when the grid's optimum is a candidate; run beside the tree, it
    starts before knowing whether the optimum found anything, and reruns seeded when it did not."""
    X, target = _mixed_task()
    monkeypatch.setattr(
        search_module.Extractor,
        "grid_optima",  # the grid's optima of lengths 1 and 2 find nothing
        lambda self, options, min_support: {k: [] for k in (1, 2) if k <= options.max_length},
    )
    seeded = _record(monkeypatch, search_module, "pair_seeds", lambda: True)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        alone = ta.extract_rules(X, target, max_length=2, min_support=60)
        assert seeded
        torch.set_num_threads(2)
        side_by_side = ta.extract_rules(X, target, max_length=2, min_support=60)
    finally:
        torch.set_num_threads(before)
    assert len(seeded) == 2
    assert [(rs.rules, rs.fitness) for rs in side_by_side] == [(rs.rules, rs.fitness) for rs in alone]


def _beside_in_a_child(queue) -> None:
    torch.set_num_threads(2)
    with search_threads("cpu"):
        queue.put(int(beside(lambda: torch.arange(5).sum(), 10)()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_beside_works_in_a_process_forked_after_it_was_used(two_threads):
    with search_threads("cpu"):
        assert int(beside(lambda: torch.arange(4).sum(), 10)()) == 6  # the pool thread exists now
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_beside_in_a_child, args=(queue,))
    child.start()
    child.join(timeout=60)
    if child.is_alive():  # the parent's pool thread is not in the child: a task given to it would never run
        child.kill()
        pytest.fail("beside hung in a forked child")
    assert child.exitcode == 0 and queue.get(timeout=5) == 10


def test_with_progress_bars_the_tree_runs_on_the_calling_thread(monkeypatch):
    X, target = _mixed_task()
    runs = _record(monkeypatch, search_module, "grow_tree", threading.get_ident)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        ta.extract_rules(X, target, max_length=2, min_support=60, progress=True)
    finally:
        torch.set_num_threads(before)
    assert runs == [threading.get_ident()]  # bars one after the other, not side by side


def test_side_by_side_gives_maps_results_in_order_on_several_threads(two_threads):
    from torch_amore._utils.threads import side_by_side

    seen = []

    def work(k: int) -> tuple[int, int, int]:
        seen.append(threading.current_thread().name)
        with parallel_pass(PARALLEL_MIN_ELEMENTS):  # a search inside takes one thread and no more
            inside = torch.get_num_threads()
        return k * k, torch.get_num_threads(), inside

    with torch.inference_mode():
        modes = list(side_by_side(lambda k: torch.is_inference_mode_enabled(), range(4), workers=2))
    assert modes == [True] * 4  # the caller's autograd modes
    out = list(side_by_side(work, range(6), workers=3))
    assert [o[0] for o in out] == [k * k for k in range(6)]
    assert all(o[1:] == (1, 1) for o in out)
    assert all(name.startswith("torch_amore_side") for name in seen)
    assert torch.get_num_threads() == 2  # the caller's count is back


def test_side_by_side_raises_the_first_error_and_restores_the_threads(two_threads):
    from torch_amore._utils.threads import side_by_side

    def work(k: int) -> int:
        if k == 2:
            raise ValueError("k=2")
        return k

    with pytest.raises(ValueError, match="k=2"):
        list(side_by_side(work, range(5), workers=2))
    assert torch.get_num_threads() == 2


def test_side_by_side_runs_in_order_on_the_calling_thread_in_a_sharded_run(two_threads, monkeypatch):
    from torch_amore._utils import distributed as D
    from torch_amore._utils.threads import side_by_side

    monkeypatch.setattr(D, "is_sharded", lambda: True)  # collectives must come in the same order on every rank
    order = []
    out = list(side_by_side(lambda k: order.append((k, threading.current_thread())) or k, range(4), workers=4))
    assert out == [0, 1, 2, 3] and order == [(k, threading.main_thread()) for k in range(4)]
