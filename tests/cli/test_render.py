"""The renderer never reads text as rich markup: headers, titles, cells and notes print as given."""

from __future__ import annotations

from dpcalc.cli import render


def test_brackets_print_verbatim(capsys):
    render.emit(command="x", inputs={"spec": "[bold]a[/bold]"}, results=[{"v": "[red]1[/red]"}], json_output=False,
                columns=[render.Column("E[gap]", lambda r: r["v"])], title="t[x] [bold]", notes=["n [i]o[/i]"])
    out = capsys.readouterr().out
    for text in ("E[gap]", "t[x] [bold]", "[red]1[/red]", "n [i]o[/i]", "[bold]a[/bold]"):
        assert text in out, (text, out)


# ---- the display rule (docs/design.md §8.2): a bound is rounded outward, whatever its value ----
import math  # noqa: E402
from decimal import Decimal  # noqa: E402

import pytest  # noqa: E402


@pytest.mark.parametrize("x,digits,shown_up,shown_down", [
    (0.9472465005, 6, "0.947247", "0.947246"),       # design.md §8.2's pld example
    (1.0000000000000004e-07, 6, "1.00001e-07", "1e-07"),  # 3 ulps above 1e-7: inexact, outward
    (math.e * 0.01, 6, "0.0271829", "0.0271828"),
    (2.0, 6, "2", "2"),
])
def test_inexact_bounds_round_outward(x, digits, shown_up, shown_down):
    assert render.fmt(x, digits, "up") == shown_up
    assert render.fmt(x, digits, "down") == shown_down
    assert Decimal(shown_up) >= Decimal(x) >= Decimal(shown_down)


def test_subsampled_delta_is_exact(run_cli):
    """Balle, Barthe, Gaboardi 2018 Thm 8: δ' = q·δ; q = 0.01, δ = 1e-5 gives exactly 1e-7."""
    from dpcalc.mechanisms.conversions import poisson_subsampling

    d = poisson_subsampling(epsilon=2.0, delta=1e-5, sample_rate=0.01).values["delta"]
    assert Decimal(d) >= Decimal("1e-7") > Decimal(math.nextafter(d, 0.0))
    # the float cannot say it is exact, so the library also gives the exact decimal product and
    # the table rounds THAT outward: 1e-07, with no under-report (the float alone would print
    # 1.00001e-07, and printing the short decimal below a float is never done)
    res = poisson_subsampling(epsilon=2.0, delta=1e-5, sample_rate=0.01)
    assert Decimal(res.details["delta_decimal"]) == Decimal("1e-7")
    out = run_cli("convert", "subsample", "--eps", "2", "--delta", "1e-5", "--sample-rate", "0.01").stdout
    assert "1e-07" in out and "1.00001e-07" not in out
    # an inexact product keeps outward rounding: 0.0123456789 · 3e-5 = 3.70370367e-07 → 3.70371e-07
    out = run_cli("convert", "subsample", "--eps", "2", "--delta", "3e-5", "--sample-rate", "0.0123456789").stdout
    assert "3.70371e-07" in out


def test_exact_decimal_rounds_outward():
    assert render.fmt(1.0000000000000001e-07, 6, "up", exact="1E-7") == "1e-07"
    assert render.fmt(1e-7, 6, "up", exact="1.0000005E-7") == "1.00001e-07"
    assert render.fmt(1e-7, 6, "down", exact="9.9999999E-8") == "9.99999e-08"
