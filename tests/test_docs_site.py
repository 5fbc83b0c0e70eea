"""The documentation site builds with `mkdocs build --strict`: no broken link, anchor or missing page."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python")
#: A Sphinx role as text (``:func:`name```), as a page would show one that was not rewritten.
RAW_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|data|meth|attr|exc|obj):`")


def _missing() -> list[str]:
    missing = []
    for name in NEEDED:
        try:
            found = importlib.util.find_spec(name) is not None
        except ModuleNotFoundError:  # a parent package is absent
            found = False
        if not found:
            missing.append(name)
    return missing


needs_mkdocs = pytest.mark.skipif(bool(_missing()), reason=f"the docs packages are not installed ({', '.join(_missing())}); "
                                  "pip install -e '.[docs]' (the test extra includes them)")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, env=env, capture_output=True, text=True,
                          timeout=600)


@needs_mkdocs
def test_site_builds_strict_without_warnings(tmp_path):
    done = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    log = done.stdout + done.stderr
    warnings = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, log
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="mlflow_mia.audits.membership.run_audit"' in api  # mkdocstrings rendered the docstrings
    # Sphinx roles in docstrings render as cross-references (docs/hooks/sphinx_roles.py), or code where the target
    # is not on the site: none is left as text, none as escaped markup.
    assert not RAW_ROLE.findall(api), RAW_ROLE.findall(api)[:5]
    assert "&lt;autoref" not in api
    links = re.findall(r'<a class="autorefs autorefs-internal"[^>]*href="([^"]+)"[^>]*><code>([^<]+)</code></a>', api)
    assert ("#mlflow_mia.audits.membership.compute_audit_signals", "compute_audit_signals") in links, links[:10]
    css = (tmp_path / "site" / "stylesheets" / "extra.css").read_text(encoding="utf-8")
    assert "overflow-x: auto" in css and 'href="../../stylesheets/extra.css"' in api  # wide tables scroll
    assert (tmp_path / "site" / "guides" / "scale" / "index.html").is_file()


@needs_mkdocs
def test_strict_build_fails_on_a_broken_link_and_a_missing_anchor(tmp_path):
    """The site's own settings (validation, strict) turn a bad link into a failed build, not a warning."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[gone](nowhere.md) and [no anchor](other.md#no-such-heading)\n")
    (docs / "other.md").write_text("# Other\n\n## A heading\n")
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    config = config.split("\nnav:\n", 1)[0] + "\nnav:\n  - Home: index.md\n  - Other: other.md\n"
    config = config.replace("paths: [.]", f"paths: [{ROOT}]").replace("- docs/hooks/", f"- {DOCS}/hooks/")
    config = config.replace("  - stylesheets/extra.css\n", "")
    (tmp_path / "mkdocs.yml").write_text(config, encoding="utf-8")
    done = _build(tmp_path / "mkdocs.yml", tmp_path / "site")
    log = done.stdout + done.stderr
    assert done.returncode != 0
    assert "nowhere.md" in log and "no-such-heading" in log


def _nav_paths() -> set[str]:
    text = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n", 1)[1]
    return set(re.findall(r":\s*([\w./-]+\.md)\s*$", text, re.M))


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    nav = _nav_paths()
    assert pages - nav == set(), "pages missing from mkdocs.yml's nav"
    assert nav - pages == set(), "nav entries without a page"


def test_every_written_page_opens_with_what_it_answers():
    """Below its title, each page's first line says what it answers (pages marked generated are their generator's)."""
    for page in sorted(DOCS.rglob("*.md")):
        lines = page.read_text(encoding="utf-8").splitlines()
        if any(line.startswith("<!-- Generated") for line in lines[:5]):
            continue  # its generator writes the opening
        assert lines[0].startswith("# "), page
        first = next(line for line in lines[1:] if line.strip())
        assert first.startswith("This page answers "), (page, first)


def test_roles_rewrite_to_optional_references():
    """The docs hook resolves a role's target as Sphinx would look it up from the docstring's module."""
    spec = importlib.util.spec_from_file_location("sphinx_roles", DOCS / "hooks" / "sphinx_roles.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    text = hook.rewrite("Uses :meth:`~.base.Audit.run`, :data:`VERDICTS` and :mod:`mlflow_mia.tracking`.",
                        "mlflow_mia.pipeline", is_package=True)
    assert text == ('Uses <autoref identifier="mlflow_mia.pipeline.base.Audit.run" optional><code>run</code></autoref>, '
                    '<autoref identifier="mlflow_mia.pipeline.VERDICTS" optional><code>VERDICTS</code></autoref> and '
                    '<autoref identifier="mlflow_mia.tracking" optional><code>mlflow_mia.tracking</code></autoref>.')
    assert not RAW_ROLE.search(text) and hook.rewrite("no role: `code`", "m") == "no role: `code`"
