"""``--plot`` of epsilon, sigma, tune and train (issue 25): the series drawn are the library's own
numbers (the data functions of dpcalc/accounting/series.py against the commands' JSON rows, not
pixels), each plot writes a valid, deterministic PNG or SVG, and a bad target is refused before
any work with one line, exit 2, nothing left on disk."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("matplotlib")

from dpcalc.accounting import series as se  # noqa: E402
from dpcalc.accounting.dpsgd import epsilon_by_accountant, noise_multiplier_by_accountant  # noqa: E402
from dpcalc.accounting.registry import available, default_accountant  # noqa: E402
from dpcalc.schedule import resolve_schedule  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
RUN = ["--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5"]
EPS = ["epsilon", "--sigma", "1", *RUN]
SIGMA = ["sigma", "--eps", "2", *RUN]
TUNE = ["tune", "--sigma", "1", *RUN, "--runs-distribution", "geometric", "--mean-runs", "4"]
#: cheaper runs for the tests of files and refusals (the rdp accountant, 100 steps)
LIGHT = ["--sample-rate", "0.01", "--steps", "100", "--delta", "1e-5"]
WRITES = {"epsilon": ["epsilon", "--sigma", "1", *LIGHT],
          "sigma": ["sigma", "--eps", "2", *LIGHT, "--accountant", "rdp"],
          "tune": ["tune", "--sigma", "1", *LIGHT, "--runs-distribution", "poisson", "--mean-runs", "2"]}


def _valid(path, fmt: str) -> bytes:
    data = path.read_bytes()
    assert len(data) > 1000
    if fmt == "png":
        assert data.startswith(PNG_MAGIC)
    else:
        head = data[:400].decode("utf-8")
        assert head.startswith("<?xml") and "<svg" in head
        assert b"<dc:date>" not in data  # no date: the same plot gives the same bytes
    return data


# -- the series are the library's numbers ---------------------------------------------------------

def test_epsilon_series_points_are_the_accountants_rows():
    sch = resolve_schedule(sample_rate=0.01, steps=1000)
    names = list(available())
    s = se.epsilon_by_epochs(noise_multiplier=1.0, schedule=sch, delta=1e-5, accountants=names)
    assert s.details["steps"][-1] == 1000 and s.details["steps"][0] == 84  # ⌈1000·k/12⌉
    assert len(s.x) == 12 and s.x[-1] == pytest.approx(10.0)  # T·q epochs
    # the last point is `dpcalc epsilon`'s row; a middle point the row of the run cut there
    for i, t in ((len(s.x) - 1, 1000), (4, s.details["steps"][4])):
        cut = resolve_schedule(sample_rate=0.01, steps=t)
        rows = epsilon_by_accountant(noise_multiplier=1.0, schedule=cut, delta=1e-5, accountants=names)
        for row in rows:
            c = s.curve(row.accountant)
            assert c.values[i] == (row.epsilon if row.applicable else None)
            if c.lower is not None:
                assert c.lower[i] == row.details.get("epsilon_lower")
    pld = s.curve(default_accountant())
    assert pld.lower is not None and all(lo <= up for lo, up in zip(pld.lower, pld.values, strict=True))
    vals = [y for y in pld.values if y is not None]
    assert vals == sorted(vals)  # ε never decreases with more steps


def test_epsilon_series_of_shuffle_counts_epochs_by_batches():
    sch = resolve_schedule(batch_size=100, dataset_size=1000, epochs=3, sampling="shuffle")
    s = se.epsilon_by_epochs(noise_multiplier=1.0, schedule=sch, delta=1e-5, accountants=[default_accountant()],
                             neighboring="add-remove")
    assert s.details["steps"][-1] == 30  # 3 epochs of ⌈N/B⌉ = 10 batches
    assert s.x == tuple(t / 10 for t in s.details["steps"])


def test_sigma_series_at_factor_one_is_dpcalc_sigma():
    sch = resolve_schedule(sample_rate=0.01, steps=1000)
    s = se.sigma_by_target(target_epsilon=2.0, delta=1e-5, schedule=sch, accountants=[default_accountant()])
    assert len(s.x) == len(se.SIGMA_FACTORS) and 2.0 in s.x
    (row,) = noise_multiplier_by_accountant(target_epsilon=2.0, delta=1e-5, schedule=sch,
                                            accountants=[default_accountant()])
    c = s.curves[0]
    assert c.values[s.x.index(2.0)] == row.noise_multiplier
    assert list(c.values) == sorted(c.values, reverse=True)  # more ε, less noise


def test_sigma_series_unreachable_target_is_a_gap_not_an_error():
    # one Gaussian at ε → 0 needs δ(0) = 2Φ(1/2σ) − 1 ≈ 1/(σ√(2π)) ≤ δ: σ ≳ 4·10⁸ at δ = 1e-9, above
    # the search range (calibrate.SIGMA_MAX = 1e6); at ε = 1 σ is finite
    sch = resolve_schedule(steps=1)
    s = se.sigma_by_target(target_epsilon=1.0, delta=1e-9, schedule=sch, accountants=[default_accountant()],
                           factors=(1e-9, 1.0))
    assert s.curves[0].values[0] is None and s.curves[0].values[1] is not None


def test_tune_series_is_the_tune_table(run_cli):
    out = run_cli(*TUNE, "--json").json()
    rows = {r["scenario"]: r for r in out["results"]}
    from dpcalc.accounting.registry import get_accountant
    from dpcalc.events import TuningEvent, dpsgd_event

    run = dpsgd_event(noise_multiplier=1.0, sample_rate=0.01, steps=1000)
    acc = next(a for a in (get_accountant(n) for n in available()) if a.supports(TuningEvent(run, "poisson", 2.0)))
    s = se.tuning_epsilon_by_runs(run, accountant=acc, delta=1e-5, mean_runs=se.mean_runs_grid(4))
    i = s.x.index(4.0)
    assert s.curve("geometric").values[i] == rows["search"]["epsilon"]
    assert s.curve("composed").values[i] == rows["fixed"]["epsilon"]  # K = ⌈4⌉ runs composed
    assert s.curve("composed").values[0] == rows["single"]["epsilon"]  # E[K] = 1: one run
    assert s.x[0] == 1.0 and s.x[-1] == 16.0
    for c in s.curves:  # ε grows with the number of runs
        vals = [y for y in c.values if y is not None]
        assert vals == sorted(vals), c.name


def test_train_series_is_the_records():
    from dpcalc.cli.run_plots import train_series

    recs = [{"epoch": e, "steps": 10 * e, "epsilon": 0.5 * e, "test_accuracy": 0.1 * e, "delta": 1e-5} for e in (1, 2)]
    assert train_series(recs) == {"epoch": [1, 2], "test_accuracy": [0.1, 0.2], "epsilon": [0.5, 1.0],
                                  "steps": [10, 20]}


# -- the commands draw those series -----------------------------------------------------------------

def test_epsilon_plot_draws_the_json_rows(run_cli, tmp_path, monkeypatch):
    from dpcalc.cli import run_plots

    seen = {}
    monkeypatch.setattr(run_plots, "plot_epsilon", lambda series, path, where: seen.update(s=series, where=where))
    out = run_cli(*EPS, "--plot", tmp_path / "e.png", "--json").json()
    for r in out["results"]:
        c = seen["s"].curve(r["accountant"])
        assert c.values[-1] == (r["epsilon"] if r.get("applicable", True) else None)
    assert "σ = 1" in seen["where"] and "T = 1,000 steps" in seen["where"]


def test_sigma_plot_draws_the_json_row(run_cli, tmp_path, monkeypatch):
    from dpcalc.cli import run_plots

    seen = {}
    monkeypatch.setattr(run_plots, "plot_sigma", lambda series, path, where: seen.update(s=series))
    out = run_cli(*SIGMA, "--plot", tmp_path / "s.png", "--json").json()
    (r,) = out["results"]
    s = seen["s"]
    assert s.curve(r["accountant"]).values[s.x.index(2.0)] == r["noise_multiplier"]


@pytest.mark.parametrize(("command", "fmt"), [("epsilon", "png"), ("epsilon", "svg"), ("sigma", "svg"),
                                              ("tune", "png")])
def test_plot_writes_a_valid_file(run_cli, tmp_path, command, fmt):
    path = tmp_path / f"plot.{fmt}"
    res = run_cli(*WRITES[command], "--plot", path)
    assert res.exit_code == 0, res.stderr
    assert f"Plot written to {path}" in " ".join(res.stdout.split())
    _valid(path, fmt)
    assert os.listdir(tmp_path) == [path.name]  # no temporary file left


def test_svg_and_png_are_deterministic(tmp_path):
    from dpcalc.cli.run_plots import plot_epsilon

    series = se.Series((1.0, 2.0, 3.0), (se.Curve("pld", (0.5, 0.8, 1.0), (0.4, 0.7, 0.9)),
                                         se.Curve("gdp", (0.45, 0.75, 0.95), None, certified=False)),
                       {"delta": 1e-5})
    for fmt in ("svg", "png"):
        a, b = tmp_path / f"a.{fmt}", tmp_path / f"b.{fmt}"
        for p in (a, b):
            plot_epsilon(series, str(p), where="a setting")
        assert _valid(a, fmt) == b.read_bytes()


@pytest.mark.parametrize("name", ["plot.pdf", "plot", "plot.png.txt", "plot.jpg"])
@pytest.mark.parametrize("command", list(WRITES))
def test_bad_extension_is_refused_before_any_work(run_cli, tmp_path, command, name):
    line = run_cli(*WRITES[command], "--plot", tmp_path / name).one_line_error()
    assert "--plot must name a .png or .svg file" in line and name in line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("target", ["missing/x.png", "adir", ""])
def test_unwritable_target_is_refused(run_cli, tmp_path, target):
    (tmp_path / "adir").mkdir()
    path = str(tmp_path / target) if target else ""
    line = run_cli(*WRITES["epsilon"], "--plot", path).one_line_error()
    assert "--plot" in line
    assert sorted(os.listdir(tmp_path)) == ["adir"] and os.listdir(tmp_path / "adir") == []


def test_read_only_directory_is_refused(run_cli, tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes anywhere")
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o500)
    try:
        line = run_cli(*WRITES["sigma"], "--plot", d / "x.svg").one_line_error()
    finally:
        d.chmod(0o700)
    assert "cannot be written" in line and os.listdir(d) == []


@pytest.mark.parametrize("cmd", [
    ["compose", "--gaussian", "4", "--sample-rate", "0.01", "--count", "100", "--delta", "1e-5",
     "--method", "rdp", "--plot"],
    ["risk", "--eps", "1", "--delta", "1e-5", "--plot"],
], ids=["compose", "risk"])
def test_older_plots_take_svg_and_refuse_other_extensions(run_cli, tmp_path, cmd):
    path = tmp_path / "p.svg"
    assert run_cli(*cmd, path).exit_code == 0
    _valid(path, "svg")
    line = run_cli(*cmd, tmp_path / "p.gif").one_line_error()
    assert ".png or .svg" in line and sorted(os.listdir(tmp_path)) == ["p.svg"]


def test_plot_needs_no_matplotlib_at_start_up():
    # the commands with --plot still start without matplotlib (tests/test_imports.py covers all)
    import subprocess
    import sys

    code = ("import sys\nfrom dpcalc.cli import cli\n"
            "cli.main(['epsilon', '--sigma', '1', '--steps', '10', '--delta', '1e-5', '--json'], "
            "prog_name='dpcalc', standalone_mode=False)\nprint('matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_accountant_keeps_its_colour_in_every_plot():
    from dpcalc.cli.plot_style import ACCOUNTANT_STYLES, accountant_style

    names = list(available())
    assert [accountant_style(n) for n in names[:len(ACCOUNTANT_STYLES)]] == list(ACCOUNTANT_STYLES[:len(names)])


# -- the same series as data (dpcalc serve's curves: dpcalc/cli/plot_data.py) -----------------------

@pytest.mark.parametrize("argv", [
    WRITES["epsilon"],
    WRITES["sigma"],
    ["sigma", "--eps", "2", "--batch-size", "100", "--dataset-size", "1000", "--epochs", "2", "--delta", "1e-5",
     "--sampling", "shuffle"],  # no --accountant: the command picks one for the sampler
    ["epsilon", "--sigma", "1", *LIGHT, "--accountant", "rdp", "--group-size", "2"],
], ids=["epsilon", "sigma", "sigma-shuffle", "epsilon-group"])
def test_plot_data_is_the_series_the_command_draws(run_cli, tmp_path, monkeypatch, argv):
    from dpcalc.cli import run_plots
    from dpcalc.cli.plot_data import plot_series

    seen = {}
    hook = "plot_epsilon" if argv[0] == "epsilon" else "plot_sigma"
    monkeypatch.setattr(run_plots, hook, lambda series, path, where: seen.update(s=series, where=where))
    assert run_cli(*argv, "--plot", tmp_path / "p.png").exit_code == 0
    data = plot_series(argv[0], argv[1:])
    s = seen["s"]
    assert data["x"] == list(s.x) and data["setting"] == seen["where"]
    assert [c["name"] for c in data["curves"]] == [c.name for c in s.curves]
    for c, d in zip(s.curves, data["curves"], strict=True):
        assert d["values"] == list(c.values) and d["lower"] == (None if c.lower is None else list(c.lower))


def test_plot_data_errors_are_the_commands(run_cli):
    from dpcalc.cli.plot_data import run_plot

    for argv in (["sigma", "--eps", "-3", *LIGHT], ["epsilon", *LIGHT], ["sigma", "--eps", "1", *LIGHT, "--plot", "x.png"],
                 ["epsilon", "--sigma", "1", *LIGHT, "--accountant", "nope"]):
        code, out, err = run_plot(argv)
        if "--plot" in argv:  # the series are returned, never drawn
            assert code == 2 and "--plot" in err
            continue
        assert (code, err.strip()) == (2, run_cli(*argv).one_line_error()) and out == ""
