"""Property test (hypothesis) over every file-reading option of the calculator commands (issue 33):
whatever file a user names — a device that never ends, a FIFO nobody writes, a symlink to either,
a directory, JSON nested 10⁵ deep, integers of thousands of digits, a CSV field beyond csv's
limit, tens of thousands of columns, bytes that are not UTF-8, NUL bytes — the command refuses it
in one ``Error:`` line with exit status 2, naming the option, in bounded time.

:data:`READERS` gives, for each option, a valid base invocation (the file's name is appended after
the option) and the file's suffix. Every generated file is invalid for every reader by
construction (so exit status 2 is required, not merely allowed).

The default run tries a few examples per option (seconds); ``-m slow`` runs the larger profile.
Each invocation runs under a wall-clock alarm (:data:`TIME_LIMIT` seconds): a read that blocks
(a FIFO opened for reading waits for a writer) fails the test instead of hanging it.
"""

from __future__ import annotations

import os
import signal
import tempfile
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpcalc.cli import cli

TMP = Path(tempfile.mkdtemp(prefix="dpcalc-fuzz-files-"))

#: option -> (command and its other options, the option (None: the file is the last positional
#: argument), file suffix)
READERS = {
    "risk --spec": (["risk", "--delta", "1e-5"], "--spec", ".json"),
    "risk --spec (toml)": (["risk", "--delta", "1e-5"], "--spec", ".toml"),
    "tune --spec": (["tune", "--delta", "1e-5", "--runs-distribution", "geometric", "--mean-runs", "10"],
                    "--spec", ".json"),
    "compose --spec": (["compose", "--delta", "1e-5"], "--spec", ".json"),
    "audit --guesses (json)": (["audit", "--delta", "1e-5"], "--guesses", ".json"),
    "audit --guesses (csv)": (["audit", "--delta", "1e-5"], "--guesses", ".csv"),
    "erm --fit": (["erm", "--eps", "1", "--lambda", "0.1", "--label", "y"], "--fit", ".csv"),
    "noisy-max --scores": (["noisy-max", "--eps", "1"], "--scores", ".txt"),
    "exponential --scores": (["exponential", "--eps", "1"], "--scores", ".txt"),
    "pate --votes": (["pate", "--mechanism", "gnmax", "--sigma", "40", "--delta", "1e-5"], "--votes", ".csv"),
    "pate --answered": (["pate", "--mechanism", "gnmax", "--sigma", "40", "--delta", "1e-5",
                         "--votes", str(Path(__file__).resolve().parents[2] / "docs/examples/pate_votes.csv")],
                        "--answered", ".csv"),
    "ledger import SOURCE": (["ledger", "import", str(TMP / "imported.db")], None, ".json"),
}
#: seconds one invocation may take (the largest generated file is a few MB)
TIME_LIMIT = 30


def _special(kind: str) -> str:
    """A special file: a device, a FIFO, a symlink to one, a directory."""
    if kind == "/dev/zero":
        return "/dev/zero"
    if kind == "/dev/urandom":
        return "/dev/urandom"
    if kind == "directory":
        return str(TMP)
    fifo = TMP / f"fifo-{uuid.uuid4().hex}"
    os.mkfifo(fifo)
    if kind == "fifo":
        return str(fifo)
    link = TMP / f"link-{uuid.uuid4().hex}"
    os.symlink("/dev/zero" if kind == "symlink to /dev/zero" else fifo, link)
    return str(link)


SPECIAL = st.sampled_from(["/dev/zero", "/dev/urandom", "directory", "fifo", "symlink to /dev/zero",
                           "symlink to a FIFO"])


