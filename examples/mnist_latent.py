"""The paper's MNIST task: rules on a CNN's 128-d latent layer for the digit 7, shown as images.

Trains the paper's small CNN (one convolutional layer, two linear layers; the latent features are the 128 inputs of
the last linear layer) on the 10,000 MNIST test images (a seeded 80/20 split: rules are extracted on the training
part and measured on the held-out part), explains "the model predicts 7" with AMORE (max_length=2, kmeans bins,
n_grids=6), prints the rule sets with support/confidence/fitness on both parts next to a depth-matched decision tree,
and saves two figures:

* ``mnist_rule_means.png`` -- the mean image of the samples satisfying each rule (the paper's MNIST figure);
* ``mnist_rule_pixels.png`` -- each rule's latent unit attributed to the pixels of a few held-out images (Captum's
  NeuronIntegratedGradients; the paper's MRI figure).

Run from the repository root (about a minute on 2 CPU cores; ``--quick`` for a ~20 s smoke run)::

    python examples/mnist_latent.py --data ../shared/data --out mnist_out
"""

from __future__ import annotations

import argparse
import gzip
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import torch_amore
from torch_amore import RegionalRuleExplainer


def read_idx(path: Path) -> np.ndarray:
    """An IDX file (the original MNIST format, gzip-compressed) as a numpy array."""
    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] != b"\x00\x00" or raw[2] != 0x08:
        raise ValueError(f"{path} is not an unsigned-byte IDX file (magic {raw[:4].hex()}).")
    ndim = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


class SmallCNN(nn.Module):
    """One convolutional layer and two linear layers; ``fc2``'s 128 inputs are the latent features."""

    def __init__(self, latent: int = 128) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, kernel_size=5)  # 28x28 -> 24x24
        self.fc1 = nn.Linear(16 * 12 * 12, latent)  # after 2x2 max pooling
        self.fc2 = nn.Linear(latent, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        z = F.relu(self.fc1(x.flatten(1)))
        return self.fc2(z)


def train(model: nn.Module, images: torch.Tensor, labels: torch.Tensor, *, epochs: int, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(images), generator=g)
        for i in range(0, len(images), 64):
            idx = order[i : i + 64]
            opt.zero_grad()
            F.cross_entropy(model(images[idx]), labels[idx]).backward()
            opt.step()
    model.eval()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder with the MNIST IDX .gz files")
    parser.add_argument("--out", type=Path, default=Path("mnist_out"), help="folder for the PNG figures")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="1 epoch on 4,000 images (a smoke test)")
    parser.add_argument("--digit", type=int, default=7)
    parser.add_argument("--min-support", type=float, default=4000 / 60000,
                        help="s_min as a fraction of the training part (the paper: 4000 of 60,000)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    torch.manual_seed(args.seed)

    images = read_idx(args.data / "mnist-t10k-images-idx3-ubyte.gz")
    labels = read_idx(args.data / "mnist-t10k-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]  # (10000, 1, 28, 28) in [0, 1]
    y = torch.from_numpy(labels.astype(np.int64))
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(args.seed))
    n_train = 8000
    train_idx, test_idx = order[:n_train], order[n_train:]
    epochs = args.epochs
    if args.quick:
        train_idx, epochs = train_idx[:4000], 1
    x_train, y_train, x_test, y_test = x[train_idx], y[train_idx], x[test_idx], y[test_idx]

    model = SmallCNN()
    t0 = time.perf_counter()
    train(model, x_train, y_train, epochs=epochs, seed=args.seed)
    with torch.no_grad():
        acc = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(f"trained SmallCNN on {len(x_train)} images, {epochs} epoch(s) in {time.perf_counter() - t0:.1f} s; "
          f"held-out accuracy {acc:.3f}")  # fmt: skip

    # --- rules on the latent layer (the 128 inputs of fc2) for "the model predicts 7"
    explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True)
    t0 = time.perf_counter()
    explanation = explainer.explain(x_train, args.digit, max_length=2, min_support=args.min_support, n_grids=6,
                                    bin_strategy="kmeans", top_k=3, batch_size=1000, progress=False)  # fmt: skip
    print(f"rule extraction: {time.perf_counter() - t0:.1f} s\n")
    print(explanation.format(max_rows=5))
    held_out = explanation.evaluate(x_test)
    print(f"\non the {len(x_test)} held-out images:")
    print(f"  {'#':>2}  {'support':>7}  {'confidence':>10}  {'fitness':>7}")
    shown = [explanation.rule_sets.index(rs) for rs in explanation.distinct()[:5]]  # the rows of the table above
    for i, m in enumerate((held_out[j] for j in shown), 1):
        print(f"  {i:>2}  {m.support:>7}  {m.confidence:>10.3f}  {m.fitness:>7.3f}")

    # the paper's baseline: a depth-matched decision tree on the same latent features (its Table of hyperparameters)
    tree = torch_amore.decision_tree_rules(explanation.features_matrix, explanation.subgroup, max_depth=2,
                                           min_samples_leaf=1000 / 60000, criterion="entropy",
                                           feature_names=explanation.feature_names,
                                           target_name=explanation.target_name)  # fmt: skip
    print(f"\ndecision tree (max_depth=2): {tree[0]}")

    # --- figures
    import matplotlib

    matplotlib.use("Agg")
    from torch_amore.report.plot import plot_rule_attributions, plot_rule_means

    args.out.mkdir(parents=True, exist_ok=True)
    best = explanation.best
    fig = plot_rule_means(x_train, explanation)
    fig.savefig(args.out / "mnist_rule_means.png", dpi=120, bbox_inches="tight")

    z_test = explainer.features_matrix(x_test)  # latent features of the held-out images
    inside = torch.nonzero(best.mask(z_test)).flatten()[:4]
    maps = explainer.attribute(x_test[inside], best, n_steps=32, batch_size=4)
    with torch.no_grad():
        predicted = model(x_test[inside]).argmax(1)
    fig = plot_rule_attributions(x_test[inside], maps, rules=best, features=z_test[inside],
                                 row_labels=[f"label {int(t)}, predicted {int(p)}"
                                             for t, p in zip(y_test[inside], predicted)],
                                 target_name=explanation.target_name)  # fmt: skip
    fig.savefig(args.out / "mnist_rule_pixels.png", dpi=120, bbox_inches="tight")
    print(f"\nsaved {args.out / 'mnist_rule_means.png'} and {args.out / 'mnist_rule_pixels.png'}")
    print(f"total time: {time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
