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

Add a command (``compose``) by adding a row to :data:`COMMANDS`. The accounting commands
(and ``plan``, ``risk``) run the fast accountants by default; ``-m slow`` also runs ``pld`` and
``all``. ``plan``'s value lists (``a,b,c``, ``lo:hi:count``) have their own property test, and
``train`` (seconds per run) its own smaller one on a tiny generated dataset.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import tempfile
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpcalc.cli import cli
from dpcalc.cli.options import RANGES

#: hostile texts every numeric option must survive (answer or one-line refusal)
HOSTILE = ["1e308", "-1e308", "1e-308", "-1e-308", "5e-324", "1e-320", "0", "-0", "-1", "nan", "NaN",
           "inf", "-inf", "Infinity", "1e400", "1_0", "١", "٣.٥", "１", "", " ", "0x10", "1e", "--1",
           "1.5", "0.999999", "1e20", "1e9", "2.5e-7", "1/3", "abc", "1,5", "+1", ".5", "5."]

#: the ledger the --ledger rows record into (created by the module's ``ledger_file`` fixture)
LEDGER_DIR = Path(tempfile.mkdtemp(prefix="dpcalc-fuzz-ledger-"))
LEDGER = str(LEDGER_DIR / "fuzz.db")
LEDGER_OPTS = {"--ledger": LEDGER, "--dataset": "fuzz"}
def _pate_votes_file() -> str:
    """A small vote file for ``dpcalc pate --votes`` (seeded; 40 queries, 250 teachers, 10 classes)."""
    import os
    import tempfile

    rng = random.Random(0)
    rows = []
    for _ in range(40):
        top = rng.randrange(10)
        counts = [0] * 10
        for _ in range(250):
            counts[top if rng.random() < 0.8 else rng.randrange(10)] += 1
        rows.append(",".join(map(str, counts)))
    import atexit

    fd, path = tempfile.mkstemp(suffix=".csv", prefix="dpcalc-fuzz-votes-")
    with os.fdopen(fd, "w") as fh:
        fh.write("\n".join(rows) + "\n")
    atexit.register(lambda: os.path.exists(path) and os.unlink(path))
    return path


PATE_VOTES = _pate_votes_file()

