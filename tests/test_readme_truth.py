"""The README and every page of the documentation site (docs/**/*.md) say nothing a feature
contradicts (issue 25): stale phrases stay gone, every registered accountant is in the
accountants table, every benchmark script is listed, and the test paths the pages name exist."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from dpcalc.accounting import registry

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "hooks" not in p.parts)]
#: where the site keeps the accountants table and the benchmark list
ACCOUNTANTS_PAGE = ROOT / "docs" / "concepts" / "certified-vs-approximate.md"
BENCHMARKS_PAGE = ROOT / "docs" / "benchmarks.md"

#: phrases that were true once and contradict a feature now (the feature in the comment)
STALE = [
    "There is no shuffled fixed-size batch mode",  # dpcalc train --sampling shuffle
    "shuffled fixed-size batches are a different mechanism, and the numbers here do not certify them",
    "numbers here do not certify them",  # --sampling shuffle certifies them
    "tests/test_mechanisms_",  # moved to tests/mechanisms/
    "`--accountant pld|rdp|ma|gdp|all`",  # zcdp is registered
    "--sample-rate needs --steps (or use",  # -q with --epochs is Opacus's pair
]


def _text(path: Path) -> str:
    return re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("phrase", STALE)
def test_no_stale_phrase(phrase):
    found = [p.relative_to(ROOT).as_posix() for p in PAGES if re.sub(r"\s+", " ", phrase) in _text(p)]
    assert not found, f"stale phrase {phrase!r} in {found}"


def test_pages_are_scanned():
    assert ACCOUNTANTS_PAGE in PAGES and BENCHMARKS_PAGE in PAGES and len(PAGES) > 20


def test_accountants_table_lists_every_registered_accountant():
    text = ACCOUNTANTS_PAGE.read_text(encoding="utf-8")
    table = text.split("## The accountants", 1)[1].split("\n| name |", 1)[1]
    table = "| name |" + table.split("\n\n", 1)[0]
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)`", table, re.M)}
    assert set(registry.available()) <= rows, set(registry.available()) - rows


def test_every_benchmark_is_listed():
    text = BENCHMARKS_PAGE.read_text(encoding="utf-8")
    listed = set(re.findall(r"^- `(bench_[a-z0-9_]+\.py)`", text, re.M))
    present = {Path(p).name for p in glob.glob(str(ROOT / "benchmarks" / "bench_*.py"))}
    assert listed == present, (present - listed, listed - present)


#: a test path right after one of these names is the peer's, not dpcalc's
PEERS = ("Opacus", "opacus", "dp_accounting", "prv_accountant", "tensorflow_privacy")


def test_named_test_paths_exist():
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in re.finditer(r"\b(tests/[\w/*.-]+\.py)\b", text):
            if any(peer in text[max(0, m.start() - 20):m.start()] for peer in PEERS):
                continue
            assert glob.glob(str(ROOT / m.group(1))), f"{page.name} names {m.group(1)}, which matches no file"


def test_readme_is_the_front_page_not_the_manual():
    """Issue 25: the README stays ≤ 300 lines; the manual lives on the site (docs/)."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 300, f"README.md has {len(lines)} lines: move the detail to a page in docs/"
