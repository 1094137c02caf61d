"""The documentation site builds with ``sphinx-build -W`` (docs/conf.py), renders a section for every public name,
fails on a reference to a torch_amore name that does not exist, and reads in headless Chromium.

The site needs the ``docs`` extra; without Sphinx the tests skip, except where ``TORCH_AMORE_REQUIRE_DOCS=1`` (set by
.ci/run once it has installed the extra), where they must run.
"""

from __future__ import annotations

import html
import importlib
import importlib.util
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import torch_amore

DOCS = Path(__file__).resolve().parents[1] / "docs"
REQUIRED = os.environ.get("TORCH_AMORE_REQUIRE_DOCS") == "1"

pytestmark = [
    pytest.mark.slow,  # three builds of the site and three browser runs: about a minute
    pytest.mark.skipif(
        importlib.util.find_spec("sphinx") is None and not REQUIRED,
        reason='Sphinx is not installed (pip install -e ".[docs]"); .ci/run installs it and requires these tests',
    ),
]


def sphinx_build(source: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(source), str(out)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The site built from docs/ into a temporary folder, as CI builds it."""
    out = tmp_path_factory.mktemp("site")
    done = sphinx_build(DOCS, out)
    assert done.returncode == 0, done.stderr
    return out


def rendered_ids(site: Path) -> set[str]:
    """The ids of the rendered signatures (``<dt class="sig sig-object py" id="torch_amore.Rule">``)."""
    pages = (site / "reference").glob("*.html")
    return {i for page in pages for i in re.findall(r'<dt class="sig sig-object py" id="([^"]+)"', page.read_text())}


def test_every_public_name_has_a_rendered_section(site):
    ids = rendered_ids(site)
    public = [n for n in torch_amore.__all__ if n != "__version__"]
    assert len(public) == len(torch_amore.__all__) - 1
    assert [n for n in public if f"torch_amore.{n}" not in ids] == []
    for module_name in ("torch_amore.plot", "torch_amore.report", "torch_amore.cli"):
        names = importlib.import_module(module_name).__all__
        # torch_amore.report re-exports the figures, rendered once under torch_amore.plot
        missing = [n for n in names if f"{module_name}.{n}" not in ids and f"torch_amore.plot.{n}" not in ids]
        assert missing == [], module_name


def test_the_guides_are_pages_and_the_hand_written_reference_is_gone(site):
    guides = sorted(p.stem for p in DOCS.glob("*.md"))
    assert "index" in guides and "api" not in guides
    assert [g for g in guides if not (site / f"{g}.html").is_file()] == []
    home = (site / "index.html").read_text()
    assert [g for g in guides if g != "index" and f'href="{g}.html"' not in home] == []
    assert 'href="reference/index.html"' in home


def small_project(tmp_path: Path, body: str) -> Path:
    """A one-page project with docs/conf.py's configuration, the figures' reference and ``body``."""
    source = tmp_path / "src"
    source.mkdir()
    conf = DOCS / "conf.py"
    (source / "conf.py").write_text(f"exec(compile(open({str(conf)!r}).read(), {str(conf)!r}, 'exec'))\n")
    functions = "".join(f".. autofunction:: torch_amore.plot.{f}\n\n" for f in ("plot_rule", "plot_rule_means"))
    page = "Page\n====\n\n" + functions
    (source / "index.rst").write_text(page + body + "\n")
    return source


def test_a_public_object_named_by_its_module_path_links_to_its_section(tmp_path):
    body = "See :func:`torch_amore.report.plot.plot_rule` and :mod:`torch_amore.strategies.exact`."
    done = sphinx_build(small_project(tmp_path, body), tmp_path / "out")
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "out" / "index.html").read_text()
    assert 'href="#torch_amore.plot.plot_rule"' in page  # the module path links to the rendered section
    assert "torch_amore.strategies.exact" in page  # an internal module prints as code, without a link
    assert 'href="#torch_amore.strategies.exact"' not in page


def test_a_reference_to_a_name_that_does_not_exist_fails_the_build(tmp_path):
    body = "See :func:`torch_amore.report.plot.plot_rules` (misspelt)."
    done = sphinx_build(small_project(tmp_path, body), tmp_path / "out")
    assert done.returncode != 0
    assert "torch_amore.report.plot.plot_rules" in done.stderr


def _chromium() -> str | None:
    return next((shutil.which(n) for n in ("chromium", "chromium-browser", "google-chrome") if shutil.which(n)), None)


# appended to a page before </body>: on load, what the browser laid out, as JSON in <pre id="probe">
PROBE = r"""<script>addEventListener("load", () => {
  const sig = document.getElementById("torch_amore.RegionalRuleExplainer");
  const out = {scrollWidth: document.documentElement.scrollWidth, clientWidth: document.documentElement.clientWidth,
    pageDisplay: getComputedStyle(document.querySelector(".page")).display,
    heading: document.querySelector("h1").innerText.replace(/\W+$/, ""),
    signature: sig ? sig.innerText : null, signatureHeight: sig ? sig.getBoundingClientRect().height : 0};
  const pre = document.createElement("pre");
  pre.id = "probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});</script>"""


def browse(page: Path, *, width: int = 1400, extra: str = "") -> dict:
    """Open ``page`` in headless Chromium at ``width`` px and return what the probe measured after it loaded."""
    assert _chromium() is not None, ".ci/run installs Debian's chromium: the browser tests must run there, not skip"
    text = page.read_text()
    page.write_text(text.replace("</body>", extra + PROBE + "</body>"))
    try:
        done = subprocess.run(
            [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", f"--window-size={width},900",
             "--virtual-time-budget=5000", "--dump-dom", page.as_uri()],
            check=True, timeout=120, capture_output=True, text=True,
        )  # fmt: skip
    finally:
        page.write_text(text)
    found = re.search(r'<pre id="probe">(.*?)</pre>', done.stdout, flags=re.S)
    assert found, "the page did not finish loading in Chromium"
    return json.loads(html.unescape(found.group(1)))


needs_chromium = pytest.mark.skipif(
    _chromium() is None and os.environ.get("CI") != "true" and not REQUIRED,
    reason="no headless Chromium on this machine (.ci/run installs Debian's chromium, and there the test must run)",
)


@needs_chromium
def test_the_probe_sees_a_sideways_scroll(site):
    wide = '<div style="width: 3000px; height: 10px"></div>'
    seen = browse(site / "index.html", extra=wide)
    assert seen["scrollWidth"] > seen["clientWidth"]


@needs_chromium
def test_the_home_page_loads_styled_without_sideways_scroll(site):
    seen = browse(site / "index.html")
    assert seen["heading"] == (DOCS / "index.md").read_text().splitlines()[0].removeprefix("# ")
    assert seen["pageDisplay"] == "flex"  # the theme's stylesheet applies (its page layout is a flex box)
    assert seen["scrollWidth"] <= seen["clientWidth"] <= 1400


@needs_chromium
def test_the_explainer_page_shows_the_rendered_signature_without_sideways_scroll(site):
    seen = browse(site / "reference" / "explainer.html")
    assert seen["pageDisplay"] == "flex"
    assert seen["scrollWidth"] <= seen["clientWidth"] <= 1400
    assert seen["signatureHeight"] > 0
    signature = seen["signature"]
    assert signature.startswith("class torch_amore.RegionalRuleExplainer(")
    parameters = inspect.signature(torch_amore.RegionalRuleExplainer).parameters
    shown = re.findall(r"[(,]\s*\*{0,2}\s*,?\s*(\w+):", signature)
    assert shown == list(parameters)
