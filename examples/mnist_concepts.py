"""Rules over concepts on the MNIST latent layer: units, principal directions and a sparse autoencoder's features.

Trains the small CNN of ``examples/mnist_latent.py`` (the paper's Task 4: the latent features are the 128 inputs of
its last linear layer) on 8,000 of the 10,000 MNIST test images in ``../shared/data`` (seeded 80/20 split), then
explains "the model predicts 7" at ``max_length=2`` three ways:

* on the 128 **units** (the paper's rules, ``z_44 >= ...``);
* on the top 16 **principal directions** of the latent activations (``concepts="pca", n_concepts=16``, fitted on
  the explained activations);
* on the 64 features of a **top-k sparse autoencoder** (``concepts="sae", n_concepts=64``: 8 active features per
  image, trained in torch on the same activations, seeded).

For each it prints the best rule set, its numbers on the training part and on the 2,000 held-out images, and its
verification by intervention on the held-out images (sufficiency, necessity and a random-concept control, method
``"resample"``): concepts are patched through the basis (``a' = decode(c') + (a - decode(c))``).

Run from the repository root (about a minute on 2 CPU cores; ``--quick`` is a smoke run)::

    python examples/mnist_concepts.py --data ../shared/data
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mnist_latent import SmallCNN, read_idx, train  # noqa: E402

from torch_amore import RegionalRuleExplainer  # noqa: E402

SEARCH = dict(max_length=2, min_support=4000 / 60000, n_grids=6, bin_strategy="kmeans", top_k=3, progress=False)


def report(name: str, explainer: RegionalRuleExplainer, x_train, x_test, digit: int, seed: int) -> None:
    """Explain, measure on the held-out images and verify the best rule set there; print one block."""
    t0 = time.perf_counter()
    explanation = explainer.explain(x_train, digit, batch_size=1000, **SEARCH)
    best = explanation.best
    held_out = explanation.evaluate(x_test)[0]
    row = explanation.verify(x_test, rule_sets=[best], n_controls=5, seed=seed).rows[0]
    facts = explanation.params.get("concepts")
    error = "" if facts is None or facts["reconstruction_error"] is None else facts["reconstruction_error"]["fvu"]
    basis = (
        ""
        if facts is None
        else f" ({facts['kind']}, K={facts['n_concepts']}"
        + (f", reconstruction error (FVU) {error:.3f})" if error != "" else ")")
    )
    print(f"{name}{basis}: {' AND '.join(r.format() for r in best.rules)}")
    print(
        f"  support {best.support}, confidence {best.confidence:.3f}, fitness {best.fitness:.3f}; held out: "
        f"confidence {held_out.confidence:.3f}, fitness {held_out.fitness:.3f}"
    )
    print(
        f"  sufficiency {row.sufficiency.value:.3f}, necessity {row.necessity.value:.3f} (control "
        f"{row.control_sufficiency.value:.3f}, {row.control_necessity.value:.3f}); {time.perf_counter() - t0:.1f} s"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder with the MNIST IDX .gz files")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="1 epoch on 4,000 images (a smoke test)")
    parser.add_argument("--digit", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    images = read_idx(args.data / "mnist-t10k-images-idx3-ubyte.gz")
    labels = read_idx(args.data / "mnist-t10k-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    y = torch.from_numpy(labels.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    train_idx, test_idx = order[:8000], order[8000:]
    epochs = args.epochs
    if args.quick:
        train_idx, epochs = train_idx[:4000], 1
    x_train, y_train, x_test = x[train_idx], y[train_idx], x[test_idx]
    model = SmallCNN()
    t0 = time.perf_counter()
    train(model, x_train, y_train, epochs=epochs, seed=args.seed)
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y[test_idx]).float().mean().item()
    seconds = time.perf_counter() - t0
    print(f"SmallCNN: {len(x_train)} images, {epochs} epoch(s) in {seconds:.1f} s, held-out accuracy {acc:.3f}")

    for name, concepts, k in (("units", None, None), ("PCA", "pca", 16), ("SAE", "sae", 64)):
        explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True, concepts=concepts, n_concepts=k)
        report(name, explainer, x_train, x_test, args.digit, args.seed)


if __name__ == "__main__":
    main()
