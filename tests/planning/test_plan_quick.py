"""``dpcalc plan --quick`` (:mod:`dpcalc.planning._quick`): every σ is certified (its ε is pld's
upper bound on the cell's grid step, reproduced bit for bit by ``dpcalc epsilon --discretization``),
within the window below the target, and tight: pld's proven *lower* bound at a σ 1% smaller already
exceeds the target (so no certified accountant can give a σ 1% smaller), and σ is within 0.3% of
``dpcalc sigma``'s.

References used below:
* ``dpcalc sigma`` = :func:`dpcalc.accounting.calibrate.calibrate_dpsgd` (pld, automatic grid);
* pld's ``epsilon_lower`` (merging and pooling of grid bins, a post-processing of the true pair:
  a proven lower bound on the mechanism's ε, docs/numerical-accounting.md) — the achievable side;
* synthetic stand-ins with known roots for the window search (closed form).
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting._pld_history import segments
from dpcalc.accounting._pld_queries import ETA_REL
from dpcalc.accounting.calibrate import _lattice_step, _round_up, calibrate_dpsgd
from dpcalc.accounting.pld import PldAccountant
from dpcalc.events import dpsgd_event
from dpcalc.planning import plan_grid
from dpcalc.planning._quick import MAX_EVALS, WINDOW, _window_root, calibrate_rows_quick

N = 50_000
DELTA = 1e-5
EPS = 3.0
BATCHES = [256, 1024, 4096]
EPOCHS = [1, 5, 30]


@pytest.fixture(scope="module")
def quick_grid():
    return plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=BATCHES, epochs=EPOCHS,
                     quick=True, workers=1)


def _event(cell, sigma=None):
    return dpsgd_event(noise_multiplier=cell.noise_multiplier if sigma is None else sigma,
                       sample_rate=cell.sample_rate, steps=cell.steps)


def test_every_quick_sigma_is_certified_in_the_window_and_reproduced_by_its_step(quick_grid):
    assert quick_grid.accountant == "pld" and quick_grid.certified
    assert len(quick_grid.cells) == 9
    for cell in quick_grid.cells:
        d = cell.result.details
        assert d["quick"] and d["fixed_grid"] and d["quick_window"] == WINDOW
        assert cell.result.certified
        assert EPS * (1 - WINDOW) <= cell.epsilon <= EPS
        # the Check line: pld with the cell's grid step, from a fresh accountant, bit for bit
        again = PldAccountant(discretization=d["discretization"]).epsilon(_event(cell), delta=DELTA)
        assert again.details["discretization"] == d["discretization"]
        assert again.epsilon == cell.epsilon
        assert again.details["epsilon_lower"] <= again.epsilon


def test_quick_sigma_is_tight_against_a_proven_lower_bound_and_dpcalc_sigma(quick_grid):
    """No certified accountant can do 1% better: pld's lower bound (an achievable ε of the
    mechanism's own dominating pair) at 0.99σ is above the target. And the quick σ is within
    0.3% of dpcalc sigma's (benchmark grid: ≤ 0.08%)."""
    for cell in quick_grid.cells:
        lower = PldAccountant().epsilon(_event(cell, 0.99 * cell.noise_multiplier), delta=DELTA)
        assert lower.details["epsilon_lower"] > EPS
    for cell in quick_grid.cells[::3]:
        ref = calibrate_dpsgd(PldAccountant(), target_epsilon=EPS, delta=DELTA, sample_rate=cell.sample_rate,
                              steps=cell.steps)
        assert abs(cell.noise_multiplier / ref.noise_multiplier - 1) < 3e-3


def test_quick_grid_in_workers_is_certified_too():
    plan = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=BATCHES, epochs=EPOCHS,
                     quick=True, workers=2)
    for cell in plan.cells:
        assert cell.result.details["quick"]
        again = PldAccountant(discretization=cell.result.details["discretization"])
        assert again.epsilon(_event(cell), delta=DELTA).epsilon == cell.epsilon <= EPS