#: command → (base arguments, {numeric flag: RANGES key}); the base runs and exits 0
COMMANDS: dict[tuple[str, ...], tuple[dict[str, str], dict[str, str]]] = {
    # compose reads its sequence flags in command-line order: the dicts keep that order
    ("compose",): (
        {"--gaussian": "2", "--sample-rate": "0.01", "--count": "100", "--delta": "1e-5"},
        {"--gaussian": "noise_multiplier", "--sample-rate": "sample_rate", "--count": "count",
         "--delta": "delta"}),
    ("compose", "dp"): (
        {"--dp": "0.1", "--count": "100", "--eps": "1"},
        {"--dp": "epsilon_dp", "--count": "count", "--eps": "epsilon_at"}),
    ("compose", "laplace"): (
        {"--laplace": "0.5", "--count": "10", "--exponential": "0.1", "--delta": "1e-6", "--steps-grid": "5"},
        {"--laplace": "epsilon_mech", "--count": "count", "--exponential": "epsilon_mech", "--delta": "delta",
         "--steps-grid": "compose_steps_grid"}),
    ("tune",): (
        {"--sigma": "1", "--sample-rate": "0.01", "--steps": "100", "--delta": "1e-5",
         "--runs-distribution": "poisson", "--mean-runs": "10"},
        {"--sigma": "noise_multiplier", "--sample-rate": "sample_rate", "--steps": "steps", "--delta": "delta",
         "--mean-runs": "mean_runs", "--fixed-runs": "fixed_runs"}),
    ("epsilon",): (
        {"--sigma": "1.1", "-q": "0.01", "--steps": "100", "--delta": "1e-5"},
        {"--sigma": "noise_multiplier", "-q": "sample_rate", "--steps": "steps", "--delta": "delta"}),
    ("epsilon", "batches"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "1",
         "--delta": "1e-5"},
        {"--batch-size": "batch_size", "--dataset-size": "dataset_size", "--epochs": "epochs"}),
    # batch samplers (issue 12): fixed-size batches under replace-one, truncated Poisson
    ("epsilon", "without-replacement"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "1",
         "--delta": "1e-6", "--sampling": "without-replacement", "--neighboring": "replace"},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--dataset-size": "dataset_size",
         "--epochs": "epochs", "--delta": "delta"}),
    ("epsilon", "truncated-poisson"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "1",
         "--delta": "1e-6", "--sampling": "truncated-poisson", "--max-batch-size": "300"},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--dataset-size": "dataset_size",
         "--max-batch-size": "batch_size", "--delta": "delta"}),
    ("delta", "without-replacement"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--steps": "100",
         "--eps": "2", "--sampling": "without-replacement", "--neighboring": "replace"},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--steps": "steps", "--eps": "epsilon_at"}),
    ("sigma", "without-replacement"): (
        {"--eps": "2", "--delta": "1e-6", "--batch-size": "256", "--dataset-size": "60000", "--steps": "100",
         "--sampling": "without-replacement", "--neighboring": "replace"},
        {"--eps": "epsilon_target", "--delta": "delta", "--batch-size": "batch_size",
         "--dataset-size": "dataset_size", "--steps": "steps"}),
    ("sigma", "truncated-poisson"): (
        {"--eps": "2", "--delta": "1e-6", "--batch-size": "256", "--dataset-size": "60000", "--steps": "100",
         "--sampling": "truncated-poisson", "--max-batch-size": "300"},
        {"--eps": "epsilon_target", "--batch-size": "batch_size", "--max-batch-size": "batch_size"}),
    ("compose", "truncated-poisson"): (
        {"--gaussian": "2", "--sample-rate": "0.01", "--sampling": "truncated-poisson", "--dataset-size": "10000",
         "--max-batch-size": "120", "--count": "100", "--delta": "1e-5"},
        {"--gaussian": "noise_multiplier", "--sample-rate": "sample_rate", "--dataset-size": "dataset_size",
         "--max-batch-size": "batch_size", "--count": "count", "--delta": "delta"}),
    ("plan", "without-replacement"): (
        {"--eps": "3", "--delta": "1e-6", "--dataset-size": "50000", "--batch-size": "256,1024",
         "--epochs": "10", "--sampling": "without-replacement", "--neighboring": "replace"},
        {"--eps": "epsilon_target", "--delta": "delta", "--dataset-size": "dataset_size"}),
    # shuffle / balls-in-bins (issue 12): zero-out, an epoch is ceil(N/B) steps, the bracket in the notes
    ("epsilon", "shuffle"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "2",
         "--delta": "1e-6", "--sampling": "shuffle"},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--dataset-size": "dataset_size",
         "--epochs": "epochs", "--delta": "delta"}),
    ("delta", "balls-in-bins"): (
        {"--sigma": "1.1", "--batch-size": "256", "--dataset-size": "60000", "--steps": "500",
         "--eps": "2", "--sampling": "balls-in-bins"},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--steps": "steps", "--eps": "epsilon_at"}),
    ("sigma", "shuffle"): (
        {"--eps": "2", "--delta": "1e-6", "--batch-size": "256", "--dataset-size": "60000", "--epochs": "3",
         "--sampling": "shuffle"},
        {"--eps": "epsilon_target", "--delta": "delta", "--batch-size": "batch_size",
         "--dataset-size": "dataset_size", "--epochs": "epochs"}),
    ("plan", "shuffle"): (
        {"--eps": "3", "--delta": "1e-6", "--dataset-size": "50000", "--batch-size": "256,1024",
         "--epochs": "10", "--sampling": "shuffle"},
        {"--eps": "epsilon_target", "--delta": "delta", "--dataset-size": "dataset_size"}),
    ("sampling-cost", "truncated-poisson"): (
        {"--sigma": "1", "--batch-size": "100", "--dataset-size": "1000", "--epochs": "2", "--delta": "1e-5",
         "--no-monte-carlo": None, "--max-batch-size": "120"},
        {"--max-batch-size": "batch_size", "--sigma": "noise_multiplier"}),
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
    ("laplace", "ledger"): (
        {"--eps": "0.001", "--release": "12", **LEDGER_OPTS},
        {"--eps": "epsilon_mech", "--release": "release", "--granularity": "granularity",
         "--sensitivity": "sensitivity"}),
    ("gaussian", "ledger"): (
        {"--eps": "0.01", "--delta": "1e-5", "--release": "12", **LEDGER_OPTS},
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
    ("noisy-max",): (
        {"--eps": "1", "--candidates": "1000"},
        {"--eps": "epsilon_mech", "--candidates": "candidates", "--sensitivity": "sensitivity",
         "--beta": "beta_union", "--gap": "gap"}),
    ("noisy-max", "scale"): (
        {"--scale": "2", "--candidates": "50", "--gap": "10", "--noise": "exponential"},
        {"--scale": "noise_scale", "--candidates": "candidates", "--sensitivity": "sensitivity",
         "--gap": "gap", "--beta": "beta_union"}),
    ("noisy-max", "top"): (
        {"--eps": "1", "--candidates": "1000", "--noise": "gumbel", "--top": "10", "--gap": "5"},
        {"--eps": "epsilon_mech", "--top": "top_k", "--beta": "beta_union", "--gap": "gap"}),
    ("noisy-max", "release"): (
        {"--eps": "1", "--scores": "-", "--noise": "gumbel", "--release": None, "--top": "2"},
        {"--eps": "epsilon_mech", "--sensitivity": "sensitivity", "--top": "top_k"}),
    ("noisy-max", "ledger"): (
        {"--eps": "0.001", "--scores": "-", "--noise": "gumbel", "--release": None, "--top": "2", **LEDGER_OPTS},
        {"--eps": "epsilon_mech", "--sensitivity": "sensitivity", "--top": "top_k"}),
    ("svt",): (
        {"--eps": "1", "--queries": "1000", "--answers": "10"},
        {"--eps": "epsilon_mech", "--queries": "queries", "--answers": "answers",
         "--sensitivity": "sensitivity", "--beta": "beta_union"}),
    ("svt", "accuracy"): (
        {"--accuracy": "50", "--queries": "1000", "--answers": "10"},
        {"--accuracy": "accuracy", "--queries": "queries", "--answers": "answers",
         "--sensitivity": "sensitivity", "--beta": "beta_union"}),
    ("svt", "delta"): (
        {"--eps": "0.5", "--queries": "1000", "--answers": "10", "--variant": "dwork-roth", "--delta": "1e-6"},
        {"--eps": "epsilon_mech", "--delta": "delta_svt", "--answers": "answers", "--beta": "beta_union"}),
    ("erm",): (
        {"--eps": "1", "--dataset-size": "455", "--dims": "31", "--lambda": "0.01"},
        {"--eps": "epsilon_gaussian", "--dataset-size": "dataset_size", "--dims": "dims", "--lambda": "lambda_erm",
         "--lipschitz": "lipschitz", "--smoothness": "smoothness", "--beta": "beta"}),
    ("erm", "delta"): (
        {"--eps": "1", "--delta": "1e-5", "--dataset-size": "1000", "--dims": "11", "--lambda": "0.01",
         "--method": "objective"},
        {"--eps": "epsilon_gaussian", "--delta": "delta_erm", "--lambda": "lambda_erm", "--dims": "dims"}),
    ("erm", "fit"): (
        {"--fit": "-", "--label": "y", "--eps": "1", "--lambda": "0.1", "--seed": "0"},
        {"--eps": "epsilon_gaussian", "--lambda": "lambda_erm", "--delta": "delta_erm", "--norm-bound": "norm_bound",
         "--test-fraction": "test_fraction", "--seed": "seed", "--split-seed": "seed"}),
    ("erm", "ledger"): (
        {"--fit": "-", "--label": "y", "--eps": "0.01", "--lambda": "0.1", "--seed": "0",
         "--ledger": LEDGER, "--dataset": "fuzz-replace"},
        {"--eps": "epsilon_gaussian", "--lambda": "lambda_erm", "--delta": "delta_erm", "--norm-bound": "norm_bound",
         "--test-fraction": "test_fraction"}),
    ("plan",): (
        {"--eps": "3", "--delta": "1e-5", "--dataset-size": "50000", "--batch-size": "256,1024",
         "--epochs": "10"},
        {"--eps": "epsilon_target", "--delta": "delta", "--dataset-size": "dataset_size",
         "--examples-budget": "examples_budget", "--max-grad-norm": "max_grad_norm", "--rows": "rows"}),
    ("plan", "steps"): (
        {"--eps": "3", "--delta": "1e-5", "--dataset-size": "50000", "--batch-size": "256:1024:2",
         "--steps": "100,1000"},
        {"--eps": "epsilon_target", "--dataset-size": "dataset_size", "--examples-budget": "examples_budget"}),
    ("plan", "sigma"): (
        {"--eps": "3", "--delta": "1e-5", "--dataset-size": "50000", "--sigma": "1", "--batch-size": "256,1024"},
        {"--eps": "epsilon_target", "--delta": "delta", "--dataset-size": "dataset_size",
         "--sigma": "noise_multiplier"}),
    ("plan", "batch"): (
        {"--eps": "3", "--delta": "1e-5", "--dataset-size": "50000", "--sigma": "1", "--epochs": "1,10"},
        {"--eps": "epsilon_target", "--dataset-size": "dataset_size", "--sigma": "noise_multiplier"}),
    ("risk",): (
        {"--eps": "8", "--delta": "1e-5"},
        {"--eps": "epsilon_dp", "--delta": "delta", "--fpr": "fpr", "--prior": "prior", "--baseline": "baseline"}),
    ("risk", "gdp"): (
        {"--gdp": "1", "--delta": "1e-5"},
        {"--gdp": "mu", "--delta": "delta", "--fpr": "fpr", "--prior": "prior", "--baseline": "baseline"}),
    ("risk", "sigma"): (
        {"--sigma": "4", "-q": "0.01", "--steps": "1000", "--delta": "1e-5"},
        {"--sigma": "noise_multiplier", "-q": "sample_rate", "--steps": "steps", "--delta": "delta",
         "--fpr": "fpr"}),
    ("sampling-cost",): (
        {"--sigma": "1", "--batch-size": "100", "--dataset-size": "1000", "--epochs": "2", "--delta": "1e-5",
         "--no-monte-carlo": None},
        {"--sigma": "noise_multiplier", "--batch-size": "batch_size", "--dataset-size": "dataset_size",
         "--epochs": "epochs_whole", "--delta": "delta"}),
    ("sampling-cost", "monte-carlo"): (  # T = 1000 bins: the work cap keeps any --mc-samples to seconds
        {"--sigma": "1", "--batch-size": "10", "--dataset-size": "10000", "--epochs": "2", "--delta": "1e-5",
         "--mc-samples": "2000"},
        {"--mc-samples": "mc_samples", "--seed": "seed"}),
    ("convert", "shuffle"): (
        {"--eps0": "4", "--n": "100000", "--delta": "1e-6"},
        {"--eps0": "eps0", "--n": "reports", "--delta": "delta"}),
    ("pate",): (
        {"--mechanism": "gnmax", "--sigma": "40", "--queries": "1000", "--delta": "1e-5"},
        {"--sigma": "pate_noise", "--queries": "queries", "--delta": "delta", "--teachers": "pate_teachers",
         "--classes": "pate_classes"}),
    ("pate", "lnmax"): (
        {"--mechanism": "lnmax", "--scale": "20", "--queries": "100", "--eps": "1"},
        {"--scale": "pate_noise", "--queries": "queries", "--eps": "epsilon_at"}),
    ("pate", "plan"): (
        {"--mechanism": "gnmax", "--sigma": "40", "--eps": "2", "--delta": "1e-5"},
        {"--sigma": "pate_noise", "--eps": "epsilon_at", "--delta": "delta"}),
    ("pate", "votes"): (
        {"--mechanism": "confident-gnmax", "--threshold": "200", "--sigma1": "150", "--sigma2": "40",
         "--votes": PATE_VOTES, "--delta": "1e-5"},
        {"--threshold": "pate_threshold", "--sigma1": "pate_noise", "--sigma2": "pate_noise", "--delta": "delta",
         "--teachers": "pate_teachers"}),
    ("pate", "ledger"): (
        {"--mechanism": "gnmax", "--sigma": "400", "--queries": "10", "--delta": "1e-5", **LEDGER_OPTS},
        {"--sigma": "pate_noise", "--queries": "queries", "--delta": "delta", "--teachers": "pate_teachers",
         "--classes": "pate_classes"}),
    ("pate", "votes", "ledger"): (
        {"--mechanism": "confident-gnmax", "--threshold": "200", "--sigma1": "1500", "--sigma2": "400",
         "--votes": PATE_VOTES, "--delta": "1e-5", **LEDGER_OPTS},
        {"--threshold": "pate_threshold", "--sigma1": "pate_noise", "--sigma2": "pate_noise", "--delta": "delta"}),
    ("pate", "release"): (
        {"--mechanism": "gnmax", "--sigma": "40", "--votes": PATE_VOTES, "--delta": "1e-5", "--release-epsilon": None,
         "--order": "10", "--beta": "0.04", "--sigma-ss": "3", "--seed": "1"},
        {"--order": "pate_order", "--beta": "pate_beta", "--sigma-ss": "pate_sigma_ss", "--seed": "seed",
         "--delta": "delta"}),
    ("audit",): (
        {"--guesses": "-", "--delta": "1e-5"},
        {"--delta": "delta_audit", "--beta": "beta", "--k-in": "k_guesses", "--k-out": "k_guesses",
         "--certified-eps": "epsilon_certified"}),
    ("audit", "clopper-pearson"): (
        {"--guesses": "-", "--delta": "1e-5", "--method": "clopper-pearson"},
        {"--delta": "delta_audit", "--beta": "beta", "--threshold": "threshold", "--seed": "seed"}),
}

#: the words in a key after the command name only select a base invocation
SUBCOMMANDS = {"convert"}
FAST_ACCOUNTANTS = ["rdp", "gdp", "ma"]
#: commands that take --accountant (drawn from the accountants of the test)
WITH_ACCOUNTANT = {"epsilon", "delta", "sigma", "plan", "risk"}
#: modes of those commands without an accountant (risk of a bare (ε, δ) or μ-GDP: --accountant is
#: refused there, issue 33)
NO_ACCOUNTANT = {("risk",), ("risk", "gdp")}
SCORES = "a,10\nb,8\nc,3\nd,-1e308\ne,1e308\n"


def _guesses(n: int = 200) -> str:
    """A membership experiment (seeded): canaries included with probability ½, score ~ N(included, 1)."""
    rng = random.Random(0)
    rows = ["included,score"]
    for _ in range(n):
        inc = rng.random() < 0.5
        rows.append(f"{'yes' if inc else 'no'},{rng.gauss(1.0 if inc else 0.0, 1.0)!r}")
    return "\n".join(rows) + "\n"


GUESSES = _guesses()
#: a small two-class table for ``erm --fit -`` (seeded)
ERM_CSV = "a,b,y\n" + "".join(f"{random.Random(i).gauss(0, 3)!r},{random.Random(-i - 1).gauss(1, 2)!r},"
                                f"{'p' if i % 3 else 'q'}\n" for i in range(30))
#: what a command reads on stdin ("-")
STDIN = {"exponential": SCORES, "noisy-max": SCORES, "audit": GUESSES, "erm": ERM_CSV}


@pytest.fixture(scope="module", autouse=True)
def ledger_file():
    """The ledger of the ``--ledger`` rows: one dataset with a large budget (fuzzed releases
    past it are refused with exit 1, which the checks allow)."""
    res = CliRunner().invoke(cli, ["ledger", "init", LEDGER, "--dataset", "fuzz", "--budget-eps", "1e4",
                                   "--delta", "1e-6"])
    assert res.exit_code == 0, res.stderr
    res = CliRunner().invoke(cli, ["ledger", "init", LEDGER, "--dataset", "fuzz-replace", "--budget-eps", "1e4",
                                   "--delta", "1e-6", "--adjacency", "replace"])  # erm --fit's replace-one
    assert res.exit_code == 0, res.stderr
    yield LEDGER
    shutil.rmtree(LEDGER_DIR, ignore_errors=True)


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


def _flat(opts: dict[str, str | None]) -> list[str]:
    """Option dict → argv (a value of None is a flag)."""
    return [x for flag, val in opts.items() for x in ((flag,) if val is None else (flag, val))]


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
    args = _argv(key) + _flat(opts)
    if key[0] in WITH_ACCOUNTANT and key not in NO_ACCOUNTANT:
        args += ["--accountant", draw(st.sampled_from(accountants))]
    if draw(st.booleans()):
        args.append("--json")
    return args, STDIN.get(key[0])


def test_every_base_invocation_runs():
    for key, (base, _) in COMMANDS.items():
        args = _argv(key) + _flat(base) + ["--json"]
        if key[0] in WITH_ACCOUNTANT and key not in NO_ACCOUNTANT:
            args += ["--accountant", "rdp"]
        res = CliRunner().invoke(cli, args, input=STDIN.get(key[0]))
        assert res.exit_code == 0, (key, res.stderr)
        _strict_json(res.stdout)


@pytest.mark.parametrize("key", sorted(COMMANDS), ids=" ".join)
def test_every_numeric_option_is_strict_and_given_once(key):
    """``1_0`` (float() reads 10) and ``١`` (int() reads 1) are refused by every numeric option,
    and so is the option given twice (click would keep the last value)."""
    base, numeric = COMMANDS[key]
    for flag in sorted(numeric):
        for text in ("1_0", "١"):
            res = CliRunner().invoke(cli, _argv(key) + _flat({**base, flag: text}), input=STDIN.get(key[0]))
            shown = "--sample-rate" if flag == "-q" else flag
            assert res.exit_code == 2 and res.stderr.startswith(f"Error: {shown} must be "), (key, flag, res.stderr)
            assert "ASCII digits" in res.stderr and res.stderr.count("\n") == 1, res.stderr
        if flag in ("--fpr", "--prior", "--baseline"):  # repeatable
            continue
        if key[0] == "compose" and flag in ("--gaussian", "--dp", "--laplace", "--exponential"):
            continue  # each adds a mechanism; its --count/--sample-rate twice is refused (checked)
        value = base.get(flag) or "1"
        res = CliRunner().invoke(cli, _argv(key) + _flat(base) + [flag, value, flag, value],
                                 input=STDIN.get(key[0]))
        assert res.exit_code == 2 and "given more than once" in res.stderr, (key, flag, res.stderr)


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


# ---- plan: value lists ('a,b,c', 'lo:hi[:count]') ------------------------------------------------

def _list_texts() -> st.SearchStrategy[str]:
    """Hostile value lists: hostile numbers joined by ',' or ':' (also empty parts, too many
    colons, a count of 1e9 or 1_0), and valid lists with random in-range values."""
    token = st.one_of(hostile(), st.sampled_from(["", " ", "1", "64", "4096", "1e9", "1000000000", "2500",
                                                  "2501", "1_0", "١"]))
    joined = st.tuples(st.lists(token, min_size=1, max_size=4), st.sampled_from([",", ":"])).map(
        lambda t: t[1].join(t[0]))
    ranged = st.tuples(token, token, token).map(lambda t: ":".join(t))
    return st.one_of(joined, ranged)


PLAN_LISTS = {
    "--batch-size": ["plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000", "--epochs", "10"],
    "--epochs": ["plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000", "--batch-size", "256"],
    "--steps": ["plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000", "--batch-size", "256"],
}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flag=st.sampled_from(sorted(PLAN_LISTS)), text=_list_texts(), sigma=st.booleans(), as_json=st.booleans())
def test_hostile_value_lists_never_crash(flag, text, sigma, as_json):
    args = PLAN_LISTS[flag] + [flag, text, "--accountant", "rdp"] + (["--sigma", "1"] if sigma else [])
    _check(args + (["--json"] if as_json else []))


