"""``dpcalc plan`` and :mod:`dpcalc.planning`: every σ it reports is certified (fed back to the
accountant and to ``dpcalc epsilon`` it gives ε ≤ target), σ is monotone where theory says
so, the ``--sigma`` solvers return exact boundaries, the utility proxies match their
definitions, the Pareto front matches a brute-force definition, and bad input is one line
with exit status 2.

References used below:
* calibration = :func:`dpcalc.accounting.calibrate.calibrate_dpsgd`, the helper behind
  ``dpcalc sigma`` (the plan must return exactly its σ);
* monotonicity of the true ε in T (composition) and in q (hockey-stick divergence of the
  mixture convex in q, dominating pairs compose; see the module docstring of
  dpcalc/planning/plan.py) — the RDP accountant's bound obeys both exactly (its per-step
  RDP is non-decreasing in q and is multiplied by T);
* TAN η = σ/(q√T) (Sander, Stock, Sablayrolles 2023; authors' code keeps η fixed by holding
  σ/B constant at fixed steps) and its central-limit meaning 1/μ with μ = q√(T(e^{1/σ²} − 1))
  (Bu et al. 2020 eq. (6)).
"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpcalc.accounting.calibrate import calibrate_dpsgd
from dpcalc.accounting.registry import get_accountant
from dpcalc.errors import ParameterError
from dpcalc.events import dpsgd_event
from dpcalc.planning import (
    max_batch_size_for_sigma,
    max_steps_for_sigma,
    pareto_front,
    plan_grid,
    total_amount_of_noise,
)
from dpcalc.schedule import resolve_schedule

N = 50_000
DELTA = 1e-5
EPS = 3.0


def eps_of(name: str, sigma: float, q: float, t: int) -> float:
    """ε from a fresh accountant, as ``dpcalc epsilon`` computes it."""
    e = get_accountant(name).epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=q, steps=t), delta=DELTA).epsilon
    return math.inf if e is None else e


@pytest.fixture(scope="module")
def pld_grid():
    return plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[4096, 1024, 2048],
                     epochs=[30, 10, 3])


# ----------------------------------------------------------------------------- the grid is certified
def test_grid_sigma_fed_back_to_the_accountant_meets_target(pld_grid):
    assert pld_grid.accountant == "pld" and pld_grid.certified
    assert len(pld_grid.cells) == 9
    for c in pld_grid.cells:
        s = resolve_schedule(batch_size=c.batch_size, dataset_size=N, epochs=c.epochs)
        assert (c.sample_rate, c.steps) == (s.sample_rate, s.steps)
        assert eps_of("pld", c.noise_multiplier, c.sample_rate, c.steps) <= EPS
        assert c.epsilon <= EPS


def test_grid_sigma_is_at_most_dpcalc_sigma(pld_grid):
    """pld cells are warm-started from their neighbours (dpcalc/planning/_warm.py) on the same
    search stand-in as ``dpcalc sigma`` and settle on the smallest 8-digit σ meeting it, so a
    cell's σ is never above the σ ``dpcalc sigma`` prints for that run, and within its rtol
    1e-6 below it."""
    for c in sorted(pld_grid.cells, key=lambda c: (c.sample_rate, c.steps))[:4]:
        ref = calibrate_dpsgd(get_accountant("pld"), target_epsilon=EPS, delta=DELTA,
                              sample_rate=c.sample_rate, steps=c.steps)
        assert ref.noise_multiplier * (1 - 2e-6) <= c.noise_multiplier <= ref.noise_multiplier


def _lattice_below(s: float) -> float:
    """The 8-significant-digit lattice point just below the lattice point s."""
    scale = 10.0 ** (7 - math.floor(math.log10(s * (1 - 1e-12))))
    return (round(s * scale) - 1) / scale


def test_pld_grid_sigma_is_the_smallest_lattice_sigma_on_its_grid():
    """The bound behind "never above dpcalc sigma": on the grid step the accountant settles on
    at the cell's σ (its calibration stand-in, the function ``dpcalc sigma`` searches), the
    8-digit σ one step below exceeds the target; the σ itself is verified by the accountant."""
    acc = get_accountant("pld")
    p = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[512, 2048, 8192],
                  epochs=[2, 5, 20], accountant="pld", workers=1)
    warm = [c for c in p.cells if c.result.details.get("warm_start")]
    # all but the first cell, and the odd cell whose grid steps alternate (then calibrate_dpsgd)
    assert len(warm) >= 6
    for c in warm:
        sigma = c.noise_multiplier
        res = acc.epsilon(dpsgd_event(noise_multiplier=sigma, sample_rate=c.sample_rate, steps=c.steps), delta=DELTA)
        assert res.epsilon <= EPS
        _, stand_in = acc.calibration_search(res)
        below = _lattice_below(sigma)
        assert below < sigma and f"{below:.8g}" != f"{sigma:.8g}"
        ev = dpsgd_event(noise_multiplier=below, sample_rate=c.sample_rate, steps=c.steps)
        assert stand_in.epsilon(ev, delta=DELTA).epsilon > EPS


def test_pld_grid_by_steps_is_certified_and_monotone():
    """Steps columns (σ*(q, T) non-decreasing in T and, at fixed T, in q: module docstring of
    dpcalc/planning/plan.py); every σ fed back to a fresh pld accountant meets the target."""
    p = plan_grid(target_epsilon=1.0, delta=DELTA, dataset_size=N, batch_sizes=[500, 1000, 5000],
                  steps=[100, 400, 1600], accountant="pld", workers=1)
    tab = {(c.batch_size, c.steps): c.noise_multiplier for c in p.cells}
    assert len(tab) == 9
    for (b, t), sigma in tab.items():
        assert eps_of("pld", sigma, b / N, t) <= 1.0
    for b in (500, 1000, 5000):
        col = [tab[b, t] for t in (100, 400, 1600)]
        assert col == sorted(col)
    for t in (100, 400, 1600):
        row = [tab[b, t] for b in (500, 1000, 5000)]
        assert row == sorted(row)


@pytest.mark.slow
def test_pld_grid_first_cell_starts_from_the_clt_and_workers_agree():
    """The first cell of a worker has no neighbour: it starts from the central-limit σ
    (dpcalc/planning/_warm.py, ``_clt_start``) and, like every warm cell, settles on the smallest
    8-digit σ meeting the stand-in: never above ``dpcalc sigma``'s σ, at most its rtol 1e-6
    below. With 1 or 2 workers (other neighbours) a warm-started σ is the same 8-digit lattice
    point up to one step (the grid step the accountant settles on may differ with the path only
    when σ sits where it switches)."""
    kw = dict(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[4096, 8192, 16384, 32768],
              epochs=[1, 4], accountant="pld")
    one = plan_grid(workers=1, **kw)
    two = plan_grid(workers=2, **kw)
    first = min(one.cells, key=lambda c: (c.sample_rate, c.steps))
    ref = calibrate_dpsgd(get_accountant("pld"), target_epsilon=EPS, delta=DELTA,
                          sample_rate=first.sample_rate, steps=first.steps)
    assert first.result.details.get("warm_start")
    assert ref.noise_multiplier * (1 - 2e-6) <= first.noise_multiplier <= ref.noise_multiplier
    a = {(c.batch_size, c.epochs): c for c in one.cells}
    b = {(c.batch_size, c.epochs): c for c in two.cells}
    assert a.keys() == b.keys()
    both = 0
    for k in a:
        sa, sb = a[k].noise_multiplier, b[k].noise_multiplier
        wa, wb = (bool(x[k].result.details.get("warm_start")) for x in (a, b))
        if wa and wb:
            both += 1
            assert abs(sa - sb) <= 1.01 * 10.0 ** (math.floor(math.log10(sa)) - 7)
        elif wa != wb:  # a cell handed to dpcalc sigma's path: at most its rtol above
            warm, cold = (sa, sb) if wa else (sb, sa)
            assert warm <= cold <= warm * (1 + 2e-6)
    assert both >= 6


def test_grid_sigma_through_dpcalc_epsilon_cli(run_cli):
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
                "--epochs", "3,10", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()["results"]
    assert len(rows) == 4
    for row in rows:
        e = run_cli("epsilon", "--sigma", repr(row["noise_multiplier"]), "--batch-size", row["batch_size"],
                    "--dataset-size", N, "--steps", row["steps"], "--delta", DELTA, "--accountant", "pld", "--json")
        assert e.exit_code == 0, e.stderr
        assert e.json()["results"][0]["epsilon"] <= EPS


def test_rdp_grid_sigma_is_minimal_and_certified():
    """rdp grid: every σ meets the target and σ·(1 − 1e-5) does not (σ is the smallest to 1e-6)."""
    p = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[128, 2048], epochs=[1, 20],
                  accountant="rdp")
    for c in p.cells:
        assert eps_of("rdp", c.noise_multiplier, c.sample_rate, c.steps) <= EPS
        assert eps_of("rdp", c.noise_multiplier * (1 - 1e-5), c.sample_rate, c.steps) > EPS


# ----------------------------------------------------------------------------- monotonicity (theory)
def _sigma_table(plan):
    return {(c.batch_size, c.steps if c.epochs is None else c.epochs): c.noise_multiplier for c in plan.cells}


def test_pld_sigma_increases_with_epochs_at_fixed_batch(pld_grid):
    """σ*(q, T) non-decreasing in T (T = ⌈E·N/B⌉ grows with E)."""
    tab = _sigma_table(pld_grid)
    for b in (1024, 2048, 4096):
        col = [tab[b, e] for e in (3, 10, 30)]
        assert col == sorted(col), (b, col)


@settings(max_examples=5, deadline=None)
@given(b=st.integers(64, 20_000), e1=st.floats(0.2, 20), e2=st.floats(0.2, 20))
def test_rdp_sigma_nondecreasing_in_epochs(b, e1, e2):
    lo, hi = sorted((e1, e2))
    p = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[b], epochs=[lo, hi],
                  accountant="rdp")
    tab = {c.epochs: c for c in p.cells}
    if len(tab) == 2:  # the two epochs values may coincide after rounding to 6 digits
        a, z = tab[min(tab)], tab[max(tab)]
        assert a.steps <= z.steps
        # both are the smallest σ to rtol 1e-6 (rounded up): allow that tolerance
        assert a.noise_multiplier <= z.noise_multiplier * (1 + 2e-6)


@settings(max_examples=5, deadline=None)
@given(b1=st.integers(8, 20_000), b2=st.integers(8, 20_000), t=st.integers(1, 5000))
def test_rdp_sigma_nondecreasing_in_batch_at_fixed_steps(b1, b2, t):
    lo, hi = sorted((b1, b2))
    p = plan_grid(target_epsilon=EPS, delta=DELTA, dataset_size=N, batch_sizes=[lo, hi], steps=[t],
                  accountant="rdp")
    by_b = {c.batch_size: c.noise_multiplier for c in p.cells}
    assert by_b[lo] <= by_b[hi] * (1 + 2e-6)


# ----------------------------------------------------------------------------- --sigma solvers
@pytest.mark.parametrize("name", ["pld", "rdp"])
def test_max_steps_is_an_exact_boundary(name):
    """Granularity: steps. ε(T*) ≤ target < ε(T*+1); whole epochs E* = ⌊T*·B/N⌋: E* epochs
    meet ε, E*+1 epochs do not (each recomputed here with a fresh accountant)."""
    sigma = 1.0
    p = max_steps_for_sigma(noise_multiplier=sigma, target_epsilon=EPS, delta=DELTA, dataset_size=N,
                            batch_sizes=[4096, 256, 1024], accountant=name)
    assert [c.batch_size for c in p.cells] == [256, 1024, 4096]
    prev = math.inf
    for c in p.cells:
        q, t = c.sample_rate, c.extra["max_steps"]
        assert c.steps == t and t >= 1
        assert eps_of(name, sigma, q, t) <= EPS < eps_of(name, sigma, q, t + 1)
        e = c.extra["max_epochs"]
        t_e = resolve_schedule(batch_size=c.batch_size, dataset_size=N, epochs=e).steps if e > 0 else 0
        t_e1 = resolve_schedule(batch_size=c.batch_size, dataset_size=N, epochs=e + 1).steps
        assert t_e <= t < t_e1
        assert eps_of(name, sigma, q, t_e1) > EPS
        if e > 0:
            assert eps_of(name, sigma, q, t_e) <= EPS
        assert t <= prev  # property 2: T* cannot grow with q
        prev = t


def test_max_steps_infeasible_batch_is_reported():
    p = max_steps_for_sigma(noise_multiplier=0.3, target_epsilon=0.5, delta=DELTA, dataset_size=N,
                            batch_sizes=[25_000], accountant="rdp")
    (c,) = p.cells
    assert not c.feasible and c.extra["max_steps"] == 0 and "exceeds" in c.result.reason


@pytest.mark.parametrize("name", ["pld", "rdp"])
def test_max_batch_size_is_an_exact_boundary(name):
    """Granularity: one example. ε(B*) ≤ target < ε(B*+1), recomputed here."""
    sigma = 1.0
    p = max_batch_size_for_sigma(noise_multiplier=sigma, target_epsilon=EPS, delta=DELTA, dataset_size=N,
                                 epochs=[1, 10, 30], accountant=name)
    for c in p.cells:
        b = c.extra["max_batch_size"]
        s0 = resolve_schedule(batch_size=b, dataset_size=N, epochs=c.epochs)
        s1 = resolve_schedule(batch_size=b + 1, dataset_size=N, epochs=c.epochs)
        assert eps_of(name, sigma, s0.sample_rate, s0.steps) <= EPS < eps_of(name, sigma, s1.sample_rate, s1.steps)


def test_max_batch_size_at_fixed_steps_is_the_largest():
    """At fixed T, ε is non-decreasing in q (theorem), so B* is the largest feasible batch size."""
    sigma, t = 1.2, 500
    p = max_batch_size_for_sigma(noise_multiplier=sigma, target_epsilon=EPS, delta=DELTA, dataset_size=N,
                                 steps=[t], accountant="rdp")
    b = p.cells[0].extra["max_batch_size"]
    assert p.cells[0].extra["steps_asked"] == t
    assert eps_of("rdp", sigma, b / N, t) <= EPS
    for bigger in (b + 1, b + 7, 2 * b, N):
        assert eps_of("rdp", sigma, bigger / N, t) > EPS


# ----------------------------------------------------------------------------- utility proxies
def test_tan_definition_and_its_central_limit_meaning():
    sigma, q, t = 50.0, 0.01, 10_000
    eta = total_amount_of_noise(sigma, q, t)
    assert eta == pytest.approx(sigma / (q * math.sqrt(t)), rel=1e-15)
    # Bu et al. 2020 eq. (6): μ = q√(T(e^{1/σ²} − 1)); μ-GDP = Gaussian mechanism with noise 1/μ
    mu = q * math.sqrt(t * math.expm1(1 / sigma**2))
    assert eta == pytest.approx(1 / mu, rel=1 / (2 * sigma**2))  # 1/μ = η(1 − 1/(4σ²) + O(σ⁻⁴))
    # the authors' scaling law (facebookresearch/tan get_noise_from_bs): σ ∝ B at fixed T keeps η
    assert total_amount_of_noise(3 * sigma, 3 * q, t) == pytest.approx(eta, rel=1e-15)
    with pytest.raises(ParameterError):
        total_amount_of_noise(1.0, 0.0, 10)


def test_cell_proxies_match_their_definitions(pld_grid):
    for c in pld_grid.cells:
        assert c.mean_noise_std == pytest.approx(c.noise_multiplier * 1.0 / c.batch_size, rel=1e-15)
        assert c.tan == pytest.approx(c.noise_multiplier / (c.sample_rate * math.sqrt(c.steps)), rel=1e-15)
        assert c.examples == c.batch_size * c.steps


def _dominated(i, xs, ys):
    return any(xs[j] <= xs[i] and ys[j] <= ys[i] and (xs[j] < xs[i] or ys[j] < ys[i]) for j in range(len(xs)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 8), st.integers(1, 8)), min_size=1, max_size=25))
def test_pareto_front_matches_brute_force(points):
    xs, ys = [p[0] for p in points], [float(p[1]) for p in points]
    assert pareto_front(xs, ys) == [not _dominated(i, xs, ys) for i in range(len(xs))]


def test_grid_front_and_order(pld_grid):
    cells = pld_grid.cells
    xs, ys = [c.examples for c in cells], [c.tan for c in cells]
    for i, c in enumerate(cells):
        assert c.pareto == (not _dominated(i, xs, ys))
        assert c.rank == i + 1
    keys = [(not c.pareto, c.tan) for c in cells]
    assert keys == sorted(keys)  # front first, then by TAN
    assert sum(c.pareto for c in cells) >= 1


def test_examples_budget_best_cell(run_cli):
    budget = 1.6e6
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
                "--epochs", "3,10,30,100", "--examples-budget", budget, "--accountant", "rdp", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json()["results"]
    assert len(rows) == 8
    under = [x for x in rows if x["examples"] <= budget]
    over = [x for x in rows if x["examples"] > budget]
    assert over and all(x.get("over_budget") and x.get("noise_multiplier") is None for x in over)
    (best,) = [x for x in rows if x.get("best")]
    assert best["examples"] <= budget and best["tan"] == min(x["tan"] for x in under)


# ----------------------------------------------------------------------------- output
def test_json_has_every_cell_and_table_rows_are_capped(run_cli):
    args = ("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024:4096:3",
            "--epochs", "5,20", "--accountant", "rdp")
    j = run_cli(*args, "--json")
    assert j.exit_code == 0, j.stderr
    obj = j.json()
    assert obj["command"] == "plan" and obj["inputs"]["accountant"] == "rdp"
    rows = obj["results"]
    assert len(rows) == 6
    for row in rows:
        for key in ("batch_size", "epochs", "steps", "sample_rate", "noise_multiplier", "epsilon",
                    "mean_noise_std", "tan", "examples", "pareto", "rank", "certified"):
            assert key in row
    t = run_cli(*args, "--rows", "3")
    assert t.exit_code == 0
    assert "Showing 3 of 6 rows" in t.stdout
    assert t.stdout.count("│") // 11 == 3  # three data rows of 10 columns (11 bars each)


def test_plot_writes_a_png(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "plan.png"
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--batch-size", "1024,4096",
                "--epochs", "3,10", "--accountant", "rdp", "--examples-budget", "6e5", "--plot", out)
    assert r.exit_code == 0, r.stderr
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    w, h = struct.unpack(">II", head[16:24])
    assert w > 600 and h > 200
    assert list(tmp_path.iterdir()) == [out]  # atomic write: no temporary file left


def test_sigma_solver_table(run_cli):
    r = run_cli("plan", "--eps", EPS, "--delta", DELTA, "--dataset-size", N, "--sigma", "1",
                "--batch-size", "256,1024", "--accountant", "rdp")
    assert r.exit_code == 0, r.stderr
    assert "most steps each batch size allows" in r.stdout and "9,171" in r.stdout


# ----------------------------------------------------------------------------- bad input
BAD = [
    (["--eps", "0", "--batch-size", "256", "--epochs", "1"], "--eps must be a finite number > 0, got 0"),
    (["--eps", "-1", "--batch-size", "256", "--epochs", "1"], "--eps must be a finite number > 0, got -1"),
    (["--eps", "3", "--batch-size", "60000", "--epochs", "1"], "--batch-size must be at most dataset_size (50000), got 60000"),
    (["--eps", "3", "--batch-size", "", "--epochs", "1"], "--batch-size needs at least one value, got ''"),
    (["--eps", "3", "--batch-size", "256", "--epochs", " "], "--epochs needs at least one value, got ' '"),
    (["--eps", "3", "--batch-size", "100:10", "--epochs", "1"], "--batch-size range '100:10' is empty: lo > hi"),
    (["--eps", "3", "--batch-size", "10:100:0", "--epochs", "1"], "--batch-size range count must be a whole number >= 1, got 0"),
    (["--eps", "3", "--batch-size", "256", "--epochs", "0"], "--epochs values must be a finite number > 0, got 0"),
    (["--eps", "3", "--batch-size", "2.5", "--epochs", "1"], "--batch-size values must be a whole number >= 1, got 2.5"),
    (["--eps", "3", "--batch-size", "256", "--epochs", "1", "--steps", "5"], "give either --epochs or --steps, not both"),
    (["--eps", "3", "--batch-size", "256"], "--epochs or --steps is needed (values or a range)"),
    (["--eps", "3", "--batch-size", "256", "--epochs", "1", "--examples-budget", "0"], "--examples-budget must be a finite number > 0, got 0"),
    (["--eps", "3", "--sigma", "1", "--epochs", "1", "--batch-size", "60000"], "--batch-size must be at most dataset_size (50000), got 60000"),
    (["--eps", "3", "--sigma", "0", "--batch-size", "256"], "--sigma must be a finite number > 0, got 0"),
    (["--eps", "3", "--sigma", "1"], "with --sigma give --batch-size (most steps per batch size) or --epochs/--steps (largest batch size)"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_exit_2(run_cli, args, message):
    r = run_cli("plan", "--delta", DELTA, "--dataset-size", N, *args)
    assert r.exit_code == 2
    assert r.stderr == f"Error: {message}\n"
    assert r.stdout == ""


def test_bad_plot_path_writes_nothing(run_cli, tmp_path):
    r = run_cli("plan", "--eps", 3, "--delta", DELTA, "--dataset-size", N, "--batch-size", "256",
                "--epochs", "1", "--plot", tmp_path / "missing" / "a.png")
    assert r.exit_code == 2 and r.stderr.startswith("Error: --plot ") and "does not exist" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_no_cell_under_budget_is_infeasible_exit_1(run_cli):
    r = run_cli("plan", "--eps", 3, "--delta", DELTA, "--dataset-size", N, "--batch-size", "256",
                "--epochs", "10", "--examples-budget", "10")
    assert r.exit_code == 1
    assert r.stderr == "Error: no cell is under the examples budget 10 (the cheapest processes 500,224 examples)\n"


# ----------------------------------------------------------------------------- plumbing
def test_planning_library_imports_no_cli_or_heavy_modules():
    import subprocess
    import sys

    code = ("import sys, dpcalc.planning\n"
            "print(','.join(m for m in ('click', 'rich', 'torch', 'matplotlib', 'scipy.stats') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_pld_warm_cell_whose_grid_steps_alternate_is_dpcalc_sigma():
    """q = 8192/50000, T = 13 (2 epochs at B = 8192): pld settles on grid A at the stand-in
    root of grid B and on B at the root of A (seen on the test grid above, from the guess the
    neighbours give). The warm start then hands the cell to ``dpcalc sigma``'s own path, which
    steps σ up until verified: the same σ. Should the accountant stop alternating there, the
    warm answer must still be certified and not above ``dpcalc sigma``'s."""
    from dpcalc.planning._warm import calibrate_warm

    acc = get_accountant("pld")
    q, t = 8192 / N, 13
    res, _, warm = calibrate_warm(acc, q, t, EPS, DELTA, 1.1250512292686026, -2.5)
    ref = calibrate_dpsgd(get_accountant("pld"), target_epsilon=EPS, delta=DELTA, sample_rate=q, steps=t)
    assert eps_of("pld", res.noise_multiplier, q, t) <= EPS
    if warm:
        assert ref.noise_multiplier * (1 - 2e-6) <= res.noise_multiplier <= ref.noise_multiplier
    else:
        assert res.noise_multiplier == ref.noise_multiplier