def test_quick_stand_in_step_is_a_fixed_point_of_an_explicit_step():
    acc = PldAccountant()
    for q, t, s in [(0.0051, 196, 0.6), (0.08192, 1221, 4.08), (1e-4, 10, 0.8), (0.02, 50_000, 1.3)]:
        ev = dpsgd_event(noise_multiplier=s, sample_rate=q, steps=t)
        key, stand_in = acc.quick_stand_in(ev, delta=DELTA)
        explicit = PldAccountant(discretization=key)
        assert explicit._start_h(segments(ev, "add-remove", "pld"), ETA_REL * DELTA) == key
        assert stand_in.grid == key
    assert PldAccountant(discretization=0.01).quick_stand_in(ev, delta=DELTA) is None


def test_cells_without_a_quick_stand_in_take_dpcalc_sigmas_path(monkeypatch):
    monkeypatch.setattr(PldAccountant, "quick_stand_in", lambda self, event, *, delta: None)
    keys = [(1024 / N, 49), (4096 / N, 13)]
    out = calibrate_rows_quick(PldAccountant(), keys, EPS, DELTA)
    for (q, t), res in zip(keys, out, strict=True):
        assert "quick" not in res.details
        ref = calibrate_dpsgd(PldAccountant(), target_epsilon=EPS, delta=DELTA, sample_rate=q, steps=t)
        assert ref.noise_multiplier * (1 - 2e-6) <= res.noise_multiplier <= ref.noise_multiplier


def test_rdp_ignores_quick():
    a = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[1024], epochs=[5],
                  accountant="rdp", quick=True)
    b = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[1024], epochs=[5],
                  accountant="rdp")
    assert a.cells[0].noise_multiplier == b.cells[0].noise_multiplier


# ----------------------------------------------------------------------------- the window search
@settings(max_examples=60, deadline=None)
@given(root=st.floats(0.3, 30.0), start=st.floats(0.5, 2.0), power=st.floats(0.5, 6.0),
       slope_guess=st.floats(-8.0, -0.3), inf_below=st.sampled_from([None, 0.9, 0.99]))
def test_window_root_lands_in_the_window(root, start, power, slope_guess, inf_below):
    """f(σ) = target·(root/σ)^power (ε = ∞ below inf_below·root, as pld where a grid does not
    fit): the σ returned is on the 8-digit lattice, f(σ) is in the window, within MAX_EVALS."""
    target = 3.0
    calls = []

    def f(s):
        calls.append(s)
        if inf_below is not None and s < inf_below * root:
            return math.inf
        return target * (root / s) ** power

    found = _window_root(f, target, WINDOW, math.log(start * root), slope_guess)
    assert found is not None
    sigma, eps, slope, n = found
    assert n == len(calls) <= MAX_EVALS
    assert sigma == _round_up(sigma, 8) and eps == f(sigma)
    assert target * (1 - WINDOW) <= eps <= target
    assert root <= sigma <= root * (1 + WINDOW / power) * (1 + 1e-7)


def test_window_root_at_a_jump_returns_the_lattice_point_above_it_or_gives_up():
    """f jumps from 2·target to target/2 at a lattice point: no point is in the window. When the
    bracket closes on the two lattice points around the jump, the one above (f ≤ target) is
    returned; from farther away the search gives up within MAX_EVALS (the cell then takes
    dpcalc sigma's path, which bisects)."""
    target = 3.0
    jump = _round_up(1.2345678, 8)
    below = _lattice_step(jump, 8, up=False)
    calls = []

    def f(s):
        calls.append(s)
        return 2 * target if s < jump else target / 2

    sigma, eps, _, n = _window_root(f, target, WINDOW, math.log(below), -1e9)
    assert (sigma, eps, n) == (jump, target / 2, 2) and calls == [below, jump]
    calls.clear()
    assert _window_root(f, target, WINDOW, math.log(1.1), -2.0) is None
    assert len(calls) == MAX_EVALS


