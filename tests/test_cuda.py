"""The device path: every public entry point on a chosen device gives the CPU's rules, with its tensors on the device.

The device is ``--device`` (``pytest tests/test_cuda.py --device cuda:1``), else ``$TORCH_AMORE_TEST_DEVICE``, else
``cuda`` when a GPU is present; without one every test on the device is skipped. ``--device cpu`` runs them all on
the CPU (the reference is then the same device: that proves the code runs end to end where no GPU is lent). One test
needs no device and always runs: the routes the search takes off the CPU (``torch.sort`` instead of numpy, no CPU
thread scope), taken on the CPU, give the CPU's rules.

What is compared with the CPU result of the same call:

* ``extract_rules``: rule for rule (the counts are exact integer arithmetic on any device; grid bounds are float
  arithmetic on the data, so they are compared to the suite's relative tolerance, :mod:`rule_compare`), and each rule
  set selects the same rows; TF32 is allowed there, as the counts must not depend on it;
* models: activations to a float tolerance (TF32 off for these tests), the subgroup exactly, the rules with
  the suite's tolerances; the device's explanation also equals ``extract_rules`` on its own features (the engine,
  exactly as above);
* the Lightning callback in mixed precision against a 32-bit CPU run: inputs exactly, activations and subgroup to the
  precision's tolerance, the best rule set's fitness on the 32-bit data close to the 32-bit run's.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from graph_models import GCN
from rule_compare import assert_rule_sets_close
from torch import nn

from torch_amore import RegionalRuleExplainer, RuleSet, extract_rules, select_features

ENV = "TORCH_AMORE_TEST_DEVICE"
TASK = Path(__file__).with_name("lightning_task.py")


# ----------------------------------------------------------------------------------------------------- the device


def chosen_device(config: pytest.Config) -> torch.device | None:
    """The device asked for (``--device``, then ``$TORCH_AMORE_TEST_DEVICE``), else ``cuda`` when present, else
    ``None``; a CUDA device gets its index (tensors report ``cuda:0``, not ``cuda``)."""
    name = config.getoption("--device", default=None) or os.environ.get(ENV)
    if name is None:
        name = "cuda" if torch.cuda.is_available() else None
    if name is None:
        return None
    device = torch.device(name)
    if device.type == "cuda" and device.index is None and torch.cuda.is_available():
        device = torch.device("cuda", torch.cuda.current_device())
    return device


@pytest.fixture(scope="module")
def device(request: pytest.FixtureRequest) -> torch.device:
    """The device under test."""
    dev = chosen_device(request.config)
    if dev is None:
        pytest.skip(f"no CUDA device: run with --device cpu (or {ENV}=cpu) to run these tests on the CPU")
    if dev.type == "cuda" and not torch.cuda.is_available():
        pytest.skip(f"--device {dev} asked for, but torch sees no CUDA device")
    return dev


def _tf32(allowed: bool) -> Iterator[None]:
    """TF32 matmuls and convolutions allowed or not while the test runs (CUDA only; the setting is restored)."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.fixture
def tf32_on() -> Iterator[None]:
    """TF32 allowed (as after ``torch.set_float32_matmul_precision("high")``, which Lightning suggests): the search's
    counts from one-hot products must stay exact under it."""
    yield from _tf32(True)


@pytest.fixture
def tf32_off() -> Iterator[None]:
    """TF32 off: float32 models compute as on the CPU, to float rounding."""
    yield from _tf32(False)


