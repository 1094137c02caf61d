"""Time and memory of :func:`torch_amore.select_features` on 1,280 latent features through a small MLP head.

The setting of the paper's MRI task: B = 2 class-mean baselines, M class-balanced test samples (B x M pairs),
1,280 latent units, n_steps = 50. Eight latent units carry the class; the others are sparse ReLU noise that the head
weighs lightly. Two ways to attribute:

- ``raw``: the latents are the inputs of the head (``IntegratedGradients``);
- ``layer``: the inputs are pre-activations and the features are the activations of a ReLU layer
  (``LayerIntegratedGradients``, integrating between the activations of baseline and sample).

Each configuration runs in a fresh subprocess; after a small warm-up call, a thread samples the process's resident
memory (/proc/self/statm) every millisecond during the measured call. ``peak`` is the highest resident memory minus
the memory before the call; ``J`` is the size of the importance matrix the call returns (it grows with the pairs by
design); ``working = peak - J`` is what the internal batch bounds. The ``unbatched`` row pushes all path points of all
pairs through the model at once (internal_batch_size = pairs x n_steps) for comparison.

Usage::

    python benchmarks/bench_select.py                     # 500 and 2,000 pairs, raw and layer, + unbatched 500
    python benchmarks/bench_select.py --pairs 2000 --threads 1 --modes raw
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

D, HIDDEN, INFORMATIVE, N_SAMPLES, N_STEPS = 1280, 64, 8, 4000, 50


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _problem(mode: str):
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(0)
    labels = torch.arange(N_SAMPLES) % 2 == 1
    pre = torch.randn(N_SAMPLES, D, generator=g) - 1.5  # pre-activations: relu(pre) is sparse noise ...
    pre[:, :INFORMATIVE] = torch.randn(N_SAMPLES, INFORMATIVE, generator=g) * 0.5 + 1.0 + 2.0 * labels[:, None]
    head = nn.Sequential(nn.Linear(D, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, 1))
    with torch.no_grad():  # ... that the head weighs lightly; the informative units carry the class
        w1 = torch.randn(HIDDEN, D, generator=g) * 0.02
        w1[:, :INFORMATIVE] = torch.randn(HIDDEN, INFORMATIVE, generator=g).abs() * 0.3
        head[0].weight.copy_(w1)
        head[0].bias.zero_()
        head[2].weight.fill_(0.3)
        head[2].bias.zero_()
    if mode == "raw":
        return head.eval(), torch.relu(pre), labels, {}
    model = nn.Sequential(nn.ReLU(), head).eval()
    return model, pre, labels, {"layer": model[0]}


def _child(mode: str, pairs: int, internal_batch_size: int, threads: int) -> dict:
    import torch

    from torch_amore import select_features

    if threads:
        torch.set_num_threads(threads)
    model, inputs, labels, extra = _problem(mode)
    # warm-up (imports, allocator); max_length=1 as 4 pairs leave hundreds of features "frequent"
    select_features(model, inputs, labels, n_test_per_class=2, n_steps=N_STEPS, max_length=1, **extra)
    before = _rss_mib()
    peak = [before]
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _rss_mib())
            time.sleep(0.001)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    t0 = time.perf_counter()
    sel = select_features(
        model,
        inputs,
        labels,
        n_test_per_class=pairs // 4,
        n_steps=N_STEPS,
        internal_batch_size=internal_batch_size,
        **extra,
    )
    total = time.perf_counter() - t0
    done.set()
    sampler.join()
    peak[0] = max(peak[0], _rss_mib())
    t1 = time.perf_counter()
    select_features(importance=sel.importance)  # threshold scan + FP-Growth alone, on the same J
    rest = time.perf_counter() - t1
    j_mib = sel.importance.numel() * sel.importance.element_size() / 2**20
    return {
        "mode": mode,
        "pairs": int(sel.importance.shape[0]),
        "internal_batch_size": internal_batch_size,
        "threads": torch.get_num_threads(),
        "time_s": total,
        "ig_s": total - rest,
        "scan_fpgrowth_s": rest,
        "J_MiB": j_mib,
        "peak_MiB": peak[0] - before,
        "working_MiB": peak[0] - before - j_mib,
        "features": list(sel.features),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--pairs", type=int, nargs="+", default=[500, 2000], help="B x M pairs (B = 2 class means, M = pairs / 2)"
    )
    parser.add_argument("--modes", nargs="+", default=["raw", "layer"], choices=["raw", "layer"])
    parser.add_argument("--internal-batch-size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--no-unbatched", action="store_true", help="skip the all-at-once reference row")
    parser.add_argument("--child", nargs=4, metavar=("MODE", "PAIRS", "IBS", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, pairs, ibs, threads = args.child
        print(json.dumps(_child(mode, int(pairs), int(ibs), int(threads))))
        return

    runs = [(m, p, args.internal_batch_size) for m in args.modes for p in args.pairs]
    if not args.no_unbatched:
        runs.append((args.modes[0], min(args.pairs), min(args.pairs) * N_STEPS))
    header = f"{'mode':6} {'pairs':>6} {'ibs':>7} {'thr':>3} {'time s':>7} {'IG s':>7} {'scan+FP s':>9} "
    header += f"{'J MiB':>6} {'peak MiB':>8} {'working MiB':>11}  features"
    print(
        f"D = {D} latent features, n_steps = {N_STEPS}, {N_SAMPLES} samples, head {D}-{HIDDEN}-1, torch threads "
        f"{args.threads or 'default'}, {os.cpu_count()} CPUs"
    )
    print(header)
    for mode, pairs, ibs in runs:
        cmd = [sys.executable, __file__, "--child", mode, str(pairs), str(ibs), str(args.threads)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        feats = r["features"] if len(r["features"]) <= 10 else f"{len(r['features'])} features"
        print(
            f"{r['mode']:6} {r['pairs']:>6} {r['internal_batch_size']:>7} {r['threads']:>3} {r['time_s']:>7.2f} "
            f"{r['ig_s']:>7.2f} {r['scan_fpgrowth_s']:>9.3f} {r['J_MiB']:>6.1f} {r['peak_MiB']:>8.1f} "
            f"{r['working_MiB']:>11.1f}  {feats}",
            flush=True,
        )


if __name__ == "__main__":
    main()