@pytest.mark.parametrize(("text", "message"), [
    ("1_0,20", "--batch-size values must be a whole number such as 100 or 1e6 (ASCII digits, no '_'), got '1_0'"),
    ("64:4096:1_0", "--batch-size range count must be a whole number such as 100 or 1e6 (ASCII digits, no '_'), "
                    "got '1_0'"),
    ("64:4096:1000000000", "--batch-size range count must be in [1, 2500] (the supported range), got 1000000000"),
    ("64:١٠", "--batch-size values must be a whole number such as 100 or 1e6 (ASCII digits, no '_'), got '١٠'"),
    ("0:64", "--batch-size values must be a whole number >= 1, got 0"),
    ("64:1e13", "--batch-size values must be in [1, 1e12] (the supported range), got 1e13"),
])
def test_value_lists_are_read_strictly(text, message):
    """int('1_0') was 10 and a count of 1e9 built a list of 1e9 values before the grid's cell
    limit was checked (minutes and gigabytes): each is one line now."""
    res = CliRunner().invoke(cli, PLAN_LISTS["--batch-size"] + ["--batch-size", text])
    assert res.exit_code == 2 and res.stderr == f"Error: {message}\n"


def test_value_list_with_a_subnormal_low_end():
    # lo:hi with hi/lo = inf (lo = 5e-324) is spaced in log space: ten points from 5e-324 to 1
    res = CliRunner().invoke(cli, PLAN_LISTS["--epochs"] + ["--epochs", "5e-324:1", "--accountant", "rdp",
                                                            "--json"])
    assert res.exit_code in (0, 1), res.stderr
    if res.exit_code == 0:
        assert _strict_json(res.stdout)["inputs"]["epochs"][-1] == 1.0


