"""torch_amore in a minute: rules on a CNN's latent layer for scikit-learn's handwritten digits.

Trains a tiny CNN on the 8x8 digits that ship with scikit-learn (nothing is downloaded), explains "the model predicts
7" with regional rules on its 32 latent units (the inputs of the last linear layer), prints the best rule sets with
support/confidence/fitness and how far to trust them (the search holds out 30 % of the training digits: each rule
set's confidence there with its interval, and a p-value against the same search on 19 shuffled targets, under a
one-line verdict), shows the same for a subgroup drawn at random (the verdict and a warning say it is noise), checks by
intervention whether the model uses their units (sufficiency, necessity and a random-unit control), prints the best
rule set next to a decision tree of the same depth fitted on the same searched digits (both measured there, on the
held-out training digits and on the test digits), saves a pixel map (which pixels drive each rule's latent unit:
integrated gradients, via Captum) and writes a self-contained HTML report (rule table with held-out metrics, the pixel
map, the rules' mean images and distributions).

    python examples/quickstart.py [--out quickstart_pixels.png] [--html PATH]
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import torch
from sklearn.datasets import load_digits
from torch import nn
from torch.nn import functional as F

import torch_amore
from torch_amore import RegionalRuleExplainer
from torch_amore.search.evidence_split import holdout_mask

DIGIT = 7


class TinyCNN(nn.Module):
    """Conv(8 channels) -> 2x2 max pooling -> Linear(128, 32) -> Linear(32, 10); latent = the 32 inputs of ``fc2``."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc1 = nn.Linear(8 * 4 * 4, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("quickstart_pixels.png"), help="where to save the pixel map")
    parser.add_argument("--html", type=Path, help="where to write the HTML report (default: quickstart_report.html "
                        "beside the pixel map)")  # fmt: skip
    args = parser.parse_args(argv)
    args.html = args.html or args.out.with_name("quickstart_report.html")
    start = time.perf_counter()
    torch.manual_seed(0)

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32)[:, None]  # (1797, 1, 8, 8) in [0, 1]
    y = torch.tensor(digits.target)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    train, test = order[:1350], order[1350:]

    model = TinyCNN()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for _ in range(25):
        for idx in train[torch.randperm(len(train))].split(64):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(x[test]).argmax(1) == y[test]).float().mean().item()
    print(f"tiny CNN trained on {len(train)} digits; held-out accuracy {accuracy:.3f}\n")

    # Regional rules on the latent layer (the input of fc2) for "the model predicts 7".
    # holdout=0.3: the search sees 70 % of the training digits and each rule set is measured on the other 30 %;
    # permutations=19: the same search on 19 shuffled subgroups, so p(perm) = 0.05 means "beats all 19".
    explainer = RegionalRuleExplainer(model, model.fc2, layer_input=True)
    options = {"max_length": 2, "min_support": 0.06, "n_grids": 6, "bin_strategy": "kmeans", "progress": False,
               "holdout": 0.3, "permutations": 19}  # fmt: skip
    explanation = explainer.explain(x[train], DIGIT, **options)
    print(explanation.format(max_rows=3))

    # For contrast, a subgroup of 10 % of the digits drawn at random, independent of the images: the search still
    # returns rule sets, but the verdict and a UserWarning say that they are what it finds in noise. (With 19
    # permutations, one random subgroup in 20 beats them all by chance: the generator's seed 1 is one.)
    noise = torch.rand(len(train), generator=torch.Generator().manual_seed(2)) < 0.1
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        random_subgroup = explainer.explain(x[train], noise, **options)
    print(f"\na random subgroup: {torch_amore.rules.verdict(random_subgroup.rule_sets, permutations=19)}")
    print(f"  best: {random_subgroup.best}")
    print("".join(f"  UserWarning: {w.message}\n" for w in caught if "noise" in str(w.message)), end="")
    # Does the model use these latent units? Replace them (from donor digits) and compare with random units.
    print(f"\n{explanation.verify(x[train], rule_sets=3, n_controls=10)}\n")

    # Next to the paper's baseline: a decision tree of the same depth, fitted on the rows the search saw. The
    # explanation's features_matrix and subgroup hold all 1350 training digits, the 405 held out too; holdout_mask
    # replays the search's seeded split, so both methods are fitted and measured on the same rows.
    z, subgroup = explanation.features_matrix, explanation.subgroup
    held = holdout_mask(subgroup, explanation.params["holdout"], seed=explanation.params["seed"])
    min_leaf = explanation.params["min_support_count"]  # min_support as a count of the searched rows
    tree = torch_amore.decision_tree_rules(z[~held], subgroup[~held], max_depth=2, min_samples_leaf=min_leaf,
                                           feature_names=explanation.feature_names,
                                           target_name=explanation.target_name)[0]  # fmt: skip
    z_test = explainer.features_matrix(x[test])  # latent features of the test digits
    with torch.no_grad():
        predicted_test = model(x[test]).argmax(1) == DIGIT
    searched = int((~held).sum())
    print(
        f"Next to a decision tree of the same depth (min_samples_leaf={min_leaf}, the search's min_support), fitted on "
        f"the same {searched} training digits the search saw:\neach rule line's numbers are on those {searched}; below "
        f"it, on the {int(held.sum())} training digits both held out and on the {len(test)} test digits"
    )
    for name, rs in (("AMORE", explanation.best), ("decision tree", tree)):
        print(f"{name:>13}: {rs}")
        for rows, (zs, target) in (("held out", (z[held], subgroup[held])), ("test digits", (z_test, predicted_test))):
            m = rs.evaluate(zs, target)
            print(f"{rows:>13}:   support={m.support}, confidence={m.confidence:.3f}, fitness={m.fitness:.3f}")

    # Which pixels drive each rule's latent unit, on test digits the best rule set covers.
    try:
        import matplotlib
    except ImportError:
        print("\n(matplotlib is not installed: no pixel map; pip install 'torch-amore[plot]')")
        return
    matplotlib.use("Agg")
    from torch_amore.report.plot import plot_rule_attributions, plot_rule_means

    covered = test[explanation.best.mask(z_test)][:3]
    maps = explainer.attribute(x[covered], explanation.best, n_steps=32)
    with torch.no_grad():
        predicted = model(x[covered]).argmax(1)
    units = explainer.features_matrix(x[covered])  # the latent values, shown against each rule's threshold
    fig = plot_rule_attributions(x[covered], maps, rules=explanation.best, features=units,
                                 row_labels=[f"test digit {int(i)}\nlabel {int(t)}, predicted {int(p)}"
                                             for i, t, p in zip(covered, y[covered], predicted)],
                                 target_name=explanation.target_name)  # fmt: skip
    fig.savefig(args.out, dpi=100, bbox_inches="tight")
    print(f"\nsaved the pixel map of the best rule set to {args.out}")
    means = plot_rule_means(x[train], explanation)
    explanation.to_html(args.html, held_out=explanation.evaluate(x[test]),
                        figures={"Pixels driving each rule's latent unit (held-out digits)": fig,
                                 "Mean training digit satisfying each rule": means})  # fmt: skip
    print(f"wrote the HTML report to {args.html} ({time.perf_counter() - start:.1f} s in all)")


if __name__ == "__main__":
    main()
