"""How far to trust a rule: the worked examples of docs/trust.md, on noise and on a planted box.

Both data sets are 5,000 x 128 ReLU-Gaussian features (a latent layer's shape). On the first the target is drawn
independently of the features (10 % of the rows); on the second it is 0.8 likely inside a box on features 0 and 1
that holds 5 % of the rows, and 0.1 likely elsewhere. The same search, ``max_length=2, min_support=50``, with 30 % of
the rows held out, P seeded permutations and B half-samples; prints the verdict and the best rule sets, each search's
warnings below it (``UserWarning: ...``).

    python examples/trust.py [--only {noise,box}] [--permutations 99] [--stability 20] [--seed 0]
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable

import numpy as np
import torch

import torch_amore
from torch_amore.rules import verdict


def data(planted: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    X = np.maximum(rng.standard_normal((5000, 128)), 0)
    u = rng.random(5000)
    if planted:
        inside = (X[:, 0] > 0.7601) & (X[:, 1] > 0.7601)  # 5 % of the rows
        target = np.where(inside, u < 0.8, u < 0.1)
    else:
        target = u < 0.1
    return torch.from_numpy(X), torch.from_numpy(target)


def caught_warnings(search: Callable[[], list]) -> tuple[list, list[str]]:
    """What ``search()`` returns and the lines of the warnings it gave (``UserWarning: ...``)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        found = search()
    return found, [f"{w.category.__name__}: {w.message}" for w in caught]


def show(title: str, planted: bool, args: argparse.Namespace) -> None:
    X, target = data(planted, args.seed)
    print(f"== {title}: {int(target.sum())} of {len(target)} rows in the target")
    plain, said = caught_warnings(lambda: torch_amore.extract_rules(X, target, max_length=2, min_support=50))
    print(f"without evidence: {plain[0]}")
    print("".join(f"{line}\n" for line in said), end="")
    found, said = caught_warnings(
        lambda: torch_amore.extract_rules(
            X,
            target,
            max_length=2,
            min_support=50,
            holdout=0.3,
            permutations=args.permutations,
            stability=args.stability,
            seed=args.seed,
        )
    )
    print(f"verdict: {verdict(found, permutations=args.permutations)}")
    for rs in found[:3]:
        print(rs)
    print("".join(f"{line}\n" for line in said), end="")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", choices=("noise", "box"), help="run one of the two examples (default: both)")
    parser.add_argument("--permutations", type=int, default=99)
    parser.add_argument("--stability", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.only in (None, "noise"):
        show("noise", False, args)
    if args.only in (None, "box"):
        show("planted box", True, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
