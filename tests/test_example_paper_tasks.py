"""examples/tox21_gnn.py and examples/mnist_latent.py: the paper's Tasks 3 and 4 beside its table.

The slow tests rerun the commands that docs/reproduction.md names and check every number of its Task 3 and Task 4
tables against what the scripts print; the fast ones check the paper's rows and settings in the scripts and the page
against the paper's LaTeX source, and the Tox21 reader against pandas.
"""

from __future__ import annotations

import importlib.util
import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = (ROOT / ".." / "shared" / "data").resolve()
PAPER_TEX = (ROOT / ".." / "shared" / "paper" / "amore_paper.tex").resolve()
DOC = ROOT / "docs" / "reproduction.md"
TOX21 = ROOT / "examples" / "tox21_gnn.py"
MNIST = ROOT / "examples" / "mnist_latent.py"
ASSAYS = ("NR-AR", "NR-AhR", "NR-AR-LBD")

needs_tox21 = pytest.mark.skipif(not (DATA / "tox21.csv").exists(), reason="shared Tox21 data not available")
needs_mnist = pytest.mark.skipif(
    not (DATA / "mnist-t10k-images-idx3-ubyte.gz").exists(), reason="shared MNIST data not available"
)
needs_paper = pytest.mark.skipif(not PAPER_TEX.exists(), reason="the paper's LaTeX source is not available")