def on(device: torch.device, *tensors: torch.Tensor | None) -> bool:
    """Whether every given tensor is on ``device``."""
    return all(t.device == device for t in tensors if t is not None)


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """The tensors held by a result: in dataclass fields, tuples, lists and dicts (recursively)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return [t for f in dataclasses.fields(obj) for t in tensors_in(getattr(obj, f.name))]
    if isinstance(obj, (list, tuple)):
        return [t for v in obj for t in tensors_in(v)]
    if isinstance(obj, dict):
        return [t for v in obj.values() for t in tensors_in(v)]
    return []


def same_rows(got: list[RuleSet], expected: list[RuleSet], X: torch.Tensor, device: torch.device) -> None:
    """Each rule set of ``got`` selects, on ``X`` moved to ``device``, the rows its CPU counterpart selects on ``X``,
    and its mask is made on ``device``."""
    X_dev = X.to(device)
    for g, e in zip(got, expected):
        mask = g.mask(X_dev)
        assert on(device, mask) and torch.equal(mask.cpu(), e.mask(X)), f"{g} vs {e}"


# ----------------------------------------------------------------------------------------------------- extract_rules


def mixed_table(n: int = 1200) -> tuple[torch.Tensor, torch.Tensor, list[str]]:
    """(X (n, 6) float32, target, feature types): a float column with 8 % NaN, an integer column (0-9), a 0/1 column,
    a category in 0-3, two floats; the target is two planted boxes with 5 % label noise."""
    g = torch.Generator().manual_seed(0)
    x0 = torch.rand(n, generator=g)
    x0[torch.rand(n, generator=g) < 0.08] = float("nan")
    x1 = torch.randint(0, 10, (n,), generator=g).float()
    x2 = torch.randint(0, 2, (n,), generator=g).float()
    x3 = torch.randint(0, 4, (n,), generator=g).float()
    x4, x5 = torch.randn(n, generator=g), torch.rand(n, generator=g)
    X = torch.stack([x0, x1, x2, x3, x4, x5], dim=1)
    target = ((x0 > 0.55) & (x1 < 6)) | ((x3 == 2) & (x4 > 0.3) & (x2 == 1))
    return X, target ^ (torch.rand(n, generator=g) < 0.05), ["float", "int", "cat", "cat", "float", "float"]


def check_extract(device: torch.device, X: torch.Tensor, target: torch.Tensor, **kw: Any) -> list[RuleSet]:
    """``extract_rules`` on ``device`` against the CPU; returns the device's rules."""
    expected = extract_rules(X, target, **kw)
    local = kw.pop("local_x", None)
    got = extract_rules(X.to(device), target.to(device), local_x=None if local is None else local.to(device), **kw)
    assert expected, "the CPU call found no rule set: the comparison would be empty"
    assert_rule_sets_close(got, expected)
    for g, e in zip(got, expected):  # the tree's probability ratios: from the same counts
        assert g.ratios == pytest.approx(e.ratios, rel=1e-6), f"{g} vs {e}"
    assert [rs.optimum for rs in got] == [rs.optimum for rs in expected]
    assert on(device, *tensors_in(got))
    same_rows(got, expected, X, device)
    return got


@pytest.mark.parametrize("bin_strategy", ["uniform", "quantile", "kmeans"])
@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
@pytest.mark.usefixtures("tf32_on")
def test_extract_rules_gives_the_cpu_rules(device, strategy, bin_strategy):
    X, target, types = mixed_table()
    got = check_extract(device, X, target, strategy=strategy, bin_strategy=bin_strategy, feature_types=types,
                        max_length=2, min_support=40, n_grids=6)  # fmt: skip
    assert {r.kind for rs in got for r in rs.rules} >= {"float"}


@pytest.mark.parametrize("n_grids", [8, 12])
@pytest.mark.usefixtures("tf32_on")
def test_exact_on_grids_wider_than_eight(device, n_grids):
    """Beyond 8 grids the CPU counts pairs by bincount and CUDA by one-hot products: the same rules."""
    X, target, types = mixed_table()
    check_extract(device, X, target, strategy="exact", n_grids=n_grids, feature_types=types, max_length=2,
                  min_support=30, top_k=10)  # fmt: skip


@pytest.mark.parametrize("strategy", ["beam", "exact"])
@pytest.mark.usefixtures("tf32_on")
def test_three_conditions_float64_and_min_confidence(device, strategy):
    X, target, types = mixed_table()
    kw = dict(min_confidence=0.6) if strategy == "beam" else {}
    got = check_extract(device, X.double(), target, strategy=strategy, bin_strategy="quantile", feature_types=types,
                        max_length=3, min_support=30, n_grids=5, min_gain=0, **kw)  # fmt: skip
    assert max(len(rs.rules) for rs in got) == 3  # min_gain=0: every rule set found, three conditions included


