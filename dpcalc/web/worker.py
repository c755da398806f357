"""The worker processes of ``dpcalc serve``: a small pool of persistent processes (``spawn``
context: a fresh interpreter, never a fork of the threaded server), each warmed by importing
the CLI and the pages' commands, each running one job at a time.

A job is the CLI's argv and standard-input bytes; the worker runs ``dpcalc <argv> --json`` in
process exactly as the ``dpcalc`` console script does (:func:`dpcalc.cli.main`: the same click
command, the same one-line ``Error: ...`` formatting and exit status) with stdin, stdout and
stderr replaced by in-memory buffers, and returns ``(exit status, stdout, stderr, messages)``.
A job of kind ``"plot"`` runs :func:`dpcalc.cli.plot_data.run_plot` instead: the series the
command's ``--plot`` draws, as JSON, with the command's own parsing and error lines.
Over its time budget, or when cancelled, the worker is terminated and replaced by a new one.
"""

from __future__ import annotations

import io
import logging
import multiprocessing
import os
import queue
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["Outcome", "WorkerPool", "run_cli", "run_job", "JOB_KINDS", "TimedOut", "Cancelled", "Busy"]

#: what a worker can run: the CLI command (``--json`` appended by the caller), or its plot series
JOB_KINDS = ("cli", "plot")

log = logging.getLogger("dpcalc.web")

#: exit status of a job whose command raised an unexpected exception (a bug, logged)
BUG = -1
#: exit status of a job that ran out of the worker's memory (:data:`MEMORY_LIMIT`)
OUT_OF_MEMORY = -2
#: address space a worker may use, bytes (a hostile input cannot take the machine's memory;
#: the commands of the pages use well under 1 GB)
MEMORY_LIMIT = 4 * 2**30


@dataclass(frozen=True)
class Outcome:
    """What a job produced: the CLI's exit status, stdout and stderr text, and the seconds taken."""

    code: int
    stdout: str
    stderr: str
    seconds: float


class TimedOut(Exception):
    """The job ran over its time budget (the worker was replaced)."""


class Cancelled(Exception):
    """The job was cancelled (the worker was replaced)."""


class Busy(Exception):
    """No worker became free within the time budget."""


class WorkerDied(Exception):
    """The worker process ended during the job (killed by the system, out of memory, ...)."""


class _DeadBeforeStart(Exception):
    """The worker given a job was found dead before it replied (it died while idle)."""


class _Buffer(io.BytesIO):
    """An in-memory stream whose text wrapper's close (at garbage collection) keeps the bytes."""

    def close(self) -> None:
        pass