# ----------------------------------------------------------------------------- the command
def test_plan_quick_cli_note_and_check_line(run_cli):
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
                "--epochs", "3,10", "--quick")
    assert r.exit_code == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert "--quick: each σ marked quick (details.quick) is certified by pld's upper bound on one grid " \
           "step fixed per cell" in flat
    check = flat.split("Check: ")[1].split(" • ")[0].split()
    assert check[:2] == ["dpcalc", "epsilon"] and "--discretization" in check
    e = run_cli(*check[1:], "--json")
    assert e.exit_code == 0, e.stderr
    js = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
                 "--epochs", "3,10", "--quick", "--json").json()["results"]
    best = js[0]
    assert e.json()["results"][0]["epsilon"] == best["epsilon"] <= EPS


def test_plan_quick_with_sigma_is_one_line_exit_2(run_cli):
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "256",
                "--sigma", "1", "--quick")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr == "Error: --quick applies to the grid (a target ε); drop it with --sigma\n"


@pytest.mark.parametrize("extra", [["--accountant", "rdp"], ["--discretization", "0.002"],
                                   ["--sampling", "without-replacement"]])
def test_plan_quick_where_it_does_not_apply_says_so(run_cli, extra):
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024",
                "--epochs", "3", "--quick", *extra)
    assert r.exit_code == 0, r.stderr
    flat = " ".join(r.stdout.split())
    assert "quick applies to pld with its automatic grid step (no explicit discretization), Poisson " \
           "sampling and group size 1: every σ here is calibrated as `dpcalc sigma`." in flat
    assert "--quick: each σ" not in flat and "did not settle" not in flat


def test_plan_quick_check_line_carries_the_accuracy(run_cli):
    args = ("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
            "--epochs", "3", "--quick", "--accuracy", "0.05")
    flat = " ".join(run_cli(*args).stdout.split())
    check = flat.split("Check: ")[1].split(" • ")[0].split()
    assert check[-2:] == ["--accuracy", "0.05"] and "--discretization" in check
    e = run_cli(*check[1:], "--json").json()["results"][0]
    best = run_cli(*args, "--json").json()["results"][0]
    assert e["epsilon"] == best["epsilon"] <= EPS
    assert "warnings" not in e["details"]


# ----------------------------------------------------------------------------- hard cases
def test_quick_is_tight_where_the_record_is_rarely_sampled():
    """q·T < 10 (here q = 0.1, T = 30, a tiny δ): pld's first grid is floored there (edge term
    −4·ln(1−q) of the lower bound); quick's step ignores that floor, so σ stays within 0.3% of
    dpcalc sigma's (with the floor it was 24% above) and 0.99σ provably misses the target."""
    q, t, eps, delta = 0.1, 30, 0.12, 1e-9
    (res,) = calibrate_rows_quick(PldAccountant(), [(q, t)], eps, delta)
    assert res.details["quick"] and res.epsilon <= eps
    ref = calibrate_dpsgd(PldAccountant(), target_epsilon=eps, delta=delta, sample_rate=q, steps=t)
    assert abs(res.noise_multiplier / ref.noise_multiplier - 1) < 3e-3
    low = PldAccountant().epsilon(dpsgd_event(noise_multiplier=0.99 * res.noise_multiplier, sample_rate=q,
                                              steps=t), delta=delta)
    assert low.details["epsilon_lower"] > eps


def test_quick_stand_in_refuses_a_step_the_alignment_does_not_fix():
    """This event's step needs more than 4 alignment steps (found by a reviewer's search; about
    1e-4 of random (q, h) pairs): no quick answer, so no Check line can miss its ε."""
    ev = dpsgd_event(noise_multiplier=3.0877972262677305, sample_rate=0.3583192185029436, steps=55)
    assert PldAccountant().quick_stand_in(ev, delta=1e-5) is None


def test_plan_quick_under_replace_counts_the_cell_without_a_start(run_cli):
    """Under replace there is no central-limit start: a worker's first cell takes dpcalc sigma's
    path, and the note says so (it is not a quick search that failed)."""
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "4096",
                "--epochs", "3", "--neighboring", "replace", "--quick", "--json")
    assert r.exit_code == 0, r.stderr
    (row,) = r.json()["results"]
    assert "quick" not in row["details"]
    flat = " ".join(run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "4096",
                            "--epochs", "3", "--neighboring", "replace", "--quick").stdout.split())
    assert "1 cell(s) were calibrated as `dpcalc sigma` (the quick search had no start there, or did not " \
           "settle)." in flat
