"""The outputs the docs show, produced again: every command block of README.md and docs/*.md that is followed by an
output block is run, and its output compared with the page's.

A page ties an output to its command by layout: a fenced ``bash``/``console``/``python`` block, then (blank lines
only between) a fenced block without a language or with ``text``: that block is what the command prints. Python
blocks run in one namespace per page, in page order (a ``>>>`` block runs its examples there too, its outputs checked
by the doctests); ``torch-amore ...`` and ``python examples/...`` lines run as commands, in a temporary directory.
``../shared/data`` in a command or a block means the shared data (``TORCH_AMORE_DATA`` to put them elsewhere).

The comparison: the text between numbers equal up to runs of white space, integers equal, decimals within the page's
rounding (half a unit of its last digit), timings (a number followed by ``s``, ``ms`` or ``min``) not compared, and a
line ``...`` on the page standing for any lines of the output.
An HTML comment ``<!-- docs-outputs: skip REASON -->`` right before a command block exempts it: measured tables
that name their machine, date and command, and timings (a benchmark states them).

Refresh the pages after a change that moves a shown output (the lead does this after merging):

    python tests/docs_outputs.py --update            # every page; README.md docs/cli.md to pick pages
    python tests/docs_outputs.py                     # check only: lists the blocks that differ

``--update`` rewrites the output blocks only, keeping each ``...`` line with as many lines before and after it as
the page shows.
"""

from __future__ import annotations

import contextlib
import doctest
import io
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = ("README.md", "docs/*.md")
DATA = Path(os.environ.get("TORCH_AMORE_DATA", ROOT.parent / "shared" / "data")).resolve()

_FENCE = re.compile(r"^```([\w-]*)[ \t]*$")
_SKIP = re.compile(r"<!--\s*docs-outputs:\s*skip\b")
_COMMAND_LANGS = ("bash", "console", "sh", "shell", "python")
_TIMING = re.compile(r" ?(s|ms|min)\b")
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:,\d{3})*(?:\.\d+)?(?:e[-+]?\d+)?(?![\w])", re.IGNORECASE)


@dataclass
class Block:
    """A fenced block of a page: its language, its text, and where it lies (lines ``start`` .. ``end``, the fences
    included, 0-based)."""

    lang: str
    text: str
    start: int
    end: int
    skip: bool = False


@dataclass
class Shown:
    """A command block and the output block the page shows for it."""

    page: Path
    command: Block
    output: Block

    @property
    def name(self) -> str:
        page = self.page.relative_to(ROOT) if self.page.is_relative_to(ROOT) else self.page
        return f"{page}:{self.command.start + 1}"


def blocks(text: str) -> list[Block]:
    """The fenced blocks of a markdown text, in order."""
    lines = text.splitlines()
    found, i = [], 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        before = "\n".join(lines[max(0, i - 3) : i])
        found.append(Block(match.group(1), "\n".join(lines[i + 1 : j]), i, j, bool(_SKIP.search(before))))
        i = j + 1
    return found


def page_paths(names: list[str] | None = None) -> list[Path]:
    if names:
        return [(ROOT / n).resolve() for n in names]
    return [p for pattern in PAGES for p in sorted(ROOT.glob(pattern))]


def shown_outputs(page: Path) -> tuple[list[Block], list[Shown]]:
    """Every block of ``page`` and the (command, output) pairs among them."""
    text = page.read_text()
    lines = text.splitlines()
    every = blocks(text)
    pairs = []
    for prev, block in zip(every, every[1:]):
        if block.lang not in ("", "text") or prev.lang not in _COMMAND_LANGS:
            continue
        if any(line.strip() for line in lines[prev.end + 1 : block.start]):
            continue  # prose between: the block is no output of the command above
        pairs.append(Shown(page, prev, block))
    return every, pairs


def runs_with(shown: Shown) -> str:
    """The text that runs for ``shown``: the page's python blocks up to its command (they share a namespace) and the
    command itself."""
    every, _ = shown_outputs(shown.page)
    earlier = [b.text for b in every if b.lang == "python" and b.start < shown.command.start]
    return "\n".join([*earlier, shown.command.text])


