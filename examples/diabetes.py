"""Task 1 of the AMORE paper, end to end in torch: why does a diabetes classifier predict "diabetic"?

Full run (from the CSV):

1. load ``diabetes_prediction_dataset.csv``, one-hot ``gender`` / ``smoking_history``, split 70/30 (seed 42),
   min-max scale on the training split;
2. train a logistic regression as a torch ``nn.Module`` (class imbalance handled by ``pos_weight``) and pick the
   threshold maximising TPR - FPR on the training ROC curve (torchmetrics); the target subgroup is
   "the model predicts diabetic" on the training split;
3. AMORE vs decision tree: the paper's grid search for both (``max_length`` = ``max_depth`` = 1, confidence lower
   bound 0.8), rules printed in raw units and evaluated on the test split too;
4. local rules for three test samples with predicted probabilities near 0.9, 0.6 and 0.42 (``max_length=3``,
   ``min_support=1000``);
5. the fitness/confidence-vs-min_support comparison figure (paper Fig. "compare_DT") as PNG under ``--out``.

``--paper-task`` instead runs on ``diabetes_paper_task.npz`` (the paper's exact rule-extraction input) and prints the
paper's table: AMORE ``HbA1c_level >= 6.643`` (support 2736, confidence 0.993, fitness 0.202) and the decision tree's
``HbA1c_level > 6.35`` (support 14501, confidence 0.515, fitness 0.032; the paper prints 6.349 and 0.033).

Usage (from the repository root)::

    python examples/diabetes.py --data ../shared/data --out diabetes_out
    python examples/diabetes.py --data ../shared/data --quick
    python examples/diabetes.py --paper-task --data ../shared/data [--local] [--search]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

import torch_amore
from torch_amore.experiments.protocol import SearchResult, select_best

CSV_NAME = "diabetes_prediction_dataset.csv"
NPZ_NAME = "diabetes_paper_task.npz"
CATEGORICAL = ["gender", "smoking_history"]
NUMERIC_TYPES = {
    "age": "float",
    "hypertension": "int",
    "heart_disease": "int",
    "bmi": "float",
    "HbA1c_level": "float",
    "blood_glucose_level": "int",
}
TARGET_NAME = "predicted diabetic"
BOUND = 0.8  # the paper's confidence lower bound iota

# the paper's hyperparameters for Task 1 (Supplementary Table "hyperparam")
PAPER_AMORE = {"max_length": 1, "min_support": 2000, "n_grids": 7, "bin_strategy": "uniform", "top_k": 3}
PAPER_DT = {"max_depth": 1, "min_samples_leaf": 1000, "class_weight": None, "criterion": "gini"}
PAPER_NUMBERS = {
    "AMORE": ("HbA1c_level >= 6.643", 2736, 0.993, 0.202),
    "DT": ("HbA1c_level > 6.349", 14501, 0.515, 0.033),
}
# the grids searched (the paper's protocol: every s_min is also the tree's min_samples_leaf)
MIN_SUPPORTS = (1000, 1500, 2000, 2500, 3000, 4000, 5000)
QUICK_MIN_SUPPORTS = (1000, 2000, 4000)
LOCAL_PROBABILITIES = (0.908, 0.591, 0.424)  # the paper's three test samples (Table "diabetes_local")


# ------------------------------------------------------------------------------------------------------ data
def resolve_data(path: str, name: str) -> Path:
    """``--data`` may be the data directory or a file in it (the CSV or the npz)."""
    p = Path(path)
    if p.is_dir():
        p = p / name
    elif p.name != name:
        p = p.with_name(name)
    if not p.exists():
        sys.exit(f"error: {p} not found (pass --data DIR holding {name}, or the file itself)")
    return p


def load_csv(csv: Path):
    """One-hot encoded features (float64 DataFrame, paper column order) and the labels."""
    import pandas as pd

    df = pd.read_csv(csv)
    missing = [c for c in [*NUMERIC_TYPES, *CATEGORICAL, "diabetes"] if c not in df.columns]
    if missing:
        sys.exit(f"error: {csv} lacks the columns {missing}")
    X = pd.get_dummies(df.drop(columns="diabetes"), columns=CATEGORICAL, dtype=float).astype(float)
    return X, df["diabetes"].to_numpy()


def split_and_scale(X, y, seed: int = 42):
    """70/30 split (seed 42), min-max scaling fitted on the training split."""
    from sklearn.model_selection import train_test_split

    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=seed)
    lo, hi = X_tr.min().to_numpy(), X_tr.max().to_numpy()
    span = np.where(hi > lo, hi - lo, 1.0)
    return (X_tr.to_numpy() - lo) / span, (X_te.to_numpy() - lo) / span, y_tr, y_te, lo, span


# ---------------------------------------------------------------------------------------------------- model
class LogisticRegression(nn.Module):
    """p(diabetic | x) = sigmoid(w.x + b)."""

    def __init__(self, n_features: int) -> None:
        super().__init__()
        self.linear = nn.Linear(n_features, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).squeeze(-1)  # logits


def train_model(X: torch.Tensor, y: torch.Tensor, *, max_iter: int = 200) -> LogisticRegression:
    """Full-batch L-BFGS on the weighted logistic loss; ``pos_weight`` = negatives / positives balances the classes."""
    torch.manual_seed(42)
    model = LogisticRegression(X.shape[1]).double()
    pos_weight = (y == 0).sum() / (y == 1).sum()
    loss_fn = nn.BCEWithLogitsLoss(pos_weight=pos_weight.double())
    opt = torch.optim.LBFGS(model.parameters(), lr=1.0, max_iter=max_iter, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = loss_fn(model(X), y.double())
        loss.backward()
        return loss

    opt.step(closure)
    return model.eval()


def roc_threshold(prob: torch.Tensor, y: torch.Tensor) -> float:
    """The threshold maximising TPR - FPR on the ROC curve (torchmetrics)."""
    from torchmetrics.functional.classification import binary_roc

    fpr, tpr, thresholds = binary_roc(prob, y.long())
    return float(thresholds[torch.argmax(tpr - fpr)])


def model_summary(prob: torch.Tensor, y: torch.Tensor, threshold: float) -> str:
    from torchmetrics.functional.classification import binary_auroc, binary_precision, binary_recall

    pred = (prob > threshold).long()
    return (
        f"recall={float(binary_recall(pred, y)):.3f} precision={float(binary_precision(pred, y)):.3f} "
        f"AUC={float(binary_auroc(prob, y)):.3f} predicted positive={int(pred.sum())}"
    )


# ---------------------------------------------------------------------------------------------------- tables
def _row(label: str, rs, test=None) -> str:
    if rs is None:
        return f"  {label:<8} (no rule set)"
    cond = " AND ".join(r.format() for r in rs.rules)
    line = f"  {label:<8} {cond:<48} support={rs.support:<6} confidence={rs.confidence:.3f} fitness={rs.fitness:.3f}"
    if test is not None:
        m = rs.evaluate(*test)
        line += f"   | test: support={m.support:<5} confidence={m.confidence:.3f} fitness={m.fitness:.3f}"
    return line


def _below_bound(rs, none: str) -> str:
    """The note under a chosen rule set below the confidence bound: ``select_best`` fell back to the highest fitness
    because ``none`` of the candidates reaches ``BOUND`` (``""`` when the chosen one reaches it)."""
    if rs is None or rs.confidence >= BOUND:
        return ""
    return f"           (below confidence {BOUND}: {none} reaches it, so this is the highest fitness of all)"


def _setting(result: SearchResult) -> str:
    return ", ".join(f"{k}={v}" for k, v in result.setting.items())


def sklearn_split_text(rs, X) -> str:
    """A one-split decision-tree rule as scikit-learn states it (``x > threshold``), in raw units: its threshold is
    the midpoint between the neighbouring values of ``X``, the data the tree was fitted on (the rule's own bound is
    the shortest number between them, which selects the same rows)."""
    r = rs.rules[0]
    if r.is_categorical or len(rs.rules) != 1:
        return str(r)
    bound = r.low if np.isfinite(r.low) else r.high
    col = np.asarray(X[:, r.feature], dtype=np.float64)
    raw = (col[col < bound].max() + col[col >= bound].min()) / 2 * r.scale + r.offset
    op = ">" if np.isfinite(r.low) else "<="
    return f"{r.name} {op} {raw:.3f}"


def compare(
    X, target, *, names, types, scale, offset, max_length, min_supports, n_grids, bin_strategies, test, progress=False
):
    """The paper's grid search for AMORE and for the decision tree, and the side-by-side table."""
    common = dict(
        feature_names=names, feature_types=types, feature_scale=scale, feature_offset=offset, target_name=TARGET_NAME
    )
    t0 = time.perf_counter()
    amore = torch_amore.search_hyperparameters(
        X,
        target,
        bin_strategies=bin_strategies,
        n_grids=n_grids,
        min_supports=min_supports,
        max_length=max_length,
        confidence_lower_bound=BOUND,
        progress=progress,
        **common,
    )
    t1 = time.perf_counter()
    dt = torch_amore.decision_tree_search(
        X,
        target,
        max_depth=max_length,
        min_samples_leaf=min_supports,
        criteria=("gini", "entropy"),
        class_weights=(None, "balanced"),
        confidence_lower_bound=BOUND,
        progress=progress,
        **common,
    )
    t2 = time.perf_counter()
    print(f"\nAMORE vs decision tree (l_max = max_depth = {max_length}; grid search, confidence lower bound {BOUND})")
    for name, result, seconds in (("AMORE", amore, t1 - t0), ("DT", dt, t2 - t1)):
        print(_row(name, result.best, test))
        print(f"           chosen: {_setting(result)}  ({len(result.records)} settings, {seconds:.1f} s)")
        note = _below_bound(result.best, "no setting's rule set")
        if note:
            print(note)
    return amore, dt