@st.composite
def hostile_content(draw, suffix: str) -> bytes:
    """The bytes of a file no reader may accept (each kind is invalid for every format)."""
    kind = draw(st.sampled_from(["deep", "bigint", "longfield", "wide", "badutf8", "nul", "utf16"]))
    if kind == "deep":  # nested arrays/objects: RecursionError in a recursive parser
        depth = draw(st.integers(1_000, 100_000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        text = opener * depth + ("]" * depth if opener == "[" else "1" + "}" * depth)
        return text.encode() if suffix in (".json", ".toml") else ("y\n" + text).encode()
    if kind == "bigint":  # an integer of hundreds to thousands of digits where a number goes
        big = "9" * draw(st.integers(400, 6_000))
        return {".json": f'{{"included": [1, 0], "score": [{big}, 1], "mechanisms": [{big}]}}',
                ".toml": f"[[mechanisms]]\nmechanism = \"laplace\"\ncount = {big}\n[mechanisms.parameters]\n"
                         "epsilon = 1\n",
                ".csv": f"included,score,y,x\n1,{big},1,{big}\n",
                ".txt": f"{big}\n{big}\n"}[suffix].encode()
    if kind == "longfield":  # one field beyond csv's 128 KiB limit
        field = "1" * draw(st.integers(140_000, 300_000))
        return {".json": f'{{"included": "{field}"}}', ".toml": f"x = \"{field}\"",
                ".csv": f"included,score,y\n1,{field},1\n", ".txt": f"a,{field}\n"}[suffix].encode()
    if kind == "wide":  # tens of thousands of columns / keys, none of them the expected one
        n = draw(st.integers(10_000, 60_000))
        if suffix == ".json":
            return ("{" + ",".join(f'"k{i}": [{i}]' for i in range(n)) + "}").encode()
        if suffix == ".toml":
            return "\n".join(f"k{i} = {i}" for i in range(n)).encode()
        # the last cell is not a number: a wide table of numbers alone is a valid vote matrix
        return (",".join(f"c{i}" for i in range(n)) + "\n" + ",".join("1" for _ in range(n)) + ",x\n").encode()
    if kind == "badutf8":
        junk = draw(st.binary(min_size=1, max_size=64))
        return b"included,score\n1," + b"\xff\xfe" + junk + b"\n"
    if kind == "nul":
        return b"[" + b"\x00" * draw(st.integers(1, 10_000)) + b"]"
    return "included,score\n1,0.5\n".encode("utf-16")  # UTF-16 with a BOM: not UTF-8


class _TimeLimit(Exception):
    pass


def _alarm(signum, frame):  # noqa: ARG001 - signal handler signature
    raise _TimeLimit


def _run(args: list[str]):
    """Run the CLI in this process under a wall-clock alarm; returns click's result."""
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, TIME_LIMIT)
    try:
        return CliRunner().invoke(cli, args, prog_name="dpcalc")
    except _TimeLimit:
        pytest.fail(f"dpcalc {' '.join(a[:60] for a in args)} took more than {TIME_LIMIT} s")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _args(base: list[str], option: str | None, path: str) -> list[str]:
    return [*base, option, path] if option else [*base, path]


def _check_refused(res, option: str | None, path: str) -> None:
    if isinstance(res.exception, _TimeLimit):
        pytest.fail(f"{option} {path}: more than {TIME_LIMIT} s")
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    err = res.stderr
    assert res.exit_code == 2, (option, path[:80], res.exit_code, res.stdout[-400:], err[-400:])
    assert err.startswith("Error: ") and err.count("\n") == 1, err[-600:]
    assert "Traceback" not in err and "Warning" not in err, err[-600:]
    assert len(err) < 600, err[:600]


def _profile(examples: int):
    return settings(max_examples=examples, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


@pytest.mark.parametrize("reader", list(READERS))
@_profile(3)
@given(kind=SPECIAL)
def test_special_files_refused(reader, kind):
    base, option, _ = READERS[reader]
    path = _special(kind)
    res = _run(_args(base, option, path))
    _check_refused(res, option, path)
    assert (option or "source") in res.stderr or "not a regular file" in res.stderr, res.stderr


def _hostile_file_refused(reader: str, data) -> None:
    """One drawn hostile file through ``reader``: refused in one line, in bounded time."""
    base, option, suffix = READERS[reader]
    content = data.draw(hostile_content(suffix))
    path = TMP / f"f-{uuid.uuid4().hex}{suffix}"
    path.write_bytes(content)
    try:
        _check_refused(_run(_args(base, option, str(path))), option, str(path))
    finally:
        path.unlink()


@pytest.mark.parametrize("reader", list(READERS))
@_profile(4)
@given(data=st.data())
def test_hostile_content_refused(reader, data):
    _hostile_file_refused(reader, data)


@pytest.mark.slow
@pytest.mark.parametrize("reader", list(READERS))
@_profile(60)
@given(data=st.data())
def test_hostile_content_refused_many(reader, data):
    _hostile_file_refused(reader, data)
