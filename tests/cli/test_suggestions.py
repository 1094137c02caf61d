"""'Did you mean' in the command line: misspelled flags get the closest flag, the target language suggests `==` for
`=` and quotes for a bare word that is no column; each suggestion is checked to be what works."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from torch_amore.cli.commands import build_parser, main
from torch_amore.cli.expression import ExpressionError, parse_expression


@pytest.fixture(scope="module")
def csv(tmp_path_factory: pytest.TempPathFactory) -> str:
    rng = np.random.default_rng(0)
    n = 200
    x = rng.normal(size=n).round(3)
    diagnosis = np.where(x + 0.3 * rng.normal(size=n) > 0, "malignant", "benign")
    path = tmp_path_factory.mktemp("suggest") / "t.csv"
    pd.DataFrame({"x": x, "predicted": (x > 0.5).astype(int), "diagnosis": diagnosis}).to_csv(path, index=False)
    return str(path)


def _error(capsys: pytest.CaptureFixture, *argv: str) -> str:
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("torch-amore: error: ")
    return err.removeprefix("torch-amore: error: ")


def test_misspelled_flag_names_the_closest(csv: str, capsys: pytest.CaptureFixture) -> None:
    err = _error(capsys, "rules", csv, "--target", "predicted == 1", "--max-lenght", "2")
    assert err == "unrecognized arguments: --max-lenght 2 (did you mean '--max-length'?)"
    assert main(["rules", csv, "--target", "predicted == 1", "--max-length", "2"]) == 0  # the suggestion works
    capsys.readouterr()


def test_several_misspelled_flags_and_one_without_a_match(csv: str, capsys: pytest.CaptureFixture) -> None:
    err = _error(capsys, "rules", csv, "--target", "predicted == 1", "--max-lenght", "2", "--topk=3", "--zzzzzz")
    assert err.endswith(" (did you mean '--max-length' for --max-lenght, '--top-k' for --topk?)")
    assert "--zzzzzz" in err and "for --zzzzzz" not in err
    flags = build_parser().parse_args(["rules", csv, "--target", "t", "--top-k", "3", "--max-length", "2"])
    assert (flags.top_k, flags.max_length) == (3, 2)


def test_other_argparse_errors_keep_their_words(capsys: pytest.CaptureFixture) -> None:
    err = _error(capsys, "rules", "t.csv")
    assert "did you mean" not in err


@pytest.mark.parametrize(
    ("text", "fixed"),
    [
        ("predicted = 0", "predicted == 0"),
        ("x > 0 and predicted = 1", "x > 0 and predicted == 1"),
        ('diagnosis = "a=b"', 'diagnosis == "a=b"'),  # an = inside a string stays
    ],
)
def test_single_equals_suggests_double(text: str, fixed: str) -> None:
    columns = ["x", "predicted", "diagnosis"]
    with pytest.raises(ExpressionError) as info:
        parse_expression(text, columns)
    assert f"(did you mean {fixed}? == compares, = is not in the language)" in str(info.value)
    parse_expression(fixed, columns)  # the suggestion parses


def test_equals_hint_only_where_it_parses() -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression("x = = 1", ["x"])
    assert "did you mean" not in str(info.value)
    assert "backquote column names" in str(info.value)


def test_bare_word_suggests_quotes(csv: str, capsys: pytest.CaptureFixture) -> None:
    columns = ["x", "predicted", "diagnosis"]
    with pytest.raises(ExpressionError) as info:
        parse_expression("diagnosis == malignant", columns)
    message = str(info.value)
    assert message.startswith(
        "unknown column 'malignant' (did you mean diagnosis == \"malignant\"? strings are quoted)"
    )
    df = pd.read_csv(csv)
    mask = parse_expression('diagnosis == "malignant"', columns).evaluate(df)
    assert np.array_equal(mask, (df["diagnosis"] == "malignant").to_numpy())
    err = _error(capsys, "rules", csv, "--target", "diagnosis == malignant")
    assert 'did you mean diagnosis == "malignant"?' in err


def test_bare_word_close_to_a_column_names_both() -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression("diagnosis == diagnosi", ["x", "diagnosis"])
    assert "(did you mean 'diagnosis', or diagnosis == \"diagnosi\"? strings are quoted)" in str(info.value)
    with pytest.raises(ExpressionError, match=r"^unknown column 'diagnoss' \(did you mean 'diagnosis'\?\)"):
        parse_expression("diagnoss == 1", ["x", "diagnosis"])  # no column on the other side: a misspelled column


def test_bare_word_in_a_list_suggests_quotes() -> None:
    with pytest.raises(ExpressionError) as info:
        parse_expression("diagnosis in [malignant, 'benign']", ["diagnosis"])
    assert (
        str(info.value) == "a bare word inside 'in [...]': malignant (did you mean \"malignant\"? strings are quoted)"
    )
