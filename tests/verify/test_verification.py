"""RegionalExplanation.verify: planted models whose head reads one of two identical units, raw inputs, shares recomputed
by a literal per-sample loop, interval coverage, bad input, restoration of hooks and modes, serialization."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from torch_amore import RegionalRuleExplainer
from torch_amore.explain.explanation import RegionalExplanation
from torch_amore.rules.rule import Rule
from torch_amore.rules.rules import RuleSet
from torch_amore.verify.verification import Verification, wilson_interval

METHODS = ("resample", "clamp", "mean")


class PlantedMLP(nn.Module):
    """Hidden layer ``act`` (8 units): unit 1 is a copy of unit 0; the head reads unit 0 only (class 1 iff z_0 > 0)."""

    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.enc = nn.Linear(3, width)
        self.act = nn.Identity()
        self.head = nn.Linear(width, 2)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.enc.weight.copy_(torch.randn(width, 3, generator=g))
            self.enc.bias.zero_()
            self.enc.weight[1] = self.enc.weight[0]
            self.head.weight.zero_()
            self.head.bias.zero_()
            self.head.weight[1, 0] = 1.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.act(self.enc(x)))


def _rule_on(explanation: RegionalExplanation, unit: int) -> RuleSet:
    """The fittest one-condition rule set of ``explanation`` on ``unit``."""
    found = [rs for rs in explanation.rule_sets if rs.features == (unit,)]
    assert found, f"no rule set on unit {unit}"
    return found[0]


def _expected_control(row, read_unit: int, part: str = "sufficiency") -> list[float]:
    """From the construction: a control draw flips a sample exactly when it replaces the read unit in it."""
    n_s = row.sufficiency.n
    hit = [(units == read_unit).any(1) for units in row.details["control_units"]]
    return [float(h[:n_s].double().mean()) if part == "sufficiency" else float(h[n_s:].double().mean()) for h in hit]


# ------------------------------------------------------------------------------------------------------------------
# 1. correlation vs use, planted


@pytest.mark.parametrize("method", METHODS)
def test_planted_mlp_read_unit_verified_copy_not(method: str) -> None:
    model = PlantedMLP()
    X = torch.randn(600, 3, generator=torch.Generator().manual_seed(1))
    explanation = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1, top_k=10)
    read, copy = _rule_on(explanation, 0), _rule_on(explanation, 1)
    assert read.fitness == copy.fitness and read.support == copy.support  # indistinguishable by the rules
    result = explanation.verify(X, rule_sets=[read, copy], method=method, n_controls=10)
    r, c = result.rows
    assert r.sufficiency.value >= 0.9 and r.necessity.value >= 0.9
    assert c.sufficiency.value <= 0.05 and c.necessity.value <= 0.05
    assert r.sufficiency.n > 50 and r.necessity.n > 50
    assert list(r.control_sufficiency.shares) == [0.0] * 10  # unit 0 is the rule's own: never drawn
    assert list(r.control_necessity.shares) == [0.0] * 10
    assert list(c.control_sufficiency.shares) == pytest.approx(_expected_control(c, 0), abs=1e-12)
    assert list(c.control_necessity.shares) == pytest.approx(_expected_control(c, 0, "necessity"), abs=1e-12)
    assert all(bool((u != 0).all()) and u.shape[1] == 1 for u in r.details["control_units"])
    assert abs(c.control_sufficiency.value - 1 / 7) < 0.05  # one of the 7 other units is the read one
    assert c.control_sufficiency.low <= 1 / 7 <= c.control_sufficiency.high


class PlantedConv(nn.Module):
    """Conv1d with 3 channels over 10 positions; channel 1 copies channel 0; the head reads (channel 0, position 4)."""

    length = 8  # output positions

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 3, kernel_size=3)
        self.head = nn.Linear(3 * self.length, 2)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(3, 1, 3, generator=g))
            self.conv.bias.zero_()
            self.conv.weight[1] = self.conv.weight[0]
            self.head.weight.zero_()
            self.head.bias.zero_()
            self.head.weight[1, 4] = 1.0  # unit 0 * 8 + 4

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.conv(x).flatten(1))


def test_planted_conv_units_are_channel_times_position() -> None:
    model = PlantedConv()
    X = torch.randn(500, 1, 10, generator=torch.Generator().manual_seed(2))
    read_unit, copy_unit = 4, PlantedConv.length + 4  # (channel 0, pos 4) and (channel 1, pos 4)
    explainer = RegionalRuleExplainer(model, model.conv)
    explanation = explainer.explain(X, 1, max_length=1, min_support=0.1, features=[read_unit, copy_unit])
    read, copy = _rule_on(explanation, read_unit), _rule_on(explanation, copy_unit)
    assert read.fitness == copy.fitness
    result = explanation.verify(X, rule_sets=[read, copy], n_controls=10)
    r, c = result.rows
    assert r.sufficiency.value >= 0.9 and r.necessity.value >= 0.9
    assert c.sufficiency.value <= 0.05 and c.necessity.value <= 0.05
    assert list(c.control_sufficiency.shares) == pytest.approx(_expected_control(c, read_unit), abs=1e-12)
    assert list(r.control_necessity.shares) == [0.0] * 10


def _graphs(n: int, seed: int) -> list:
    from torch_geometric.data import Data

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        k = int(torch.randint(3, 8, (1,), generator=g))
        edges = torch.stack([torch.arange(k - 1), torch.arange(1, k)])
        out.append(Data(x=torch.randn(k, 3, generator=g), edge_index=torch.cat([edges, edges.flip(0)], 1)))
    return out


class PlantedGNN(nn.Module):
    """Node encoder, mean pooling, a pooled embedding ``embed`` (6 units, unit 1 copies unit 0), head on unit 0."""

    def __init__(self) -> None:
        super().__init__()
        self.node = nn.Linear(3, 4)
        self.embed = nn.Linear(4, 6)
        self.head = nn.Linear(6, 2)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in (self.node.weight, self.embed.weight):
                p.copy_(torch.randn(p.shape, generator=g))
            self.node.bias.zero_()
            self.embed.bias.zero_()
            self.embed.weight[1] = self.embed.weight[0]
            self.head.weight.zero_()
            self.head.bias.zero_()
            self.head.weight[1, 0] = 1.0

    def forward(self, data) -> torch.Tensor:
        from torch_geometric.nn import global_mean_pool

        return self.head(self.embed(global_mean_pool(torch.tanh(self.node(data.x)), data.batch)))


def test_planted_gnn_pooled_embedding() -> None:
    pytest.importorskip("torch_geometric")
    model, graphs = PlantedGNN(), _graphs(300, 3)
    explanation = RegionalRuleExplainer(model, "embed").explain(graphs, 1, max_length=1, min_support=0.1, top_k=10,
                                                                batch_size=64)  # fmt: skip
    read, copy = _rule_on(explanation, 0), _rule_on(explanation, 1)
    assert read.fitness == copy.fitness
    result = explanation.verify(graphs, rule_sets=[read, copy], n_controls=5, batch_size=64)
    r, c = result.rows
    assert r.sufficiency.value >= 0.9 and r.necessity.value >= 0.9
    assert c.sufficiency.value <= 0.05 and c.necessity.value <= 0.05
    assert list(c.control_necessity.shares) == pytest.approx(_expected_control(c, 0, "necessity"), abs=1e-12)


# ------------------------------------------------------------------------------------------------------------------
# 2. raw inputs


class ReadsFirst(nn.Module):
    """A tabular model reading feature 0 only (class 1 iff x_0 > 0.5); features 1 and 2 are ignored."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = 10 * (x[:, 0] - 0.5)
        return torch.stack([torch.zeros_like(s), s], 1)


