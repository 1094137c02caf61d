"""Docs that cannot drift: every output README.md and docs/*.md show below a command is produced again and compared
(tests/docs_outputs.py; `python tests/docs_outputs.py --update` refreshes the pages)."""

from __future__ import annotations

from pathlib import Path

import docs_outputs as D
import pytest

PAIRS = [shown for page in D.page_paths() for shown in D.shown_outputs(page)[1]]
_RUNS: dict[Path, D.PageRun] = {}
_SLOW = ("shared/data", "examples/", "pl.Trainer(")  # the paper's data (100,000 rows), whole examples, training


def _param(shown: D.Shown) -> object:
    marks = []
    if any(word in D.runs_with(shown) for word in _SLOW):
        marks.append(pytest.mark.slow)
    return pytest.param(shown, id=shown.name, marks=marks)


def test_pages_show_outputs() -> None:
    pages = {shown.page.name for shown in PAIRS}
    assert {"README.md", "getting_started.md", "cli.md", "explainer.md"} <= pages


@pytest.mark.parametrize("shown", [_param(s) for s in PAIRS])
def test_shown_output_is_what_the_command_prints(shown: D.Shown, tmp_path_factory: pytest.TempPathFactory) -> None:
    if shown.command.skip:
        pytest.skip("exempt on the page (<!-- docs-outputs: skip ... -->)")
    if "shared/data" in D.runs_with(shown) and not D.DATA.exists():
        pytest.skip(f"the shared data are not at {D.DATA}")
    if shown.page not in _RUNS:
        _RUNS[shown.page] = D.PageRun(shown.page, tmp_path_factory.mktemp("docs"))
    actual = _RUNS[shown.page].output(shown)
    assert D.matches(shown.output.text, actual), (
        f"{shown.name} shows an output its command no longer prints; `python tests/docs_outputs.py --update` "
        f"refreshes the page. It prints:\n{actual}"
    )


# ---------------------------------------------------------------------------------------------- the comparison itself

STALE_PAGE = """\
9 rule sets found
   1  HbA1c_level >= 6.8                                    3895       1.000    0.458
   2  blood_glucose_level >= 212                            3277       1.000    0.386"""
PRINTED = """\
7 rule sets found
   1  HbA1c_level >= 6.7                             3895       1.000    0.458
   2  blood_glucose_level >= 210                     3277       1.000    0.386
"""


def test_drifted_numbers_and_counts_fail() -> None:
    assert not D.matches(STALE_PAGE, PRINTED)  # the drift: 9 vs 7 rule sets, 6.8 vs 6.7, 212 vs 210
    for stale, fresh in [("6.8", "6.7"), ("212", "210"), ("9 rule", "7 rule")]:
        page = PRINTED.replace(fresh, stale)
        assert not D.matches(page, PRINTED), stale
    assert D.matches(PRINTED.replace("   1  ", " 1 "), PRINTED)  # white space runs alike


def test_numbers_within_the_pages_rounding() -> None:
    assert D.matches("fitness=0.458", "fitness=0.45787037037037037")  # rounds to the shown 0.458
    assert not D.matches("fitness=0.457", "fitness=0.45787037037037037")
    assert D.matches("0.46", "0.455")  # half a unit of the last digit
    assert not D.matches("0.46", "0.454")
    assert not D.matches("support=3895", "support=3896")  # integers exact
    assert not D.matches("HbA1c_level >= 6.7", "HbA1c_level > 6.7")  # the words between numbers exact
    assert D.matches("z_10 < 1.5", "z_10 < 1.5")
    assert not D.matches("z_10 < 1.5", "z_11 < 1.5")  # digits inside names are words
    assert D.matches("13 rule sets in 3.4 s; 12 ms", "13 rule sets in 1.3 s; 7 ms")  # timings are not compared
    assert not D.matches("13 rule sets in 3.4 s", "16 rule sets in 3.4 s")


def test_lines_added_or_missing_fail_unless_the_page_elides_them() -> None:
    lines = [f"row {i}: {i / 7:.3f}" for i in range(10)]
    printed = "\n".join(lines)
    assert not D.matches("\n".join(lines[:9]), printed)
    assert not D.matches("\n".join([*lines, "row 10: 1.429"]), printed)
    assert D.matches("\n".join([*lines[:2], "...", *lines[-1:]]), printed)
    assert D.matches("\n".join(["...", *lines[4:6], "..."]), printed)
    assert not D.matches("\n".join(["...", lines[6], lines[4], "..."]), printed)  # order kept
    assert not D.matches("\n".join([*lines[:2], "...", "row 99: 0.000"]), printed)


def test_refresh_keeps_the_pages_elision() -> None:
    lines = [f"row {i}: {i / 7:.3f}" for i in range(10)]
    page = "\n".join([*lines[:2], "  ...", lines[-1]])
    new = [line.replace("row", "line") for line in lines]
    assert D.refreshed(page, "\n".join(new)) == "\n".join([*new[:2], "  ...", new[-1]])
    assert D.refreshed("old\nlines", "a\nb\nc") == "a\nb\nc"


def test_update_rewrites_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    stale = "Intro.\n\n```python\nx = 6 * 7\nprint(f'x is {x}')\n```\n\n```\nx is 41\n```\n\nAfter.\n"
    page.write_text(stale)
    assert D.check_pages([str(page)]) == [f"{page}:3"]
    assert page.read_text() == stale  # checking alone leaves the page
    assert D.check_pages([str(page)], update=True) == [f"{page}:3"]
    assert page.read_text() == stale.replace("x is 41", "x is 42")
    assert D.check_pages([str(page)]) == []


def test_pairs_need_the_output_right_below_the_command(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "```bash\ntorch-amore --version\n```\n\nprose\n\n```\nnot an output\n```\n\n"
        "<!-- docs-outputs: skip measured on a 2-core machine, 2026-11-27 -->\n```bash\ntorch-amore --version\n```\n"
        "\n```text\ntorch-amore 0.0\n```\n"
    )
    page.write_text(text)
    lines = text.splitlines()
    second = lines.index("```bash", 1)
    _, pairs = D.shown_outputs(page)
    assert [(p.command.start, p.output.start, p.command.skip) for p in pairs] == [(second, second + 4, True)]
    assert lines[second - 1].startswith("<!-- docs-outputs: skip")
    assert D.check_pages([str(page)]) == []  # the skipped pair is not run


def test_doctest_blocks_run_in_the_pages_namespace(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    text = (
        "```python\n>>> x = 6\n>>> int('no')\nTraceback (most recent call last):\n...\nValueError: ...\n"
        ">>> y = 7\n```\n\n```python\nprint(x * y)\n```\n\n```\n42\n```\n"
    )
    page.write_text(text)
    assert D.check_pages([str(page)]) == []
    page.write_text(text.replace("\n42\n", "\n41\n"))
    assert D.check_pages([str(page)]) == [f"{page}:{text.splitlines().index('print(x * y)')}"]