def run_cli(argv: Sequence[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """Run ``dpcalc <argv>`` in this process as the console script does, with ``stdin`` as its
    standard input and its stdout/stderr captured.

    Returns:
        ``(exit status, stdout, stderr)``; exit status :data:`BUG` when the command raised an
        unexpected exception (its traceback is in the returned stderr after the first line).
    """
    from dpcalc.cli import main

    out, err = _Buffer(), _Buffer()
    saved = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = io.TextIOWrapper(err, encoding="utf-8", write_through=True)
    code = 0
    try:
        main(list(argv))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    except MemoryError:
        code = OUT_OF_MEMORY
    except Exception as e:  # a bug: reported as such (500), never as a user's error
        code = BUG
        sys.stderr.write(f"Error: internal error: {type(e).__name__}: {e}\n{traceback.format_exc()}")
    finally:
        for s in (sys.stdout, sys.stderr):
            try:
                s.flush()
            except ValueError:  # closed by the command
                pass
        texts = out.getvalue(), err.getvalue()
        sys.stdin, sys.stdout, sys.stderr = saved
    return code, texts[0].decode("utf-8", "replace"), texts[1].decode("utf-8", "replace")


def run_job(kind: str, argv: Sequence[str], stdin: bytes = b"") -> tuple[int, str, str]:
    """Run one job of ``kind`` (:data:`JOB_KINDS`): ``"cli"`` is :func:`run_cli`; ``"plot"`` is
    :func:`dpcalc.cli.plot_data.run_plot` (``argv`` = the command and its options; an unexpected
    exception is a :data:`BUG`, as in :func:`run_cli`)."""
    if kind == "cli":
        return run_cli(argv, stdin)
    if kind != "plot":
        return BUG, "", f"Error: internal error: unknown job kind {kind!r}\n"
    from dpcalc.cli.plot_data import run_plot

    try:
        return run_plot(argv)
    except MemoryError:
        return OUT_OF_MEMORY, "", ""
    except Exception as e:  # a bug: reported as such (500), never as a user's error
        return BUG, "", f"Error: internal error: {type(e).__name__}: {e}\n{traceback.format_exc()}"


def _watch_parent(parent: int, every: float = 0.5) -> None:  # pragma: no cover - worker process
    """Leave (with every process of this worker's group: a plan's calibration pool) as soon as
    the server process is gone — killed, crashed — even in the middle of a job: a worker never
    outlives its server."""

    def watch() -> None:
        while True:
            if os.getppid() != parent:
                if hasattr(os, "killpg") and os.getpgid(0) == os.getpid():
                    os.killpg(0, signal.SIGKILL)
                os._exit(1)
            time.sleep(every)

    threading.Thread(target=watch, name="dpcalc-web-parent-watch", daemon=True).start()


def _child(conn, warm: Sequence[str], server: int) -> None:  # pragma: no cover - runs in the worker process
    """The worker's loop: warm up, then run jobs until the pipe closes."""
    import click

    # Ctrl-C in the terminal reaches the whole process group: the server stops the workers itself
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the worker leads its own process group: a command's own worker processes (`dpcalc plan`
    # calibrates in a forked pool) are stopped with it when a job is cancelled or over its budget
    if hasattr(os, "setpgrp"):
        os.setpgrp()
    _watch_parent(server)  # the server's pid, passed in: it may be gone before this line runs
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT:
            resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, hard))
    except (ImportError, ValueError, OSError):  # not on this platform
        pass

    from dpcalc import _files
    from dpcalc.cli import cli
    from dpcalc.cli import plan as plan_cli

    # the web page's mode: no command run here reads a file named in a form field; `-` (standard
    # input, the upload) only for the page's upload option, given with each job
    _files.web_mode(None)

    ctx = click.Context(cli)
    for name in warm:
        cli.get_command(ctx, name)

    def progress(done: int, total: int) -> None:
        conn.send(("progress", int(done), int(total)))

    plan_cli.PROGRESS_HOOK = progress
    if "sigma" in warm:  # one small run imports what the σ page's first request would (numpy, pld)
        run_cli(["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "10", "--json"])
        run_job("plot", ["sigma", "--eps", "1", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "10"])
    conn.send(("ready",))
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError, KeyboardInterrupt):
            return
        if msg is None:
            return
        kind, argv, stdin, upload = msg
        _files.web_mode(upload)
        t0 = time.perf_counter()
        code, out, err = run_job(kind, argv, stdin)
        conn.send(("done", code, out, err, time.perf_counter() - t0))


class _Worker:
    def __init__(self, ctx, warm: Sequence[str]) -> None:
        self.conn, child = ctx.Pipe()
        # not a daemon: `dpcalc plan` may start its own process pool (a daemon may have no children);
        # the pool terminates its workers at shutdown and a worker leaves when its pipe closes
        self.proc = ctx.Process(target=_child, args=(child, tuple(warm), os.getpid()), name="dpcalc-web-worker")
        self.proc.start()
        child.close()
        self.ready = False

    def _group(self) -> int | None:
        """The worker's process group when the worker leads it (it calls ``setpgrp`` first
        thing), else None (then only the worker itself is signalled, never our own group)."""
        pid = self.proc.pid
        try:
            return pid if pid is not None and hasattr(os, "killpg") and os.getpgid(pid) == pid else None
        except OSError:
            return None

    def stop(self) -> None:
        """Stop the worker and every process it started (a forked calibration pool)."""
        try:
            self.conn.close()
        except OSError:
            pass
        group = self._group()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                if group is not None:
                    os.killpg(group, sig)
                elif self.proc.is_alive():
                    os.kill(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.join(2)


class WorkerPool:
    """A fixed number of persistent worker processes.

    Args:
        size: the number of workers (≥ 1).
        warm: CLI command names each worker imports before its first job.
    """

    def __init__(self, size: int = 2, warm: Sequence[str] = ()) -> None:
        self._ctx = multiprocessing.get_context("spawn")
        self._warm = tuple(warm)
        self._idle: queue.Queue[_Worker] = queue.Queue()
        self._all: set[_Worker] = set()
        self._lock = threading.Lock()
        self._closed = False
        self.size = max(1, int(size))
        for _ in range(self.size):
            self._idle.put(self._spawn())

    def _spawn(self) -> _Worker:
        w = _Worker(self._ctx, self._warm)
        with self._lock:
            self._all.add(w)
        return w

    def _replace(self, w: _Worker) -> None:
        with self._lock:
            self._all.discard(w)
        w.stop()
        if not self._closed:
            self._idle.put(self._spawn())

    @staticmethod
    def _check_ready(w: _Worker) -> bool:
        try:
            while not w.ready and w.conn.poll(0):
                if w.conn.recv()[0] == "ready":
                    w.ready = True
        except (EOFError, OSError):
            pass
        return w.ready

    def _prefer_ready(self, w: _Worker) -> _Worker:
        """``w`` if it has warmed up, else an idle worker that has (a replaced worker warms up for
        seconds; a request should not wait for it while another is free)."""
        if self._check_ready(w):
            return w
        others = []
        try:
            while True:
                others.append(self._idle.get_nowait())
        except queue.Empty:
            pass
        chosen = next((o for o in others if self._check_ready(o)), None)
        for o in others:
            if o is not chosen:
                self._idle.put(o)
        if chosen is None:
            return w
        self._idle.put(w)
        return chosen

    def run(self, argv: Sequence[str], stdin: bytes, *, time_limit: float,
            progress: Callable[[int, int], None] | None = None,
            cancelled: threading.Event | None = None, kind: str = "cli", upload: str | None = None) -> Outcome:
        """Run one job on a free worker (blocking; call it from a thread).

        Args:
            argv: the CLI words after ``dpcalc``.
            kind: ``"cli"`` (the command) or ``"plot"`` (its plot series, :func:`run_job`).
            stdin: the standard input's bytes.
            time_limit: seconds allowed, from now (waiting for a free worker included).
            progress: called with ``(done, total)`` as the command reports progress.
            cancelled: set it to stop the job (the worker is terminated and replaced).
            upload: the option whose ``-`` reads ``stdin`` (the page's upload); every other
                input file is refused (:func:`dpcalc._files.web_mode`).

        Raises:
            Busy: no worker was free in time. TimedOut: over the budget. Cancelled: cancelled
                (while waiting for a free worker too).
            WorkerDied: the worker process ended during the job.
        """
        deadline = time.monotonic() + time_limit
        job = (kind, list(argv), bytes(stdin), upload)
        attempts = self.size + 1  # every idle worker may have died (each is replaced at the back)
        for attempt in range(attempts):
            try:
                return self._run_once(job, deadline, progress, cancelled, retry=attempt < attempts - 1)
            except _DeadBeforeStart:
                continue  # the worker had died while idle: replaced; the job goes to the next one
        raise WorkerDied()

    def _run_once(self, job: tuple, deadline: float, progress: Callable[[int, int], None] | None,
                  cancelled: threading.Event | None, *, retry: bool) -> Outcome:
        """:meth:`run` on one worker. Raises :class:`_DeadBeforeStart` (``retry``) when the worker
        is found dead before it replied anything (it died while idle: killed, out of memory)."""
        while True:  # wait for a free worker, in short slices: a cancelled request stops waiting
            if cancelled is not None and cancelled.is_set():
                raise Cancelled()
            remaining = deadline - time.monotonic()
            try:
                w = self._idle.get(timeout=max(0.0, min(0.1, remaining)))
                break
            except queue.Empty:
                if remaining <= 0.1:
                    raise Busy() from None
        w = self._prefer_ready(w)
        t0 = time.perf_counter()
        first = True  # a worker dead before the job: its pipe is closed at the first poll already
        try:
            if not w.proc.is_alive():
                raise OSError("the worker is not running")
            w.conn.send(job)
        except (OSError, ValueError):
            self._replace(w)
            if retry:
                raise _DeadBeforeStart() from None
            raise WorkerDied() from None
        while True:
            if cancelled is not None and cancelled.is_set():
                self._replace(w)
                raise Cancelled()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._replace(w)
                raise TimedOut()
            try:
                ready = w.conn.poll(min(0.05, remaining))
                msg = w.conn.recv() if ready else None
            except (EOFError, OSError):
                self._replace(w)
                if retry and first:
                    raise _DeadBeforeStart() from None
                raise WorkerDied() from None
            first = False
            if msg is None:
                continue
            if msg[0] == "ready":
                w.ready = True
                continue
            if msg[0] == "progress":
                if progress is not None:
                    progress(msg[1], msg[2])
                continue
            _, code, out, err, _secs = msg
            self._idle.put(w)
            return Outcome(code, out, err, time.perf_counter() - t0)

    def wait_ready(self, timeout: float = 60.0) -> bool:
        """Wait until every idle worker has warmed up (True) or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        workers = []
        try:
            while len(workers) < self.size:
                workers.append(self._idle.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            pass
        ok = len(workers) == self.size
        for w in workers:
            while not w.ready and time.monotonic() < deadline:
                try:
                    if w.conn.poll(0.05) and w.conn.recv()[0] == "ready":
                        w.ready = True
                except (EOFError, OSError):
                    break
            ok = ok and w.ready
            self._idle.put(w)
        return ok

    def close(self) -> None:
        """Stop every worker."""
        self._closed = True
        with self._lock:
            workers = list(self._all)
            self._all.clear()
        for w in workers:
            w.stop()
