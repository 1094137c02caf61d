"""Task loaders of the search-quality benchmark (``bench_quality.py``) and its test (``tests/test_quality.py``).

Each loader returns a :class:`Task`: the features, the boolean target subgroup and the paper's settings for the row
(``max_length``, ``min_support``, ``n_grids``, ``bin_strategy``). Real data are read in place from ``../shared/data``
(or ``$TORCH_AMORE_DATA``); the slow derived features (RDKit descriptors, the MNIST latent layer of a quickly
trained CNN) are cached as ``.npz`` files in a cache folder outside the repository (``$TORCH_AMORE_CACHE`` or
``~/.cache/torch_amore``).

Rows:

- ``diabetes_l1`` / ``diabetes_l3``: the paper's diabetes task (``diabetes_paper_task.npz``, target: the model's
  positive predictions), max_length 1 (s_min 2000, 7 uniform grids) and 3 (s_min 1000, 10 k-means grids).
- ``mnist7``: "the CNN predicts 7" on the 128-d latent layer of ``examples/mnist_latent.py``'s SmallCNN trained for
  one epoch on 8,000 MNIST test images (max_length 2, 6 k-means grids, s_min = 5% of N).
- ``tox21_ar`` / ``tox21_ahr``: the label 1 of NR-AR / NR-AhR among the labelled molecules of ``tox21.csv``, on the
  finite RDKit descriptors within float32's range (max_length 2, 10 k-means grids, s_min 150).
- ``box_small`` / ``box``: a planted axis-aligned box on two Gaussian features (plus label noise and a narrow, pure
  decoy spike on a third feature that attracts the ratio-driven search); 5,000 x 20 and 100,000 x 1,000.
- ``multimode``: the paper's Fig. 3b situation. The target lives in two boxes of different size on features 0 and 1
  (so feature 0's ratio histogram has two modes), plus a narrow spike of high ratio beside the smaller mode.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("TORCH_AMORE_DATA", ROOT.parent / "shared" / "data"))  # the shared data, or elsewhere


def cache_dir() -> Path:
    """Folder for derived features (outside the repository)."""
    path = Path(os.environ.get("TORCH_AMORE_CACHE", Path.home() / ".cache" / "torch_amore"))
    path.mkdir(parents=True, exist_ok=True)
    return path


@dataclass
class Task:
    """One benchmark row: data, target subgroup and the search settings shared by all methods."""

    name: str
    X: np.ndarray  # (N, F) float32 or float64
    target: np.ndarray  # (N,) bool
    feature_names: list[str]
    max_length: int
    min_support: int
    n_grids: int
    bin_strategy: str
    feature_types: list[str] | None = None
    min_confidence: float | None = None  # when set, every method must return a rule set at least this confident
    about: str = ""
    planted: dict = field(default_factory=dict)  # synthetic rows: the planted region, for reference

    @property
    def shape(self) -> tuple[int, int]:
        return self.X.shape


# --------------------------------------------------------------------------------------------------- real data


def diabetes(max_length: int) -> Task:
    """The paper's diabetes task; ``max_length`` 1 or 3 with the paper's settings for each."""
    with np.load(DATA / "diabetes_paper_task.npz") as d:
        X, target = d["X"].astype(np.float64), d["target"].astype(bool)
        names, types = [str(s) for s in d["feature_names"]], [str(s) for s in d["feature_types"]]
    if max_length == 1:
        settings = dict(min_support=2000, n_grids=7, bin_strategy="uniform")
    else:
        settings = dict(min_support=1000, n_grids=10, bin_strategy="kmeans")
    return Task(f"diabetes_l{max_length}", X, target, names, max_length, feature_types=types,
                about="model-predicted diabetes, 70,000 x 15", **settings)  # fmt: skip


def _mnist_latent(epochs: int = 1, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """128-d latent features (fc2's inputs) and predicted digits of SmallCNN on 8,000 MNIST test images (cached)."""
    path = cache_dir() / f"bench_mnist_latent_e{epochs}_s{seed}.npz"
    if path.exists():
        with np.load(path) as d:
            return d["Z"], d["pred"]
    import torch

    sys.path.insert(0, str(ROOT / "examples"))
    try:
        from mnist_latent import SmallCNN, read_idx, train
    finally:
        sys.path.pop(0)
    torch.manual_seed(seed)
    images = read_idx(DATA / "mnist-t10k-images-idx3-ubyte.gz")
    labels = read_idx(DATA / "mnist-t10k-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.astype(np.float32) / 255.0)[:, None]
    y = torch.from_numpy(labels.astype(np.int64))
    idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(seed))[:8000]
    model = SmallCNN()
    train(model, x[idx], y[idx], epochs=epochs, seed=seed)
    latent: list[torch.Tensor] = []
    handle = model.fc2.register_forward_hook(lambda m, inp, out: latent.append(inp[0].detach()))
    with torch.no_grad():
        pred = torch.cat([model(x[idx[i : i + 1000]]).argmax(1) for i in range(0, len(idx), 1000)])
    handle.remove()
    Z, pred_np = torch.cat(latent).numpy().astype(np.float32), pred.numpy()
    np.savez(path, Z=Z, pred=pred_np)
    return Z, pred_np


def mnist7() -> Task:
    Z, pred = _mnist_latent()
    return Task("mnist7", Z, pred == 7, [f"z_{i}" for i in range(Z.shape[1])], 2, int(round(0.05 * len(Z))), 6,
                "kmeans", about="CNN predicts 7, 128-d latent, 8,000 images")  # fmt: skip


def _descriptors(smiles: list[str]) -> np.ndarray:
    from rdkit import Chem, RDLogger
    from rdkit.Chem import Descriptors

    RDLogger.DisableLog("rdApp.*")
    names = [n for n, _ in Descriptors.descList]
    out = np.full((len(smiles), len(names)), np.nan)
    for i, s in enumerate(smiles):
        mol = Chem.MolFromSmiles(s)
        if mol is not None:
            d = Descriptors.CalcMolDescriptors(mol)
            out[i] = [d.get(n, np.nan) for n in names]
    return out


def _tox21_descriptors() -> tuple[np.ndarray, list[str], object]:
    """RDKit descriptors of all molecules of tox21.csv (cached; computed on 2 processes, a few minutes)."""
    import pandas as pd
    from rdkit.Chem import Descriptors

    table = pd.read_csv(DATA / "tox21.csv", skiprows=1, na_values=["N/A"], skipinitialspace=True)
    table.columns = [c.strip().lstrip("#") for c in table.columns]
    names = [n for n, _ in Descriptors.descList]
    path = cache_dir() / "bench_tox21_rdkit_descriptors.npz"
    if path.exists():
        with np.load(path) as d:
            if [str(s) for s in d["names"]] == names and len(d["D"]) == len(table):
                return d["D"], names, table
    from concurrent.futures import ProcessPoolExecutor

    smiles = [str(s).strip() for s in table["smiles"]]
    parts = [smiles[i : i + 500] for i in range(0, len(smiles), 500)]
    with ProcessPoolExecutor(max_workers=2) as pool:
        D = np.concatenate(list(pool.map(_descriptors, parts)))
    np.savez(path, D=D, names=np.array(names))
    return D, names, table


def tox21(assay: str) -> Task:
    """Label 1 of ``assay`` ("NR-AR" or "NR-AhR") among its labelled molecules, on the finite RDKit descriptors."""
    D, names, table = _tox21_descriptors()
    labelled = table[assay].notna().to_numpy()
    D = D[labelled]
    # finite, non-constant, and within float32's range (scikit-learn's trees cast to float32; this drops Ipc)
    finite = np.isfinite(D).all(0) & (np.nanstd(D, 0) > 0) & (np.abs(D).max(0, initial=0.0) < 1e30)
    X = D[:, finite]
    target = table[assay].to_numpy()[labelled] == 1
    short = {"NR-AR": "ar", "NR-AhR": "ahr"}[assay]
    return Task(f"tox21_{short}", X, target, [n for n, k in zip(names, finite) if k], 2, 150, 10, "kmeans",
                about=f"{assay} label 1, {X.shape[0]:,} molecules x {X.shape[1]} RDKit descriptors")  # fmt: skip


# ---------------------------------------------------------------------------------------------- synthetic data


def planted_box(n: int = 100_000, n_features: int = 1000, *, seed: int = 0, name: str = "box") -> Task:
    """An axis-aligned box on two Gaussian features (target rate 0.9 inside, 0.03 outside), and a decoy.

    The decoy is a narrow spike on a third feature: the top 0.4% of its values are all in the target. Its ratio peak
    is the highest of all grids, so the paper's ratio-driven search starts there.
    """
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, n_features), dtype=np.float32)
    f0, f1, decoy = n_features // 7, (3 * n_features) // 5, n_features - 2
    box = (X[:, f0] >= 0.3) & (X[:, f0] < 1.8) & (X[:, f1] >= -1.2) & (X[:, f1] < 0.4)
    u = rng.random(n)
    target = np.where(box, u < 0.9, u < 0.03)
    spike = X[:, decoy] >= np.quantile(X[:, decoy], 0.996)
    target |= spike
    planted = {"box": {f0: (0.3, 1.8), f1: (-1.2, 0.4)}, "decoy": decoy}
    return Task(name, X, target, [f"x{i}" for i in range(n_features)], 2, max(100, n // 50), 10, "uniform",
                about=f"planted box on x{f0}, x{f1} + decoy spike on x{decoy}, {n:,} x {n_features:,} Gaussian",
                planted=planted)  # fmt: skip


def multimode(n: int = 20_000, n_noise: int = 8, *, seed: int = 1) -> Task:
    """Fig. 3b of the paper: feature 0's ratio histogram has two modes; the broader one holds the better region.

    Two target boxes on (x0, x1): a large one at x0 in [0.4, 2.2), x1 in [-1.0, 1.2) and a smaller one at x0 in
    [-2.2, -1.1), x1 in [0.2, 1.6) (target rate 0.85 inside, 0.04 outside). Beside the small mode, x0 in
    [-2.6, -2.3) is fully in the target: the sharpest ratio peak, but little mass. The rest are uniform noise features.
    """
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal(n) * 1.4
    x1 = rng.standard_normal(n)
    noise = rng.random((n, n_noise))
    big = (x0 >= 0.4) & (x0 < 2.2) & (x1 >= -1.0) & (x1 < 1.2)
    small = (x0 >= -2.2) & (x0 < -1.1) & (x1 >= 0.2) & (x1 < 1.6)
    u = rng.random(n)
    target = np.where(big | small, u < 0.85, u < 0.04) | ((x0 >= -2.6) & (x0 < -2.3))
    X = np.column_stack([x0, x1, noise])
    planted = {"big": {0: (0.4, 2.2), 1: (-1.0, 1.2)}, "small": {0: (-2.2, -1.1), 1: (0.2, 1.6)}}
    return Task("multimode", X, target, [f"x{i}" for i in range(X.shape[1])], 2, n // 50, 10, "uniform",
                about=f"two boxes on x0, x1 + spike on x0, {n:,} x {X.shape[1]}", planted=planted)  # fmt: skip


#: All rows in benchmark order; the first ones are small (tests/test_quality.py uses them).
TASKS: dict[str, Callable[[], Task]] = {
    "diabetes_l1": lambda: diabetes(1),
    "diabetes_l3": lambda: diabetes(3),
    "box_small": lambda: planted_box(5000, 20, seed=2, name="box_small"),
    "multimode": multimode,
    "mnist7": mnist7,
    "tox21_ar": lambda: tox21("NR-AR"),
    "tox21_ahr": lambda: tox21("NR-AhR"),
    "box": planted_box,
}


def latent_like(n: int, f: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(X float32 (n, f), target): Gaussian, the first half of the columns ReLU-clipped, a planted box on columns
    f // 3 and 2f // 3 with 10 % label noise (the latent-like layer of bench_exact and bench_versions)."""
    import torch

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, f)).astype(np.float32)
    X[:, : f // 2] = np.maximum(X[:, : f // 2], 0)
    a, b = f // 3, (2 * f) // 3
    box = (X[:, a] > 0.3) & (X[:, a] < 1.8) & (X[:, b] > -1.0) & (X[:, b] < 0.6)
    target = box ^ (rng.random(n) < 0.1)
    return torch.from_numpy(X), torch.from_numpy(target)


def latent_issue(n: int, f: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(X float32 (n, f), target) of the speed benchmark's latent-like rows (``bench_versions.py``): N(0, 1), every
    even column ReLU-clipped, the subgroup ``(X[:, a] > 0.8) & (X[:, b] < -0.3)`` with ``a = 2 * (f // 6) + 1``,
    ``b = 2 * (f // 3) + 1``, each label flipped with probability 0.02 (numpy ``default_rng(seed)``)."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, f), dtype=np.float32)
    X[:, 0::2] = np.maximum(X[:, 0::2], 0)
    a, b = 2 * (f // 6) + 1, 2 * (f // 3) + 1
    target = (X[:, a] > 0.8) & (X[:, b] < -0.3)
    flip = rng.random(n) < 0.1
    target ^= flip & (rng.random(n) < 0.2)
    return X, target


def adult_like(seed: int = 0) -> Task:
    """A one-hot-heavy table of the adult census's shape, 22,792 x 108: 4 float columns (skewed like fnlwgt,
    capital gain and loss, education years), 2 int columns (age, hours per week) and 102 one-hot 0/1 columns typed
    ``"cat"`` (nine categorical variables of 2-41 levels); the target from a logistic model of age, hours, capital
    gain and two of the categories (about 47 % positive). ``max_length`` 3, ``min_support`` 1000, 8 k-means grids."""
    rng = np.random.default_rng(seed)
    n = 22_792
    age = rng.integers(17, 90, n).astype(float)
    hours = np.clip(rng.normal(40, 12, n).round(), 1, 99)
    floats = np.column_stack([rng.lognormal(12, 0.5, n), rng.exponential(1000, n) * (rng.random(n) < 0.1),
                              rng.exponential(90, n) * (rng.random(n) < 0.05), rng.normal(10, 2.5, n)])  # fmt: skip
    hot, levels = [], []
    for k in (16, 7, 14, 6, 5, 2, 41, 9, 2):  # 102 levels
        level = rng.choice(k, n, p=rng.dirichlet(np.ones(k) * 0.7))
        one = np.zeros((n, k))
        one[np.arange(n), level] = 1
        hot.append(one)
        levels.append(level)
    X = np.concatenate([floats, age[:, None], hours[:, None], *hot], axis=1)
    logit = 0.04 * (age - 38) + 0.05 * (hours - 40) + 0.0004 * floats[:, 1] + 1.2 * (levels[1] == 0)
    logit += 0.9 * (levels[3] < 2) - 1.5
    target = rng.random(n) < 1 / (1 + np.exp(-logit))
    types = ["float"] * 4 + ["int"] * 2 + ["cat"] * 102
    about = f"one-hot-heavy table, {n:,} x {X.shape[1]} (4 float, 2 int, 102 one-hot 0/1 columns)"
    names = [f"x{i}" for i in range(X.shape[1])]
    return Task("adult_like", X, target, names, 3, 1000, 8, "kmeans", types, about=about)
