"""Property test (hypothesis) over every numeric option of the calculator commands: whatever
text a user types, dpcalc answers, or refuses in one line — never a traceback (issue 17).

For each command the table :data:`COMMANDS` gives a valid base invocation and its numeric
options. An example replaces one option's value with hostile text (finite extremes ±1e±308,
subnormals, 0, negatives, NaN, inf, ``1_0``, Unicode digits, empty, random floats) and may set
the other numeric options to random values inside their supported ranges (where real
computations happen). It asserts:

* the exit status is 0 (answer), 1 (infeasible) or 2 (bad input), and no exception escapes;
* no traceback in the output; an error is one ``Error: ...`` line on stderr;
* with ``--json``, stdout is one strict JSON object (no NaN/Infinity literals).

Add a command (``compose``, ``train``) by adding a row to :data:`COMMANDS`. The accounting
commands run the fast accountants by default; ``-m slow`` also runs ``pld`` and ``all``.
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcalc.cli import cli
from dpcalc.cli.options import RANGES

#: hostile texts every numeric option must survive (answer or one-line refusal)
HOSTILE = ["1e308", "-1e308", "1e-308", "-1e-308", "5e-324", "1e-320", "0", "-0", "-1", "nan", "NaN",
           "inf", "-inf", "Infinity", "1e400", "1_0", "١", "٣.٥", "１", "", " ", "0x10", "1e", "--1",
           "1.5", "0.999999", "1e20", "1e9", "2.5e-7", "1/3", "abc", "1,5", "+1", ".5", "5."]

#: command → (base arguments, {numeric flag: RANGES key}); the base runs and exits 0
COMMANDS: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str]]] = {
    ("epsilon",): (
        {"--sigma": "1.1", "-q": "0.01", "--steps": "100", "--delta": "1e-5"},
        {"--sigma": "noise_multiplier", "-q": "sample_rate", "--steps": "steps", "--delta": "delta"}),
    ("epsilon", "batches"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "1",
         "--delta": "1e-5"},
        {"--batch-size": "batch_size", "--dataset-size": "dataset_size", "--epochs": "epochs"}),
    ("delta",): (
        {"--sigma": "1.1", "-q": "0.01", "--steps": "100", "--eps": "2"},
        {"--sigma": "noise_multiplier", "-q": "sample_rate", "--steps": "steps", "--eps": "epsilon_at"}),
    ("sigma",): (
        {"--eps": "2", "--delta": "1e-5", "-q": "0.01", "--steps": "100"},
        {"--eps": "epsilon_target", "--delta": "delta", "-q": "sample_rate", "--steps": "steps",
         "--max-grad-norm": "max_grad_norm"}),
    ("laplace",): (
        {"--eps": "1", "--sensitivity": "1", "--beta": "0.05", "--dims": "10"},
        {"--eps": "epsilon_mech", "--sensitivity": "sensitivity", "--beta": "beta", "--dims": "dims"}),
    ("laplace", "accuracy"): (
        {"--accuracy": "10", "--beta": "0.05"},
        {"--accuracy": "accuracy", "--beta": "beta", "--sensitivity": "sensitivity", "--dims": "dims"}),
    ("laplace", "release"): (
        {"--eps": "1", "--release": "12.34", "--granularity": "0.01"},
        {"--eps": "epsilon_mech", "--release": "release", "--granularity": "granularity",
         "--sensitivity": "sensitivity"}),
    ("gaussian",): (
        {"--eps": "1", "--delta": "1e-5", "--sensitivity": "1", "--beta": "0.05", "--dims": "10"},
        {"--eps": "epsilon_gaussian", "--delta": "delta", "--sensitivity": "sensitivity",
         "--beta": "beta", "--dims": "dims"}),
    ("gaussian", "accuracy"): (
        {"--accuracy": "10", "--beta": "0.05", "--delta": "1e-5"},
        {"--accuracy": "accuracy", "--beta": "beta", "--delta": "delta", "--sensitivity": "sensitivity",
         "--dims": "dims"}),
    ("gaussian", "release"): (
        {"--eps": "1", "--delta": "1e-5", "--release": "12", "--granularity": "1"},
        {"--eps": "epsilon_gaussian", "--delta": "delta", "--release": "release",
         "--granularity": "granularity", "--sensitivity": "sensitivity"}),
    ("rr",): (
        {"--eps": "1", "--categories": "3", "--observed": "500,300,200"},
        {"--eps": "epsilon_rr"}),
    ("rr", "plain"): ({"--eps": "1"}, {"--eps": "epsilon_rr", "--categories": "categories"}),
    ("convert", "group"): (
        {"--eps": "1", "--delta": "1e-6", "--group-size": "4"},
        {"--eps": "epsilon_dp", "--delta": "delta_closed", "--group-size": "group_size"}),
    ("convert", "subsample"): (
        {"--eps": "2", "--delta": "1e-5", "-q": "0.01"},
        {"--eps": "epsilon_dp", "--delta": "delta_closed", "-q": "sample_rate_convert"}),
    ("convert", "zcdp"): ({"--rho": "0.5", "--delta": "1e-5"}, {"--rho": "rho", "--delta": "delta"}),
    ("convert", "zcdp", "pure"): ({"--eps": "1"}, {"--eps": "epsilon_pure"}),
    ("exponential",): (
        {"--eps": "1", "--sensitivity": "1", "--scores": "-", "--beta": "0.05", "--top": "2"},
        {"--eps": "epsilon_mech", "--sensitivity": "sensitivity", "--beta": "beta", "--top": "top"}),
}

#: the words in a key after the command name only select a base invocation
SUBCOMMANDS = {"convert"}
FAST_ACCOUNTANTS = ["rdp", "gdp", "ma"]
SCORES = "a,10\nb,8\nc,3\nd,-1e308\ne,1e308\n"


def _argv(key: tuple[str, ...]) -> list[str]:
    return list(key[:2]) if key[0] in SUBCOMMANDS else [key[0]]


def in_range(kind_key: str) -> st.SearchStrategy[str]:
    """Texts of values inside an option's supported range (log-uniform over its magnitude)."""
    kind = RANGES[kind_key]
    r = kind.supported or kind.domain
    lo, hi = max(r.lo, 1e-300), r.hi
    if kind.whole:
        return st.integers(int(max(r.lo, 0)), int(min(hi, 1e12))).map(str)
    if lo >= hi:
        return st.just(repr(lo))
    logs = st.floats(math.log10(lo), math.log10(hi), allow_nan=False, allow_infinity=False)
    return logs.map(lambda t: repr(min(max(10.0**t, lo), hi))).filter(lambda s: float(s) in r)


