"""dpcalc.train.memory: freed memory is kept in the process (no page faults per step).

Each case runs in a fresh interpreter: the setting is process-wide and cannot be undone.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dpcalc.train.memory import keep_freed_memory


def _glibc() -> bool:
    try:
        return os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc")
    except (ValueError, OSError, AttributeError):  # not a glibc system
        return False


_GLIBC = sys.platform.startswith("linux") and _glibc()

# allocates and frees a 61 MB and a 228 MB array ten times each after one warm-up, and counts
# the minor page faults of those twenty allocations (each fills its array, touching every page)
_PROBE = textwrap.dedent("""
    import json, resource, sys
    import numpy as np
    from dpcalc.train.memory import keep_freed_memory

    applied = keep_freed_memory() if sys.argv[1] == "keep" else False
    faults = 0
    for n in (8_000_000, 30_000_000):
        a = np.ones(n); del a
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        for _ in range(10):
            a = np.ones(n); del a
        faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
    print(json.dumps({"applied": applied, "faults": faults}))
""")


def _probe(mode: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items()
             if not (k.startswith("MALLOC_") and k.endswith("_")) and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True,
                         check=True, env={**clean, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not _GLIBC, reason="the setting is glibc's (Linux with glibc only)")
def test_freed_memory_is_reused_without_page_faults():
    # 20 allocations of 61-228 MB: with glibc's defaults each is mapped afresh (thousands of
    # faults even with transparent huge pages); kept, they reuse pages already touched
    kept = _probe("keep")
    default = _probe("default")
    assert kept["applied"] is True
    assert default["faults"] > 1000, default
    assert kept["faults"] < 100, kept


@pytest.mark.skipif(not _GLIBC, reason="the setting is glibc's (Linux with glibc only)")
@pytest.mark.parametrize("env", [{"MALLOC_TOP_PAD_": "0"}, {"GLIBC_TUNABLES": "glibc.malloc.mmap_max=5"}])
def test_a_user_malloc_setting_is_left_alone(env):
    assert _probe("keep", **env)["applied"] is False


@pytest.mark.parametrize("pad", [-1, 2 ** 31])
def test_pad_outside_a_c_int_is_refused(pad):
    with pytest.raises(ValueError, match="pad_bytes"):
        keep_freed_memory(pad)
