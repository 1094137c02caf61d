"""Streamed extraction (torch_amore.search.stream): peak memory and time per million rows against in-memory extraction.

A source of ``--rows`` x ``--features`` float32 values is generated batch by batch from a seed (never whole): Gaussian
features, the first half ReLU-clipped, a planted box on two of them with 10 % label noise as the target. Streamed
extraction (``max_length=2``, the default strategy) runs on it in a process of its own; in-memory extraction runs on
``--memory-rows`` rows of the same source, concatenated, in another. Each process runs on one thread and reports its
peak resident memory (``resource.getrusage``), so the two do not mix.

Reported: seconds per million rows of each and their ratio (target: streamed at most 2x per row), the codes' size
(a byte per value for the paper's grids, two more for the beam's fine grids, a byte per row for the target), and the
streamed peak RSS against ``1.5 x codes + 300 MB`` (with ``--codes-dir``, codes on disk: against 1 GB) and its growth
above the RSS before the call against ``0.75 x the floats + 300 MB``; on CUDA also
the peak device memory (``torch.cuda.max_memory_allocated``), where the codes then live.

    python benchmarks/bench_stream.py                         # 20,000,000 x 128 against 2,000,000 x 128 in memory
    python benchmarks/bench_stream.py --rows 1000000 --memory-rows 1000000
    python benchmarks/bench_stream.py --rows 8000000 --features 64 --min-support 20000 --memory-rows 0
    python benchmarks/bench_stream.py --device cuda           # batches and codes on the GPU
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MB = 2**20


def make_source(rows: int, features: int, batch: int, device: str, seed: int = 0):
    """A callable source: each call yields the same ``(X_batch, target_batch)`` batches, made from the seed."""

    def batches():
        a, b = features // 3, (2 * features) // 3
        for i, r0 in enumerate(range(0, rows, batch)):
            g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + i)
            n = min(batch, rows - r0)
            X = torch.randn(n, features, generator=g, device=device)
            X[:, : features // 2].clamp_(min=0)
            box = (X[:, a] > 0.3) & (X[:, a] < 1.8) & (X[:, b] > -1.0) & (X[:, b] < 0.6)
            noise = torch.rand(n, generator=g, device=device) < 0.1
            yield X, box ^ noise

    return batches


def _count_or_share(text: str) -> int | float:
    """``--min-support``: an int count, or a float share of the rows."""
    return float(text) if any(c in text for c in ".eE") else int(text)


def peak_rss_mb() -> float:
    """Peak resident memory of this process (ru_maxrss is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_one(args: argparse.Namespace) -> dict:
    """One measurement in this process: ``args.mode`` is "stream" or "memory"."""
    from torch_amore import extract_rules

    torch.set_num_threads(1)
    rows = args.rows if args.mode == "stream" else args.memory_rows
    source = make_source(rows, args.features, args.batch, args.device)
    base_rss = peak_rss_mb()
    start = time.perf_counter()
    if args.mode == "stream":
        kw = {"codes_dir": args.codes_dir} if args.codes_dir else {}
        found = extract_rules(source, max_length=2, min_support=args.min_support, **kw)
    else:
        parts = list(source())
        X, target = torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])
        del parts
        found = extract_rules(X, target, max_length=2, min_support=args.min_support)
    seconds = time.perf_counter() - start
    codes_mb = rows * args.features * 3 / MB + rows / MB  # uint8 grid codes, int16 fine codes, the target
    return {
        "mode": args.mode, "rows": rows, "features": args.features, "seconds": seconds,
        "s_per_million_rows": seconds / (rows / 1e6), "peak_rss_mb": peak_rss_mb(), "start_rss_mb": base_rss,
        "codes_mb": codes_mb, "floats_mb": rows * args.features * 4 / MB, "device": args.device,
        "best": str(found[0]) if found else None, "rules": [str(rs) for rs in found[:5]],
        "codes_on_disk": bool(args.codes_dir),
        "peak_device_mb": torch.cuda.max_memory_allocated() / MB if args.device.startswith("cuda") else None,
    }  # fmt: skip