#: A number in a rule's text (not the digits of a name such as ``z_59`` or ``SMR_VSA5``).
NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _run(script: Path, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(script), "--data", str(DATA), *args], cwd=ROOT, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _section(text: str, heading: str) -> str:
    """The lines from ``heading`` (a line starting with it, then not a letter, digit or dash) to the next heading of
    the same or a higher level."""
    level = len(heading) - len(heading.lstrip("#"))
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(re.escape(heading) + r"(?![\w-])", line))
    end = next(
        (
            j
            for j in range(start + 1, len(lines))
            if re.match(r"#+ ", lines[j]) and len(lines[j]) - len(lines[j].lstrip("#")) <= level
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _rule_rows(text: str) -> dict[str, list[str]]:
    """Method -> cells of the rule-set table rows (``| method | rule set | support | ... |``) in ``text``."""
    rows = {}
    for line in text.splitlines():
        cells = _cells(line) if line.startswith("| ") else []
        if len(cells) == 6 and (cells[0].startswith("paper ") or cells[0].startswith("torch_amore ")):
            rows[cells[0]] = cells
    return rows


def _same_rule(page: str, printed: str) -> bool:
    """The same conditions; each bound equal up to the last printed digit of a shortest cut (another CPU may print
    another shortest number between the same two observed values, see the page)."""
    if NUMBER.sub("#", page) != NUMBER.sub("#", printed):
        return False
    pairs = zip(NUMBER.findall(page), NUMBER.findall(printed))
    return all(math.isclose(float(a), float(b), rel_tol=0.01, abs_tol=0.01) for a, b in pairs)


def _check_rows(page: dict[str, list[str]], printed: dict[str, list[str]]) -> None:
    assert set(page) == set(printed) and len(page) == 5, (sorted(page), sorted(printed))
    for method, cells in page.items():
        got = printed[method]
        assert _same_rule(cells[1], got[1]), (method, cells[1], got[1])
        if method.startswith("paper "):
            assert cells[1:] == got[1:], method  # the paper's rows: copied as the script prints them
            continue
        assert int(cells[2]) == int(got[2]), method  # support: a count
        for a, b in zip(cells[3:5], got[3:5]):  # confidence, fitness: three decimals on the page
            assert abs(float(a) - float(b)) <= 5e-4 + 1e-12, (method, cells, got)
        held_page, held_printed = cells[5].split(" / "), got[5].split(" / ")
        assert int(held_page[0]) == int(held_printed[0]), method
        for a, b in zip(held_page[1:], held_printed[1:]):
            assert abs(float(a) - float(b)) <= 5e-4 + 1e-12, (method, cells, got)


def _model_numbers(line: str) -> list[float]:
    """Training size, #(y*=c), #(y^=c), recall, precision, AUC, AUC_test from a script's ``model:`` line."""
    size = re.search(r"training size (\d+)|\(of (\d+)\) recall", line)
    keys = (
        r"#\(y\*=\d\)=(\d+)",
        r"#\(y\^=\d\)=(\d+)",
        r"recall=([\d.]+)",
        r"precision=([\d.]+)",
        r"AUC=([\d.]+)",
        r"AUC_test=([\d.]+)",
    )
    return [float(size.group(1) or size.group(2))] + [float(re.search(k, line).group(1)) for k in keys]


def _page_models(text: str) -> dict[str, list[str]]:
    """(data set, model) -> the cells of the model-summary rows (``| assay | model | training size | ... |``)."""
    rows = {}
    for line in text.splitlines():
        cells = _cells(line) if line.startswith("| ") else []
        if len(cells) == 9 and cells[2].isdigit():
            rows[(cells[0], cells[1].split(" ")[0])] = cells[2:]
    return rows


def _check_model(page: list[str], printed: list[float]) -> None:
    assert [int(v) for v in page[:3]] == [int(v) for v in printed[:3]], (page, printed)
    for a, b in zip(page[3:], printed[3:]):
        assert abs(float(a) - b) <= 5e-4 + 1e-12, (page, printed)


# ------------------------------------------------------------------------------------------------------- slow runs
@needs_tox21
@pytest.mark.slow
def test_tox21_page_numbers_come_from_the_command():
    pytest.importorskip("rdkit")
    pytest.importorskip("torch_geometric")
    import torch

    machine = _section(DOC.read_text(), "## Machine and date")
    kernels = re.search(r"CPU kernels (\w+)", machine).group(1)
    if torch.backends.cpu.get_cpu_capability() != kernels:  # the GAT's training amplifies the kernels' rounding
        pytest.skip(
            f"the page's Tox21 numbers are for {kernels} kernels; torch runs "
            f"{torch.backends.cpu.get_cpu_capability()} here"
        )
    out = _run(TOX21)  # the page's command: python examples/tox21_gnn.py --data ../shared/data
    assert f"CPU kernels {kernels}," in out
    page = _section(DOC.read_text(), "## Task 3")
    models = _page_models(page)
    for assay in ASSAYS:
        printed = out.split(f"=== {assay}:")[1].split("\n=== ")[0]
        _check_rows(_rule_rows(_section(page, f"### {assay}")), _rule_rows(printed))
        model_line = next(line for line in printed.splitlines() if line.startswith("model: "))
        _check_model(models[(assay, "torch_amore")], _model_numbers(model_line))
    # the page's explanation of NR-AhR's beam row: its highest-fitness rule set, below the confidence bound
    ahr = out.split("=== NR-AhR:")[1].split("\n=== ")[0]
    line = next(x for x in ahr.splitlines() if x.startswith("torch_amore default (beam), highest fitness"))
    rule = re.search(r"IF (.*) THEN", line).group(1)
    conf, fit = re.search(r"confidence=([\d.]+), fitness=(-?[\d.]+)", line).groups()
    assert f"`{rule}`, fitness {fit}) have confidence {conf}" in " ".join(page.split())


@needs_mnist
@pytest.mark.slow
def test_mnist_page_numbers_come_from_the_command():
    out = _run(MNIST, "--no-figures")  # the page's command
    page = _section(DOC.read_text(), "## Task 4")
    _check_rows(_rule_rows(page), _rule_rows(out))
    model_line = next(line for line in out.splitlines() if line.startswith("model: "))
    _check_model(_page_models(page)[("MNIST", "torch_amore")], _model_numbers(model_line))
    accuracy = re.search(r"held-out accuracy ([\d.]+)", out).group(1)
    assert f"reaches {accuracy} held-out accuracy" in " ".join(page.split())


def _numbered(out: str, after: str, pattern: str) -> dict[int, tuple[str, ...]]:
    """# -> the other groups of ``pattern`` for the first run of table rows below the line containing ``after``."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if after in line)
    matches = [re.fullmatch(pattern, line) for line in lines[start:]]
    first = next(i for i, match in enumerate(matches) if match)
    rows = {}
    for match in matches[first:]:
        if not match:
            break
        rows[int(match.group(1))] = match.groups()[1:]
    return rows


@needs_mnist
@pytest.mark.slow
def test_mnist_held_out_table_numbers_rule_sets_as_the_explainer_table():
    out = _run(MNIST, "--quick", "--no-figures")
    shown = _numbered(
        out, "as the explainer shows them:", r"\s+(\d+)\s+(\d+)\s+[\d.]+\s+-?[\d.]+\s+[\d.]+\*?\s+[\d.]+\s+(.+)"
    )
    held = _numbered(out, "held-out images:", r"\s+(\d+)\s+(\d+)\s+([\d.]+)\s+(-?[\d.]+)")
    assert len(shown) == 5 and list(held) == list(shown)  # the places in rule_sets, as the table above numbers them
    assert list(shown) != list(range(1, 6))  # near-duplicates left out leave gaps (else the check above is void)
    # a rule set of the methods table has its held-out numbers there too (RuleSet.evaluate on the held-out images'
    # latent features): the row of the same # must show them
    matched = 0
    for cells in _rule_rows(out).values():
        rule, numbers = cells[1].strip("`"), cells[5].split(" / ")
        for place, (_, text) in shown.items():
            if text == rule and len(numbers) == 3:
                assert held[place] == tuple(numbers), (place, rule)
                matched += 1
    assert matched >= 1, out


# ------------------------------------------------------------------------------------------------------- fast checks
def _tex_blocks() -> dict[str, str]:
    """The paper's Table "global results" split into its task blocks (title -> LaTeX text), ``\\multicolumn{1}``
    wrappers removed."""
    tex = PAPER_TEX.read_text()
    table = tex[tex.index(r"\label{tab:global_results}") - 9000 : tex.index(r"\label{tab:global_results}")]
    table = re.sub(r"\\multicolumn\{1\}\{c\|\}\{([^{}]*)\}", r"\1", table)
    parts = re.split(r"\\multicolumn\{4\}\{\|c\|\}\{\\textbf\{([^}]*)\}\}", table)
    return {parts[i].strip(): parts[i + 1] for i in range(1, len(parts) - 1, 2)}


def _tex_metrics(block: str) -> list[tuple[float, float]]:
    """(AMORE, DT) of the rows Support, Confidence, Fitness of one task block."""
    out = []
    for name in ("Support", "Confidence", "Fitness"):
        row = re.search(name + r"\s*&(.*?)\\\\", block, re.S).group(1)
        a, b = (float(v) for v in re.findall(r"\d+(?:\.\d+)?", row))
        out.append((a, b))
    return out


@needs_paper
def test_paper_rows_in_the_scripts_and_the_page_are_the_papers():
    tox21, mnist = _module(TOX21, "tox21_example"), _module(MNIST, "mnist_example")
    blocks = _tex_blocks()
    expected = {
        "Molecular toxicity prediction -- AR": tox21.PAPER["NR-AR"],
        "Molecular toxicity prediction -- AhR": tox21.PAPER["NR-AhR"],
        "MNIST digit classification": mnist.PAPER_ROWS,
    }
    for title, rows in expected.items():
        (s_a, s_d), (c_a, c_d), (f_a, f_d) = _tex_metrics(blocks[title])
        assert rows["AMORE"][1:] == (s_a, c_a, f_a) and rows["DT"][1:] == (s_d, c_d, f_d), title
    page = DOC.read_text()
    for section, assays, script in (("## Task 3", ASSAYS, TOX21), ("## Task 4", (None,), MNIST)):
        text = _section(page, section)
        for assay in assays:
            rows = _rule_rows(_section(text, f"### {assay}") if assay else text)
            paper = tox21.PAPER[assay] if assay else mnist.PAPER_ROWS
            for name in ("AMORE", "DT"):
                cells = rows[f"paper {name}"]
                assert (int(cells[2]), float(cells[3]), float(cells[4])) == paper[name][1:], (script.name, assay)


@needs_paper
def test_paper_settings_and_model_rows_are_the_papers():
    tex = PAPER_TEX.read_text()
    tox21, mnist = _module(TOX21, "tox21_example"), _module(MNIST, "mnist_example")
    hyper = {}
    for line in tex[tex.index(r"\label{tab:task_summary}") : tex.index(r"\label{tab:hyperparam}")].splitlines():
        cells = [c.strip() for c in line.split("\\\\")[0].split("&")]
        if len(cells) == 9:
            hyper[cells[0]] = cells[1:]
    for key, assay in (("Toxicity -- AR", "NR-AR"), ("Toxicity -- AhR", "NR-AhR")):
        amore, tree = tox21.PAPER[assay]["amore"], tox21.PAPER[assay]["tree"]
        weight = "uniform" if tree["class_weight"] is None else tree["class_weight"]
        ours = [
            amore["max_length"],
            amore["min_support"],
            amore["n_grids"],
            amore["bin_strategy"],
            tree["max_depth"],
            tree["min_samples_leaf"],
            weight,
            tree["criterion"],
        ]
        assert [str(v) for v in ours] == hyper[key], key
    a, d = mnist.PAPER_AMORE, mnist.PAPER_DT
    ours = [
        a["max_length"],
        a["min_support"],
        a["n_grids"],
        a["bin_strategy"],
        d["max_depth"],
        d["min_samples_leaf"],
        "uniform" if d["class_weight"] is None else d["class_weight"],
        d["criterion"],
    ]
    assert [str(v) for v in ours] == hyper["MNIST"]
    summary = tex[tex.index(r"\begin{tabular}{|c|c|c|c|c|c|c|c|c|c|c|}") : tex.index(r"\label{tab:task_summary}")]
    numbers = {}
    for chunk in summary.split(r"\midrule")[1:]:
        values = re.findall(r"&\s*([\d.]+)", chunk)
        name = "AhR" if "AhR" in chunk else "AR" if "AR" in chunk else "MNIST" if "MNIST" in chunk else None
        if name and len(values) >= 9:
            numbers[name] = [values[0], *values[3:]]  # training size, #(y*=c), #(y^=c), recall, ... AUC_test
    models = _page_models(DOC.read_text())
    for name, key in (("AR", "NR-AR"), ("AhR", "NR-AhR"), ("MNIST", "MNIST")):
        page = models[(key, "paper")]
        assert [float(v) for v in page] == [float(v) for v in numbers[name]], name


@needs_tox21
def test_read_tox21_matches_pandas():
    pd = pytest.importorskip("pandas")
    assays, smiles, labels = _module(TOX21, "tox21_example").read_tox21(DATA / "tox21.csv")
    table = pd.read_csv(DATA / "tox21.csv", skiprows=1, na_values=["N/A"], skipinitialspace=True)
    table.columns = [c.strip().lstrip("#") for c in table.columns]
    assert assays == [c for c in table.columns if c not in ("mol_id", "smiles")]
    assert smiles == [str(s).strip() for s in table["smiles"]]
    np.testing.assert_array_equal(labels, table[assays].to_numpy(dtype=np.float32))