# ---------------------------------------------------------------------------------------------------------- running


def _with_data(text: str) -> str:
    return text.replace("../shared/data", str(DATA))


def shell_commands(text: str) -> list[list[str]]:
    """The ``torch-amore`` and ``python ...`` commands of a shell block (continued lines joined), as argv lists run
    with this interpreter; comments and prompts left out."""
    text = re.sub(r"\\\n\s*", " ", text)
    argvs = []
    for line in text.splitlines():
        line = line.strip().removeprefix("$ ").strip()
        if not line or line.startswith("#"):
            continue
        argv = shlex.split(_with_data(line), comments=True)
        if argv[0] == "torch-amore":
            argv = [sys.executable, "-m", "torch_amore", *argv[1:]]
        elif argv[0] in ("python", "python3"):
            argv = [sys.executable, *argv[1:]]
        else:
            raise ValueError(f"cannot run {line!r}: a command block with an output runs torch-amore or python")
        argvs.append(argv)
    return argvs


_SHELL_RUNS: dict[str, str] = {}


def run_shell(text: str, cwd: Path) -> str:
    """What the commands of a shell block print (stdout and stderr, in the order a terminal shows them); a block
    shown on several pages runs once."""
    if text in _SHELL_RUNS:
        return _SHELL_RUNS[text]
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""), PYTHONUNBUFFERED="1")
    env.pop("TORCH_AMORE_TRACEBACK", None)
    out = []
    for argv in shell_commands(text):
        argv = [str(ROOT / a) if a.startswith("examples/") else a for a in argv]
        done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        out.append(done.stdout)
    _SHELL_RUNS[text] = "".join(out)
    return _SHELL_RUNS[text]


def run_python(text: str, namespace: dict) -> str:
    """What a python block prints, run in ``namespace``; a ``>>>`` block runs its examples one by one (an example
    that shows a traceback may raise)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        if ">>>" not in text:
            exec(compile(_with_data(text), "<docs>", "exec"), namespace)
            return buffer.getvalue()
        for example in doctest.DocTestParser().get_examples(text):
            try:
                exec(compile(_with_data(example.source), "<docs>", "exec"), namespace)
            except Exception:
                if example.exc_msg is None:
                    raise
    return buffer.getvalue()


class PageRun:
    """Runs a page's blocks in order, one namespace and one working directory for the page."""

    def __init__(self, page: Path, workdir: Path) -> None:
        self.page, self.workdir = page, workdir
        self.every, self.pairs = shown_outputs(page)
        self.namespace: dict = {"__name__": "__docs__"}
        self.done = -1
        self.cache: dict[str, str] = {}

    def output(self, shown: Shown) -> str:
        """The output of ``shown``'s command: the page's python blocks with outputs (and the ``>>>`` blocks) before
        it run first."""
        for i, block in enumerate(self.every):
            if i <= self.done or block.start > shown.command.start:
                continue
            self.done = i
            if block.lang != "python" or block.skip:
                continue
            has_output = any(p.command is block for p in self.pairs)
            if has_output or ">>>" in block.text:
                with _cwd(self.workdir):
                    self.cache[str(block.start)] = run_python(block.text, self.namespace)
        if shown.command.lang == "python":
            return self.cache[str(shown.command.start)]
        return run_shell(shown.command.text, self.workdir)


@contextlib.contextmanager
def _cwd(path: Path):
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


# ------------------------------------------------------------------------------------------------------- comparing


def _line_matches(shown: str, actual: str) -> bool:
    """One line: the text between numbers equal (white space runs alike), integers equal, decimals within the page's
    rounding (half a unit of the shown last digit); a timing (a number followed by s, ms or min) is not compared."""
    shown, actual = " ".join(shown.split()), " ".join(actual.split())
    if _NUMBER.split(shown) != _NUMBER.split(actual):
        return False
    shown_nums, actual_nums = list(_NUMBER.finditer(shown)), _NUMBER.findall(actual)
    if len(shown_nums) != len(actual_nums):
        return False
    return all(_TIMING.match(shown, m.end()) or _number_matches(m.group(), a) for m, a in zip(shown_nums, actual_nums))


