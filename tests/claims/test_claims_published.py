"""The curated published claims (docs/claims/published.yaml) are re-checked, and the verdict table
of docs/how-to/check-a-claim.md is what the check gives today (it cannot drift)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpcalc.claims import load_claims
from dpcalc.claims.check import check_claims

pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[2]
CLAIMS = ROOT / "docs/claims/published.yaml"
PAGE = ROOT / "docs/how-to/check-a-claim.md"
BEGIN, END = "<!-- verdicts: begin (tests/claims/test_claims_published.py) -->", "<!-- verdicts: end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def verdict_table(results) -> str:
    """The Markdown table of the docs page: one row per claim."""
    from dpcalc._rounding import format_bound as _fmt

    rows = ["| claim | source | claimed ε (δ) | certified ε [lower bound] | verdict | flags |",
            "|---|---|---|---|---|---|"]
    for r in results:
        c = r.claim
        delta = "δ not stated" if c.delta is None else f"δ = {c.delta:g}"
        cert = "—" if r.epsilon is None else _fmt(r.epsilon) + (
            "" if r.epsilon_lower is None else f" [{_fmt(r.epsilon_lower, 'down')}]")
        flags = ", ".join(f["flag"] for f in r.flags) or ("—" if r.reason is None else r.reason)
        verified = "" if c.verified else " (settings not verified)"
        rows.append(f"| `{c.name}` | {_cell(c.where or '')}{verified} | {c.claimed_epsilon:g} ({delta}) | {cert} | "
                    f"**{r.verdict}** | {_cell(flags)} |")
    return "\n".join(rows)


@pytest.fixture(scope="module")
def results():
    return check_claims(load_claims(str(CLAIMS)))


def test_the_curated_file_has_at_least_15_sourced_claims(results):
    claims = [r.claim for r in results]
    assert len(claims) >= 15 and len({c.id for c in claims}) == len(claims)
    for c in claims:
        assert c.id and c.paper and c.where and c.verified is not None, c.id
    papers = " ".join(c.paper for c in claims)
    for author in ("Abadi", "Papernot", "Tramèr", "De,", "Kurakin", "Li,", "Yu,", "Sander"):
        assert author in papers, author


def test_verified_claims_are_checkable(results):
    for r in results:
        if r.claim.verified:
            assert r.verdict != "not checkable", (r.claim.id, r.reason)


def test_known_verdicts(results):
    by_id = {r.claim.id: r for r in results}
    # Abadi et al.'s moments-accountant ε holds, and is loose (pld is tighter: docs/references.md §2)
    assert by_id["abadi2016-ma-E100"].verdict == "holds"
    assert any(f["flag"] == "loose" for f in by_id["abadi2016-ma-E100"].flags)
    # a Poisson ε claimed for shuffled batches is false for the run that was trained
    for key in ("tfp-tutorial-default-shuffled", "chua2024-shuffle-sigma0.8"):
        assert by_id[key].verdict == "does not hold"
        assert any(f["flag"] == "sampler" for f in by_id[key].flags)
    # De et al.'s ImageNet δ = 8e-7 is above 1/N for ImageNet-1k (N = 1,281,167)
    assert any(f["flag"] == "delta" for f in by_id["sander2023-imagenet-eps8"].flags)


def test_docs_page_shows_todays_verdicts(results):
    text = PAGE.read_text(encoding="utf-8")
    got = re.search(re.escape(BEGIN) + r"\n(.*?)\n" + re.escape(END), text, flags=re.S)
    assert got is not None, f"{PAGE} lacks the verdict table markers"
    want = verdict_table(results)
    assert got.group(1).strip() == want, "docs/how-to/check-a-claim.md verdict table is stale; today's:\n" + want
