"""The README and docs/*.md say nothing a feature contradicts (issue 25): stale phrases stay
gone, every registered accountant is in the accountants table, every benchmark script is listed,
and the test paths the README names exist."""

from __future__ import annotations

import glob
import re
from pathlib import Path

import pytest

from dpcalc.accounting import registry

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

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


def test_accountants_table_lists_every_registered_accountant():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme.split("### The accountants", 1)[1].split("\n\n", 2)[1]
    rows = {m.group(1) for m in re.finditer(r"^\| `([a-z0-9_]+)`", table, re.M)}
    assert set(registry.available()) <= rows, set(registry.available()) - rows


def test_every_benchmark_is_listed():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^  - `(bench_[a-z0-9_]+\.py)`", readme, re.M))
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
