"""What the result page shows (dpcalc.web.views, dpcalc.web.pages): numbers rounded outward like
the CLI's tables, and no option that releases private data."""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from dpcalc.cli import cli
from dpcalc.web.pages import PAGES, RELEASE_OPTIONS, fields_of
from dpcalc.web.views import cell, tables


def _cli_json(*argv: str) -> dict:
    res = CliRunner().invoke(cli, [*argv, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.parametrize("argv", [
    ("epsilon", "--sigma", "1", "--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000",
     "--epochs", "10"),
    ("gaussian", "--eps", "1", "--delta", "1e-5", "--sensitivity", "1"),
    ("laplace", "--eps", "0.7", "--sensitivity", "1"),
])
def test_result_cells_never_round_a_bound_inwards(argv):
    """Review finding: the page showed pld ε 1.1001606 for 1.100160618… and the Gaussian σ
    3.7306316 for 3.73063163… (rounded to nearest). Every shown number must be ≥ the JSON value,
    and a lower end ≤ it."""
    result = _cli_json(*argv)
    table = next(t for t in tables(result) if t["title"] == "results")
    checked = 0
    for row, text_row in zip(result["results"], table["rows"], strict=True):
        for col, text in zip(table["columns"], text_row, strict=True):
            x = row.get(col)
            if not isinstance(x, float) or not math.isfinite(x) or text in ("—", "∞"):
                continue
            shown = float(text.replace(",", ""))
            assert (shown <= x) if "lower" in col else (shown >= x), (col, x, text)
            checked += 1
    assert checked >= 2


def test_cell_directions_and_inputs():
    assert cell(1.100160618, "epsilon") == "1.1001607"
    assert cell(0.94666519, "epsilon_lower") == "0.94666519"
    assert cell(0.946665191, "epsilon_lower") == "0.94666519"
    assert cell(2.99999993583, "epsilon") == "3"
    assert cell(256 / 60000, "sample_rate", bound=False) == "0.004266666667"
    assert cell(math.inf, "epsilon") == "∞"


def test_no_page_offers_a_release_of_private_data():
    for page in PAGES:
        flags = {f.flag for f in fields_of(page)}
        assert not flags & set(RELEASE_OPTIONS), (page.path, flags & set(RELEASE_OPTIONS))
