"""The ``dpcalc`` command group.

Sub-commands live one per module and are imported only when used (fast start:
no torch, scipy.stats or matplotlib at import). Errors become one line on stderr:
``Error: ...`` with exit status 2 for bad parameters and 1 for infeasible
requests, never a traceback (docs/design.md §5).
"""

from __future__ import annotations

import gc
import importlib
import re
import sys

import click

from dpcalc._version import __version__
from dpcalc.errors import DpcalcError, ParameterError

__all__ = ["cli", "main", "COMMANDS", "PANELS"]

#: command name -> "module:function" (imported on first use)
COMMANDS: dict[str, str] = {
    "epsilon": "dpcalc.cli.epsilon:epsilon_command",
    "delta": "dpcalc.cli.epsilon:delta_command",
    "sigma": "dpcalc.cli.sigma:sigma_command",
    "train": "dpcalc.cli.train:train_command",
    "compose": "dpcalc.cli.compose:compose_command",
    "laplace": "dpcalc.cli.laplace:laplace_command",
    "gaussian": "dpcalc.cli.gaussian:gaussian_command",
    "exponential": "dpcalc.cli.exponential:exponential_command",
    "noisy-max": "dpcalc.cli.noisy_max:noisy_max_command",
    "svt": "dpcalc.cli.svt:svt_command",
    "erm": "dpcalc.cli.erm:erm_command",
    "rr": "dpcalc.cli.rr:rr_command",
    "convert": "dpcalc.cli.convert:convert_group",
    "risk": "dpcalc.cli.risk:risk_command",
    "audit": "dpcalc.cli.audit:audit_command",
    "plan": "dpcalc.cli.plan:plan_command",
    "tune": "dpcalc.cli.tune:tune_command",
    "sampling-cost": "dpcalc.cli.sampling_cost:sampling_cost_command",
    "ledger": "dpcalc.cli.ledger:ledger_group",
    "pate": "dpcalc.cli.pate:pate_command",
    "check": "dpcalc.cli.check:check_command",
    "report": "dpcalc.cli.report:report_command",
    "ldp": "dpcalc.cli.ldp:ldp_group",
    "mf": "dpcalc.cli.mf:mf_command",
    "fl": "dpcalc.cli.fl:fl_command",
    "serve": "dpcalc.cli.serve:serve_command",
}

#: ``dpcalc --help``: the commands in panels by task (dpcalc.cli.grouped_help draws them)
PANELS: dict[str, tuple[str, ...]] = {
    "DP-SGD accounting": ("sigma", "epsilon", "delta", "plan", "sampling-cost", "tune", "risk", "fl"),
    "Composition": ("compose", "convert"),
    "Mechanisms": ("laplace", "gaussian", "exponential", "rr", "noisy-max", "svt"),
    "Local DP": ("ldp",),
    "Correlated noise": ("mf",),
    "Learning": ("erm", "pate", "train", "audit"),
    "Budget": ("ledger",),
    "Claims and statements": ("check", "report"),
    "Web page": ("serve",),
}

#: glossary name -> command-line flag, for error messages
FLAGS = {
    "epsilon": "--eps",
    "target_epsilon": "--eps",
    "noise_multiplier": "--sigma",
    "sample_rate": "--sample-rate",
}


#: bare ``dpcalc`` (click ≥ 8.2 raises this to show the help; older click prints it itself)
_NO_ARGS_IS_HELP = getattr(click.exceptions, "NoArgsIsHelpError", ())


