"""The package's layout holds: each folder imports only folders on lower layers (docs/architecture.md), imports at
function level included; no private name is imported from another folder; every subpackage names its public
surface in ``__all__``."""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "torch_amore"

# bottom to top: a folder may import its own modules and those of the layers below it
LAYERS = [
    {"_version", "_utils"},
    {"data"},
    {"grids", "rules", "model", "concepts"},
    {"strategies", "verify", "selection"},
    {"search", "report"},
    {"explain", "experiments"},
    {"integrations", "cli"},
]
RANK = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def _imports(path: Path):
    """(module, names) of every import of torch_amore in ``path``, at any depth."""
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("torch_amore"):
            yield node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("torch_amore"):
                    yield alias.name, []


def _folder(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if len(p.relative_to(PACKAGE).parts) > 1)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_layers(path):
    here = path.relative_to(PACKAGE).parts[0]
    if here not in RANK:  # the version leaf
        return
    for module, names in _imports(path):
        there = _folder(module)
        assert there is not None, f"{path.name} imports the package root ({module}): import the module itself"
        if there == here:
            continue
        assert RANK[there] < RANK[here], f"{here}/{path.name} imports {module}, a folder on the same or a higher layer"
        private = [n for n in names if n.startswith("_") and n != "__version__"]
        assert not private, f"{here}/{path.name} imports private names {private} from {module}"


def test_every_folder_is_on_a_layer_and_names_its_surface():
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert folders == set(RANK) - {"_version"}
    for folder in folders:
        tree = ast.parse((PACKAGE / folder / "__init__.py").read_text())
        assert any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in n.targets)
                   for n in tree.body), f"{folder}/__init__.py has no __all__"  # fmt: skip


def _third_party(path: Path) -> set[str]:
    """The top-level names of every module outside torch_amore that ``path`` imports, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found - {"torch_amore"}


LIGHTNING = {"lightning", "pytorch_lightning", "lightning_utilities"}


@pytest.mark.parametrize("path", sorted(PACKAGE.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_only_integrations_import_lightning(path):
    """Lightning is an integration: the explainer, the model runs and the search work without it."""
    if path.relative_to(PACKAGE).parts[0] == "integrations":
        return
    assert not _third_party(path) & LIGHTNING, f"{path.relative_to(PACKAGE)} imports Lightning"


def test_every_required_dependency_is_imported_by_the_package():
    """A required dependency does a job in the package; one that only the tests use belongs to the test extra."""
    import re

    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    pyproject = tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())
    # distribution name -> import name, where they differ
    import_name = {"pytorch-lightning": "pytorch_lightning", "scikit-learn": "sklearn"}
    required = [re.split(r"[<>=!~\[; ]", dep, maxsplit=1)[0].lower() for dep in pyproject["project"]["dependencies"]]
    assert required, "pyproject.toml lists no required dependency"
    imported = set().union(*(_third_party(p) for p in PACKAGE.rglob("*.py")))
    unused = [dep for dep in required if import_name.get(dep, dep.replace("-", "_")) not in imported]
    assert not unused, f"required dependencies that the package never imports: {unused}"