def local_rules(
    X, target, X_test, prob_test, *, names, types, scale, offset, n_grids=7, min_support=1000, max_length=3
):
    """Local rules (rules containing the sample) for the test samples nearest the paper's three probabilities."""
    print(
        f"\nLocal rules for three test samples (max_length={max_length}, min_support={min_support}, "
        f"n_grids={n_grids}, uniform; best fitness among confidence >= {BOUND}, else the best fitness, noted)"
    )
    out = []
    for p in LOCAL_PROBABILITIES:
        i = int(torch.argmin((prob_test - p).abs()))
        t0 = time.perf_counter()
        rule_sets = torch_amore.extract_rules(
            X,
            target,
            max_length=max_length,
            min_support=min_support,
            n_grids=n_grids,
            bin_strategy="uniform",
            local_x=X_test[i],
            feature_names=names,
            feature_types=types,
            feature_scale=scale,
            feature_offset=offset,
            target_name=TARGET_NAME,
        )
        best = select_best(rule_sets, BOUND)
        print(f"  test sample {i} (predicted probability {float(prob_test[i]):.3f}; {time.perf_counter() - t0:.1f} s)")
        print("  " + _row("local", best))
        note = _below_bound(best, f"none of its {len(rule_sets)} rule sets")
        if note:
            print("  " + note)
        out.append((i, float(prob_test[i]), best))
    return out


