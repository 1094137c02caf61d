"""The memory model (torch_amore.data.memory): the estimate, the limits it is compared with, and the refusals before any
heavy work, including under a real address-space limit (RLIMIT_AS) set in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

import torch_amore as ta
from torch_amore.data import memory as M
from torch_amore.search import extract as search_module

N = 2000


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(N, 3, generator=g)
    return X, (X[:, 0] > 0.7) & (X[:, 2] < 0.5)


@pytest.fixture
def no_binning(monkeypatch):
    """Binning the features (the first heavy step) fails the test: the refusal must come before it."""

    def fail(*args, **kwargs):
        raise AssertionError("the features were binned before the memory check")

    monkeypatch.setattr(search_module, "encode_features", fail)


def _limit(monkeypatch, free: int | None, name: str = "a test limit") -> None:
    monkeypatch.setattr(M, "available_memory", lambda device="cpu": (free, name))


# ------------------------------------------------------------------------------------------------- the estimate


def test_refuses_before_binning_naming_size_limit_and_knobs(monkeypatch, no_binning):
    _limit(monkeypatch, 10_000, "the address-space limit RLIMIT_AS (ulimit -v)")
    X, target = _data()
    with pytest.raises(MemoryError) as info:
        ta.extract_rules(X, target)
    message = str(info.value)
    need = M.search_memory(N, 3, 10, strategy="beam", max_length=2, top_k=3)
    assert 2**20 < need < 2**30 and f"{need / 2**20:.1f} MiB" in message and "9.8 KiB" in message
    assert "RLIMIT_AS" in message and "on cpu" in message
    for knob in ("`features=`", "fewer rows", "`n_grids`", "`max_length`", "strategy='paper'"):
        assert knob in message


def test_counts_only_searched_features(monkeypatch):
    X, target = _data()
    need_one = M.search_memory(N, 1, 10, strategy="beam", max_length=2)
    _limit(monkeypatch, need_one)  # enough for one feature, not three
    with pytest.raises(MemoryError):
        ta.extract_rules(X, target)
    rule_sets = ta.extract_rules(X, target, features=[0])
    assert rule_sets and all(r.feature == 0 for r in rule_sets[0].rules)


def test_prepare_checks_too(monkeypatch, no_binning):
    _limit(monkeypatch, 10_000)
    X, target = _data()
    with pytest.raises(MemoryError, match="rule search needs about"):
        search_module.prepare(X, target, ta.SearchOptions())


def test_grows_with_each_knob():
    ref = M.search_memory(1000, 10, 10, strategy="paper", max_length=3)
    assert M.search_memory(2000, 10, 10, strategy="paper", max_length=3) > ref
    assert M.search_memory(1000, 20, 10, strategy="paper", max_length=3) > ref
    assert M.search_memory(1000, 10, 1000, strategy="paper", max_length=3) > ref
    assert M.search_memory(1000, 10, 10, strategy="paper", max_length=4) > ref
    assert M.search_memory(1000, 10, 10, strategy="paper", max_length=3, bin_strategy="kmeans") > ref
    assert M.search_memory(1000, 10, 10, strategy="beam", max_length=3) > ref
    # at max_length 2 the paper strategy also computes the grid's optimum: at least the exact search's memory
    assert M.search_memory(10**6, 10, 10, strategy="paper") >= M.search_memory(10**6, 10, 10, strategy="exact")


def test_max_length_counts_up_to_the_number_of_features():
    capped = M.search_memory(1000, 4, 10, max_length=4)
    assert M.search_memory(1000, 4, 10, max_length=100) == capped
    assert capped < 2**30  # not the 1.8e42 GiB of an uncapped top_k ** 99


def test_conversion_copies_counted_as_they_are_made():
    import pandas as pd

    ints = np.arange(4000, dtype=np.int32).reshape(1000, 4)
    assert M.conversion_memory(ints) == ints.astype(np.float64).nbytes
    strided = np.zeros((1000, 8), dtype=np.float32)[:, ::2]
    assert M.conversion_memory(strided) == np.ascontiguousarray(strided).nbytes
    assert M.conversion_memory(np.zeros((1000, 4), dtype=np.float32)) == 0  # shared with the tensor
    frame = pd.DataFrame(ints, columns=list("abcd"))
    assert M.conversion_memory(frame) >= 2 * frame.to_numpy(dtype=np.float64).nbytes  # mixed columns: gathered first
    assert M.conversion_memory(torch.zeros(1, 4).expand(10**9, 4)) == 0  # a view is read as it is
    longs = torch.zeros(1000, 4, dtype=torch.int64)  # a float64 copy and a mask of the values beyond 2**53
    assert M.conversion_memory(longs) == longs.double().nbytes + (longs > 2**53).nbytes
    assert M.estimate_memory(ints) == M.search_memory(1000, 4, 10) + ints.astype(np.float64).nbytes


def test_numpy_input_refused_before_its_copy(monkeypatch):
    def fail(*args, **kwargs):
        raise AssertionError("X was converted before the memory check")

    monkeypatch.setattr(search_module.V, "to_tensor_2d", fail)
    _limit(monkeypatch, 10_000)
    X = np.zeros((1000, 4), dtype=np.int32)  # 1000 x 4 float64 values to make: 31.2 KiB
    with pytest.raises(MemoryError, match=r"31\.2 KiB of it to copy X into a float tensor.*contiguous float32"):
        ta.extract_rules(X, X[:, 0] > 0)


def test_unknown_memory_is_not_a_refusal(monkeypatch):
    _limit(monkeypatch, None, "unknown")
    X, target = _data()
    assert ta.extract_rules(X, target, max_length=1)


# --------------------------------------------------------------------------------------------------- the limits


def test_cpu_takes_the_smallest_limit_and_names_it(monkeypatch):
    monkeypatch.setattr(M, "_ram_available", lambda: 8 << 30)
    monkeypatch.setattr(M, "_cgroup_available", lambda: 4 << 30)
    monkeypatch.setattr(M, "_rlimit_left", lambda limit, field: 1 << 30 if limit == "RLIMIT_AS" else None)
    assert M.available_memory("cpu") == (1 << 30, "the address-space limit RLIMIT_AS (ulimit -v)")
    monkeypatch.setattr(M, "_rlimit_left", lambda limit, field: None)
    assert M.available_memory("cpu") == (4 << 30, "the cgroup (container) memory limit")
    monkeypatch.setattr(M, "_cgroup_available", lambda: None)
    assert M.available_memory("cpu") == (8 << 30, "the available RAM (MemAvailable)")
    monkeypatch.setattr(M, "_ram_available", lambda: None)
    assert M.available_memory("cpu") == (None, "unknown on 'cpu'")


def test_address_space_left_for_threads_yet_to_start(monkeypatch):
    import resource

    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    real = M._proc_field
    monkeypatch.setattr(M, "_proc_field", lambda path, field, unit=1024: 1 if field == "Threads" else real(path, field))
    soft = resource.getrlimit(resource.RLIMIT_STACK)[0]
    stack = soft if 0 < soft < (1 << 30) else 8 << 20
    assert M._thread_reserve() == 4 * (stack + (64 << 20))  # three more intra-op threads and one beside them
    monkeypatch.setattr(M, "_ram_available", lambda: None)
    monkeypatch.setattr(M, "_cgroup_available", lambda: None)
    monkeypatch.setattr(M, "_rlimit_left", lambda limit, field: 1 << 30 if limit == "RLIMIT_AS" else None)
    assert M.available_memory("cpu")[0] == (1 << 30) - 4 * (stack + (64 << 20))


@pytest.mark.parametrize("version", ["v2", "v1"])
def test_cgroup_limit_minus_usage(tmp_path, monkeypatch, version):
    limit, usage = ("memory.max", "memory.current") if version == "v2" else ("memory.limit_in_bytes",
                                                                            "memory.usage_in_bytes")  # fmt: skip
    (tmp_path / limit).write_text("1000000\n")
    (tmp_path / usage).write_text("400000\n")
    monkeypatch.setattr(M, "_cgroup_dirs", lambda: [(str(tmp_path), limit, usage)])
    assert M._cgroup_available() == 1000000 - 400000
    (tmp_path / limit).write_text("max\n" if version == "v2" else f"{2**63 - 4096}\n")  # no limit
    assert M._cgroup_available() is None


def test_cgroup_dirs_include_the_process_own_cgroup(monkeypatch):
    own = [line.rstrip("\n").split(":", 2) for line in open("/proc/self/cgroup")]
    dirs = {d for d, _, _ in M._cgroup_dirs()}
    for _, controllers, path in own:
        if controllers == "" and path != "/":
            assert "/sys/fs/cgroup" + path in dirs
        if "memory" in controllers.split(",") and path != "/":
            assert "/sys/fs/cgroup/memory" + path in dirs


def test_cuda_uses_the_device_memory_and_names_the_device(monkeypatch):
    asked = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: asked.append(d) or (3 << 20, 16 << 30))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: 2 << 20)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: 1 << 20)
    monkeypatch.setattr(M, "_ram_available", lambda: 1 << 40)  # plenty on the host: not what is asked
    free, name = M.available_memory(torch.device("cuda:1"))
    assert free == (3 << 20) + (1 << 20) and "cuda:1" in name and "mem_get_info" in name
    assert asked == [torch.device("cuda:1")]
    X = torch.zeros(10_000, 8)
    with pytest.raises(MemoryError, match=r"available on cuda:1 \(the free memory of cuda:1"):
        M.check_memory(X, "cuda:1", n_grids=10, strategy="beam", max_length=2)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (64 << 30, 80 << 30))
    M.check_memory(X, "cuda:1", n_grids=10, strategy="beam", max_length=2)  # fits the device: nothing raised


def test_other_devices_are_unknown():
    assert M.available_memory("meta") == (None, "unknown on 'meta'")


# --------------------------------------------------------------------------------- a real RLIMIT_AS, subprocess

_CHILD = textwrap.dedent(
    r"""
    import json, resource, sys, time
    import torch
    def vm():
        for line in open("/proc/self/status"):
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    import torch_amore as ta
    from torch_amore.data.memory import available_memory
    out = []
    for n, kind in json.loads(sys.argv[1]):
        if kind == "windows":  # 4 bytes a row: overlapping windows of one vector
            X = torch.rand(n + 7, generator=torch.Generator().manual_seed(0)).as_strided((n, 8), (1, 1))
        elif kind == "dense":
            X = torch.rand(n, 8, generator=torch.Generator().manual_seed(0))
        else:  # zero-stride: no memory of its own
            X = torch.zeros(1, 8).expand(n, 8)
        target = torch.zeros(1, dtype=torch.bool).expand(n) if kind == "zero" else torch.arange(n) % 7 == 0
        if not out:
            limit = vm() + int(sys.argv[2])
            resource.setrlimit(resource.RLIMIT_AS, (limit, resource.RLIM_INFINITY))
        t0 = time.perf_counter()
        try:
            ta.extract_rules(X, target)
            err = None
        except MemoryError as e:
            err = str(e)
        out.append(dict(n=n, seconds=time.perf_counter() - t0, error=err, left=available_memory("cpu")))
        del X, target
    print(json.dumps(out))
    """
)


def _run_limited(cases: list, limit_bytes: int) -> list[dict]:
    """``extract_rules`` on each case in a subprocess whose address space is limited to ``limit_bytes`` above its size
    after importing torch and making the first case's data."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(cases), str(limit_bytes)], capture_output=True,
                          text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _assert_refused_up_front(r: dict) -> None:
    message = r["error"]
    assert message is not None, f"N={r['n']} was not refused"
    assert "RLIMIT_AS" in message and ("GiB" in message or "MiB" in message)
    for knob in ("`features=`", "fewer rows", "`n_grids`", "`max_length`", "strategy="):
        assert knob in message
    assert r["seconds"] < 2.0, f"refused only after {r['seconds']:.1f} s"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_zero_stride_billion_rows_refused_up_front_under_rlimit():
    (r,) = _run_limited([[10**9, "zero"]], 1 << 30)
    _assert_refused_up_front(r)
    assert "1000000000 rows x 8" in r["error"] and r["left"][1].startswith("the address-space limit")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_four_million_rows_refused_up_front_under_rlimit():
    # 1.3 GB in all, of which torch itself takes about 600 MB and X 128 MB: as in the issue
    (r,) = _run_limited([[4_000_000, "dense"]], 570 << 20)
    _assert_refused_up_front(r)
    need = M.search_memory(4_000_000, 8, 10)
    assert f"{need / 2**20:.1f} MiB" in r["error"] or f"{need / 2**30:.2f} GiB" in r["error"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_sweep_under_rlimit_finishes_or_refuses_up_front():
    limit = 700 << 20
    cases = [[10**5, "windows"], [10**6, "windows"], [10**7, "zero"], [10**8, "zero"]]
    results = _run_limited(cases, limit)
    for r in results:
        if r["error"] is None:  # it finished: then the estimate said it fits
            assert M.search_memory(r["n"], 8, 10) <= limit
        else:
            _assert_refused_up_front(r)
    assert results[0]["error"] is None  # small data fits and is never refused
    assert results[-1]["error"] is not None


_AT_ESTIMATE = textwrap.dedent(
    r"""
    import json, resource, sys
    import torch
    import torch_amore as ta
    from torch_amore.data import memory as M
    n, strategy, max_length = json.loads(sys.argv[1])
    X = torch.rand(n + 7, generator=torch.Generator().manual_seed(0)).as_strided((n, 8), (1, 1))
    target = (X[:, 0] > 0.6) & (X[:, 3] < 0.5) | (torch.arange(n) % 11 == 0)
    vm = M._proc_field("/proc/self/status", "VmSize")
    room = M.estimate_memory(X, strategy=strategy, max_length=max_length) + M._thread_reserve() + (16 << 20)
    resource.setrlimit(resource.RLIMIT_AS, (vm + room, resource.RLIM_INFINITY))
    found = ta.extract_rules(X, target, strategy=strategy, max_length=max_length)
    print(json.dumps(len(found)))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
@pytest.mark.parametrize("strategy, max_length", [("beam", 2), ("paper", 3), ("exact", 2)])
def test_finishes_with_just_the_estimated_address_space(strategy, max_length):
    # the estimate is at least the real peak: a limit of exactly the estimate above the process's size is enough
    args = json.dumps([1_000_000, strategy, max_length])
    proc = subprocess.run([sys.executable, "-c", _AT_ESTIMATE, args], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) > 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/status are Linux's")
def test_target_counted_without_a_copy():
    # a bool sum would copy 10**8 rows to int64 (800 MB); the limit leaves 300 MB
    code = textwrap.dedent(
        """
        import resource, torch
        from torch_amore.data import validation as V
        from torch_amore.data import memory as M
        target = torch.zeros(10**8, dtype=torch.bool)
        target[::3] = True
        vm = M._proc_field("/proc/self/status", "VmSize")
        resource.setrlimit(resource.RLIMIT_AS, (vm + (300 << 20), resource.RLIM_INFINITY))
        print(int(V.to_target(target, 10**8, torch.device("cpu")).count_nonzero()))
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert int(proc.stdout.split()[-1]) == len(range(0, 10**8, 3))