def test_raw_inputs_ignored_feature_has_no_effect() -> None:
    g = torch.Generator().manual_seed(4)
    x0 = torch.rand(800, generator=g)
    X = torch.stack([x0, torch.rand(800, generator=g), x0 + 0.02 * torch.randn(800, generator=g)], 1)  # x_2 ~ x_0
    explanation = RegionalRuleExplainer(ReadsFirst()).explain(X, 1, max_length=1, min_support=0.1, top_k=10)
    used, ignored = _rule_on(explanation, 0), _rule_on(explanation, 2)
    assert ignored.fitness > 0.8  # the ignored feature describes the subgroup well
    for method in METHODS:
        r, i = explanation.verify(X, rule_sets=[used, ignored], method=method, n_controls=1).rows
        assert r.sufficiency.value >= 0.9 and r.necessity.value >= 0.9
        assert i.sufficiency.hits == 0 and i.necessity.hits == 0  # the model never reads x_2
        assert i.sufficiency.n > 50


# ------------------------------------------------------------------------------------------------------------------
# 3. every share recomputed by a literal loop


class SmallNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(5)
        self.enc = nn.Sequential(nn.Linear(4, 6), nn.Tanh())
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.enc(x))


def _literal_value(method, X, unit, rule, i, into, donor, pool, control):
    """The replacement value of ``unit`` in sample ``i``, from the definitions (python loops, no library code);
    ``rule`` is the condition paired with the unit (its own, or for a control unit the one it stands in for)."""
    col = [float(v) for v in X[:, unit]]
    if method == "resample":
        return float(X[donor, unit])
    if method == "mean":
        return sum(col[j] for j in pool) / len(pool)
    v = col[i]
    if not control:  # by value: the nearest observed value inside / outside the interval (ties: the lower)
        inside = lambda c: rule.low <= c < rule.high  # noqa: E731
        if into and inside(v):
            return v
        cands = sorted({c for c in col if inside(c) == into})
        return min(cands, key=lambda c: (abs(c - v), c)) if cands else v
    own = [float(c) for c in X[:, rule.feature]]  # by rank: the ranks [a, b) the rule holds on its own unit
    a, b = sum(c < rule.low for c in own), sum(c < rule.high for c in own)
    ranked = sorted(col)
    rank = sum(c < v for c in col)
    if into:
        return v if a <= rank < b else ranked[a] if rank < a else ranked[b - 1]
    cands = ([ranked[a - 1]] if a > 0 else []) + ([ranked[b]] if b < len(col) else [])
    return min(cands, key=lambda c: (abs(c - v), c)) if cands else v