def figure(amore: SearchResult, dt: SearchResult, path: Path) -> None:
    """Confidence and fitness of the best rule sets of both methods per min_support (= min_samples_leaf)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = amore.best_by("min_support")
    d = dt.best_by("min_samples_leaf")
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, metric in zip(axes, ("confidence", "fitness")):
        ax.plot(a["min_support"], a[metric], "o-", label="AMORE")
        ax.plot(d["min_samples_leaf"], d[metric], "s--", label="DT classifier")
        ax.set_xlabel("$s_{min}$ (min_support = min_samples_leaf)")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.suptitle("Diabetes: best rule set per $s_{min}$ (grid search, confidence lower bound 0.8)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"\nwrote {path}")


def rule_figure(rs, X, target, path: Path) -> None:
    """The chosen AMORE rule set over the features' distributions (subgroup vs rest, raw units)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from torch_amore.report.plot import plot_rule

    fig = plot_rule(rs, X, target)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    print(f"wrote {path}")


# ---------------------------------------------------------------------------------------------------- modes
def run_csv(args) -> None:
    t_start = time.perf_counter()
    csv = resolve_data(args.data, CSV_NAME)
    frame, y = load_csv(csv)
    names = list(frame.columns)
    types = [NUMERIC_TYPES.get(n, "cat") for n in names]
    X_tr, X_te, y_tr, y_te, lo, span = split_and_scale(frame, y)
    X_tr, X_te = torch.from_numpy(X_tr), torch.from_numpy(X_te)
    y_tr, y_te = torch.from_numpy(y_tr), torch.from_numpy(y_te)
    print(
        f"{csv.name}: {len(frame)} patients, {len(names)} features after one-hot; train {len(y_tr)}, test {len(y_te)}"
    )

    model = train_model(X_tr, y_tr, max_iter=50 if args.quick else 200)
    with torch.no_grad():
        prob_tr, prob_te = torch.sigmoid(model(X_tr)), torch.sigmoid(model(X_te))
    threshold = roc_threshold(prob_tr, y_tr)
    target, target_te = prob_tr > threshold, prob_te > threshold
    print(f"logistic regression (torch, pos_weight): ROC threshold {threshold:.3f} (max TPR - FPR)")
    print(f"  train: {model_summary(prob_tr, y_tr, threshold)}")
    print(f"  test:  {model_summary(prob_te, y_te, threshold)}")
    print(f"target subgroup: model predicts diabetic on {int(target.sum())} of {len(target)} training samples")

    unit = dict(names=names, types=types, scale=span.tolist(), offset=lo.tolist())
    amore, dt = compare(
        X_tr,
        target,
        max_length=args.max_length,
        min_supports=QUICK_MIN_SUPPORTS if args.quick else MIN_SUPPORTS,
        n_grids=(5, 7) if args.quick else range(2, 11),
        bin_strategies=("uniform",) if args.quick else ("uniform", "kmeans"),
        test=(X_te, target_te),
        progress=args.progress,
        **unit,
    )
    local_rules(X_tr, target, X_te, prob_te, max_length=2 if args.quick else 3, **unit)
    out = Path(args.out)
    figure(amore, dt, out / "diabetes_compare_dt.png")
    if amore.best is not None:
        rule_figure(amore.best, X_tr, target, out / "diabetes_amore_rule.png")
    for name, res in (("amore", amore), ("dt", dt)):
        res.records.drop(columns="rule_set").to_csv(out / f"diabetes_{name}_records.csv", index=False)
    print(f"total {time.perf_counter() - t_start:.1f} s")