def test_host_syncs_of_the_default_search(device):
    """The default search of a 200,000 x 128 latent-like layer (``max_length=2``) waits for the device at most 50
    times, each wait counted by CUDA's sync debug mode: host copies of results and data-dependent sizes only (tables
    sent to the device go through pinned memory, counts through ``index_add_``)."""
    if device.type != "cuda":
        pytest.skip("host syncs are counted by CUDA's sync debug mode (on the CPU: tests/search/test_engine_counts.py)")
    import warnings

    g = torch.Generator(device=device).manual_seed(0)
    X = torch.randn(200_000, 128, generator=g, device=device)
    X[:, :64].clamp_(min=0)
    target = ((X[:, 10] > 0.3) & (X[:, 90] < 0.6)) ^ (torch.rand(200_000, generator=g, device=device) < 0.1)
    extract_rules(X, target, max_length=2)  # warm-up: kernels loaded, pinned blocks cached
    torch.cuda.synchronize(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            found = extract_rules(X, target, max_length=2)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in caught if "synchronizing CUDA operation" in str(w.message)]
    assert found and 0 < len(syncs) <= 50, len(syncs)


@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
def test_deterministic_algorithms_mode(device, monkeypatch, strategy):
    """Under ``torch.use_deterministic_algorithms(True)`` (what ``Trainer(deterministic=True)`` sets) CUDA refuses
    the operations it has only nondeterministic kernels for: the search must avoid them and give the CPU's rules.
    cuBLAS products need ``CUBLAS_WORKSPACE_CONFIG`` in that mode (PyTorch's requirement for any matmul)."""
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", os.environ.get("CUBLAS_WORKSPACE_CONFIG", ":4096:8"))
    X, target, types = mixed_table()
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        check_extract(device, X, target, strategy=strategy, bin_strategy="kmeans", feature_types=types, max_length=2,
                      min_support=40)  # fmt: skip
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


@pytest.mark.parametrize("strategy", ["paper", "beam"])
@pytest.mark.usefixtures("tf32_on")
def test_local_rules_and_inferred_types(device, strategy):
    X, target, _ = mixed_table()
    row = int(torch.nonzero(target & (X[:, 0] > 0.6))[0])
    got = check_extract(device, X, target, strategy=strategy, local_x=X[row], max_length=2, min_support=40)
    assert all(bool(rs.mask(X[row : row + 1].to(device))[0]) for rs in got)  # local: every rule set holds the row


@pytest.mark.parametrize("bin_strategy", ["uniform", "quantile", "kmeans"])
@pytest.mark.parametrize("strategy", ["paper", "beam", "exact"])
def test_the_routes_a_gpu_takes_give_the_cpu_rules_on_the_cpu(monkeypatch, strategy, bin_strategy):
    """Off the CPU the search sorts with ``torch.sort`` (not numpy) and runs without the one-thread scope, the large
    passes' threads or the second thread beside the beam: those routes, taken on the CPU, give the same rules (this
    test needs no device, so it runs in the normal suite)."""
    import torch_amore._utils.sorting as sorting
    import torch_amore._utils.threads as threads
    import torch_amore.search.extract as search
    import torch_amore.search.extractor as extractor

    X, target, types = mixed_table()
    kw = dict(strategy=strategy, bin_strategy=bin_strategy, feature_types=types, max_length=2, min_support=40)
    seen, bin_plan, sort = [], search.bin_plan, torch.sort

    def spy_bin_plan(*args: Any, **kwargs: Any) -> Any:  # in which thread scope the search runs
        seen.append(threads._CALLER_THREADS.get())
        return bin_plan(*args, **kwargs)

    def spy_sort(*args: Any, **kwargs: Any) -> Any:
        seen.append("torch.sort")
        return sort(*args, **kwargs)

    monkeypatch.setattr(search, "bin_plan", spy_bin_plan)
    monkeypatch.setattr(torch, "sort", spy_sort)
    expected = extract_rules(X, target, **kw)
    assert seen[0] is not None  # the CPU's route: the one-thread scope
    cpu_sorts = seen.count("torch.sort")
    seen.clear()
    monkeypatch.setattr(sorting, "_NUMPY_DTYPES", frozenset())  # torch.sort, as for CUDA tensors
    monkeypatch.setattr(extractor, "search_threads", lambda device: contextlib.nullcontext())  # as off the CPU
    got = extract_rules(X, target, **kw)
    assert seen[0] is None and seen.count("torch.sort") > cpu_sorts  # the device's routes were taken
    assert expected and got == expected
    assert [rs.ratios for rs in got] == [rs.ratios for rs in expected]


# ----------------------------------------------------------------------------------------------------- explainers


