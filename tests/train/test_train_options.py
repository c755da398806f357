"""``dpcalc train`` option ranges (issue 17): every numeric option has a stated supported
range, checked once where the options are parsed (``TrainConfig.validated``); a value outside
it is one ``Error:`` line naming the option, the range and the value, exit 2, no traceback —
before any data is read or any step taken. Also: the trainer package never imports the CLI,
click or rich (issue 9, item 5)."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torch")

from dpcalc.errors import ParameterError  # noqa: E402
from dpcalc.train.config import INT_RANGES, MAX_STEPS, RANGES, TrainConfig  # noqa: E402

# (flag, value, expected message) — the message is the whole stderr line after "Error: ". The
# options are read by the strict number type of dpcalc.cli.options (RANGES), which states the
# range of dpcalc.train.config.RANGES / INT_RANGES (test_cli_ranges_agree_with_the_trainer's).
OUT_OF_RANGE = [
    ("--noise-multiplier", "1e-320", "--noise-multiplier must be in [0.05, 1e6] (the supported range), got 1e-320"),
    ("--noise-multiplier", "0.01", "--noise-multiplier must be in [0.05, 1e6] (the supported range), got 0.01"),
    ("--noise-multiplier", "1e308", "--noise-multiplier must be in [0.05, 1e6] (the supported range), got 1e308"),
    ("--noise-multiplier", "nan", "--noise-multiplier must be a finite number > 0, got nan"),
    ("--noise-multiplier", "inf", "--noise-multiplier must be a finite number > 0, got inf"),
    ("--target-epsilon", "1e308", "--target-epsilon must be in (0, 1000] (the supported range), got 1e308"),
    ("--target-epsilon", "0", "--target-epsilon must be a finite number > 0, got 0"),
    ("--target-epsilon", "-inf", "--target-epsilon must be a finite number > 0, got -inf"),
    ("--delta", "1e-320", "--delta must be in [1e-30, 1) (the supported range), got 1e-320"),
    ("--delta", "1", "--delta must be in (0, 1), got 1"),
    ("--epochs", "1e308", "--epochs must be in (0, 1e7] (the supported range), got 1e308"),
    ("--epochs", "0", "--epochs must be a finite number > 0, got 0"),
    ("--lr", "1e308", "--lr must be in (0, 1e6] (the supported range), got 1e308"),
    ("--lr", "-1e-320", "--lr must be a finite number > 0, got -1e-320"),
    ("--momentum", "1", "--momentum must be in [0, 1), got 1"),
    ("--max-grad-norm", "1e308", "--max-grad-norm must be in (0, 1e6] (the supported range), got 1e308"),
    ("--max-epsilon", "inf", "--max-epsilon must be a finite number > 0, got inf"),
    ("--max-epsilon", "0", "--max-epsilon must be a finite number > 0, got 0"),
    ("--threads", "100000000000", "--threads must be in [1, 1024] (the supported range), got 100000000000"),
    ("--threads", "0", "--threads must be a whole number >= 1, got 0"),
    ("--seed", str(2**63), f"--seed must be in [0, {2**63 - 1}] (the supported range), got {2**63}"),
    ("--seed", "-1", "--seed must be a whole number >= 0, got -1"),
    ("--batch-size", "0", "--batch-size must be a whole number >= 1, got 0"),
    ("--max-physical-batch", "0", "--max-physical-batch must be a whole number >= 1, got 0"),
]


@pytest.mark.parametrize("flag, value, message", OUT_OF_RANGE)
def test_out_of_range_option_is_one_line(tmp_path, run_cli, flag, value, message):
    sigma = () if flag in ("--noise-multiplier", "--target-epsilon") else ("--noise-multiplier", "1")
    r = run_cli("train", "--data-dir", tmp_path, "--quiet", *sigma, f"{flag}={value}")
    assert r.exit_code == 2
    assert r.stderr == f"Error: {message}\n"
    assert r.stdout == ""


def test_ranges_are_the_documented_ones():
    """The table the messages come from (so a change of range is a deliberate one)."""
    assert RANGES["noise_multiplier"][:2] == (0.05, 1e6)
    assert RANGES["target_epsilon"][:2] == (0.0, 1000.0)
    assert RANGES["epochs"][1] == MAX_STEPS == 10_000_000
    assert INT_RANGES["threads"] == (1, 1024)


#: CLI RANGES key of each trainer option (dpcalc.cli.options.RANGES)
CLI_KEYS = {"noise_multiplier": "noise_multiplier_train", "target_epsilon": "epsilon_target_train",
            "delta": "delta_train", "epochs": "epochs_train", "lr": "lr", "momentum": "momentum",
            "max_grad_norm": "max_grad_norm_train", "max_epsilon": "max_epsilon",
            "batch_size": "batch_size", "max_physical_batch": "max_physical_batch", "seed": "seed",
            "threads": "threads", "audit_canaries": "audit_canaries", "max_batch_size": "batch_size",
            "records_per_user": "batch_size"}


def test_cli_ranges_agree_with_the_trainer():
    """The command line refuses exactly what TrainConfig.validated() refuses (the CLI may be
    narrower only for whole numbers without an upper limit in the trainer: batch size and the
    physical batch, at most 1e12 like every batch size of dpcalc)."""
    from decimal import Decimal

    from dpcalc.cli.options import RANGES as CLI

    for name, (lo, hi, lo_in, hi_in) in RANGES.items():
        kind = CLI[CLI_KEYS[name]]
        r = kind.supported or kind.domain
        assert (r.lo, r.lo_open, r.hi, r.hi_open) == (lo, not lo_in, hi, not hi_in), name
    for name, (lo, hi) in INT_RANGES.items():
        kind = CLI[CLI_KEYS[name]]
        r = kind.supported or kind.domain
        top = 10**12 if hi is None else hi
        assert kind.whole and r.contains_exactly(Decimal(lo)) and r.contains_exactly(Decimal(top)), name
        assert not r.contains_exactly(Decimal(lo - 1)) and not r.contains_exactly(Decimal(top + 1)), name


@pytest.mark.parametrize("flag", ["--noise-multiplier", "--epochs", "--lr", "--batch-size", "--seed"])
@pytest.mark.parametrize("text", ["1_0", "١", "0x10"])
def test_numbers_are_read_strictly(tmp_path, run_cli, flag, text):
    """float('1_0') is 10 and int('١') is 1: the command line refuses both (issue 17)."""
    sigma = () if flag == "--noise-multiplier" else ("--noise-multiplier", "1")
    r = run_cli("train", "--data-dir", tmp_path, "--quiet", *sigma, f"{flag}={text}")
    assert r.exit_code == 2
    assert r.stderr.startswith(f"Error: {flag} must be a ") and "ASCII digits" in r.stderr
    assert r.stderr.count("\n") == 1


@pytest.mark.parametrize("args", [["--epochs", "1", "--epochs", "2"], ["--sigma", "1", "--noise-multiplier", "2"],
                                  ["--seed", "1", "--seed=2"]])
def test_an_option_given_twice_is_refused(tmp_path, run_cli, args):
    sigma = () if "--sigma" in args else ("--noise-multiplier", "1")
    r = run_cli("train", "--data-dir", tmp_path, "--quiet", *sigma, *args)
    assert r.exit_code == 2
    assert "given more than once" in r.stderr and r.stderr.count("\n") == 1


EXTREMES = [0.0, -0.0, 5e-324, 1e-320, 2.2250738585072014e-308, 1e-300, 1e-30, 1e-6, 0.05, 0.5, 1.0,
            1 - 2**-53, 1000.0, 1e6, 1e7, 1e300, 1.7976931348623157e308, math.inf, -math.inf, math.nan,
            -1.0, -1e308]


def reals():
    return st.one_of(st.sampled_from(EXTREMES), st.floats(allow_nan=True, allow_infinity=True))


def config_for(field, value):
    opts = dict(noise_multiplier=1.0)
    if field == "target_epsilon":
        opts = dict(target_epsilon=value)
    else:
        opts[field] = value
    if field == "max_batch_size":  # B_max is an option of --sampling truncated-poisson only
        opts["sampling"] = "truncated-poisson"
    if field == "records_per_user":  # an option of --privacy-unit user only
        opts["privacy_unit"] = "user"
    return TrainConfig(**opts)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(field=st.sampled_from(sorted(RANGES)), value=reals())
def test_every_real_option_is_accepted_exactly_in_its_range(field, value):
    lo, hi, lo_in, hi_in = RANGES[field]
    inside = (not math.isnan(value) and (lo <= value if lo_in else lo < value)
              and (value <= hi if hi_in else value < hi))
    try:
        config_for(field, value).validated()
    except ParameterError as e:
        assert not inside, e.message
        assert e.name == field and "\n" not in e.message
        assert e.message.startswith(f"{field} must be a number in ")
    else:
        assert inside


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(sorted(INT_RANGES)),
       value=st.one_of(st.integers(min_value=-2**70, max_value=2**70),
                       st.sampled_from([0, 1, 1024, 1025, 2**63 - 1, 2**63, -1, 1.5, math.nan, True])))
def test_every_whole_option_is_accepted_exactly_in_its_range(field, value):
    lo, hi = INT_RANGES[field]
    whole = not isinstance(value, bool) and (isinstance(value, int) or float(value).is_integer())
    inside = whole and lo <= value and (hi is None or value <= hi)
    try:
        config_for(field, value).validated()
    except ParameterError as e:
        assert not inside, e.message
        assert e.name == field and "\n" not in e.message
    else:
        assert inside


NUMERIC_FLAGS = ["--noise-multiplier", "--target-epsilon", "--delta", "--epochs", "--batch-size", "--lr",
                 "--momentum", "--max-grad-norm", "--max-epsilon", "--max-physical-batch", "--seed",
                 "--threads"]
TEXTS = ["1e308", "-1e308", "1e400", "1e-320", "0", "-0", "nan", "inf", "-inf", "1_0", "١٢", "0x10", "", " ",
         "1e", "9" * 5000, "2", "0.5", "10", "1e7", "3.0"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(NUMERIC_FLAGS), text=st.sampled_from(TEXTS) | st.text(max_size=8))
def test_cli_numeric_options_never_traceback(tmp_path, run_cli, flag, text):
    """Any text for any numeric option: a clean exit 2 (the option's error, or the missing
    --data-dir once the options are valid) — never a traceback, never a run."""
    sigma = () if flag in ("--noise-multiplier", "--target-epsilon") else ("--noise-multiplier", "1")
    r = run_cli("train", "--data-dir", tmp_path / "missing", "--quiet", *sigma, f"{flag}={text}")
    assert r.exit_code == 2, r.stderr
    assert r.stderr.startswith("Error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_train_package_never_imports_the_cli_click_or_rich():
    """Layers import only downward (cli → train): the progress display lives in dpcalc.cli."""
    code = ("import sys, dpcalc.train, dpcalc.train.loop, dpcalc.train.config, dpcalc.train.privacy, "
            "dpcalc.train.results, dpcalc.train.checkpoint, dpcalc.train.data, dpcalc.train.distributed, "
            "dpcalc.train.dpsgd, dpcalc.train.models\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('click', 'rich') "
            "or m.startswith('dpcalc.cli'))\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
    with pytest.raises(ModuleNotFoundError):
        __import__("dpcalc.train.progress")


def test_a_dataset_without_test_images_says_so(tmp_path, run_cli):
    """No test images (issue 33): the run trains, and the 0.00% test accuracy comes with a note."""
    import numpy as np

    from dpcalc.train.data import write_idx

    rng = np.random.default_rng(0)
    for name, n in (("train", 40), ("t10k", 0)):
        write_idx(tmp_path / f"{name}-images-idx3-ubyte.gz", rng.integers(0, 256, (n, 28, 28), dtype=np.uint8))
        write_idx(tmp_path / f"{name}-labels-idx1-ubyte.gz", rng.integers(0, 10, n, dtype=np.uint8))
    res = run_cli("train", "--data-dir", tmp_path, "--quiet", "--model", "logistic", "--epochs", "0.5",
                  "--batch-size", "20", "--noise-multiplier", "1", "--delta", "1e-3", "--threads", "1")
    assert res.exit_code == 0, res.stderr
    assert "no test images" in " ".join(res.stdout.split())
