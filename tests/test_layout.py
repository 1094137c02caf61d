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
    {"grids", "rules", "model"},
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
