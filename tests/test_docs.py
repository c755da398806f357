"""The design documents live in the repository, and everything that cites them resolves.

- No file sends a reader to a design note outside the repository: the founding notes were
  kept beside the repository, and every citation now names its file under ``docs/``
  (docs/contributing.md §9).
- Every ``docs/<name>.md §N`` (and ``docs/<name>.md, "Heading"``) cited anywhere names an
  existing file and an existing numbered (or titled) heading of it; every ``tests/…::name``
  a document cites exists.
- Section numbers are stable: the topics of the numbered sections that code cites stay where
  they are (a renumbering would silently re-point every citation).
- ``LICENSE`` is the Apache License 2.0 that README and pyproject.toml declare.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

#: what is scanned for citations: the package, tests, scripts, benchmarks, CI and the docs
SCANNED = ("dpcalc", "tests", "scripts", "benchmarks", "docs", ".ci", "README.md", "CHANGELOG.md",
           "pyproject.toml")

# Built from parts so that this file does not match its own patterns.
_OLD_NOTES = ("DESIGN", "REFERENCES", "PLD_NOTES", "STYLE")
#: an old note cited without the docs/ path (``docs/design.md`` is lower case: not matched)
OLD_CITATION = re.compile(r"(?<![\w/.-])(?:" + "|".join(_OLD_NOTES) + r")\.md\b")
#: paths outside the repository where the founding notes (and the helpers' rules) lived
OUTSIDE = re.compile("|".join(re.escape(s) for s in (".." + "/shared", "/work" + "/shared",
                                                        "/work" + "/wt", "COMMON" + ".md")))
#: docs/<name>.md, optionally followed by §N[.M] or by , "Heading"
DOC_CITATION = re.compile(r"docs/([a-z0-9_-]+\.md)(?:\s*§\s*(\d+(?:\.\d+)*)|,\s*\"([^\"]+)\")?")
#: inside docs/: [text](other.md) §N
LINK_CITATION = re.compile(r"\]\(([a-z0-9_-]+\.md)\)\s*§\s*(\d+(?:\.\d+)*)")
#: tests/test_<file>.py or tests/test_<file>.py::name (dpcalc's own tests; peers' are named otherwise)
TEST_CITATION = re.compile(r"(tests/(?:[\w]+/)*test_\w+\.py)(?:::(\w+))?")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*$", re.M)
NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s+(.*)$")


def _text_files():
    for name in SCANNED:
        path = ROOT / name
        paths = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for p in paths:
            if any(part in {"__pycache__", ".pytest_cache", ".hypothesis"} for part in p.parts):
                continue
            try:
                yield p, p.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):  # images and other binary files
                continue


def _headings(doc: str) -> tuple[set[str], set[str]]:
    """(section numbers, heading titles) of docs/<doc>."""
    numbers, titles = set(), set()
    for heading in HEADING.findall((DOCS / doc).read_text(encoding="utf-8")):
        m = NUMBERED.match(heading)
        if m:
            numbers.add(m.group(1))
            titles.add(m.group(2).strip())
        titles.add(heading.strip())
    return numbers, titles


def _where(path: Path, text: str, pos: int) -> str:
    return f"{path.relative_to(ROOT)}:{text.count(chr(10), 0, pos) + 1}"


def test_no_citation_leaves_the_repository():
    bad = []
    for path, text in _text_files():
        if path == Path(__file__).resolve():
            continue
        for m in OLD_CITATION.finditer(text):
            bad.append(f"{_where(path, text, m.start())}: {m.group(0)} (cite docs/<name>.md)")
        for m in OUTSIDE.finditer(text):
            bad.append(f"{_where(path, text, m.start())}: {m.group(0)} is outside the repository")
    assert not bad, "citations of files outside the repository:\n" + "\n".join(bad)


def test_cited_docs_and_sections_exist():
    bad, seen = [], 0
    for path, text in _text_files():
        found = [(m.start(), m.group(1), m.group(2), m.group(3)) for m in DOC_CITATION.finditer(text)]
        if path.parent == DOCS:
            found += [(m.start(), m.group(1), m.group(2), None) for m in LINK_CITATION.finditer(text)]
        for pos, doc, number, title in found:
            seen += 1
            where = _where(path, text, pos)
            if doc == "img" or not (DOCS / doc).is_file():
                bad.append(f"{where}: docs/{doc} does not exist")
                continue
            numbers, titles = _headings(doc)
            if number is not None and number not in numbers:
                bad.append(f"{where}: docs/{doc} has no section {number}")
            if title is not None and title not in titles:
                bad.append(f"{where}: docs/{doc} has no heading {title!r}")
    assert seen > 50, "expected the code, tests and README to cite the docs"
    assert not bad, "\n".join(bad)


def test_tests_cited_by_the_docs_exist():
    bad = []
    for doc in sorted(DOCS.rglob("*.md")):
        text = doc.read_text(encoding="utf-8")
        for m in TEST_CITATION.finditer(text):
            target = ROOT / m.group(1)
            if not target.is_file():
                bad.append(f"{_where(doc, text, m.start())}: {m.group(1)} does not exist")
            elif m.group(2) and not re.search(rf"^\s*def {m.group(2)}\(", target.read_text(encoding="utf-8"), re.M):
                bad.append(f"{_where(doc, text, m.start())}: no test {m.group(0)}")
    assert not bad, "\n".join(bad)


# The topics of the numbered sections that code cites. Citations written against the founding
# notes ("§5" = output contract, ...) keep their meaning only while these stay where they are.
STABLE_SECTIONS = {
    "design.md": {"1": "under-report", "2": "Architecture", "3": "Glossary", "4": "Mathematics",
                  "5": "Output contract", "6": "trainer", "7": "Dependencies", "8": "Rounding policy",
                  "9": "Neighbouring", "10": "Adding an accountant"},
    "contributing.md": {"1": "Describe, then account", "2": "accountant contract", "3": "registry",
                        "4": "Layers", "5": "thin CLI", "6": "Log space", "7": "Diagnostics",
                        "8": "Calibration checks", "9": "Docstrings", "10": "--help",
                        "11": "README", "12": "Independent references", "13": "Property tests",
                        "14": "Error tests", "15": "Slow tests"},
    "numerical-accounting.md": {"1": "privacy curve", "2": "Poisson-sampled Gaussian",
                                "3": "Discretisation", "4": "Composition by FFT",
                                "5": "Floating point", "6": "Reading", "7": "Test oracles",
                                "8": "Rényi"},
    "references.md": {"1": "Poisson-sampled Gaussian", "2": "Gaussian mechanism", "3": "Composition",
                      "4": "Mechanisms", "5": "Training"},
}


@pytest.mark.parametrize("doc", sorted(STABLE_SECTIONS))
def test_section_numbers_keep_their_topics(doc):
    by_number = {}
    for heading in HEADING.findall((DOCS / doc).read_text(encoding="utf-8")):
        m = NUMBERED.match(heading)
        if m:
            assert m.group(1) not in by_number, f"docs/{doc}: section {m.group(1)} twice"
            by_number[m.group(1)] = m.group(2)
    for number, topic in STABLE_SECTIONS[doc].items():
        assert number in by_number, f"docs/{doc}: section {number} ({topic}) missing"
        assert topic.lower() in by_number[number].lower(), \
            f"docs/{doc} §{number} is {by_number[number]!r}, expected the topic {topic!r}"


# SHA-256 of the Apache License 2.0 text as published at
# https://www.apache.org/licenses/LICENSE-2.0.txt (202 lines; the same bytes ship as the
# LICENSE of many Python packages, e.g. trio's LICENSE.APACHE2).
APACHE_2_SHA256 = "cfc7749b96f63bd31c3c42b5c471bf756814053e847c10f3eb003417bc523d30"


def test_license_is_apache_2():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    for n, title in enumerate(["Definitions", "Grant of Copyright License", "Grant of Patent License",
                               "Redistribution", "Submission of Contributions", "Trademarks",
                               "Disclaimer of Warranty", "Limitation of Liability",
                               "Accepting Warranty or Additional Liability"], start=1):
        assert f"{n}. {title}." in text, f"LICENSE: section {n} ({title}) missing"
    assert "END OF TERMS AND CONDITIONS" in text
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == APACHE_2_SHA256
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert re.search(r'^license\s*=\s*"Apache-2\.0"\s*$', pyproject, re.M)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert re.search(r"^## License\s+Apache-2\.0", readme, re.M)