def _number_matches(shown: str, actual: str) -> bool:
    s_val, a_val = float(shown.replace(",", "")), float(actual.replace(",", ""))
    if "." not in shown and "e" not in shown.lower():
        return s_val == a_val
    digits = len(shown.split(".")[1].lower().split("e")[0]) if "." in shown else 0
    return abs(s_val - a_val) <= 0.5 * 10.0**-digits * (1 + 1e-9)


def _is_gap(line: str) -> bool:
    return line.strip() == "..."


def _segments(lines: list[str]) -> list[list[str]]:
    out: list[list[str]] = [[]]
    for line in lines:
        if _is_gap(line):
            out.append([])
        else:
            out[-1].append(line)
    return out


def _at(shown: list[str], actual: list[str], k: int) -> bool:
    return k + len(shown) <= len(actual) and all(_line_matches(s, a) for s, a in zip(shown, actual[k:]))


def matches(shown_text: str, actual_text: str) -> bool:
    """Whether the output a page shows agrees with ``actual_text`` (see the module docstring)."""
    shown = [line for line in shown_text.strip("\n").splitlines()]
    actual = [line.rstrip() for line in actual_text.strip("\n").splitlines()]
    parts = _segments(shown)
    if len(parts) == 1:
        return len(shown) == len(actual) and _at(shown, actual, 0)
    first, *middle, last = parts
    if not _at(first, actual, 0):
        return False
    k = len(first)
    end = len(actual) - len(last)
    if end < k or not _at(last, actual, end):
        return False
    for part in middle:
        k = next((j for j in range(k, end - len(part) + 1) if _at(part, actual, j)), None)
        if k is None:
            return False
        k += len(part)
    return True


def refreshed(shown_text: str, actual_text: str) -> str:
    """The output block's new text: the actual output, abbreviated where the page shows ``...`` lines (as many lines
    before the first and after the last as the page shows)."""
    actual = [line.rstrip() for line in actual_text.strip("\n").splitlines()]
    shown = shown_text.strip("\n").splitlines()
    parts = _segments(shown)
    if len(parts) == 1:
        return "\n".join(actual)
    gap = next(line for line in shown if _is_gap(line))
    head, tail = len(parts[0]), len(parts[-1])
    if head + tail >= len(actual):
        return "\n".join(actual)
    return "\n".join([*actual[:head], gap, *(actual[len(actual) - tail :] if tail else [])])


# ------------------------------------------------------------------------------------------------------------- main


def check_pages(names: list[str] | None = None, update: bool = False) -> list[str]:
    """Run every shown output of the pages; the names of those that differ (rewritten with ``update``)."""
    differ = []
    with tempfile.TemporaryDirectory() as tmp:
        for page in page_paths(names):
            run = PageRun(page, Path(tmp))
            new_outputs = {}
            for shown in run.pairs:
                if shown.command.skip:
                    continue
                actual = run.output(shown)
                if not matches(shown.output.text, actual):
                    differ.append(shown.name)
                    new_outputs[shown.output.start] = refreshed(shown.output.text, actual)
            if update and new_outputs:
                lines = page.read_text().splitlines()
                for start in sorted(new_outputs, reverse=True):
                    end = next(b.end for b in run.every if b.start == start)
                    lines[start + 1 : end] = new_outputs[start].splitlines()
                page.write_text("\n".join(lines) + "\n")
    return differ


if __name__ == "__main__":
    args = sys.argv[1:]
    update = "--update" in args
    pages = [a for a in args if a != "--update"]
    if not DATA.exists():
        sys.exit(f"the shared data are not at {DATA}; set TORCH_AMORE_DATA")
    stale = check_pages(pages or None, update=update)
    for name in stale:
        print(("updated " if update else "differs: ") + name)
    sys.exit(1 if stale and not update else 0)
