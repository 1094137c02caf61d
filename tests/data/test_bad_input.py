"""Bad and borderline input to the library's entry points (issue 12).

Every refused input gets a ``ValueError``/``TypeError`` (or ``MemoryError``) whose message names the argument, raised
before the features are binned. Every accepted edge case returns rules whose support, confidence and fitness match a
recomputation from their masks.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest
import torch

import torch_amore as ta
import torch_amore.search.extract as search_module
from torch_amore.grids.binning import bin_features
from torch_amore.search.options import SearchOptions

N = 200


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    X = torch.rand(N, 3, generator=g, dtype=torch.float64)
    return X, X[:, 0] > 0.5


def _frame(**extra) -> pd.DataFrame:
    X, _ = _data()
    return pd.DataFrame(X.numpy(), columns=["a", "b", "c"]).assign(**extra)


def _sparse_target() -> torch.Tensor:
    return _data()[1].to(torch.float32).to_sparse()


def _quantized() -> torch.Tensor:
    with warnings.catch_warnings():  # quantized tensors are deprecated, and may still be passed
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(_data()[0].float(), 0.01, 0, torch.quint8)


def _csr() -> torch.Tensor:
    with warnings.catch_warnings():  # "sparse CSR support is in beta"
        warnings.simplefilter("ignore")
        return _data()[0].to_sparse_csr()


def _scipy_sparse():
    sparse = pytest.importorskip("scipy.sparse")
    return sparse.csr_matrix(_data()[0].numpy())


# (X, target, keyword arguments) builders; each case: builder, exception type, substrings of the message
X0, T0 = _data()
BAD = {
    # pandas columns that are not numbers
    "string column": (
        lambda: (_frame(s=pd.array(["u", "v"] * 100, dtype="string")), T0, {}),
        TypeError,
        ["`X`", "pd.get_dummies(X, columns=['s'], dtype=float)"],
    ),
    "object column": (
        lambda: (_frame(s=np.array(["u", "v"] * 100, dtype=object)), T0, {}),
        TypeError,
        ["`X`", "pd.get_dummies(X, columns=['s']"],
    ),
    "category column": (
        lambda: (_frame(s=pd.Categorical(["u", "v"] * 100)), T0, {}),
        TypeError,
        ["`X`", "pd.get_dummies(X, columns=['s']"],
    ),
    "numeric category column": (
        lambda: (_frame(s=pd.Categorical([1, 2] * 100)), T0, {}),
        TypeError,
        ["`X`", "get_dummies"],
    ),
    "two text columns": (
        lambda: (_frame(s=["u", "v"] * 100, t=pd.Categorical(["x", "y"] * 100)), T0, {}),
        TypeError,
        ["columns=['s', 't']"],
    ),
    "datetime column": (
        lambda: (_frame(d=pd.date_range("2020-01-01", periods=N)), T0, {}),
        TypeError,
        ["`X`", "['d']", "pd.Timestamp('1970-01-01')", "days"],
    ),
    "tz datetime column": (
        lambda: (_frame(d=pd.date_range("2020-01-01", periods=N, tz="UTC")), T0, {}),
        TypeError,
        ["`X`", "['d']", "dates"],
    ),
    "timedelta column": (
        lambda: (_frame(d=pd.to_timedelta(np.arange(N), unit="h")), T0, {}),
        TypeError,
        ["`X`", "durations"],
    ),
    "period column": (
        lambda: (_frame(d=pd.period_range("2020-01", periods=N, freq="M")), T0, {}),
        TypeError,
        ["`X`", "dates"],
    ),
    "text and date columns": (
        lambda: (_frame(s=["u", "v"] * 100, d=pd.date_range("2020", periods=N)), T0, {}),
        TypeError,
        ["['s']", "['d']"],
    ),
    "complex column": (
        lambda: (_frame(z=np.ones(N, dtype=np.complex128)), T0, {}),
        TypeError,
        ["`X`", "['z']", "complex128"],
    ),
    "huge Int64 column": (
        lambda: (_frame(big=pd.array([2**60 + 1, None] * 100, dtype="Int64")), T0, {}),
        ValueError,
        ["`X['big']`", "2**53", "1152921504606846977"],
    ),
    "duplicate DataFrame columns": (
        lambda: (_frame().set_axis(["a", "b", "a"], axis=1), T0, {}),
        ValueError,
        ["columns of `X`", "['a']"],
    ),
    "pandas Series": (lambda: (_frame()["a"], T0, {}), TypeError, ["`X`", "to_frame()"]),
    # numpy arrays that are not numbers
    "datetime64 array": (
        lambda: (np.arange(3 * N).reshape(N, 3).astype("datetime64[D]"), T0, {}),
        TypeError,
        ["`X`", "datetime64[D]", "np.datetime64"],
    ),
    "timedelta64 array": (
        lambda: (np.arange(3 * N).reshape(N, 3).astype("timedelta64[s]"), T0, {}),
        TypeError,
        ["`X`", "timedelta64[s]"],
    ),
    "string array": (lambda: (np.full((N, 3), "x"), T0, {}), TypeError, ["`X`", "<U1", "get_dummies"]),
    "object array": (lambda: (X0.numpy().astype(object), T0, {}), TypeError, ["`X`", "object"]),
    "complex array": (lambda: (X0.numpy().astype(np.complex64), T0, {}), TypeError, ["`X`", "complex64"]),
    "lossy int64 array": (
        lambda: (np.full((N, 3), 2**53 + 1, dtype=np.int64), T0, {}),
        ValueError,
        ["`X`", "2**53", "9007199254740993"],
    ),
    "lossy uint64 array": (
        lambda: (np.full((N, 3), 2**64 - 1, dtype=np.uint64), T0, {}),
        ValueError,
        ["`X`", "18446744073709551615"],
    ),
    "lossy int64 tensor": (
        lambda: (torch.full((N, 3), 2**63 - 1, dtype=torch.int64), T0, {}),
        ValueError,
        ["`X`", "9223372036854775807"],
    ),
    # tensors that hold no dense real numbers
    "complex tensor": (lambda: (X0.to(torch.complex64), T0, {}), TypeError, ["`X`", "complex64"]),
    "sparse COO tensor": (lambda: (X0.to_sparse(), T0, {}), TypeError, ["`X`", "sparse_coo", "to_dense()"]),
    "sparse CSR tensor": (lambda: (_csr(), T0, {}), TypeError, ["`X`", "sparse_csr", "to_dense()"]),
    "meta tensor": (lambda: (X0.to("meta"), T0, {}), ValueError, ["`X`", "'meta'"]),
    "quantized tensor": (lambda: (_quantized(), T0, {}), TypeError, ["`X`", "dequantize()"]),
    "list": (lambda: (X0.tolist(), T0, {}), TypeError, ["`X`", "list"]),
    # shapes and values
    "1-D X": (lambda: (X0[:, 0], T0, {}), ValueError, ["`X`", "(200,)"]),
    "3-D X": (lambda: (X0[None], T0, {}), ValueError, ["`X`", "(1, 200, 3)"]),
    "no rows": (lambda: (X0[:0], T0[:0], {"min_support": 10}), ValueError, ["`X`", "(0, 3)"]),
    "no rows, fraction": (lambda: (X0[:0], T0[:0], {}), ValueError, ["`X`", "(0, 3)"]),
    "no columns": (lambda: (X0[:, :0], T0, {}), ValueError, ["`X`", "(200, 0)"]),
    "all missing": (lambda: (torch.full((N, 3), float("nan")), T0, {}), ValueError, ["`X`", "NaN"]),
    "searched features all missing": (
        lambda: (torch.cat([X0[:, :1], torch.full((N, 2), float("nan"))], 1), T0, {"features": [1, 2]}),
        ValueError,
        ["`features`", "[1, 2]", "NaN"],
    ),
    "infinite value": (
        lambda: (X0.clone().index_fill_(0, torch.tensor([3]), float("inf")), T0, {}),
        ValueError,
        ["`X`", "+-inf"],
    ),
    "range overflows": (
        lambda: (torch.cat([X0[:, :2], (X0[:, 2:] - 0.5) * 1.7e308 * 2], 1), T0, {}),
        ValueError,
        ["`X`", "column 2", "`feature_scale`"],
    ),
    # target
    "string target": (lambda: (X0, "y", {}), TypeError, ["`target`", "str"]),
    "scalar target": (lambda: (X0, 0.5, {}), TypeError, ["`target`", "float"]),
    "fractional target": (lambda: (X0, T0.double() * 0.5, {}), TypeError, ["`target`", "0.5"]),
    "NaN target": (
        lambda: (X0, T0.double().index_fill_(0, torch.tensor([0]), float("nan")), {}),
        ValueError,
        ["`target`", "NaN"],
    ),
    "string array target": (lambda: (X0, np.array(["yes", "no"] * 100), {}), TypeError, ["`target`", "'yes'"]),
    "string list target": (lambda: (X0, ["yes", "no"] * 100, {}), TypeError, ["`target`", "<U3"]),
    "object string target": (
        lambda: (X0, np.array(["yes", 1] * 100, dtype=object), {}),
        TypeError,
        ["`target`", "'yes'"],
    ),
    "datetime target": (lambda: (X0, np.arange(N).astype("datetime64[D]"), {}), TypeError, ["`target`"]),
    "NA target": (
        lambda: (X0, pd.Series(pd.array([True, None] * 100, dtype="boolean")), {}),
        ValueError,
        ["`target`", "missing"],
    ),
    "short target": (lambda: (X0, T0[:-1], {}), ValueError, ["`target`", "(200)", "199"]),
    "2-D target": (lambda: (X0, torch.stack([T0, T0], 1), {}), ValueError, ["`target`", "(200, 2)"]),
    "ragged target": (lambda: (X0, [[True], [False, True]], {}), ValueError, ["`target`", "ragged"]),
    "sparse target": (lambda: (X0, _sparse_target(), {}), TypeError, ["`target`", "to_dense()"]),
    "meta target": (lambda: (X0, T0.to("meta"), {}), ValueError, ["`target`", "'meta'"]),
    "complex target": (lambda: (X0, T0.to(torch.complex64), {}), TypeError, ["`target`", "complex64"]),
    "empty subgroup": (lambda: (X0, torch.zeros(N, dtype=torch.bool), {}), ValueError, ["`target`", "empty"]),
    "full subgroup": (lambda: (X0, torch.ones(N, dtype=torch.bool), {}), ValueError, ["`target`", "all 200"]),
    # options and names
    "n_grids above the int16 codes": (lambda: (X0, T0, {"n_grids": 32768}), ValueError, ["`n_grids`", "32767"]),
    "n_grids 10**6": (lambda: (X0, T0, {"n_grids": 10**6}), ValueError, ["`n_grids`", "1000000"]),
    "n_grids 1": (lambda: (X0, T0, {"n_grids": 1}), ValueError, ["`n_grids`"]),
    "n_grids float": (lambda: (X0, T0, {"n_grids": 10.0}), TypeError, ["`n_grids`"]),
    "min_confidence high": (lambda: (X0, T0, {"min_confidence": "high"}), TypeError, ["`min_confidence`", "'high'"]),
    "min_support 1.0": (lambda: (X0, T0, {"min_support": 1.0}), ValueError, ["`min_support`", "int 1"]),
    "min_support above N": (lambda: (X0, T0, {"min_support": 201}), ValueError, ["`min_support`", "201"]),
    "duplicate feature_names": (
        lambda: (X0, T0, {"feature_names": ["a", "a", "b"]}),
        ValueError,
        ["`feature_names`", "['a']"],
    ),
    "feature_names equal as text": (
        lambda: (X0, T0, {"feature_names": [1, "1", 2]}),
        ValueError,
        ["`feature_names`", "['1']"],
    ),
    "short feature_names": (lambda: (X0, T0, {"feature_names": ["a", "b"]}), ValueError, ["`feature_names`", "3"]),
    "feature_names string": (lambda: (X0, T0, {"feature_names": "abc"}), TypeError, ["`feature_names`"]),
    "feature out of range": (lambda: (X0, T0, {"features": [0, 3]}), ValueError, ["`features`", "[3]"]),
    "no features": (lambda: (X0, T0, {"features": []}), ValueError, ["`features`", "empty"]),
    "fractional features": (lambda: (X0, T0, {"features": [0.5, 2]}), ValueError, ["`features`", "whole", "0.5"]),
    "a boolean mask as features": (
        lambda: (X0, T0, {"features": [True, False, True]}),
        TypeError,
        ["`features`", "booleans", "flatnonzero"],
    ),
    "feature names as features": (
        lambda: (X0, T0, {"features": ["b", "1"]}),
        TypeError,
        ["`features`", "names ['b', '1']", "positions"],
    ),
    "an infinite feature index": (lambda: (X0, T0, {"features": [float("inf")]}), TypeError, ["`features`", "[inf]"]),
    "target_name a number": (lambda: (X0, T0, {"target_name": 5}), TypeError, ["`target_name`", "string", "5"]),
    "unknown keyword": (lambda: (X0, T0, {"n_grid": 5}), TypeError, ["'n_grid'", "'n_grids'"]),
    "local_x shape": (lambda: (X0, T0, {"local_x": X0[0, :2]}), ValueError, ["`local_x`", "(3,)"]),
    "local_x strings": (lambda: (X0, T0, {"local_x": np.array(["a", "b", "c"])}), TypeError, ["`local_x`"]),
    "local_x meta": (lambda: (X0, T0, {"local_x": X0[0].to("meta")}), ValueError, ["`local_x`", "'meta'"]),
    "local_x infinite": (lambda: (X0, T0, {"local_x": [0.1, float("inf"), 0.2]}), ValueError, ["`local_x`"]),
    "short feature_types": (lambda: (X0, T0, {"feature_types": ["float"]}), ValueError, ["`feature_types`", "3"]),
    "scipy sparse X": (lambda: (_scipy_sparse(), T0, {}), TypeError, ["`X`", "toarray()"]),
}


@pytest.fixture
def no_binning(monkeypatch):
    """Binning the features (the first heavy step) fails the test: errors must come before it."""

    def fail(*args, **kwargs):
        raise AssertionError("the features were binned before the bad input was noticed")

    monkeypatch.setattr(search_module, "encode_features", fail)


@pytest.mark.parametrize("case", list(BAD), ids=list(BAD))
def test_bad_input_names_the_argument(case, no_binning):
    build, error, parts = BAD[case]
    X, target, kwargs = build()
    with pytest.raises(error) as info:
        ta.extract_rules(X, target, **kwargs)
    message = str(info.value)
    for part in parts:
        assert part in message, f"{part!r} not in {message!r}"
    assert "\n" not in message


def test_target_name_none_is_the_default_name():
    X, target = _data()
    named, default = (ta.extract_rules(X, target, max_length=1, **kw) for kw in ({"target_name": None}, {}))
    assert named and [str(rs) for rs in named] == [str(rs) for rs in default]
    assert "THEN target " in str(named[0])


@pytest.mark.parametrize(
    "case",
    [
        "no rows",
        "n_grids above the int16 codes",
        "duplicate feature_names",
        "string column",
        "meta target",
        "all missing",
    ],
)
def test_prepare_checks_too(case, no_binning):
    build, error, parts = BAD[case]
    X, target, kwargs = build()
    rest = {k: v for k, v in kwargs.items() if k not in SearchOptions.names() and k != "local_x"}
    with pytest.raises(error) as info:  # at the options object (n_grids) or in prepare
        options = SearchOptions.resolve(None, **{k: v for k, v in kwargs.items() if k in SearchOptions.names()})
        search_module.prepare(X, target, options, **rest)
    assert all(part in str(info.value) for part in parts)


def test_too_many_categories_names_the_feature():
    X = torch.arange(5000, dtype=torch.float64)[:, None]
    with pytest.raises(ValueError, match=r"at most 4096 distinct values in a 'cat' feature, but feature 0 has 5000"):
        ta.extract_rules(X, X[:, 0] < 100, feature_types=["cat"])


# ------------------------------------------------------------------------------------------- accepted edge input


def assert_correct(rule_sets, X, target) -> None:
    """Support, confidence and fitness of every rule set recomputed from its bounds in numpy (float64)."""
    Xn = np.asarray(X.numpy() if isinstance(X, torch.Tensor) else X, dtype=np.float64)
    tn = np.asarray(target.numpy() if isinstance(target, torch.Tensor) else target, dtype=bool)
    assert rule_sets, "expected at least one rule set"
    for rs in rule_sets:
        mask = np.ones(len(Xn), bool)
        for r in rs.rules:
            col = Xn[:, r.feature]
            mask &= (col == r.value) if r.value is not None else (col >= r.low) & (col < r.high)
        hits = int((mask & tn).sum())
        assert rs.support == int(mask.sum())
        assert rs.confidence == pytest.approx(hits / rs.support, abs=1e-12)
        assert rs.fitness == pytest.approx((2 * hits - rs.support) / int(tn.sum()), abs=1e-12)


@pytest.mark.parametrize("strategy", ["paper", "beam"])
@pytest.mark.parametrize("scale", [1e19, 1e300, 1.7e308, -1.7e308, 1e-300])
def test_huge_and_tiny_finite_values(strategy, scale):
    X, target = _data()
    X = X * scale
    rule_sets = ta.extract_rules(X, target, strategy=strategy)
    assert_correct(rule_sets, X, target)
    assert rule_sets[0].fitness == 1.0 and rule_sets[0].rules[0].feature == 0


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_huge_values_declared_int(strategy):
    """Beyond 2**53 every float64 is whole: the bounds stay floats (no int conversion that could overflow)."""
    X, target = _data()
    X = X * 1e300
    rule_sets = ta.extract_rules(X, target, strategy=strategy, feature_types=["int", "int", "int"])
    assert_correct(rule_sets, X, target)
    assert rule_sets[0].fitness == 1.0
    assert all(isinstance(r.low, float) and isinstance(r.high, float) for rs in rule_sets for r in rs.rules)


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint8, np.uint64, bool])
def test_integer_and_bool_arrays(dtype):
    g = np.random.default_rng(0)
    X = g.integers(0, 2 if dtype is bool else 100, size=(N, 3)).astype(dtype)
    target = X[:, 0].astype(np.int64) > (0 if dtype is bool else 49)
    rule_sets = ta.extract_rules(X, target)
    assert_correct(rule_sets, X, target)
    assert rule_sets[0].fitness == 1.0
    as_float = ta.extract_rules(X.astype(np.float64), target)
    assert [str(r) for r in rule_sets] == [str(r) for r in as_float]


def test_exactly_representable_big_integers():
    g = np.random.default_rng(1)
    X = g.integers(0, 1000, size=(N, 2)).astype(np.int64) * 2**52  # up to ~4.5e18, exact in float64
    target = X[:, 1] >= 500 * 2**52
    for data in (X, torch.from_numpy(X), pd.DataFrame(X, columns=["p", "q"])):
        rule_sets = ta.extract_rules(data, target)
        assert_correct(rule_sets, X, target)
        assert rule_sets[0].fitness == 1.0


def test_mixed_dataframe_of_numbers():
    X, target = _data()
    df = pd.DataFrame(
        {
            "a": X[:, 0].numpy(),
            "flag": [True, False] * 100,
            "maybe": pd.array([True, None] * 100, dtype="boolean"),
            "count": pd.array([1, None, 3, 4] * 50, dtype="Int64"),
            "obj": np.array(list(range(N)), dtype=object),
            7: np.arange(N, dtype=np.int16),
        }
    )
    rule_sets = ta.extract_rules(df, target)
    numbers = df.astype("Float64").to_numpy(dtype=np.float64, na_value=np.nan)
    assert_correct(rule_sets, numbers, target)
    assert rule_sets[0].rules[0].name == "a" and rule_sets[0].fitness == 1.0
    assert {r.name for rs in rule_sets for r in rs.rules} <= {"a", "flag", "maybe", "count", "obj", "7"}


@pytest.mark.parametrize("strategy", ["paper", "beam"])
def test_single_sample_subgroup(strategy):
    X, _ = _data()
    target = torch.zeros(N, dtype=torch.bool)
    target[int(X[:, 1].argmax())] = True  # the sample with the largest feature_1
    rule_sets = ta.extract_rules(X, target, min_support=1, strategy=strategy)
    assert_correct(rule_sets, X, target)
    assert bool(rule_sets[0].mask(X)[target].all())
    if strategy == "beam":  # the paper's grids may hold other samples too; the beam cuts between observed values
        assert rule_sets[0].fitness == 1.0 and rule_sets[0].support == 1


@pytest.mark.parametrize("n_grids", [4097, 32767])
def test_many_grids(n_grids):
    X, target = _data()
    rule_sets = ta.extract_rules(X, target, n_grids=n_grids, strategy="paper")
    assert_correct(rule_sets, X, target)
    assert rule_sets[0].fitness == 1.0


def test_many_grids_with_a_categorical_feature():
    """n_grids beyond the categorical limit is not blamed on a categorical feature."""
    X, target = _data()
    X = torch.cat([X, (X[:, :1] > 0.3).double()], 1)
    rule_sets = ta.extract_rules(X, target, n_grids=5000, strategy="paper")
    assert_correct(rule_sets, X, target)


@pytest.mark.parametrize("n_grids", [10, 100, 5000])
@pytest.mark.parametrize("bin_strategy", ["uniform", "quantile"])
def test_bin_codes_count_the_thresholds_reached(n_grids, bin_strategy):
    """Codes (one pass per threshold for few grids, a binary search for many) equal a count in numpy, with values
    lying exactly on grid edges."""
    g = torch.Generator().manual_seed(3)
    X = torch.randint(0, 50, (300, 3), generator=g).double()
    X[::7, 1] = float("nan")
    b = bin_features(X, [0, 1, 2], ["float", "float", "float"], n_grids=n_grids, bin_strategy=bin_strategy)
    thr = b.thresholds.numpy()
    Xn = X.numpy()
    expected = (Xn[:, :, None] >= thr[None, :, :]).sum(2)
    expected[np.isnan(Xn)] = b.nan_code
    assert np.array_equal(b.codes.long().numpy(), expected)


def test_reduced_precision_and_views():
    X, target = _data()
    for data in (X.half(), X.bfloat16(), X.float(), X.t().contiguous().t(), X.numpy()[:, :], X.numpy().copy()):
        rule_sets = ta.extract_rules(data, target, strategy="paper")
        ref = data.double() if isinstance(data, torch.Tensor) else data
        assert_correct(rule_sets, ref, target)


def test_read_only_and_grad_inputs_give_the_same_rules_without_warnings():
    X, target = _data()
    frozen = X.numpy().copy()
    frozen.setflags(write=False)
    expected = [str(r) for r in ta.extract_rules(X, target)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", message="Feature 'feature_0' may leak the target")  # target = x_0 >= 0.5
        assert [str(r) for r in ta.extract_rules(frozen, target)] == expected
        assert [str(r) for r in ta.extract_rules(X.clone().requires_grad_(), target)] == expected


@pytest.mark.parametrize("target_form", ["int", "float", "numpy bool", "list", "column", "series", "object bools"])
def test_target_forms(target_form):
    X, target = _data()
    forms = {
        "int": target.long(),
        "float": target.double(),
        "numpy bool": target.numpy(),
        "list": target.tolist(),
        "column": target[:, None],
        "series": pd.Series(target.numpy()),
        "object bools": np.array(target.tolist(), dtype=object),
    }
    rule_sets = ta.extract_rules(X, forms[target_form])
    assert_correct(rule_sets, X, target)
    assert [str(r) for r in rule_sets] == [str(r) for r in ta.extract_rules(X, target)]