class LazyGroup(click.Group):
    """A click group whose sub-commands are imported on demand."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in COMMANDS:
            module, _, attr = COMMANDS[cmd_name].partition(":")
            return getattr(importlib.import_module(module), attr)
        return super().get_command(ctx, cmd_name)

    def get_help(self, ctx: click.Context) -> str:
        """The help with the commands in :data:`PANELS` (rich-click, imported only here)."""
        from dpcalc.cli.grouped_help import grouped_help

        return grouped_help(self, ctx, PANELS)

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):  # noqa: D102
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.Exit as e:
            _exit(e.exit_code)
        except _NO_ARGS_IS_HELP as e:  # bare `dpcalc`: the help as it is, on stderr
            click.echo(e.format_message(), err=True)
            _exit(2)
        except click.exceptions.Abort:
            click.echo("Error: aborted", err=True)
            _exit(1)
        except click.ClickException as e:  # click's own messages may span lines ("Choose from:\n\t...")
            click.echo(f"Error: {one_line(e.format_message())}", err=True)
            _exit(e.exit_code if e.exit_code else 2)
        except ParameterError as e:
            click.echo(f"Error: {parameter_message(e)}", err=True)
            _exit(2)
        except DpcalcError as e:  # InfeasibleError, UnsupportedEventError, ...
            click.echo(f"Error: {e}", err=True)
            _exit(1)
        except KeyboardInterrupt:
            click.echo("Error: interrupted", err=True)
            _exit(130)
        _exit(rv if isinstance(rv, int) else 0)


def _exit(code: int) -> None:
    """Leave with ``code``. A process that joined a torch.distributed group (``dpcalc train``
    under torchrun) leaves with ``os._exit`` after flushing its output: at interpreter exit,
    C++ destructors of the process group's threads can abort it (std::terminate, SIGABRT —
    seen in ~1 of 4 successful 2-process runs), which the launcher reports as a failed run.
    Everything dpcalc writes is written and closed (or atomically replaced) before this point."""
    dist = sys.modules.get("dpcalc.train.distributed")
    if dist is not None and getattr(dist, "JOINED", False):
        import os

        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)
    sys.exit(code)


def one_line(message: str) -> str:
    """``message`` on one line: each line break with the indentation around it becomes one space
    (click lists the choices of a missing option one per line)."""
    return re.sub(r"\s*\n\s*", " ", message.strip())


def flag_for(name: str) -> str:
    """The command-line flag of a glossary parameter name."""
    return FLAGS.get(name, "--" + name.replace("_", "-"))


def parameter_message(err: ParameterError) -> str:
    """A ParameterError's message with the glossary name replaced by its flag."""
    msg = err.message
    if msg.startswith(err.name + " "):
        msg = flag_for(err.name) + msg[len(err.name):]
    return msg


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="dpcalc")
def cli() -> None:
    """dpcalc: differential-privacy accounting and mechanism calibration.

    How much noise do I need, and how much privacy did I spend? Certified
    (upper-bound) answers for DP-SGD, composition and classic mechanisms.
    Assumptions unless stated: Poisson sampling, add/remove adjacency.

    \b
    Example:
      dpcalc sigma --eps 3 --delta 1e-5 --batch-size 256 --dataset-size 60000 --epochs 60
    """


#: the cyclic collector's first threshold while the CLI owns its process (:func:`main`)
GC_THRESHOLD = 100_000


def main(argv: list[str] | None = None) -> None:
    """Console entry point (``dpcalc``, ``python -m dpcalc``): run the CLI; errors become one line
    and an exit status.

    Called without ``argv`` (the console script, ``python -m dpcalc``), the command owns its
    process, which ends with it, and the cyclic garbage collector is set for that
    (docs/design.md §2.3): the first threshold is raised to :data:`GC_THRESHOLD` container objects
    (a calculator command allocates ~4·10⁴, nearly all of them modules, classes and functions that
    live until exit, during which the default threshold of 700 ran the collector ~60 times; a long
    command still collects, every 10⁵ allocations), and everything alive is frozen on the way out
    (``gc.freeze``), so that the interpreter's last collection does not traverse it all once more.
    Together ~50 ms CPU of every command (``dpcalc epsilon --accountant rdp``: 0.33 → 0.28 s CPU,
    measured as benchmarks/bench_startup.py runs it).
    Called with ``argv`` (the web page's workers, tests: a process that goes on), the collector
    is left alone.
    """
    if argv is not None:
        cli.main(args=argv, prog_name="dpcalc")
        return
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, GC_THRESHOLD), gen1, gen2)
    try:
        cli.main(prog_name="dpcalc")
    finally:
        gc.freeze()