def _literal_flips(model, x, layer, units, values, target):
    """Run one sample with ``units`` of the layer set to ``values``; whether it is predicted ``target``."""

    def hook(module, args, out):
        out = out.clone()
        out[0, units] = torch.tensor(values, dtype=out.dtype)
        return out

    handle = layer.register_forward_hook(hook)
    try:
        with torch.no_grad():
            return int(model(x[None]).argmax(1)) == target
    finally:
        handle.remove()


@pytest.mark.parametrize("method", METHODS)
def test_shares_match_a_literal_loop(method: str) -> None:
    model, target = SmallNet(), 2
    X = torch.randn(70, 4, generator=torch.Generator().manual_seed(6))
    explainer = RegionalRuleExplainer(model, model.enc)
    explanation = explainer.explain(X, target, max_length=2, min_support=0.1)
    rs = next(rs for rs in explanation.rule_sets if len(rs) == 2)
    result = explanation.verify(X, rule_sets=rs, method=method, n_controls=3, batch_size=16)
    row = result.rows[0]
    Z = explainer.features_matrix(X)
    with torch.no_grad():
        predicted = model(X).argmax(1) == target
    inside = rs.mask(Z)
    pool_in = [j for j in range(70) if inside[j]]
    pool_out = [j for j in range(70) if not inside[j]]
    S = [j for j in range(70) if not inside[j] and not predicted[j]]
    Q = [j for j in range(70) if inside[j] and predicted[j]]
    assert row.details["sufficiency_samples"].tolist() == S and row.details["necessity_samples"].tolist() == Q
    donors = row.details["donors"].tolist() if method == "resample" else [None] * (len(S) + len(Q))
    if method == "resample":
        assert all(inside[d] for d in donors[: len(S)]) and not any(inside[d] for d in donors[len(S) :])
    samples = S + Q
    draws = [[list(rs.features)] * len(samples)]  # per draw, the units of each sample (S then Q)
    draws += [d.tolist() for d in row.details["control_units"]]
    counts = []
    for k, per_sample in enumerate(draws):
        flips = []
        for r, i in enumerate(samples):
            into = r < len(S)
            pool = pool_in if into else pool_out
            units = per_sample[r]
            values = [_literal_value(method, Z, u, rule, i, into, donors[r], pool, k > 0)
                      for u, rule in zip(units, rs.rules)]  # fmt: skip
            flips.append(_literal_flips(model, X[i], model.enc, units, values, target) == into)
        counts.append((sum(flips[: len(S)]), sum(flips[len(S) :])))
    assert (row.sufficiency.hits, row.sufficiency.n) == (counts[0][0], len(S))
    assert (row.necessity.hits, row.necessity.n) == (counts[0][1], len(Q))
    assert list(row.control_sufficiency.shares) == [s / len(S) for s, _ in counts[1:]]
    assert list(row.control_necessity.shares) == [q / len(Q) for _, q in counts[1:]]
    assert len(S) > 5 and len(Q) > 5


