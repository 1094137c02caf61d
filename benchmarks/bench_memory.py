"""The up-front memory estimate against the measured peak of one ``extract_rules`` call, and the refusals under a set
address-space limit.

Each case runs in a fresh process: float32 uniform features with a planted two-feature region, the call's peak
extra resident memory (``VmHWM`` over ``VmRSS`` before, the peak reset first) and peak extra address space
(``VmPeak`` over ``VmSize`` before: what ``RLIMIT_AS`` counts) beside :func:`torch_amore.data.memory.estimate_memory`.
The estimate should be at least the larger peak (data that fits is never refused) and not far above it.

``--sweep`` runs N from 10**5 to 10**8 rows x 8 features under ``RLIMIT_AS`` set to ``--limit-mib`` above the
address space once torch is imported and the data made (the default: a 1.3 GB limit less torch's own ~600 MB), the
data as overlapping windows of one vector (4 bytes a row) up to 10**7 rows and a zero-stride view beyond, so that
mostly the search's memory counts: each case either finishes or ends in the library's ``MemoryError`` before any
heavy work (seconds to the refusal are printed).

Usage:
    python benchmarks/bench_memory.py             # the estimate-versus-peak table
    python benchmarks/bench_memory.py --sweep     # the RLIMIT_AS sweep
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASES = [  # (N, F, strategy, max_length, extra options)
    (100_000, 8, "beam", 2, {}),
    (1_000_000, 8, "beam", 2, {}),
    (4_000_000, 8, "beam", 2, {}),
    (1_000_000, 8, "beam", 3, {}),
    (1_000_000, 8, "paper", 2, {}),
    (1_000_000, 8, "exact", 2, {}),
    (1_000_000, 8, "beam", 2, {"bin_strategy": "kmeans"}),
    (200_000, 128, "beam", 2, {}),
    (200_000, 128, "paper", 3, {}),
    (1_000_000, 64, "beam", 2, {}),
    (100_000, 512, "beam", 2, {"n_grids": 100}),
    (300_000, 8, "paper", 2, {"n_grids": 500, "bin_strategy": "quantile"}),
    (300_000, 8, "beam", 2, {"n_grids": 2000, "bin_strategy": "quantile"}),
    (30_000, 8, "paper", 2, {"n_grids": 2000, "bin_strategy": "quantile"}),
    (100_000, 128, "paper", 2, {"n_grids": 300}),
    (100_000, 128, "beam", 2, {"n_grids": 200}),
]

_CHILD = r"""
import gc, json, resource, sys, time
def status(field):
    for line in open("/proc/self/status"):
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
n, F, strategy, ml, extra, limit, view = json.loads(sys.argv[1])
import torch
import torch_amore
from torch_amore.data.memory import estimate_memory
g = torch.Generator().manual_seed(0)
if view:  # little memory of its own: overlapping windows of one vector up to 10**7 rows, beyond a zero-stride view
    X = torch.rand(n + F, generator=g).as_strided((n, F), (1, 1)) if n <= 10**7 else torch.rand(1, F).expand(n, F)
    target = torch.arange(n) % 7 == 0 if n <= 10**7 else torch.zeros(1, dtype=torch.bool).expand(n)
else:
    X = torch.rand(n, F, generator=g)
    target = ((X[:, 0] > 0.7) & (X[:, 1] < 0.5)) | (torch.rand(n, generator=g) < 0.05)
gc.collect()
if limit:  # above what the process maps once torch is imported and the data made
    resource.setrlimit(resource.RLIMIT_AS, (status("VmSize") + limit, resource.RLIM_INFINITY))
with open("/proc/self/clear_refs", "w") as fh:
    fh.write("5")
vm, rss = status("VmSize"), status("VmRSS")
est = estimate_memory(X, n_grids=extra.get("n_grids", 10), strategy=strategy, max_length=ml,
                      bin_strategy=extra.get("bin_strategy", "uniform"))
t0 = time.perf_counter()
try:
    torch_amore.extract_rules(X, target, strategy=strategy, max_length=ml, **extra)
    err = None
except MemoryError as e:
    err = str(e)
print(json.dumps(dict(seconds=time.perf_counter() - t0, virt=status("VmPeak") - vm, rss=status("VmHWM") - rss,
                      est=est, err=err)))
"""


def run_case(case: tuple, limit: int = 0, view: bool = False) -> dict:
    """One case in a fresh process: its peaks, the estimate and the error (``None`` when it finished)."""
    proc = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([*case, limit, view])], capture_output=True,
                          text=True, timeout=1800)  # fmt: skip
    if proc.returncode != 0:
        return {"crash": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"rc {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table() -> None:
    print("| N x F | strategy | max_length | options | seconds | peak extra RSS | peak extra address space | "
          "estimate | estimate / larger peak |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for case in CASES:
        n, f, strategy, ml, extra = case
        r = run_case(case)
        if "crash" in r:
            print(f"| {n:,} x {f} | {strategy} | {ml} | {extra or ''} | crashed: {r['crash']} |")
            continue
        peak = max(r["virt"], r["rss"])
        print(
            f"| {n:,} x {f} | {strategy} | {ml} | {extra or ''} | {r['seconds']:.2f} | {r['rss'] / 2**20:.0f} MiB | "
            f"{r['virt'] / 2**20:.0f} MiB | {r['est'] / 2**20:.0f} MiB | {r['est'] / max(peak, 1):.2f} |"
        )


def sweep(limit_mib: int) -> None:
    print(f"RLIMIT_AS: {limit_mib} MiB above the address space with torch imported and X, a (N, 8) view, made")
    print("| N | outcome | seconds | estimate |")
    print("|---|---|---|---|")
    for n in (10**5, 3 * 10**5, 10**6, 2 * 10**6, 3 * 10**6, 5 * 10**6, 10**7, 3 * 10**7, 10**8):
        r = run_case((n, 8, "beam", 2, {}), limit=limit_mib << 20, view=True)
        if "crash" in r:
            print(f"| {n:,} | CRASH: {r['crash']} | | |")
            continue
        outcome = "finished" if r["err"] is None else "MemoryError: " + r["err"].split(";")[0]
        print(f"| {n:,} | {outcome} | {r['seconds']:.2f} | {r['est'] / 2**20:.0f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sweep", action="store_true", help="the RLIMIT_AS sweep instead of the table")
    parser.add_argument("--limit-mib", type=int, default=700, help="RLIMIT_AS above torch's address space (MiB)")
    args = parser.parse_args()
    sweep(args.limit_mib) if args.sweep else table()


if __name__ == "__main__":
    main()