# ---- train: its own small fuzz (a run is ~0.1-1 s) ----------------------------------------------

#: train's numeric options and their RANGES keys (dpcalc.cli.options)
TRAIN_NUMERIC = {"--noise-multiplier": "noise_multiplier_train", "--target-epsilon": "epsilon_target_train",
                 "--delta": "delta_train", "--epochs": "epochs_train", "--batch-size": "batch_size",
                 "--lr": "lr", "--momentum": "momentum", "--max-grad-norm": "max_grad_norm_train",
                 "--max-epsilon": "max_epsilon", "--max-physical-batch": "max_physical_batch",
                 "--seed": "seed", "--threads": "threads", "--nproc": "nproc", "--max-batch-size": "batch_size"}
#: --sampling values drawn with them (issue 12; "bogus" must be a one-line refusal)
TRAIN_SAMPLINGS = [None, "poisson", "without-replacement", "truncated-poisson", "shuffle", "balls-in-bins", "bogus"]
#: a run of a few steps: N = 60, B = 20, half an epoch
TRAIN_BASE = {"--model": "logistic", "--epochs": "0.5", "--batch-size": "20", "--noise-multiplier": "1",
              "--delta": "1e-3", "--threads": "1", "--lr": "0.5", "--max-grad-norm": "1"}