def run_mnist(args: argparse.Namespace) -> dict:
    """The explainer on the MNIST latent example (examples/mnist_latent.py: SmallCNN, one epoch on 8,000 test images,
    the 128 inputs of ``fc2``, kmeans grids), streamed: peak RSS above the RSS before the call, against one batch of
    activations plus the codes plus 300 MB, and the rules against the in-memory path's."""
    sys.path.insert(0, str(ROOT / "examples"))
    import numpy as np
    from mnist_latent import SmallCNN, read_idx, train

    from torch_amore import RegionalRuleExplainer

    torch.set_num_threads(1)
    torch.manual_seed(0)
    images = read_idx(Path(args.mnist) / "mnist-t10k-images-idx3-ubyte.gz")
    labels = read_idx(Path(args.mnist) / "mnist-t10k-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    y = torch.from_numpy(labels.astype(np.int64))
    model = SmallCNN()
    train(model, x[:8000], y[:8000], epochs=1, seed=0)
    explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True)
    kw = dict(max_length=2, min_support=4000 / 60000, n_grids=6, bin_strategy="kmeans", batch_size=1000)
    if args.mode == "mnist-memory":
        explanation = explainer.explain(x, 7, stream=False, **kw)
        return {"rules": [str(rs) for rs in explanation.rule_sets[:3]]}
    before = peak_rss_mb()
    explanation = explainer.explain(x, 7, stream=True, **kw)
    n, d = len(x), 128
    batch_mb, codes_mb = 1000 * d * 4 / MB, n * d * 3 / MB + n / MB
    return {"rss_before_mb": before, "peak_rss_mb": peak_rss_mb(), "batch_mb": batch_mb, "codes_mb": codes_mb,
            "rules": [str(rs) for rs in explanation.rule_sets[:3]]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=20_000_000, help="rows of the streamed source")
    p.add_argument("--memory-rows", type=int, default=2_000_000, help="rows of the in-memory run (0: skip it)")
    p.add_argument("--features", type=int, default=128)
    p.add_argument("--min-support", type=_count_or_share, default=None,
                   help="min_support: a count (20000) or a share of the rows (0.01); default: auto")  # fmt: skip
    p.add_argument("--batch", type=int, default=65_536, help="rows per batch of the source")
    p.add_argument("--device", default="cpu")
    p.add_argument("--codes-dir", default=None, help="keep the codes in memory-mapped files in this folder")
    p.add_argument("--mnist", default=None, help="folder of the MNIST IDX files: measure the streamed explainer")
    p.add_argument("--mode", choices=["stream", "memory", "mnist-stream", "mnist-memory"], default=None,
                   help=argparse.SUPPRESS)  # fmt: skip
    args = p.parse_args()
    if args.mode is not None:
        print(json.dumps(run_mnist(args) if args.mode.startswith("mnist") else run_one(args)))
        return
    if args.mnist:
        out = {}
        for mode in ("mnist-stream", "mnist-memory"):
            cmd = [sys.executable, __file__, "--mode", mode, "--mnist", args.mnist]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True,
                                  env={**os.environ, "OMP_NUM_THREADS": "1"})  # fmt: skip
            out[mode] = json.loads(done.stdout.strip().splitlines()[-1])
        s = out["mnist-stream"]
        grew = s["peak_rss_mb"] - s["rss_before_mb"]
        limit = s["batch_mb"] + s["codes_mb"] + 300
        print(f"streamed explainer, MNIST latent: peak RSS {s['peak_rss_mb']:.0f} MB, {grew:.0f} MB above the RSS "
              f"before the call, against one batch + codes + 300 MB = {limit:.0f} MB "
              f"({'met' if grew <= limit else 'missed'}); same top rules as in memory: "
              f"{s['rules'] == out['mnist-memory']['rules']}")  # fmt: skip
        print(json.dumps(out))
        return
    results = []
    for mode in ["stream"] + (["memory"] if args.memory_rows else []):
        cmd = [sys.executable, __file__, "--mode", mode, "--rows", str(args.rows), "--memory-rows",
               str(args.memory_rows), "--features", str(args.features), "--batch", str(args.batch), "--device",
               args.device] + (["--codes-dir", args.codes_dir] if args.codes_dir else [])  # fmt: skip
        cmd += ["--min-support", str(args.min_support)] if args.min_support is not None else []
        out = subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ,
                             "OMP_NUM_THREADS": "1"})  # fmt: skip
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
        r = results[-1]
        print(
            f"{mode:7s} {r['rows']:>11,} x {r['features']}: {r['seconds']:8.1f} s, "
            f"{r['s_per_million_rows']:6.2f} s per million rows, peak RSS {r['peak_rss_mb']:8.0f} MB"
            + (f", peak device memory {r['peak_device_mb']:8.0f} MB" if r["peak_device_mb"] is not None else "")
        )
        print(f"        best: {r['best']}")
    s = results[0]
    limit = 1024 if args.codes_dir else 1.5 * s["codes_mb"] + 300
    print(f"codes {s['codes_mb']:.0f} MB; streamed peak RSS {s['peak_rss_mb']:.0f} MB against the target "
          f"{limit:.0f} MB ({'met' if s['peak_rss_mb'] <= limit else 'missed'})")  # fmt: skip
    grew, goal = s["peak_rss_mb"] - s["start_rss_mb"], 0.75 * s["floats_mb"] + 300
    print(f"streamed peak {grew:.0f} MB above the process's RSS before the call, against 0.75 x the floats "
          f"({s['floats_mb']:.0f} MB) + 300 MB = {goal:.0f} MB ({'met' if grew <= goal else 'missed'})")  # fmt: skip
    if len(results) > 1:
        ratio = s["s_per_million_rows"] / results[1]["s_per_million_rows"]
        print(f"time per row, streamed / in memory: {ratio:.2f} (target: at most 2)")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