def hostile() -> st.SearchStrategy[str]:
    return st.one_of(
        st.sampled_from(HOSTILE),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:g}"),
        st.integers(-10**30, 10**30).map(str),
    )


def _strict_json(text: str) -> dict:
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")
    obj = json.loads(text, parse_constant=refuse)
    assert isinstance(obj, dict)
    return obj


def _check(args: list[str], stdin: str | None = None) -> None:
    res = CliRunner().invoke(cli, args, prog_name="dpcalc", input=stdin)
    where = " ".join(args)
    assert res.exception is None or isinstance(res.exception, SystemExit), (
        where, repr(res.exception))
    assert res.exit_code in (0, 1, 2), (where, res.exit_code, res.stderr)
    assert "Traceback" not in res.stdout + res.stderr, where
    if res.exit_code == 0:
        if "--json" in args:
            _strict_json(res.stdout)
    else:
        lines = res.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (where, res.stderr)


@st.composite
def invocations(draw, accountants: list[str]):
    key = draw(st.sampled_from(sorted(COMMANDS)))
    base, numeric = COMMANDS[key]
    opts = dict(base)
    for flag in sorted(numeric):  # other numeric options: sometimes a random in-range value
        if draw(st.booleans()):
            opts[flag] = draw(in_range(numeric[flag]))
    target = draw(st.sampled_from(sorted(numeric)))
    opts[target] = draw(hostile())
    args = _argv(key)
    for flag, val in opts.items():
        args += [flag, val]
    if key[0] in ("epsilon", "delta", "sigma"):
        args += ["--accountant", draw(st.sampled_from(accountants))]
    if draw(st.booleans()):
        args.append("--json")
    return args, (SCORES if key[0] == "exponential" else None)


def test_every_base_invocation_runs():
    for key, (base, _) in COMMANDS.items():
        args = _argv(key) + [x for kv in base.items() for x in kv] + ["--json"]
        res = CliRunner().invoke(cli, args, input=SCORES if key[0] == "exponential" else None)
        assert res.exit_code == 0, (key, res.stderr)
        _strict_json(res.stdout)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invocations(FAST_ACCOUNTANTS))
def test_hostile_numbers_never_crash(case):
    args, stdin = case
    _check(args, stdin)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(invocations(["pld", "all"]))
def test_hostile_numbers_never_crash_pld(case):
    args, stdin = case
    _check(args, stdin)