def small_cnn() -> nn.Sequential:
    """A seeded CNN on 1 x 8 x 8 images with three classes."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 16), nn.ReLU(), nn.Linear(16, 3)
    )


def images(n: int = 600) -> torch.Tensor:
    return torch.rand(n, 1, 8, 8, generator=torch.Generator().manual_seed(1))


def majority_class(model: nn.Module, inputs: Any) -> int:
    with torch.no_grad():
        return int(model(inputs).argmax(1).bincount().argmax())


def check_explanation(device: torch.device, got: Any, expected: Any, *, atol: float = 1e-5) -> None:
    """A device explanation against the CPU one: tensors on the device, activations to ``atol``, the same subgroup
    and (the suite's tolerances) rules; the device's rules also equal ``extract_rules`` on its own features."""
    assert expected.rule_sets, "the CPU explanation is empty: the comparison would be empty"
    assert on(device, got.subgroup, got.features_matrix, got.sample)
    assert torch.allclose(got.features_matrix.cpu(), expected.features_matrix, atol=atol, rtol=1e-5)
    assert torch.equal(got.subgroup.cpu(), expected.subgroup)
    assert_rule_sets_close(got.rule_sets, expected.rule_sets)
    p = got.params
    local = None if got.sample is None else got.sample.cpu()
    engine = extract_rules(
        got.features_matrix.cpu(), got.subgroup.cpu(), features=got.features, feature_names=got.feature_names,
        local_x=local, target_name=got.target_name, max_length=p["max_length"], min_support=p["min_support"],
        n_grids=p["n_grids"], bin_strategy=p["bin_strategy"], strategy=p["strategy"],
    )  # fmt: skip
    assert_rule_sets_close(got.rule_sets, engine)


def cnn_explanations(device: torch.device) -> tuple[torch.Tensor, Any, Any]:
    """(images, CPU explanation, device explanation) of the small CNN's second layer for its majority class."""
    model, X = small_cnn(), images()
    cls = majority_class(model, X)
    opts = dict(max_length=2, min_support=30, n_grids=5, progress=False)
    expected = RegionalRuleExplainer(model, layer=model[1]).explain(X, cls, **opts)
    moved = copy.deepcopy(model).to(device)
    got = RegionalRuleExplainer(moved, layer=moved[1]).explain(X.to(device), cls, **opts)
    return X, expected, got


@pytest.mark.usefixtures("tf32_off")
def test_explainer_on_a_cnn_layer(device):
    _, expected, got = cnn_explanations(device)
    assert got.features_matrix.shape == (600, 4 * 6 * 6)
    check_explanation(device, got, expected)
    same_rows(got.rule_sets, expected.rule_sets, expected.features_matrix, device)


@pytest.mark.usefixtures("tf32_off")
def test_explain_local_on_the_cnn(device):
    model, X = small_cnn(), images()
    cls = majority_class(model, X)
    with torch.no_grad():
        row = int(torch.nonzero(model(X).argmax(1) == cls)[0])
    opts = dict(max_length=2, min_support=30, n_grids=5, strategy="paper", progress=False)
    expected = RegionalRuleExplainer(model, layer="4").explain_local(row, X, cls, **opts)
    moved = copy.deepcopy(model).to(device)
    got = RegionalRuleExplainer(moved, layer="4").explain_local(X[row].to(device), X.to(device), cls, **opts)
    assert got.sample is not None and torch.allclose(got.sample.cpu(), expected.sample, atol=1e-5)
    check_explanation(device, got, expected)


@pytest.mark.usefixtures("tf32_off")
def test_verify_on_the_cnn(device):
    """Rule verification (interventions on the layer) on the device counts what the CPU counts: the same samples,
    donors and control units (seeded on the host), outcomes equal but for samples whose logits tie within float
    noise."""
    X, expected, got = cnn_explanations(device)
    check_explanation(device, got, expected)
    for method in ("resample", "clamp"):
        ref = expected.verify(X, rule_sets=3, method=method, n_controls=3, batch_size=128)
        dev = got.verify(X.to(device), rule_sets=3, method=method, n_controls=3, batch_size=128)
        assert len(dev.rows) == len(ref.rows) == 3
        for a, b in zip(dev.rows, ref.rows):
            for share in ("sufficiency", "necessity"):
                sa, sb = getattr(a, share), getattr(b, share)
                assert sa.n == sb.n, (method, share)
                assert abs(sa.hits - sb.hits) <= max(1, 0.02 * sb.n), (method, share, sa, sb)


@pytest.mark.usefixtures("tf32_off")
def test_explainer_on_a_gnn(device):
    pytest.importorskip("torch_geometric")
    from torch_geometric.data import Batch, Data

    g = torch.Generator().manual_seed(0)
    graphs = []
    for _ in range(120):
        k = int(torch.randint(4, 10, (1,), generator=g))
        edges = torch.randint(0, k, (2, 2 * k), generator=g)
        graphs.append(Data(x=torch.randn(k, 3, generator=g), edge_index=edges))
    model = GCN()
    with torch.no_grad():  # about half the graphs predicted 1
        out = model(Batch.from_data_list(graphs))
        model.out.bias[1] -= float((out[:, 1] - out[:, 0]).median()) + 1e-3
    opts = dict(max_length=2, min_support=10, n_grids=4, progress=False)
    expected = RegionalRuleExplainer(model, "head").explain(graphs, 1, batch_size=32, **opts)
    moved = copy.deepcopy(model).to(device)
    got = RegionalRuleExplainer(moved, "head").explain(graphs, 1, batch_size=32, **opts)
    check_explanation(device, got, expected)


@pytest.mark.usefixtures("tf32_off")
def test_select_features_and_explain_on_the_selection(device):
    g = torch.Generator().manual_seed(0)
    X = torch.randn(800, 6, generator=g)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 1), nn.Sigmoid())
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[3.0, 0.0, -2.0, 0.0, 0.0, 0.0]]))
        model[0].bias.zero_()
        labels = model(X).squeeze(1) > 0.5
    kw = dict(n_test_per_class=40, n_steps=16)
    expected = select_features(model, X, labels, **kw)
    moved = copy.deepcopy(model).to(device)
    got = select_features(moved, X.to(device), labels.to(device), **kw)
    assert got.features == expected.features == (0, 2)
    assert torch.allclose(got.importance, expected.importance, rtol=1e-3, atol=1e-5)  # on the CPU (documented)
    assert torch.equal(got.pairs, expected.pairs)
    opts = dict(max_length=2, min_support=40, n_grids=6, progress=False)
    ref = RegionalRuleExplainer(model).explain(X, 1, features=expected, **opts)
    run = RegionalRuleExplainer(moved).explain(X.to(device), 1, features=got, **opts)
    assert {r.feature for rs in run for r in rs.rules} <= {0, 2}
    check_explanation(device, run, ref)