def test_dataloader_and_dataset_give_the_tensor_counts() -> None:
    from torch.utils.data import DataLoader, TensorDataset

    model = SmallNet()
    X = torch.randn(90, 4, generator=torch.Generator().manual_seed(7))
    y = torch.zeros(90, dtype=torch.long)
    explanation = RegionalRuleExplainer(model, model.enc).explain(X, 2, max_length=2, min_support=0.1)
    counts = []
    for data in (X, TensorDataset(X, y), DataLoader(TensorDataset(X, y), batch_size=32)):
        row = explanation.verify(data, rule_sets=1, n_controls=2, batch_size=32).rows[0]
        counts.append((row.sufficiency.hits, row.necessity.hits, row.control_sufficiency.shares))
    assert counts[0] == counts[1] == counts[2]


# ------------------------------------------------------------------------------------------------------------------
# 3b. coverage of the intervals


def test_wilson_interval_coverage_binomial() -> None:
    g = torch.Generator().manual_seed(8)
    for n, p in ((60, 0.3), (200, 0.1), (200, 0.5)):
        draws = (torch.rand(4000, n, generator=g) < p).sum(1).tolist()
        covered = sum(lo <= p <= hi for lo, hi in (wilson_interval(int(k), n) for k in draws)) / 4000
        assert 0.93 <= covered <= 0.97, (n, p, covered)


