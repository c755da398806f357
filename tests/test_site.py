"""The documentation site (issue 25): its configuration builds offline, its command reference
is generated from the click definitions and names every command and sub-command with every
spelling of every option, its Python API page covers every export, and every page is in the
navigation. The slow test builds the site strictly and checks the HTML fetches nothing remote.

The build itself (``mkdocs build --strict``) runs in ``.ci/run``.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
yaml = pytest.importorskip("yaml")


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _config() -> dict:
    # the !!python/name tags Material's docs use are not used here: plain YAML
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def _nav_files(nav) -> list[str]:
    out = []
    for item in nav:
        value = next(iter(item.values())) if isinstance(item, dict) else item
        out += _nav_files(value) if isinstance(value, list) else [value]
    return out


# ---- configuration -----------------------------------------------------------------------------

def test_config_builds_offline():
    cfg = _config()
    assert cfg["docs_dir"] == "docs" and cfg["strict"] is True
    assert cfg["theme"]["name"] == "material"
    assert cfg["theme"]["font"] is False, "Material fetches Google Fonts unless theme.font is false"
    for key in ("extra_javascript", "extra_css"):
        for entry in cfg.get(key, []):
            src = entry if isinstance(entry, str) else entry.get("path", "")
            assert not re.match(r"(https?:)?//", src), f"{key}: {src} is fetched from the web"
    for hook in cfg["hooks"]:
        assert (ROOT / hook).is_file(), hook


def test_every_page_is_in_the_nav():
    files = set(_nav_files(_config()["nav"]))
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md") if "hooks" not in p.parts}
    assert files <= pages, f"nav names missing pages: {sorted(files - pages)}"
    assert pages <= files, f"pages not in the nav of mkdocs.yml: {sorted(pages - files)}"


def test_design_docs_are_linked():
    files = set(_nav_files(_config()["nav"]))
    assert {"design.md", "numerical-accounting.md", "contributing.md", "references.md",
            "changelog.md", "benchmarks.md", "reference/cli.md", "reference/python-api.md"} <= files


def test_changelog_is_included_not_copied():
    assert (DOCS / "changelog.md").read_text(encoding="utf-8").strip() == '--8<-- "CHANGELOG.md"'


# ---- the generated command reference -------------------------------------------------------------

def _all_commands() -> dict[str, click.Command]:
    """Every command path (``dpcalc convert group``) → command, walked from the top group."""
    from dpcalc.cli import COMMANDS, cli

    found: dict[str, click.Command] = {}

    def visit(group: click.Group, ctx: click.Context) -> None:
        for name in group.list_commands(ctx):
            cmd = group.get_command(ctx, name)
            sub = click.Context(cmd, info_name=name, parent=ctx)
            found[sub.command_path] = cmd
            if isinstance(cmd, click.Group):
                visit(cmd, sub)

    visit(cli, click.Context(cli, info_name="dpcalc"))
    assert {f"dpcalc {n}" for n in COMMANDS} <= set(found)
    return found


def test_reference_is_generated_not_copied():
    page = (DOCS / "reference" / "cli.md").read_text(encoding="utf-8")
    hook = _load(DOCS / "hooks" / "cli_reference.py")
    assert hook.MARKER in page
    assert "## `dpcalc sigma`" not in page  # the sections come from the hook at build time


def test_reference_names_every_command_and_option():
    text = _load(DOCS / "hooks" / "cli_reference.py").cli_reference()
    commands = _all_commands()
    assert any(" convert " in p for p in commands) and any(" ledger " in p for p in commands)
    headings = set(re.findall(r"^#{2,3} `(dpcalc[^`]*)`$", text, re.M))
    missing = set(commands) - headings
    assert not missing, f"commands missing from the generated reference: {sorted(missing)}"
    for path, cmd in commands.items():
        section = text.split(f"`{path}`\n", 1)[1].split("\n## `", 1)[0].split("\n### `", 1)[0]
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden:
                for spelling in (*param.opts, *param.secondary_opts):
                    assert f"`{spelling}`" in section, f"{path}: {spelling} missing from the reference"


def test_reference_fails_for_a_missing_command(monkeypatch):
    """The check above can fail: a command added to the group shows up in the reference."""
    from dpcalc.cli import cli

    hook = _load(DOCS / "hooks" / "cli_reference.py")

    @click.command("brand-new")
    @click.option("--knob", "--dial", type=float, help="A knob.")
    def brand_new(knob):
        """A command added after the reference was written."""

    monkeypatch.setattr(cli, "commands", {**cli.commands, "brand-new": brand_new})
    text = hook.cli_reference()
    assert "## `dpcalc brand-new`" in text and "`--knob` / `--dial`" in text


def test_python_api_page_covers_every_export():
    import dpcalc

    page = (DOCS / "reference" / "python-api.md").read_text(encoding="utf-8")
    hook = _load(DOCS / "hooks" / "python_api.py")
    assert hook.MARKER in page
    blocks = hook.api_blocks()
    documented = set(re.findall(r"^        - (\w+)$", blocks, re.M))
    exported = {n for n in dpcalc.__all__ if n != "__version__"}
    assert exported <= documented, sorted(exported - documented)


# ---- offline: the checker, and the built site ------------------------------------------------------

def test_offline_checker_finds_remote_fetches(tmp_path):
    checker = _load(ROOT / "scripts" / "check_site_offline.py")
    (tmp_path / "index.html").write_text(
        '<link rel="canonical" href="https://example.org/">'
        '<a href="https://arxiv.org/abs/1607.00133">Abadi et al.</a>'
        '<link rel="stylesheet" href="assets/main.css">', encoding="utf-8")
    assert checker.findings(tmp_path) == []
    (tmp_path / "font.html").write_text(
        '<link href="https://fonts.gstatic.com" rel="preconnect">'
        '<script src="//cdn.example.org/x.js"></script>', encoding="utf-8")
    (tmp_path / "x.css").write_text("@import url('https://fonts.googleapis.com/css?family=Roboto');",
                                    encoding="utf-8")
    found = checker.findings(tmp_path)
    assert len(found) == 3, found


@pytest.mark.slow
def test_site_builds_strictly_and_offline(tmp_path):
    """``mkdocs build --strict`` (about 15 s), then no page fetches anything remote."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    site = tmp_path / "site"
    env = {"NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
                         cwd=ROOT, capture_output=True, text=True, env=env)
    assert run.returncode == 0, run.stderr
    checker = _load(ROOT / "scripts" / "check_site_offline.py")
    assert checker.findings(site) == []
    reference = (site / "reference" / "cli" / "index.html").read_text(encoding="utf-8")
    for path in _all_commands():
        assert f"<code>{path}</code>" in reference, path
