"""The renderer never reads text as rich markup: headers, titles, cells and notes print as given."""

from __future__ import annotations

from dpcalc.cli import render


def test_brackets_print_verbatim(capsys):
    render.emit(command="x", inputs={"spec": "[bold]a[/bold]"}, results=[{"v": "[red]1[/red]"}], json_output=False,
                columns=[render.Column("E[gap]", lambda r: r["v"])], title="t[x] [bold]", notes=["n [i]o[/i]"])
    out = capsys.readouterr().out
    for text in ("E[gap]", "t[x] [bold]", "[red]1[/red]", "n [i]o[/i]", "[bold]a[/bold]"):
        assert text in out, (text, out)


# ---- the display rule (docs/design.md §8.2): exact prints exactly, inexact rounds outward ----
import math  # noqa: E402
from decimal import Decimal  # noqa: E402

import pytest  # noqa: E402


@pytest.mark.parametrize("exact", ["1e-07", "1e-05", "0.3", "20", "3.11929e-05", "0.1"])
def test_exact_upper_bound_prints_exactly(exact):
    """The smallest float ≥ a short decimal n (how an exact bound such as q·δ = 1e-7 is held)
    prints as n; the largest float ≤ n prints as n when rounded down."""
    n = Decimal(exact)
    up = float(n) if Decimal(float(n)) >= n else math.nextafter(float(n), math.inf)
    down = float(n) if Decimal(float(n)) <= n else math.nextafter(float(n), -math.inf)
    assert Decimal(render.fmt(up, 6, "up")) == n
    assert Decimal(render.fmt(down, 6, "down")) == n


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
    out = run_cli("convert", "subsample", "--eps", "2", "--delta", "1e-5", "--sample-rate", "0.01").stdout
    assert "1e-07" in out and "1.00001e-07" not in out
