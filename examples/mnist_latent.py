"""The paper's Task 4 (MNIST digit 7): rules on a CNN's 128-d latent layer, next to the paper's table, and shown as
images.

Trains the paper's small CNN (one convolutional layer, two linear layers; the latent features are the 128 inputs of
the last linear layer) on the 10,000 MNIST test images, the only MNIST digits in ``../shared/data`` (the paper trained
on the 60,000 training digits): a seeded 80/20 split, rules extracted on the 8,000-image training part and measured on
the 2,000 held-out images. The subgroup is "the model predicts 7" (argmax, as in the paper). The paper's settings
(Supplementary Table "hyperparam"), with its counts scaled from 60,000 samples to the training part: AMORE
``max_length=2``, ``min_support`` 4000/60000 of the samples, ``n_grids=6``, kmeans bins; the decision tree
``max_depth=2``, ``min_samples_leaf`` 1000/60000 of the samples, entropy, no class weights. It prints the model's
summary (the paper's Supplementary Table "task_summary" columns) and the rule sets of ``strategy="paper"``, of the
default (beam) strategy and of the decision tree beside the paper's rows (Table "global results"); each method's rule
set is the one with the highest fitness among those with confidence >= 0.8 (else the highest fitness). It then saves
two figures of the default strategy's best rule set:

* ``mnist_rule_means.png`` -- the mean image of the samples satisfying each rule (the paper's MNIST figure);
* ``mnist_rule_pixels.png`` -- each rule's latent unit attributed to the pixels of a few held-out images (Captum's
  NeuronIntegratedGradients; the paper's MRI figure).

Run from the repository root (under a minute on 2 CPU cores; ``--no-figures`` skips the figures, ``--quick`` is a
~15 s smoke run)::

    python examples/mnist_latent.py --data ../shared/data --out mnist_out
"""

from __future__ import annotations

import argparse
import gzip
import math
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

import torch_amore
from torch_amore import RegionalRuleExplainer
from torch_amore.experiments.protocol import select_best

BOUND = 0.8  # the paper's confidence lower bound iota
#: The paper's settings (Supplementary Table "hyperparam"; counts of its 60,000 training digits) and its rows of
#: Table "global results": (rule, support, confidence, fitness) for AMORE and the decision tree.
PAPER_N = 60000
PAPER_AMORE = {"max_length": 2, "min_support": 4000, "n_grids": 6, "bin_strategy": "kmeans"}
PAPER_DT = {"max_depth": 2, "min_samples_leaf": 1000, "class_weight": None, "criterion": "entropy"}
PAPER_ROWS = {
    "AMORE": ("z_44 >= 6.223 AND 0 <= z_114 <= 3.105", 5340, 0.900, 0.682),
    "DT": ("z_44 > 6.429 AND z_114 <= 3.463", 5518, 0.891, 0.687),
}


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


def model_row(probs: torch.Tensor, y: torch.Tensor, probs_test: torch.Tensor, y_test: torch.Tensor, digit: int) -> str:
    """The paper's Supplementary Table "task_summary" columns for the class ``digit`` (one vs. rest)."""
    from torchmetrics.functional.classification import binary_auroc

    pred, true = probs.argmax(1) == digit, y == digit
    hits = int((pred & true).sum())
    auc = float(binary_auroc(probs[:, digit], true.long()))
    auc_test = float(binary_auroc(probs_test[:, digit], (y_test == digit).long()))
    return (
        f"training size {len(y)}, #(y*={digit})={int(true.sum())} #(y^={digit})={int(pred.sum())} "
        f"recall={hits / int(true.sum()):.3f} precision={hits / int(pred.sum()):.3f} AUC={auc:.3f} "
        f"AUC_test={auc_test:.3f}"
    )


