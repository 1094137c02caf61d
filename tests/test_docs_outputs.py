"""Docs that cannot drift: every output README.md and docs/*.md show below a command is produced again and compared
(tests/docs_outputs.py; `python tests/docs_outputs.py --update` refreshes the pages)."""

from __future__ import annotations

from pathlib import Path

import docs_outputs as D
import pytest

PAIRS = [shown for page in D.page_paths() for shown in D.shown_outputs(page)[1]]
_RUNS: dict[Path, D.PageRun] = {}


def _param(shown: D.Shown) -> object:
    marks = []
    if "shared/data" in shown.command.text or "examples/" in shown.command.text:
        marks.append(pytest.mark.slow)  # the paper's data (100,000 rows) or a whole example
    return pytest.param(shown, id=shown.name, marks=marks)


def test_pages_show_outputs() -> None:
    pages = {shown.page.name for shown in PAIRS}
    assert {"README.md", "getting_started.md", "cli.md", "explainer.md"} <= pages


@pytest.mark.parametrize("shown", [_param(s) for s in PAIRS])
def test_shown_output_is_what_the_command_prints(shown: D.Shown, tmp_path_factory: pytest.TempPathFactory) -> None:
    if shown.command.skip:
        pytest.skip("exempt on the page (<!-- docs-outputs: skip ... -->)")
    if "shared/data" in shown.command.text and not D.DATA.exists():
        pytest.skip(f"the shared data are not at {D.DATA}")
    if shown.page not in _RUNS:
        _RUNS[shown.page] = D.PageRun(shown.page, tmp_path_factory.mktemp("docs"))
    actual = _RUNS[shown.page].output(shown)
    assert D.matches(shown.output.text, actual), (
        f"{shown.name} shows an output its command no longer prints; `python tests/docs_outputs.py --update` "
        f"refreshes the page. It prints:\n{actual}"
    )