def _too_long(flag: str, text: str) -> bool:
    """Valid values that make a run long by design (many steps or threads): not drawn."""
    try:
        x = float(text)
    except ValueError:
        return False
    if not math.isfinite(x) or text.strip() != text or "_" in text:
        return False
    return ((flag == "--epochs" and x > 1) or (flag == "--threads" and x > 2)
            or (flag == "--batch-size" and 0 < x < 5)
            or (flag == "--nproc" and x >= 2))  # would start processes (tests/train/test_train_distributed.py)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(sorted(TRAIN_NUMERIC)), text=hostile(), as_json=st.booleans(),
       device=st.sampled_from([None, "auto", "cpu", "cuda", "CPU", "gpu", ""]),
       sampling=st.sampled_from(TRAIN_SAMPLINGS))
def test_train_hostile_numbers_never_crash(random_idx, flag, text, as_json, device, sampling):
    assume(not _too_long(flag, text))
    opts = {**TRAIN_BASE}
    if sampling is not None:
        opts["--sampling"] = sampling
    if sampling == "truncated-poisson":
        opts["--max-batch-size"] = "25"
    opts[flag] = text
    if device is not None:
        opts["--device"] = device
    if flag == "--target-epsilon":
        del opts["--noise-multiplier"]
    args = ["train", "--data-dir", str(random_idx), "--quiet", *_flat(opts)]
    _check(args + (["--json"] if as_json else []))


