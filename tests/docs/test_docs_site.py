"""The user docs site (mkdocs.yml): it builds with --strict, a broken link fails the build, docs/dev stays out,
every page renders its markdown (tables, lists), and the headless-Chromium check of scripts/docs_screenshot.sh."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")
ENV = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    # No -q: mkdocs 1.6 then drops the warnings that --strict turns into a failure.
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(config), "-d", str(site)],
                          capture_output=True, text=True, env=ENV, timeout=120)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if not MKDOCS.exists():
        pytest.skip(f"{MKDOCS} is missing: install the docs extra (`pip install -e .[docs]`, part of `make setup`)")
    out = tmp_path_factory.mktemp("site")
    result = _build(ROOT / "mkdocs.yml", out)
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def test_the_site_builds_with_every_user_page_and_without_the_working_notes(site: Path):
    pages = {p.stem for p in (ROOT / "docs").glob("*.md")}
    built = {p.parent.name for p in site.glob("*/index.html")} | {"index"}
    assert pages <= built, f"pages not built: {sorted(pages - built)}"
    assert not (site / "dev").exists() and "HELPERS" not in (site / "sitemap.xml").read_text()
    home = (site / "index.html").read_text()
    for section in ("config/", "algorithms/", "rewards/", "agent_loop/", "checkpoints/", "scaling/",
                    "performance/", "troubleshooting/"):
        assert f'href="{section}"' in home, f"the nav has no link to {section}"


def test_every_page_renders_its_tables_and_lists(site: Path):
    # Python-Markdown leaves a table or list that does not start its own block as a paragraph of raw text.
    raw = re.compile(r"^(<p>\|| ?- |\d+\. )", re.M)
    bad = {p.parent.name: raw.findall(p.read_text())[:3] for p in site.glob("*/index.html")
           if raw.search(p.read_text())}
    assert not bad, f"markdown rendered as plain text: {bad}"
    config = (site / "config" / "index.html").read_text()
    assert config.count("<table>") >= 2 and "<code>actor_rollout_ref.rollout.name</code>" in config
    assert re.search(r"<h2 id=\"free-form-sections\"", config)


def test_a_broken_link_or_nav_entry_fails_the_build(tmp_path: Path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "index.md").write_text("# Home\n\n[fine](other.md)\n")
    (docs / "other.md").write_text("# Other\n")
    config = tmp_path / "mkdocs.yml"
    shutil.copy(ROOT / "mkdocs.yml", config)
    text = config.read_text().split("\nnav:\n")[0]
    config.write_text(text + "\nnav:\n  - Home: index.md\n  - Other: other.md\n")
    assert _build(config, tmp_path / "site").returncode == 0

    (docs / "index.md").write_text("# Home\n\n[broken](missing.md)\n")
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0 and "missing.md" in result.stdout + result.stderr

    (docs / "index.md").write_text("# Home\n\n[fine](other.md#no-such-heading)\n")
    assert _build(config, tmp_path / "site").returncode != 0

    (docs / "index.md").write_text("# Home\n")
    config.write_text(text + "\nnav:\n  - Home: index.md\n  - Other: other.md\n  - Gone: gone.md\n")
    result = _build(config, tmp_path / "site")
    assert result.returncode != 0 and "gone.md" in result.stdout + result.stderr


@pytest.mark.slow
def test_headless_chromium_renders_the_site_and_follows_the_nav(tmp_path: Path):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("chromium is not installed (Debian: apt-get install chromium)")
    result = subprocess.run(["bash", str(ROOT / "scripts" / "docs_screenshot.sh"), str(tmp_path)],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    for png in ("home.png", "inner.png"):
        assert (tmp_path / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "<title>Troubleshooting - verl</title>" in (tmp_path / "followed.html").read_text()
