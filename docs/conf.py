"""Sphinx configuration of torch_amore's documentation site.

Build it with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (``pip install -e ".[docs]"``). The
guides are the markdown files of this folder (read by MyST); the API reference (``reference/``) is rendered from the
docstrings by autodoc and napoleon. The build needs no network: intersphinx is off, so names of other libraries
(``torch.Tensor``, ``pandas.DataFrame``) print as plain text, while a reference to a torch_amore name must name one
that exists (``nitpicky``; ``-W`` makes a broken one fail the build): a public one links to its section, an internal
one prints as code.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torch_amore import __version__  # noqa: E402

project = "torch_amore"
author = "torch_amore developers"
copyright = "torch_amore developers"
version = release = __version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# MyST: the guides link to each other's headings as GitHub does (``concepts.md#the-interval-convention``)
myst_heading_anchors = 4

# autodoc: members in source order, signatures with their type hints; the lazily imported names (Lightning and
# torchmetrics) load when their page is rendered
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True}
autoclass_content = "both"
napoleon_google_docstring = True
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# a reference to a torch_amore name must resolve (or exist: _missing_reference); other libraries' names stay plain
# text (no intersphinx)
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(?!torch_amore\b).*"),
]

html_theme = "furo"
html_title = f"torch_amore {__version__}"
html_static_path: list[str] = []


def _resolve(target: str) -> tuple[bool, Any]:
    """(found, object) for a dotted name of torch_amore: the longest importable module, then attributes."""
    parts = target.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False, None
            obj = getattr(obj, attr)
        return True, obj
    return False, None


def _documented(env: Any) -> dict[int, tuple[str, Any]]:
    """The documented torch_amore objects by identity: id(object) -> (documented name, the py domain's entry)."""
    found = {}
    for name, entry in env.get_domain("py").objects.items():
        ok, obj = _resolve(name)
        if ok and entry.objtype != "module":
            found.setdefault(id(obj), (name, entry))
    return found


def _missing_reference(app: Any, env: Any, node: Any, contnode: Any) -> Any:
    """A reference to a torch_amore name that the reference does not render under that path.

    A public object referred to by its module path (``torch_amore.report.plot.plot_rule``) links to its rendered
    section (``torch_amore.plot.plot_rule``); an internal name that exists (``torch_amore.strategies.exact``) prints
    as code without a link; a name that does not exist stays a warning, so ``-W`` fails the build on it.
    """
    from sphinx.util.nodes import make_refnode

    target = node.get("reftarget", "")
    if node.get("refdomain") != "py" or not target.startswith("torch_amore"):
        return None
    found, obj = _resolve(target)
    if not found:
        return None
    match = _documented(env).get(id(obj))
    if match is None:
        return contnode
    _, entry = match
    return make_refnode(app.builder, node["refdoc"], entry.docname, entry.node_id, contnode)


def setup(app: Any) -> None:
    app.connect("missing-reference", _missing_reference)