class Planted2(nn.Module):
    """Class 1 iff (x_0 >= 0.5 and x_1 < 0.7) or x_2 < 0.3, on uniform inputs: for the rule set ``x_0 >= 0.5``, the
    true sufficiency is P(x_1 < 0.7) = 0.7 and the true necessity P(x_2 >= 0.3 | target, x_0 >= 0.5) = 0.49 / 0.79."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        on = ((x[:, 0] >= 0.5) & (x[:, 1] < 0.7)) | (x[:, 2] < 0.3)
        return torch.stack([torch.zeros(len(x)), on.float() * 2 - 1], 1)


def test_interval_coverage_through_verify() -> None:
    explainer = RegionalRuleExplainer(Planted2())
    rs = RuleSet.from_rules([Rule(0, "x0", low=0.5)], torch.rand(10, 3), torch.ones(10, dtype=torch.bool))
    params = {"source": "inputs", "target": 1, "layer": None, "outputs": "logits"}
    explanation = RegionalExplanation([rs], None, None, [0, 1, 2], ["x0", "x1", "x2"], params, explainer=explainer)
    g = torch.Generator().manual_seed(9)
    truth = (0.7, 0.49 / 0.79)
    covered = [0, 0]
    runs = 1200  # Monte Carlo error of the coverage: 0.6 %
    for seed in range(runs):
        X = torch.rand(120, 3, generator=g)
        row = explanation.verify(X, rule_sets=rs, n_controls=0, seed=seed).rows[0]
        for j, share in enumerate((row.sufficiency, row.necessity)):
            covered[j] += share.low <= truth[j] <= share.high
    assert all(0.93 <= c / runs <= 0.97 for c in covered), covered


class Planted6(Planted2):
    """``Planted2`` on 6 features (3-5 ignored). Control of the rule set ``x_0 >= 0.5`` (1 random unit among 1-5,
    resampled from the donor): sufficiency flips only when unit 2 is drawn and the donor has x_2 < 0.3, so its true
    rate is 0.3 / 5; necessity flips when unit 1 is drawn (x_1 >= 0.7 in the donor, target held by x_1 alone: 0.3 *
    0.49 / 0.79) or unit 2 (x_2 >= 0.3 in the donor, target held by x_2 alone: 0.7 * 0.09 / 0.79), over 5."""


def test_control_interval_coverage_through_verify() -> None:
    explainer = RegionalRuleExplainer(Planted6())
    rs = RuleSet.from_rules([Rule(0, "x0", low=0.5)], torch.rand(10, 6), torch.ones(10, dtype=torch.bool))
    params = {"source": "inputs", "target": 1, "layer": None, "outputs": "logits"}
    names = [f"x{i}" for i in range(6)]
    explanation = RegionalExplanation([rs], None, None, list(range(6)), names, params, explainer=explainer)
    truth = (0.3 / 5, (0.3 * 0.49 / 0.79 + 0.7 * 0.09 / 0.79) / 5)
    g = torch.Generator().manual_seed(18)
    covered, runs = [0, 0], 600  # Monte Carlo error of the coverage: 0.9 %
    for seed in range(runs):
        row = explanation.verify(torch.rand(200, 6, generator=g), rule_sets=rs, n_controls=10, seed=seed).rows[0]
        for j, share in enumerate((row.control_sufficiency, row.control_necessity)):
            covered[j] += share.low <= truth[j] <= share.high
    assert all(0.93 <= c / runs <= 0.97 for c in covered), covered


# ------------------------------------------------------------------------------------------------------------------
# 6. bad input, before any forward pass


class Counting(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inner = PlantedMLP()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        return self.inner(x)


@pytest.fixture
def counted() -> tuple[Counting, RegionalExplanation, torch.Tensor]:
    model = Counting()
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(10))
    explanation = RegionalRuleExplainer(model, "inner.act").explain(X, 1, max_length=1, min_support=0.1)
    model.calls = 0
    return model, explanation, X


def test_bad_input_is_refused_before_any_forward_pass(counted) -> None:
    model, explanation, X = counted
    other = RegionalRuleExplainer(PlantedMLP(), "act").explain(X, 0, max_length=1, min_support=0.1)
    cases = [
        (dict(rule_sets=other.best), ValueError, "not one of its rule sets"),
        (dict(method="clmap"), ValueError, "did you mean 'clamp'"),
        (dict(n_controls=-1), ValueError, "n_controls"),
        (dict(level=95), ValueError, "level"),
        (dict(target=torch.ones(300, dtype=torch.bool)), ValueError, "fixed mask"),
        (dict(model=nn.Sequential(nn.Linear(3, 2))), ValueError, "inner.act"),
        (dict(rule_sets=[object()]), TypeError, "RuleSet"),
        (dict(rule_sets=1.5), TypeError, r"`rule_sets` to be a count \(an integer >= 1\), a RuleSet or RuleSets"),
        (dict(rule_sets=None), TypeError, "`rule_sets` to be a count"),
        (dict(batch_size=0), ValueError, r"`batch_size` to be an integer >= 1, but got 0"),
    ]
    for kwargs, error, text in cases:
        with pytest.raises(error, match=text):
            explanation.verify(X, **kwargs)
    with pytest.raises(ValueError, match=r"`batch_size` to be an integer >= 1, but got 0"):
        explanation.evaluate(X, batch_size=0)  # 0 was read as "the explanation's batch size"
    with pytest.raises(TypeError, match="n_control"):
        explanation.verify(X, n_control=3)
    with pytest.raises(ValueError, match=r"shape \(N, 3\) like the explained samples, but got shape \(300, 4\)"):
        explanation.verify(torch.randn(300, 4))  # a layer explainer: the inputs' shape is checked against explain's
    assert model.calls == 0


def test_wrong_width_and_features_rules_are_refused() -> None:
    model = Counting()
    X = torch.randn(200, 3, generator=torch.Generator().manual_seed(11))
    explanation = RegionalRuleExplainer(model).explain(X, 1, max_length=1, min_support=0.1)
    model.calls = 0
    with pytest.raises(ValueError, match=r"shape \(N, 3\) like the explained samples, but got shape \(50, 4\)"):
        explanation.verify(torch.rand(50, 4))
    explanation.params["input_shape"] = None  # e.g. an explanation from the callback: the width is still checked
    with pytest.raises(ValueError, match=r"3 features per sample .* \(4 features\)"):
        explanation.verify(torch.rand(50, 4))
    on_features = RegionalRuleExplainer(model).explain(X, 1, features=X[:, :2], max_length=1, min_support=0.1)
    model.calls = 0
    with pytest.raises(ValueError, match="separate `features` matrix"):
        on_features.verify(X)
    assert model.calls == 0


def test_layer_width_mismatch_is_a_clear_error() -> None:
    model = PlantedMLP()
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(12))
    data = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1).to_dict()
    explanation = RegionalExplanation.from_dict(data)
    with pytest.raises(ValueError, match="8 units .* they have 5"):
        explanation.verify(X, model=PlantedMLP(width=5))


# ------------------------------------------------------------------------------------------------------------------
# restoration, determinism, local rules, serialization


class Interrupting(PlantedMLP):
    def __init__(self, error: type[BaseException]) -> None:
        super().__init__()
        self.error, self.calls = error, 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls > 1:
            raise self.error("stop")
        return super().forward(x)


@pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
def test_hooks_and_modes_restored_on_errors(error) -> None:
    model = PlantedMLP()
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(13))
    explanation = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1)
    failing = Interrupting(error)
    failing.train()
    failing.head.eval()
    with pytest.raises(error):
        explanation.verify(X, model=failing, batch_size=1000)
    assert failing.calls == 2  # the clean pass, then the first patched pass
    assert failing.training and failing.act.training and not failing.head.training
    assert not failing.act._forward_hooks and not failing.act._forward_pre_hooks


def test_every_forward_call_holds_at_most_a_batch() -> None:
    model = Counting()
    sizes = []
    model.inner.act.register_forward_hook(lambda m, a, out: sizes.append(out.shape[0]))
    X = torch.randn(500, 3, generator=torch.Generator().manual_seed(17))
    explanation = RegionalRuleExplainer(model, "inner.act").explain(X, 1, max_length=1, min_support=0.1)
    sizes.clear()
    model.calls = 0
    result = explanation.verify(X, rule_sets=2, n_controls=3, batch_size=64)
    used = [r.sufficiency.n + r.necessity.n for r in result.rows]
    assert max(sizes) == 64 and sum(sizes) == 500 + 4 * sum(used)  # the clean pass, then 1 + 3 passes per rule set
    assert model.calls == sum(-(-n // 64) for n in [500] + [u for u in used for _ in range(4)])


def test_layer_input_and_per_sample_model_arguments() -> None:
    model = PlantedMLP()
    X = torch.randn(400, 3, generator=torch.Generator().manual_seed(19))
    on_output = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=2, min_support=0.1)
    on_input = RegionalRuleExplainer(model, "head", layer_input=True).explain(X, 1, max_length=2, min_support=0.1)
    assert [rs.rules for rs in on_output.rule_sets] == [rs.rules for rs in on_input.rule_sets]
    a = on_output.verify(X, rule_sets=3, n_controls=2, method="clamp")
    b = on_input.verify(X, rule_sets=3, n_controls=2, method="clamp")  # the same units, patched by a pre-hook
    assert [(r.sufficiency, r.necessity, r.control_sufficiency) for r in a.rows] == [
        (r.sufficiency, r.necessity, r.control_sufficiency) for r in b.rows
    ]

    class Shifted(nn.Module):  # the planted model with a per-sample shift of the input
        def __init__(self) -> None:
            super().__init__()
            self.inner = PlantedMLP()

        def forward(self, x: torch.Tensor, shift: torch.Tensor) -> torch.Tensor:
            return self.inner(x - shift)

    shift = torch.randn(400, 3, generator=torch.Generator().manual_seed(20))
    shifted = RegionalRuleExplainer(Shifted(), "inner.act").explain(X + shift, 1, additional_forward_args=shift,
                                                                    max_length=2, min_support=0.1)  # fmt: skip
    assert [rs.rules for rs in shifted.rule_sets] == [rs.rules for rs in on_output.rule_sets]
    c = shifted.verify(X + shift, rule_sets=3, n_controls=2, method="clamp", batch_size=64)  # rows cut per batch
    assert [(r.sufficiency, r.necessity) for r in c.rows] == [(r.sufficiency, r.necessity) for r in a.rows]


def test_deterministic_and_local_rules() -> None:
    model = PlantedMLP()
    X = torch.randn(400, 3, generator=torch.Generator().manual_seed(14))
    explainer = RegionalRuleExplainer(model, "act")
    explanation = explainer.explain(X, 1, max_length=2, min_support=0.1)
    first = explanation.verify(X, n_controls=4, seed=3)
    assert explanation.verify(X, n_controls=4, seed=3) == first
    other = explanation.verify(X, n_controls=4, seed=4).rows[0].details["control_units"]
    assert not all(torch.equal(a, b) for a, b in zip(other, first.rows[0].details["control_units"]))
    local = explainer.explain_local(0, X, 1, max_length=1, min_support=0.1)
    row = local.verify(X, rule_sets=1, n_controls=2).rows[0]
    assert row.position == 1 and row.sufficiency.n > 0


def test_shown_serialized_and_old_files_load(tmp_path) -> None:
    model = PlantedMLP()
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(15))
    explanation = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1)
    assert "Verification" not in str(explanation)
    result = explanation.verify(X, rule_sets=2, n_controls=3)
    assert explanation.verification is result
    text = str(explanation)
    assert "Verification by intervention (method 'resample', 3 control draws" in text
    assert "resample" in repr(result) and len(result.rows) == 2
    explanation.to_json(tmp_path / "e.json")
    back = RegionalExplanation.from_json(tmp_path / "e.json")
    assert back.verification == result
    frame = result.to_frame()
    assert list(frame.index) == [r.position for r in result.rows]
    assert frame.loc[result.rows[0].position, "sufficiency"] == result.rows[0].sufficiency.value
    old = explanation.to_dict()
    old.pop("verification")
    old["format_version"] = 2
    assert RegionalExplanation.from_dict(old).verification is None
    same = [back.rule_sets[r.position - 1] for r in result.rows]
    again = back.verify(X, model=model, rule_sets=same, n_controls=3)  # from JSON: the model given, same numbers
    assert [r.sufficiency for r in again.rows] == [r.sufficiency for r in result.rows]
    with pytest.raises(ValueError, match="version"):
        Verification.from_dict({"version": 99})


def test_html_report_shows_the_verification(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    model = PlantedMLP()
    X = torch.randn(300, 3, generator=torch.Generator().manual_seed(16))
    explanation = RegionalRuleExplainer(model, "act").explain(X, 1, max_length=1, min_support=0.1)
    assert "control sufficiency" not in explanation.to_html(tmp_path / "a.html", plot_rules=0).read_text()
    row = explanation.verify(X, rule_sets=1, n_controls=2).rows[0]
    text = explanation.to_html(tmp_path / "b.html", plot_rules=0).read_text()
    assert '<th class="verified">control sufficiency</th>' in text
    assert "test this model on these samples, not the world" in text
    s = row.sufficiency
    interval = f'<span class="interval">[{s.low:.3f}, {s.high:.3f}]</span>'
    assert f'data-value="{s.value!r}">{s.value:.3f}<br>{interval}</td>' in text


def test_lightning_callback_verifies_and_writes_it(tmp_path) -> None:
    pl = pytest.importorskip("pytorch_lightning")
    from lightning_task import BreastCancerModule, loaders

    from torch_amore import RegionalRuleExtractor

    model = BreastCancerModule()
    options = {"n_controls": 2, "rule_sets": 2}
    callback = RegionalRuleExtractor(target=0, layer="net.1", n_grids=6, min_support=0.1, verify=options)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_epochs=1, default_root_dir=tmp_path, callbacks=[callback],
                         logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         enable_checkpointing=False)  # fmt: skip
    train_dl, val_dl = loaders()
    trainer.fit(model, train_dl, val_dl)
    result = callback.explanation.verification
    assert result is not None and len(result.rows) == 2 and result.n_samples == len(val_dl.dataset)
    assert RegionalExplanation.from_json(callback.last_path).verification == result
    assert "Verification by intervention" in callback.last_path.with_suffix(".txt").read_text()
    explanation = RegionalExplanation.from_json(callback.last_path)
    again = explanation.verify(val_dl.dataset.tensors[0], model=model, target=0, n_controls=2, batch_size=64,
                               rule_sets=[explanation.rule_sets[r.position - 1] for r in result.rows])  # fmt: skip
    assert [(r.sufficiency.hits, r.necessity.hits) for r in again.rows] == [
        (r.sufficiency.hits, r.necessity.hits) for r in result.rows
    ]
    with pytest.raises(TypeError, match="did you mean 'n_controls'"):
        RegionalRuleExtractor(target=0, verify={"n_control": 2})
    with pytest.raises(ValueError, match="did you mean 'clamp'"):
        RegionalRuleExtractor(target=0, verify={"method": "clap"})


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_verify_on_cuda() -> None:
    model = PlantedMLP().cuda()
    X = torch.randn(600, 3, generator=torch.Generator().manual_seed(1))
    explanation = RegionalRuleExplainer(model, "act").explain(X.cuda(), 1, max_length=1, min_support=0.1, top_k=10)
    read, copy = _rule_on(explanation, 0), _rule_on(explanation, 1)
    r, c = explanation.verify(X, rule_sets=[read, copy], n_controls=5).rows
    assert r.sufficiency.value >= 0.9 and r.necessity.value >= 0.9
    assert c.sufficiency.value <= 0.05 and c.necessity.value <= 0.05