@pytest.mark.parametrize("root", [0.7312345678, 1.0000000449, 3.9999999951, 12.345678912])
@pytest.mark.parametrize("start,inf_below", [(0.9, None), (1.03, None), (0.5, 0.95), (2.0, None)])
def test_lattice_root_is_the_smallest_lattice_sigma(root, start, inf_below):
    """The warm search on a synthetic stand-in f(σ) = target·(root/σ)² (ε = ∞ below
    ``inf_below``·root, as pld when a small σ's grid does not fit): the smallest 8-digit σ with
    f ≤ target, from guesses within 3% up to a factor 2 away, with f evaluated at lattice points
    only and the lattice point below the answer evaluated too."""
    from dpcalc.accounting.calibrate import _round_up
    from dpcalc.planning._warm import _lattice_root

    target = 3.0
    calls = []

    def f(s):
        calls.append(s)
        if inf_below is not None and s < inf_below * root:
            return math.inf
        return target * (root / s) ** 2

    sigma, slope = _lattice_root(f, target, math.log(start * root), -1.0)
    assert sigma == _round_up(root, 8)  # f decreasing: the smallest lattice point ≥ root
    assert sigma in calls and _lattice_below(sigma) in calls  # both evaluated
    assert all(s == _round_up(s, 8) for s in calls)  # lattice points only
    assert f(sigma) <= target < f(_lattice_below(sigma))
    assert slope == pytest.approx(-2.0, rel=1e-3)
    assert len(calls) <= 12