def rows_table(ours: list[tuple[str, object]], test: tuple[torch.Tensor, torch.Tensor]) -> str:
    """The paper's two rows and ours as a markdown table (ours also measured on the held-out part)."""
    lines = [
        "| method | rule set | support | confidence | fitness | held-out support / confidence / fitness |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in ("AMORE", "DT"):
        rule, s, c, f = PAPER_ROWS[name]
        lines.append(f"| paper {name} | `{rule}` | {s} | {c:.3f} | {f:.3f} | |")
    for name, rs in ours:
        if rs is None:
            lines.append(f"| {name} | (no rule set) | | | | |")
            continue
        text = " AND ".join(r.format() for r in rs.rules)
        m = rs.evaluate(*test)
        lines.append(
            f"| {name} | `{text}` | {rs.support} | {rs.confidence:.3f} | {rs.fitness:.3f} | "
            f"{m.support} / {m.confidence:.3f} / {m.fitness:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data"), help="folder with the MNIST IDX .gz files")
    parser.add_argument("--out", type=Path, default=Path("mnist_out"), help="folder for the PNG figures")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="1 epoch on 4,000 images (a smoke test)")
    parser.add_argument("--no-figures", action="store_true", help="skip the two figures")
    parser.add_argument("--digit", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    # one thread and deterministic kernels: the printed numbers do not depend on the core count
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(args.seed)

    print(f"torch {torch.__version__}, CPU kernels {torch.backends.cpu.get_cpu_capability()}, 1 thread")
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
        probs, probs_test = F.softmax(model(x_train), 1), F.softmax(model(x_test), 1)
    acc = (probs_test.argmax(1) == y_test).float().mean().item()
    print(
        f"trained SmallCNN on {len(x_train)} images, {epochs} epoch(s) in {time.perf_counter() - t0:.1f} s; "
        f"held-out accuracy {acc:.3f}"
    )
    print("model: " + model_row(probs, y_train, probs_test, y_test, args.digit))

    # --- rules on the latent layer (the 128 inputs of fc2) for "the model predicts 7", the paper's settings scaled
    n = len(x_train)
    amore = dict(PAPER_AMORE, min_support=PAPER_AMORE["min_support"] / PAPER_N)
    leaf = PAPER_DT["min_samples_leaf"] / PAPER_N
    print(
        f"AMORE: max_length=2, min_support={amore['min_support']:.4f} of {n} ({math.ceil(amore['min_support'] * n)}), "
        f"n_grids=6, kmeans; decision tree: max_depth=2, min_samples_leaf={leaf:.4f} of {n} ({math.ceil(leaf * n)}), "
        "entropy, class_weight=None"
    )
    explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True)
    ours, explanation = [], None
    for strategy in ("paper", "beam"):
        t0 = time.perf_counter()
        explanation = explainer.explain(
            x_train, args.digit, strategy=strategy, top_k=3, batch_size=1000, progress=False, **amore
        )
        name = 'torch_amore strategy="paper"' if strategy == "paper" else "torch_amore default (beam)"
        ours.append((name, select_best(explanation.rule_sets, BOUND)))
        print(f"{name}: {len(explanation.rule_sets)} rule sets in {time.perf_counter() - t0:.1f} s")
    z, subgroup = explanation.features_matrix, explanation.subgroup
    dt = torch_amore.decision_tree_search(
        z,
        subgroup,
        max_depth=PAPER_DT["max_depth"],
        min_samples_leaf=leaf,
        criteria=PAPER_DT["criterion"],
        class_weights=[PAPER_DT["class_weight"]],
        confidence_lower_bound=BOUND,
        feature_names=explanation.feature_names,
        target_name=explanation.target_name,
    )
    ours.append(("torch_amore decision tree", dt.best))
    with torch.no_grad():
        z_test = explainer.features_matrix(x_test)  # latent features of the held-out images
    test = (z_test, probs_test.argmax(1) == args.digit)
    print(f"subgroup: {int(subgroup.sum())} of {n} training images ({int(test[1].sum())} of {len(x_test)} held out)\n")
    print(rows_table(ours, test))
    print("\nthe default strategy's rule sets, as the explainer shows them:")
    print(explanation.format(max_rows=5))
    held_out = explanation.evaluate(x_test)
    print(f"on the {len(x_test)} held-out images:")
    print(f"  {'#':>2}  {'support':>7}  {'confidence':>10}  {'fitness':>7}")
    for i, _ in explanation.shown()[:5]:  # the rows of the table above, numbered as there: rule_sets[i - 1] is #i
        m = held_out[i - 1]
        print(f"  {i:>2}  {m.support:>7}  {m.confidence:>10.3f}  {m.fitness:>7.3f}")

    if not args.no_figures:
        figures(explainer, explanation, x_train, x_test, y_test, z_test, model, args.out)
    print(f"total time: {time.perf_counter() - start:.1f} s")


def figures(explainer, explanation, x_train, x_test, y_test, z_test, model, out: Path) -> None:
    """The rule means and the pixel attributions of the default strategy's best rule set."""
    import matplotlib

    matplotlib.use("Agg")
    from torch_amore.report.plot import plot_rule_attributions, plot_rule_means

    out.mkdir(parents=True, exist_ok=True)
    best = explanation.best
    fig = plot_rule_means(x_train, explanation)
    fig.savefig(out / "mnist_rule_means.png", dpi=120, bbox_inches="tight")

    inside = torch.nonzero(best.mask(z_test)).flatten()[:4]
    maps = explainer.attribute(x_test[inside], best, n_steps=32, batch_size=4)
    with torch.no_grad():
        predicted = model(x_test[inside]).argmax(1)
    labels = [f"label {int(t)}, predicted {int(p)}" for t, p in zip(y_test[inside], predicted)]
    fig = plot_rule_attributions(
        x_test[inside],
        maps,
        rules=best,
        features=z_test[inside],
        row_labels=labels,
        target_name=explanation.target_name,
    )
    fig.savefig(out / "mnist_rule_pixels.png", dpi=120, bbox_inches="tight")
    print(f"\nsaved {out / 'mnist_rule_means.png'} and {out / 'mnist_rule_pixels.png'}")


if __name__ == "__main__":
    main()
