"""Verification by intervention: its time against plain forward passes over the same samples.

On the quickstart's tiny CNN (scikit-learn digits, 1,350 training digits) and on the MNIST latent example's small CNN
(one epoch on 4,000 images of ../shared/data), ``explanation.verify(X, rule_sets=5, n_controls=10)`` is timed against
its budget: for each verified rule set, 2 x (1 + 10) plain forward passes over the samples it concerns (those outside
the rule set and not the target, plus those inside and the target), plus 10 %. The plain passes are measured in the
same process, same batch size, one thread, under ``torch.inference_mode`` (medians of ``--repeat``, the calls
alternating). The ratio reported is ``verify time / (sum over rule sets of (1 + 10) plain passes)``: the budget is a
ratio of 2.2. With ``--device cuda`` the peak GPU memory of ``verify`` above the model and data is reported for two
batch sizes (it should follow the batch size, not the number of samples).

Measured (2-core CPU shared with other jobs, one thread, batch 256, medians of 3): the quickstart's CNN 1.57 s for 5
rule sets (ratio 1.50), the MNIST CNN 30.9 s (ratio 1.25); both within the budget of 2.2.

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_verify.py --data ../shared/data --repeat 3
    python benchmarks/bench_verify.py --data ../shared/data --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch.nn import functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from mnist_latent import SmallCNN, read_idx, train  # noqa: E402
from quickstart import TinyCNN  # noqa: E402

from torch_amore import RegionalRuleExplainer  # noqa: E402

N_CONTROLS, TOP = 10, 5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def quickstart_task(device: torch.device) -> tuple[torch.nn.Module, torch.Tensor, dict]:
    from sklearn.datasets import load_digits

    torch.manual_seed(0)
    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32)[:, None]
    y = torch.tensor(digits.target)
    train_idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:1350]
    model = TinyCNN()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(25):
        for idx in train_idx[torch.randperm(len(train_idx))].split(64):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    options = dict(max_length=2, min_support=0.06, n_grids=6, bin_strategy="kmeans")
    return model.eval().to(device), x[train_idx].to(device), options


def mnist_task(data: Path, device: torch.device) -> tuple[torch.nn.Module, torch.Tensor, dict]:
    torch.manual_seed(0)
    images = read_idx(data / "mnist-t10k-images-idx3-ubyte.gz")
    labels = read_idx(data / "mnist-t10k-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    y = torch.from_numpy(labels.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))[:4000]
    model = SmallCNN()
    train(model, x[order], y[order], epochs=1, seed=0)
    options = dict(max_length=2, min_support=4000 / 60000, n_grids=6, bin_strategy="kmeans", top_k=5)
    return model.eval().to(device), x[order].to(device), options


def plain_passes(model: torch.nn.Module, x: torch.Tensor, batch_size: int) -> None:
    with torch.inference_mode():
        for i in range(0, len(x), batch_size):
            model(x[i : i + batch_size])


def measure(name: str, model, x, options, *, repeat: int, batch_size: int, device: torch.device) -> dict:
    explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True)
    explanation = explainer.explain(x, 7, progress=False, batch_size=batch_size, **options)
    result = explanation.verify(x, rule_sets=TOP, n_controls=N_CONTROLS, batch_size=batch_size)
    used = [torch.cat([r.details["sufficiency_samples"], r.details["necessity_samples"]]) for r in result.rows]
    subsets = [x[rows.to(x.device)] for rows in used]
    verify_times, plain_times = [], []
    for _ in range(repeat):
        _sync(device)
        t0 = time.perf_counter()
        explanation.verify(x, rule_sets=TOP, n_controls=N_CONTROLS, batch_size=batch_size)
        _sync(device)
        verify_times.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for sub in subsets:  # one plain pass over each rule set's samples
            plain_passes(model, sub, batch_size)
        _sync(device)
        plain_times.append(time.perf_counter() - t0)
    t_verify, t_plain = statistics.median(verify_times), statistics.median(plain_times)
    ratio = t_verify / ((1 + N_CONTROLS) * t_plain)
    print(f"\n{name}: {len(x)} samples, batch {batch_size}, {len(result.rows)} rule sets, samples used per rule set "
          f"{[len(u) for u in used]}")  # fmt: skip
    print(result)
    print(f"  verify {t_verify * 1e3:.1f} ms; one plain pass over each rule set's samples {t_plain * 1e3:.2f} ms")
    print(f"  ratio verify / ((1 + {N_CONTROLS}) plain passes) = {ratio:.2f}  (budget 2 x 1.1 = 2.20: "
          f"{'within' if ratio <= 2.2 else 'OVER'})")  # fmt: skip
    if device.type == "cuda":
        for bs in (batch_size, 4 * batch_size):
            torch.cuda.empty_cache()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            explanation.verify(x, rule_sets=TOP, n_controls=N_CONTROLS, batch_size=bs)
            peak = (torch.cuda.max_memory_allocated() - base) / 2**20
            print(f"  peak GPU memory above model and data, batch {bs}: {peak:.1f} MiB")
    return {"name": name, "ratio": ratio, "verify_s": t_verify, "plain_s": t_plain}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "data")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device {device}")
    rows = [measure("quickstart TinyCNN (digits)", *quickstart_task(device), repeat=args.repeat,
                    batch_size=args.batch_size, device=device)]  # fmt: skip
    if (args.data / "mnist-t10k-images-idx3-ubyte.gz").exists():
        rows.append(measure("MNIST SmallCNN (1 epoch, 4,000 images)", *mnist_task(args.data, device),
                            repeat=args.repeat, batch_size=args.batch_size, device=device))  # fmt: skip
    else:
        print(f"\n(no MNIST files in {args.data}: the MNIST row is skipped)")
    print("\nsummary: " + "; ".join(f"{r['name']}: ratio {r['ratio']:.2f}" for r in rows))


if __name__ == "__main__":
    main()