# ----------------------------------------------------------------------------------------------------- Lightning


def _lightning():
    pl = pytest.importorskip("pytorch_lightning")
    from lightning_task import BreastCancerModule, loaders

    class Frozen(BreastCancerModule):
        """The task's MLP with a zero learning rate: every precision trains to the same (initial) weights."""

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.0)

    return pl, Frozen, loaders


#: the callbacks of the precision test: (file stem, options); the hidden layer's features are computed in the
#: precision of the run, the inputs' are not
EXTRACTORS = {
    "inputs": dict(target=1, data="val", bin_strategy="uniform", n_grids=8, min_support=0.05),
    "hidden": dict(target=0, data="val", layer="net.1", bin_strategy="quantile", n_grids=6, min_support=20),
}


def _fit(root: Path, precision: str, accelerator: str, devices: Any) -> dict[str, Any]:
    from torch_amore import RegionalRuleExtractor

    pl, Frozen, loaders = _lightning()
    callbacks = [RegionalRuleExtractor(**opts, filename=name) for name, opts in EXTRACTORS.items()]
    trainer = pl.Trainer(
        accelerator=accelerator, devices=devices, precision=precision, max_epochs=1, limit_train_batches=1,
        default_root_dir=root, callbacks=callbacks, logger=False, enable_progress_bar=False,
        enable_model_summary=False, enable_checkpointing=False, num_sanity_val_steps=0,
    )  # fmt: skip
    model = Frozen()
    trainer.fit(model, *loaders())
    return {name: cb.explanation for name, cb in zip(EXTRACTORS, callbacks)}


def _fitness_on(rule_set: RuleSet, X: torch.Tensor, subgroup: torch.Tensor) -> float:
    return rule_set.evaluate(X, subgroup).fitness


