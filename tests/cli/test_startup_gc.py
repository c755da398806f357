"""``dpcalc.cli.main`` sets the cyclic garbage collector for a short-lived process only when it owns
the process (no ``argv``: the console script, ``python -m dpcalc``), never when called with
``argv`` by a process that goes on (the web page's workers, tests) (docs/design.md §2.3)."""

from __future__ import annotations

import subprocess
import sys

RUN = (
    "import gc, sys\n"
    "from dpcalc.cli import GC_THRESHOLD, main\n"
    "before = gc.get_threshold()\n"
    "try:\n"
    "    {call}\n"
    "except SystemExit as e:\n"
    "    code = e.code\n"
    "print(code, gc.get_threshold() == before, gc.get_threshold()[0] == GC_THRESHOLD, gc.get_freeze_count() > 0,"
    " gc.isenabled(), file=sys.stderr)\n"
)


def _run(call: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", RUN.format(call=call), "rr", "--eps", "1"],
                         capture_output=True, text=True)
    assert "┃" in out.stdout, out.stderr[-2000:]
    return out.stderr.strip().splitlines()[-1].split()


def test_main_with_argv_leaves_the_collector_alone():
    assert _run("main(['rr', '--eps', '1'])") == ["0", "True", "False", "False", "True"]


def test_main_owning_the_process_raises_the_threshold_and_freezes_at_exit():
    assert _run("main()") == ["0", "False", "True", "True", "True"]
