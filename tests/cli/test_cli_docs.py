"""docs/cli.md against the parser: every flag of ``torch-amore rules`` is on the page, and its table of search
options lists each flag of the search and evidence groups once, with the parser's metavar or choices, the
`SearchOptions` field it sets and that field's default."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from torch_amore import SearchOptions
from torch_amore.cli.commands import build_parser

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
TABLE_GROUPS = ("search options", "how far to trust")  # the argument groups whose flags the table lists


def _rules_parser() -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices["rules"]


def _table_actions() -> dict[str, argparse.Action]:
    groups = [g for g in _rules_parser()._action_groups if g.title and g.title.startswith(TABLE_GROUPS)]
    assert len(groups) == len(TABLE_GROUPS)
    return {a.option_strings[0]: a for g in groups for a in g._group_actions}


def _usage(action: argparse.Action) -> str:
    """How ``--help`` shows the flag's argument: ``{a,b}`` for choices, the metavar, nothing for a switch."""
    if action.nargs == 0:
        return ""
    if action.choices is not None:
        return "{" + ",".join(action.choices) + "}"
    return action.metavar


def _table_rows() -> list[tuple[list[str], str]]:
    """The search options table: (the backquoted ``--flag ARG`` items of its first cell, its second cell)."""
    rows = []
    for line in PAGE.read_text().splitlines():
        if line.startswith("| `--"):
            first, second = line.strip("|").split(" | ", 1)
            rows.append((re.findall(r"`(--[^`]+)`", first), second))
    return rows


def test_every_flag_of_the_parser_is_on_the_page():
    text = PAGE.read_text()
    flags = [s for a in _rules_parser()._actions for s in a.option_strings if s.startswith("--") and s != "--help"]
    assert len(flags) > 30
    missing = [flag for flag in flags if not re.search(re.escape(flag) + r"(?![\w-])", text)]
    assert not missing, f"docs/cli.md does not mention {missing}"


def test_the_table_lists_each_option_flag_as_help_shows_it():
    actions = _table_actions()
    items = [item for flags, _ in _table_rows() for item in flags]
    listed = [item.split(" ")[0] for item in items]
    assert sorted(listed) == sorted(actions), "the table's flags differ from the parser's search and evidence flags"
    for item in items:
        flag, _, shown = item.partition(" ")
        assert shown == _usage(actions[flag]), (item, _usage(actions[flag]))


def test_the_table_names_each_field_and_its_default():
    defaults = SearchOptions()
    named, checked = set(), 0
    for flags, cell in _table_rows():
        fields = [item.split(" ")[0].removeprefix("--").replace("-", "_") for item in flags]  # the fields set
        assert all(f"`{field}`" in cell for field in fields), cell
        named |= set(fields)
        stated = re.findall(r"\(default ([^():]+)\)", cell)
        if stated:
            assert len(stated) == len(fields), cell
            for field, value in zip(fields, stated):
                assert value == str(getattr(defaults, field)), (field, value)
                checked += 1
    assert set(SearchOptions.names()) <= named  # every field of SearchOptions is a flag, as the page says
    assert named - set(SearchOptions.names()) == {"holdout_rows"}  # extract_rules' argument beside the options
    assert checked >= 12