#: --model values: malformed specs, missing modules/attributes, dpcalc callables that are not
#: factories (never other installed packages: --model calls what it names)
TRAIN_MODEL_SPECS = ["", ":", "a:", ":b", "1a:b", "x.y:z", "tanh-cnn:", "dpcalc:nothing",
                     "dpcalc.train.models:check_model", "dpcalc.train.models:MODELS",
                     "dpcalc.train.models:TanhCNN", "dpcalc.train.models:TanhCNN.forward", "logistic"]


def _names_an_installed_module(text: str) -> bool:
    import importlib.util
    import re

    m = re.match(r"^\s*([A-Za-z_]\w*)", text.split(":")[0])
    if m is None or ":" not in text or m.group(1) == "dpcalc":
        return False
    try:
        return importlib.util.find_spec(m.group(1)) is not None
    except (ImportError, ValueError):
        return True


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=st.one_of(st.sampled_from(TRAIN_MODEL_SPECS), st.text(max_size=30)), as_json=st.booleans())
def test_train_hostile_model_never_crashes(random_idx, text, as_json):
    assume(not _names_an_installed_module(text))
    args = ["train", "--data-dir", str(random_idx), "--quiet", *_flat({**TRAIN_BASE, "--model": text})]
    _check(args + (["--json"] if as_json else []))


