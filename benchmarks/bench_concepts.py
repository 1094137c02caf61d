"""The cost of concept bases (issue 43, criterion 6): fitting a sparse autoencoder, and encoding concepts in an
explain call.

Parts (``--parts``):

- ``sae``: :class:`torch_amore.concepts.SparseAutoencoderBasis` with K = 256 features (default settings: top_k 32,
  2,000 Adam steps of 256 rows) fitted on 10,000 x 128 activations, the ReLU'd layer of a random 2-layer network
  (the budget: under 30 s on one CPU thread). Reports seconds (median of ``--repeat``), FVU and dead features.
- ``encode``: an explain call on a 10,000 x 128 latent layer (an MLP 32 -> 128 -> ReLU -> 2, seeded;
  ``RegionalRuleExplainer(model, model[1]).explain(X, 1, max_length=2)``) against the extra work that K = 128
  :class:`torch_amore.concepts.Directions` add: ``encode`` of the layer's activations in the explainer's batches of
  256, and the search on the 128 concept columns instead of the 128 units. The estimate of an explain call over
  concepts is ``explain - search(units) + search(concepts) + encode``; the budget is 1.2 times the explain call.
  Measured directly as well: the explain call with ``concepts=Directions(I)`` (the units themselves as concepts, so
  the same search: the difference is encoding alone) and with ``concepts=Directions(W)`` (a random rotation).
  Medians of ``--repeat``, the calls alternating, in one process.

Measured (2-core CPU shared with other jobs, load average 5-8, one thread, ``--repeat 3``): the SAE fit 16.9 s
(median; single runs 9.1-24.3 s as the load varied; FVU 0.16, no dead features), within 30 s; encoding K = 128
directions 11 ms against an explain call of 0.31 s (3.7 %; the estimate of the explain call over concepts 0.96 times
the call over units, the search on 128 concept columns as fast as on 128 units), within 1.2. The explain calls
themselves (``--parts encode --repeat 5``, load average 6-7, 2026-11-27): 0.221 s on units, 0.237 s with the
identity basis (1.07x: encoding alone), 0.246 s with the rotation (1.11x).

Usage::

    OMP_NUM_THREADS=1 python benchmarks/bench_concepts.py --repeat 3
    python benchmarks/bench_concepts.py --parts sae --device cuda
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from torch_amore import RegionalRuleExplainer, extract_rules
from torch_amore.concepts import Directions, SparseAutoencoderBasis

N, D, K_SAE, K_DIRECTIONS, BATCH = 10_000, 128, 256, 128, 256


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn, device: torch.device) -> tuple[float, object]:
    _sync(device)
    t0 = time.perf_counter()
    out = fn()
    _sync(device)
    return time.perf_counter() - t0, out


def bench_sae(repeat: int, device: torch.device) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(N, 64, generator=g)
    a = torch.relu(x @ torch.randn(64, D, generator=g) / 8).to(device)
    seconds, fitted = [], None
    for _ in range(repeat):
        t, fitted = _timed(lambda: SparseAutoencoderBasis(K_SAE).fit(a), device)
        seconds.append(t)
    return {
        "part": "sae",
        "device": str(device),
        "shape": [N, D],
        "n_concepts": K_SAE,
        "top_k": fitted.top_k,
        "steps": fitted.steps,
        "seconds": statistics.median(seconds),
        "all_seconds": seconds,
        "fvu": fitted.fvu,
        "dead_fraction": fitted.dead_fraction,
        "budget_seconds": 30.0,
    }


def bench_encode(repeat: int, device: torch.device) -> dict:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, D), torch.nn.ReLU(), torch.nn.Linear(D, 2)).to(device).eval()
    X = torch.randn(N, 32, generator=torch.Generator().manual_seed(1)).to(device)
    with torch.no_grad():
        acts = model[1](model[0](X))
        target = model(X).argmax(1) == 1
    W, _ = torch.linalg.qr(torch.randn(D, K_DIRECTIONS, generator=torch.Generator().manual_seed(2)))
    basis = Directions(W.to(device))
    options = {"max_length": 2}
    explainer = RegionalRuleExplainer(model, model[1])
    # the identity basis gives the units themselves as concepts (x @ I == x exactly): the same search, so the
    # difference of the two explain calls is the cost of encoding alone; the rotation is a realistic basis
    identity = RegionalRuleExplainer(model, model[1], concepts=Directions(torch.eye(D, device=device)))
    rotated = RegionalRuleExplainer(model, model[1], concepts=basis)

    def encode() -> torch.Tensor:
        return torch.cat([basis.encode(rows) for rows in acts.split(BATCH)])

    concepts = encode()
    calls = {
        "explain": lambda: explainer.explain(X, 1, batch_size=BATCH, progress=False, **options),
        "search_units": lambda: extract_rules(acts, target, **options),
        "search_concepts": lambda: extract_rules(concepts, target, **options),
        "encode": encode,
        "explain_identity_concepts": lambda: identity.explain(X, 1, batch_size=BATCH, progress=False, **options),
        "explain_rotated_concepts": lambda: rotated.explain(X, 1, batch_size=BATCH, progress=False, **options),
    }
    for call in calls.values():  # warm up: first calls pay for lazy imports and allocations
        call()
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            times[name].append(_timed(call, device)[0])
    med = {name: statistics.median(t) for name, t in times.items()}
    with_concepts = med["explain"] - med["search_units"] + med["search_concepts"] + med["encode"]
    return {
        "part": "encode",
        "device": str(device),
        "shape": [N, D],
        "n_concepts": K_DIRECTIONS,
        **{f"{name}_seconds": value for name, value in med.items()},
        "encode_share_of_explain": med["encode"] / med["explain"],
        "explain_with_concepts_estimate_seconds": with_concepts,
        "ratio": with_concepts / med["explain"],
        "identity_ratio": med["explain_identity_concepts"] / med["explain"],
        "rotated_ratio": med["explain_rotated_concepts"] / med["explain"],
        "budget_ratio": 1.2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--parts", nargs="+", default=["sae", "encode"], choices=["sae", "encode"])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch threads on the CPU (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    for part in args.parts:
        result = bench_sae(args.repeat, device) if part == "sae" else bench_encode(args.repeat, device)
        print(json.dumps({"threads": args.threads, **result}), flush=True)


if __name__ == "__main__":
    main()
