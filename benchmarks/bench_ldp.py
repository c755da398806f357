"""Benchmark: local-DP randomize and estimate throughput (reports/s) of every frequency oracle at
k = 1024, ε = 1, beside pure-ldp's client/server (the ``bench`` extra) in the same run (issue 27).

* dpcalc: ``o.randomize`` on ``--reports`` values (vectorised, exact Bernoulli draws) and
  ``o.support`` + ``o.estimate`` on the reports;
* pure-ldp: its client's ``privatise`` one value at a time and its server's ``aggregate`` +
  ``estimate_all`` on ``--peer-reports`` values (a Python loop per report: timed on fewer
  reports, the rate is per report either way).

Prints one row per protocol: reports/s of each side and the ratio dpcalc / pure-ldp.

Run:  PYTHONPATH=. .venv/bin/python benchmarks/bench_ldp.py [--reports 100000] [--peer-reports 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from dpcalc.mechanisms.ldp import TABLE_PROTOCOLS, make_oracle, make_rng, synthetic_values

K, EPS = 1024, 1.0


def ours(name: str, n: int) -> tuple[float, float]:
    o = make_oracle(name, EPS, K)
    rng = make_rng(1)
    x = synthetic_values("zipf", K, n, rng)
    t = time.perf_counter()
    reps = np.concatenate([o.randomize(x[i:i + 8192], rng) for i in range(0, n, 8192)])
    t1 = time.perf_counter()
    o.estimate(o.support(reps), n)
    t2 = time.perf_counter()
    return n / (t1 - t), n / (t2 - t1)


def pure_ldp_module(sub: str):
    """A pure-ldp frequency-oracle subpackage (``"unary_encoding"``, ...), or None when pure-ldp is
    not installed. pure_ldp.frequency_oracles' own __init__ imports every oracle, RAPPOR's server
    needing statsmodels (not a declared dependency of pure-ldp 1.2): the package is registered
    without running that __init__, and only the subpackage asked for is imported."""
    import importlib
    import importlib.util
    import sys
    import types

    try:
        spec = importlib.util.find_spec("pure_ldp")
    except ImportError:  # pragma: no cover
        return None
    if spec is None:
        return None
    name = "pure_ldp.frequency_oracles"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [str(__import__("pathlib").Path(spec.origin).parent / "frequency_oracles")]
        sys.modules[name] = pkg
    return importlib.import_module(f"{name}.{sub}")


def peer(name: str, n: int) -> tuple[float, float] | None:
    def fo(module: str, cls: str):
        return getattr(pure_ldp_module(module), cls)

    if pure_ldp_module("direct_encoding") is None:  # pragma: no cover - the bench extra
        return None
    if name == "grr":
        client, server = fo("direct_encoding", "DEClient")(EPS, K), fo("direct_encoding", "DEServer")(EPS, K)
    elif name in ("sue", "oue"):
        client = fo("unary_encoding", "UEClient")(EPS, K, use_oue=name == "oue")
        server = fo("unary_encoding", "UEServer")(EPS, K, use_oue=name == "oue")
    elif name in ("olh", "blh"):
        client = fo("local_hashing", "LHClient")(EPS, K, use_olh=name == "olh")
        server = fo("local_hashing", "LHServer")(EPS, K, use_olh=name == "olh")
    elif name == "hr":
        server = fo("hadamard_response", "HadamardResponseServer")(EPS, K)
        client = fo("hadamard_response", "HadamardResponseClient")(EPS, K, server.get_hash_funcs())
    elif name in ("cms", "hcms"):
        server = fo("apple_cms", "CMSServer")(EPS, 256, 1024, is_hadamard=name == "hcms")
        client = fo("apple_cms", "CMSClient")(EPS, server.get_hash_funcs(), 1024, is_hadamard=name == "hcms")
    else:
        return None
    x = synthetic_values("zipf", K, n, make_rng(2)) + 1  # pure-ldp's domain is 1..k
    t = time.perf_counter()
    reps = [client.privatise(int(v)) for v in x]
    t1 = time.perf_counter()
    for r in reps:
        server.aggregate(r)
    server.estimate_all(range(1, K + 1), suppress_warnings=True)
    t2 = time.perf_counter()
    return n / (t1 - t), n / (t2 - t1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reports", type=int, default=100_000)
    ap.add_argument("--peer-reports", type=int, default=2_000)
    args = ap.parse_args()
    print(f"k = {K}, ε = {EPS}; dpcalc on {args.reports:,} reports, pure-ldp on {args.peer_reports:,}")
    print(f"{'protocol':8} {'randomize/s':>12} {'peer':>10} {'ratio':>7}   {'estimate/s':>12} {'peer':>10} {'ratio':>7}")
    for name in TABLE_PROTOCOLS:
        r, e = ours(name, args.reports)
        try:
            p = peer(name, args.peer_reports)
        except Exception as err:  # a peer that does not run with this numpy (pure-ldp's CMSServer)
            print(f"  (pure-ldp {name}: {type(err).__name__}: {err})")
            p = None
        pr, pe = p if p else (float("nan"), float("nan"))
        print(f"{name:8} {r:12,.0f} {pr:10,.0f} {r / pr:7.1f}   {e:12,.0f} {pe:10,.0f} {e / pe:7.1f}")


if __name__ == "__main__":
    main()