def test_train_base_runs(random_idx):
    res = CliRunner().invoke(cli, ["train", "--data-dir", str(random_idx), "--quiet", *_flat(TRAIN_BASE), "--json"])
    assert res.exit_code == 0, res.stderr
    assert _strict_json(res.stdout)["results"][0]["steps"] == 2  # T = ceil(0.5·60/20)


# ---- ledger: init's numbers, and files that are not ledgers ------------------------------------------

LEDGER_INIT_NUMERIC = {"--budget-eps": "epsilon_target", "--delta": "delta"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(flag=st.sampled_from(sorted(LEDGER_INIT_NUMERIC)), text=hostile(), as_json=st.booleans(),
       adjacency=st.sampled_from(["add-remove", "replace"]))
def test_ledger_init_hostile_numbers_never_crash(flag, text, as_json, adjacency):
    opts = {"--budget-eps": "1", "--delta": "1e-6", flag: text}
    args = ["ledger", "init", LEDGER, "--dataset", uuid.uuid4().hex, "--adjacency", adjacency, *_flat(opts)]
    _check(args + (["--json"] if as_json else []))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.one_of(hostile(), st.lists(hostile(), min_size=1, max_size=4).map(",".join),
                      st.tuples(hostile(), hostile(), hostile()).map(":".join)), as_json=st.booleans())
