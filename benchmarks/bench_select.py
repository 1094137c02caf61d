"""Time, memory and outcome of :func:`torch_amore.select_features` (default options) on models it is meant for.

Cases (``--cases``; each runs in a fresh subprocess, one after the other):

- ``dense14`` ... ``dense30``: a dense linear model ``sigmoid(w . x)`` on 14, 20, 24, 30 standard-normal inputs,
  every input relevant (5,000 samples; class = prediction > 0.5).
- ``mlp2000``: a Tanh MLP (2,000-32-1) whose first layer weighs 3 inputs with N(0, 1) weights and the other 1,997 with
  N(0, 0.01^2) weights, as a trained network leaves them (4,000 samples; class = output above its median).
- ``only4of3000``: an MLP that reads only 4 of 3,000 inputs (the output depends on exactly those 4).
- ``mlp4of3000``: as ``mlp2000`` with 4 relevant of 3,000 inputs (small non-zero weights on the others).
- ``latent6of20000``: 10,000 samples of 32 inputs, encoder ``Linear(32, 20000) -> ReLU`` and a head reading 6 of the
  20,000 units; features = the ReLU's units (``layer="1"``), n_test_per_class=100.
- ``latentnoisy6of20000``: the same head with small weights (N(0, 0.001^2)) on the other 19,994 units.
- ``breast_cancer``: a 30-16-1 Tanh MLP trained on scikit-learn's bundled breast-cancer data (569 samples, 30
  inputs); also times ``RegionalRuleExplainer(model).explain(X, 1, labels=y, select_features=True)``.

Per case: seconds and peak memory of ``select_features`` (resident memory sampled every millisecond by a thread,
minus the memory before the call), j_th, the features selected, exact or fallback, whether the selection holds only
relevant features and at least two of them, and ``extract_rules`` (max_length=2, min_support=0.05, on the class the
model predicts) on the selected features vs on all of them: seconds and best fitness.

Usage::

    python benchmarks/bench_select.py                       # all cases
    python benchmarks/bench_select.py --cases dense24 dense30 --no-extract
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time

CASES = [
    "dense14",
    "dense20",
    "dense24",
    "dense30",
    "mlp2000",
    "only4of3000",
    "mlp4of3000",
    "latent6of20000",
    "latentnoisy6of20000",
    "breast_cancer",
]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class _Peak:
    """Peak resident memory (MiB above the start) while the ``with`` block runs, and its wall time."""

    def __enter__(self) -> _Peak:
        self.before = _rss_mib()
        self.peak = self.before
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        self.t0 = time.perf_counter()
        return self

    def _sample(self) -> None:
        while not self._done.is_set():
            self.peak = max(self.peak, _rss_mib())
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self.t0
        self._done.set()
        self._thread.join()
        self.mib = max(self.peak, _rss_mib()) - self.before


def _mlp(n_in: int, relevant: list[int], noise: float, seed: int = 0):
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(seed)
    model = nn.Sequential(nn.Linear(n_in, 32), nn.Tanh(), nn.Linear(32, 1))
    with torch.no_grad():
        w = torch.randn(32, n_in, generator=g) * noise
        w[:, relevant] = torch.randn(32, len(relevant), generator=g)
        model[0].weight.copy_(w)
        model[0].bias.zero_()
        model[2].weight.copy_(torch.randn(1, 32, generator=g))
        model[2].bias.zero_()
    return model.eval()


def _problem(case: str) -> dict:
    """Model, inputs, labels, relevant features, options for select_features and the feature matrix for rules."""
    import torch
    from torch import nn

    g = torch.Generator().manual_seed(1)
    if case.startswith("dense"):
        d = int(case[5:])
        model = nn.Sequential(nn.Linear(d, 1), nn.Sigmoid())
        with torch.no_grad():
            model[0].weight.copy_(torch.randn(1, d, generator=g))
            model[0].bias.zero_()
        X = torch.randn(5000, d, generator=g)
        with torch.no_grad():
            labels = model(X).squeeze(1) > 0.5
        return {"model": model.eval(), "X": X, "labels": labels, "relevant": list(range(d)), "opts": {}, "F": X}
    if case in ("mlp2000", "mlp4of3000", "only4of3000"):
        n_in, relevant = (2000, [17, 901, 1642]) if case == "mlp2000" else (3000, [5, 100, 2000, 2999])
        if case == "only4of3000":

            class Only(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.mlp = _mlp(len(relevant), list(range(len(relevant))), 0.0)

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    return self.mlp(x[:, relevant])

            model = Only().eval()
        else:
            model = _mlp(n_in, relevant, 0.01)
        X = torch.randn(4000, n_in, generator=g)
        with torch.no_grad():
            out = model(X).squeeze(1)
        labels = out > out.median()
        return {"model": model, "X": X, "labels": labels, "relevant": relevant, "opts": {}, "F": X}
    if case.startswith("latent"):
        relevant = [3, 4321, 8765, 12000, 15555, 19999]
        enc = nn.Linear(32, 20000)
        head = nn.Linear(20000, 1)
        with torch.no_grad():
            enc.weight.copy_(torch.randn(20000, 32, generator=g) / 32**0.5)
            enc.bias.zero_()
            w = torch.randn(1, 20000, generator=g) * (0.001 if "noisy" in case else 0.0)
            w[0, relevant] = torch.randn(len(relevant), generator=g).sign() * (
                1.0 + torch.rand(len(relevant), generator=g)
            )
            head.weight.copy_(w)
            head.bias.zero_()
        model = nn.Sequential(enc, nn.ReLU(), head).eval()
        X = torch.randn(10000, 32, generator=g)
        with torch.no_grad():
            out = model(X).squeeze(1)
        labels = out > out.median()
        return {"model": model, "X": X, "labels": labels, "relevant": relevant, "opts": {"layer": "1"}, "F": None}
    if case == "breast_cancer":
        from sklearn.datasets import load_breast_cancer

        data = load_breast_cancer()
        X = torch.tensor(data.data, dtype=torch.float32)
        X = (X - X.mean(0)) / X.std(0)
        y = torch.tensor(data.target)
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(30, 16), nn.Tanh(), nn.Linear(16, 1))
        opt = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(300):
            opt.zero_grad()
            loss = nn.functional.binary_cross_entropy_with_logits(model(X).squeeze(1), y.float())
            loss.backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            labels = model(X).squeeze(1) > 0
        names = [str(n) for n in data.feature_names]
        return {"model": model, "X": X, "labels": labels, "relevant": None, "opts": {"feature_names": names}, "F": X}
    raise ValueError(f"unknown case {case!r}")


def _rules(F, target, features) -> tuple[float, float]:
    from torch_amore import extract_rules

    t0 = time.perf_counter()
    rule_sets = extract_rules(F, target, features=features, max_length=2, min_support=0.05)
    return time.perf_counter() - t0, (rule_sets[0].fitness if rule_sets else float("nan"))


def _child(case: str, extract: bool, threads: int) -> dict:
    import warnings

    import torch

    from torch_amore import select_features

    if threads:
        torch.set_num_threads(threads)
    p = _problem(case)
    model, X, labels = p["model"], p["X"], p["labels"]
    select_features(model, X[:50], labels[:50].long() * 0 + torch.arange(50) % 2, n_test_per_class=2, n_steps=2)
    with warnings.catch_warnings(record=True) as caught, _Peak() as peak:
        warnings.simplefilter("always")
        sel = select_features(model, X, labels, **p["opts"])
    with warnings.catch_warnings():  # the threshold scan and itemset search alone, on the same J
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        select_features(importance=sel.importance)
        mine_s = time.perf_counter() - t0
    out = {
        "case": case,
        "mine_s": mine_s,
        "stopped_by": None if sel.exact else sel.reason.split("stopped at ")[1].split("=")[0],
        "shape": list(sel.importance.shape),
        "seconds": peak.seconds,
        "peak_MiB": peak.mib,
        "threshold": sel.threshold,
        "features": list(sel.features),
        "left_out": [n for n in p["opts"].get("feature_names", []) if n not in sel.names],
        "exact": sel.exact,
        "n_examined": sel.n_examined,
        "reason": sel.reason,
        "warnings": len([w for w in caught if "select_features" in str(w.message)]),
    }
    rel = p["relevant"]
    if rel is not None:
        hits = set(sel.features) & set(rel)
        out["only_relevant"] = set(sel.features) <= set(rel)
        out["relevant_found"] = f"{len(hits)}/{len(rel)}"
    if case == "breast_cancer":
        from torch_amore import RegionalRuleExplainer

        y = labels.long()
        with _Peak() as ex:
            expl = RegionalRuleExplainer(model).explain(X, 1, labels=y, select_features=True, progress=False)
        out["explain_seconds"] = ex.seconds
        out["explain_features"] = list(expl.features)
    if extract:
        F = p["F"]
        if F is None:  # latent: the layer's activations
            with torch.no_grad():
                F = model[1](model[0](X))
        target = labels
        out["rules_selected_s"], out["fitness_selected"] = _rules(F, target, sel.features)
        if F.shape[1] <= 5000:
            out["rules_all_s"], out["fitness_all"] = _rules(F, target, None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=CASES, choices=CASES)
    parser.add_argument("--no-extract", action="store_true", help="skip extract_rules with / without the selection")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default)")
    parser.add_argument("--child", nargs=3, metavar=("CASE", "EXTRACT", "THREADS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, extract, threads = args.child
        print(json.dumps(_child(case, extract == "1", int(threads))))
        return
    print(f"torch threads {args.threads or 'default'}, {os.cpu_count()} CPUs", flush=True)
    for case in args.cases:
        cmd = [sys.executable, __file__, "--child", case, "0" if args.no_extract else "1", str(args.threads)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"{case}: FAILED\n{proc.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        feats = r["features"] if len(r["features"]) <= 12 else f"{len(r['features'])} features"
        how = "exact" if r["exact"] else f"FALLBACK at {r['stopped_by']}"
        line = (
            f"{case:20} J {r['shape'][0]}x{r['shape'][1]:<6} {r['seconds']:7.2f} s (scan+search {r['mine_s']:.2f} s) "
            f"{r['peak_MiB']:7.1f} MiB  j_th {r['threshold']:.4g}  {how} ({r['n_examined']} itemsets, "
            f"{r['warnings']} warning)  selected {feats}"
        )
        if r["left_out"]:
            line += f" (left out: {r['left_out']})"
        if "relevant_found" in r:
            line += f"  relevant {r['relevant_found']} only_relevant={r['only_relevant']}"
        if "rules_selected_s" in r:
            line += f"\n{'':20} rules on selection {r['rules_selected_s']:.2f} s fitness {r['fitness_selected']:.3f}"
            if "rules_all_s" in r:
                line += f" | on all features {r['rules_all_s']:.2f} s fitness {r['fitness_all']:.3f}"
        if "explain_seconds" in r:
            line += f"\n{'':20} explain(select_features=True) {r['explain_seconds']:.2f} s"
        print(line, flush=True)


if __name__ == "__main__":
    main()