@pytest.mark.parametrize("precision", ["16-mixed", "bf16-mixed"])
@pytest.mark.usefixtures("tf32_off")
def test_lightning_callback_in_mixed_precision(device, tmp_path, precision):
    if device.type == "cpu" and precision == "16-mixed":
        pytest.skip("16-mixed needs a GPU (Lightning runs bf16-mixed instead on CPU, the other case)")
    accelerator, devices = ("gpu", [device.index or 0]) if device.type == "cuda" else ("cpu", 1)
    ref = _fit(tmp_path / "fp32", "32-true", "cpu", 1)
    got = _fit(tmp_path / precision, precision, accelerator, devices)
    for name, opts in EXTRACTORS.items():
        e, r = got[name], ref[name]
        assert r.rule_sets and e.rule_sets, name
        assert on(device, e.subgroup, e.features_matrix), name
        X, mask = e.features_matrix.cpu(), e.subgroup.cpu()
        # the engine on the run's own features: the rules of the same call on the CPU
        kw = {k: v for k, v in opts.items() if k not in ("target", "data", "layer")}
        assert_rule_sets_close(e.rule_sets, extract_rules(X, mask, feature_names=e.feature_names, **kw))
        # against 32 bits: inputs exactly, activations to half precision's rounding; the subgroup may differ only
        # where the 32-bit logits are close to a tie
        if opts.get("layer") is None:
            assert torch.equal(X, r.features_matrix), name
        else:
            assert torch.allclose(X, r.features_matrix, rtol=2e-2, atol=2e-2), name
        flips = int((mask != r.subgroup).sum())
        assert flips <= 0.02 * mask.numel(), f"{name}: {flips} of {mask.numel()} rows changed subgroup"
        # the best rule set of the run, measured on the 32-bit features and subgroup, is about as fit as 32 bits'
        best = _fitness_on(e.best, r.features_matrix, r.subgroup)
        assert best >= r.best.fitness - 0.05, f"{name}: {best:.3f} vs {r.best.fitness:.3f}"
        if flips == 0 and opts.get("layer") is None:  # the same input of the search: the same rules
            assert_rule_sets_close(e.rule_sets, r.rule_sets)


# ----------------------------------------------------------------------------------------------------- DDP


def test_ddp_on_two_gpus_gives_the_single_process_rules(device, tmp_path):
    """``Trainer(accelerator="gpu", devices=2, strategy="ddp")`` on the task script; its rules equal one CPU
    process's on the final weights (as tests/test_callbacks.py checks DDP on CPU processes)."""
    if device.type != "cuda" or torch.cuda.device_count() < 2:
        pytest.skip("DDP on GPUs needs two CUDA devices (DDP on CPU processes: tests/test_callbacks.py)")
    from lightning_task import EXTRACTORS as TASK_EXTRACTORS
    from lightning_task import BreastCancerModule, loaders

    from torch_amore import RegionalExplanation

    run = subprocess.run(
        [sys.executable, str(TASK), "--root", str(tmp_path), "--devices", "2", "--strategy", "ddp",
         "--accelerator", "gpu"],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONWARNINGS": "ignore"}, cwd=TASK.parent,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    log_dir = Path((tmp_path / "log_dir.txt").read_text())
    model = BreastCancerModule()
    model.load_state_dict(torch.load(tmp_path / "model.pt", weights_only=True, map_location="cpu"))
    model.eval()
    train_dl, val_dl = loaders()
    for name, opts in TASK_EXTRACTORS.items():
        opts = dict(opts)
        target, data, layer = opts.pop("target"), opts.pop("data"), opts.pop("layer", None)
        X = (train_dl if data == "train" else val_dl).dataset.tensors[0]
        with torch.no_grad():
            mask = model.net(X).argmax(1) == target
            feats = X if layer is None else model.net[:2](X)
        prefix = "feature" if layer is None else "z"
        single = extract_rules(feats, mask, feature_names=[f"{prefix}_{i}" for i in range(feats.shape[1])], **opts)
        ddp = RegionalExplanation.from_json(log_dir / f"{name}.json")
        assert single, name
        assert ddp.params["world_size"] == 2 and ddp.params["subgroup_size"] == int(mask.sum()), name
        assert_rule_sets_close(ddp.rule_sets, single)