def test_ledger_init_orders_never_crash(text, as_json):
    """``ledger init --orders LIST`` (a,b,c or lo:hi:count of Rényi orders > 1)."""
    args = ["ledger", "init", LEDGER, "--dataset", uuid.uuid4().hex, "--budget-eps", "1", "--delta", "1e-6",
            "--orders", text]
    _check(args + (["--json"] if as_json else []))


@pytest.mark.parametrize("flag", sorted(LEDGER_INIT_NUMERIC))
def test_ledger_init_numbers_are_strict_and_given_once(flag):
    base = {"--budget-eps": "1", "--delta": "1e-6"}
    for text in ("1_0", "١"):
        res = CliRunner().invoke(cli, ["ledger", "init", LEDGER, "--dataset", "strict", *_flat({**base, flag: text})])
        assert res.exit_code == 2 and res.stderr.startswith(f"Error: {flag} must be "), res.stderr
    res = CliRunner().invoke(cli, ["ledger", "init", LEDGER, "--dataset", "strict", *_flat(base), flag, "1", flag, "1"])
    assert res.exit_code == 2 and "given more than once" in res.stderr, res.stderr


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.one_of(st.sampled_from(["", " ", "/dev/null", "/", "/nonexistent/x.db", "/proc/self/status",
                                       "-", "\x00", "a" * 5000]), st.text(max_size=30)),
       sub=st.sampled_from(["show", "export", "import", "release"]))
def test_ledger_paths_never_crash(path, sub):
    if sub == "release":
        args = ["laplace", "--eps", "1", "--release", "3", "--ledger", path, "--dataset", "fuzz"]
    elif sub == "import":
        args = ["ledger", "import", LEDGER, path]
    else:
        args = ["ledger", sub, path]
    _check(args, stdin="")