def run_paper_task(args) -> None:
    t_start = time.perf_counter()
    npz = resolve_data(args.data, NPZ_NAME)
    d = np.load(npz)
    X, target = torch.from_numpy(d["X"]), torch.from_numpy(d["target"])
    names = [str(n) for n in d["feature_names"]]
    types = [str(t) for t in d["feature_types"]]
    scale, offset = (d["raw_max"] - d["raw_min"]).tolist(), d["raw_min"].tolist()
    common = dict(
        feature_names=names, feature_types=types, feature_scale=scale, feature_offset=offset, target_name=TARGET_NAME
    )
    print(
        f"{npz.name}: {X.shape[0]} training samples x {X.shape[1]} features; target subgroup (model predicts "
        f"diabetic, threshold {float(d['threshold']):.3f}): {int(target.sum())} samples"
    )

    # AMORE with the paper's hyperparameters: a one-setting search runs the paper's rule tree exactly
    amore = torch_amore.search_hyperparameters(
        X,
        target,
        bin_strategies=PAPER_AMORE["bin_strategy"],
        n_grids=PAPER_AMORE["n_grids"],
        min_supports=PAPER_AMORE["min_support"],
        max_length=PAPER_AMORE["max_length"],
        top_k=PAPER_AMORE["top_k"],
        confidence_lower_bound=BOUND,
        **common,
    ).best
    # the decision tree: max_depth = l_max = 1 and the paper's grid search over criterion x min_samples_leaf x
    # class_weight (every setting with criterion gini and class_weight None gives the same split)
    dt = torch_amore.decision_tree_search(
        X,
        target,
        max_depth=PAPER_DT["max_depth"],
        min_samples_leaf=MIN_SUPPORTS,
        criteria=("gini", "entropy"),
        class_weights=(None, "balanced"),
        confidence_lower_bound=BOUND,
        **common,
    )
    print("\nAMORE (max_length=1, min_support=2000, n_grids=7, bin_strategy=uniform, top_k=3):")
    print(f"  {amore}")
    print("DT classifier (max_depth=1; grid search over criterion x min_samples_leaf x class_weight):")
    print(f"  {dt.best}")
    print(f"  as scikit-learn states the split: {sklearn_split_text(dt.best, X)}; chosen: {_setting(dt)}")

    print("\n| rule property | paper AMORE | torch_amore AMORE | paper DT | torch_amore DT |")
    print("|---|---|---|---|---|")
    pa, pd_ = PAPER_NUMBERS["AMORE"], PAPER_NUMBERS["DT"]
    ours = [(" AND ".join(r.format() for r in amore.rules), amore), (sklearn_split_text(dt.best, X), dt.best)]
    print(f"| rule | `{pa[0]}` | `{ours[0][0]}` | `{pd_[0]}` | `{ours[1][0]}` |")
    print(f"| support | {pa[1]} | {amore.support} | {pd_[1]} | {dt.best.support} |")
    print(f"| confidence | {pa[2]:.3f} | {amore.confidence:.3f} | {pd_[2]:.3f} | {dt.best.confidence:.3f} |")
    print(f"| fitness | {pa[3]:.3f} | {amore.fitness:.3f} | {pd_[3]:.3f} | {dt.best.fitness:.3f} |")

    if args.local:
        local_rules(
            X,
            target,
            torch.from_numpy(d["X_test"]),
            torch.from_numpy(d["prob_test"]),
            names=names,
            types=types,
            scale=scale,
            offset=offset,
        )
    if args.search:
        t0 = time.perf_counter()
        search = torch_amore.search_hyperparameters(
            X,
            target,
            bin_strategies=("uniform", "kmeans"),
            n_grids=range(2, 11),
            min_supports=MIN_SUPPORTS,
            max_length=1,
            confidence_lower_bound=BOUND,
            **common,
        )
        rec = search.records
        top = rec[np.isclose(rec["fitness"], search.best.fitness) & rec["meets_bound"].astype(bool)]
        paper_row = rec[(rec["bin_strategy"] == "uniform") & (rec["n_grids"] == 7) & (rec["min_support"] == 2000)]
        print(
            f"\nAMORE grid search (uniform/kmeans x n_grids 2..10 x min_support {list(MIN_SUPPORTS)}, "
            f"{len(rec)} settings, {time.perf_counter() - t0:.1f} s):"
        )
        print(f"  best: {search.best}")
        print(
            f"  {len(top)} settings reach fitness {search.best.fitness:.3f} with confidence >= {BOUND}, all with "
            f"support {sorted(set(top['support']))}; the paper's setting is among them: "
            f"{bool(len(paper_row)) and bool(np.isclose(paper_row['fitness'].iloc[0], search.best.fitness))}"
        )
    print(f"\ntotal {time.perf_counter() - t_start:.1f} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="../shared/data", help="data directory, or the CSV / npz file")
    parser.add_argument("--out", default="diabetes_out", help="directory for the figure and the records tables")
    parser.add_argument(
        "--paper-task", action="store_true", help="run on diabetes_paper_task.npz and print the paper's table"
    )
    parser.add_argument(
        "--search", action="store_true", help="with --paper-task: also run AMORE's full grid search (about a minute)"
    )
    parser.add_argument(
        "--local", action="store_true", help="with --paper-task: also the local rules of the paper's three test samples"
    )
    parser.add_argument("--quick", action="store_true", help="small grids and fewer iterations (for tests)")
    parser.add_argument("--max-length", type=int, default=1, help="l_max = max_depth for the comparison (paper: 1)")
    parser.add_argument("--progress", action="store_true", help="progress bars")
    args = parser.parse_args(argv)
    torch.set_num_threads(max(1, min(4, torch.get_num_threads())))
    if args.paper_task:
        run_paper_task(args)
    else:
        run_csv(args)


if __name__ == "__main__":
    main()
