"""Build the sdist and the wheel, check them, and run the wheel from a fresh environment
(issue 25; a step of ``.ci/run``).

1. ``python -m build --outdir TMP/dist`` (sdist, then the wheel built from it) and
   ``twine check --strict`` (the metadata and the README render on PyPI).
2. A fresh virtual environment TMP/venv without pip; the wheel is installed into it with this
   interpreter's pip (``pip --python``) and ``--no-deps``. The runtime dependencies are not
   downloaded again (resolving numpy and scipy into a new environment took 84 s on the CI
   machine): a ``.pth`` file puts this environment's site-packages *after* the fresh one on
   ``sys.path``, and every requirement the wheel declares (``Requires-Dist`` without an
   extra) is checked against the versions found there. dpcalc itself must be imported from the
   fresh environment — the wheel — never from the repository (the commands run from TMP, and the
   editable install's own ``.pth`` is not processed).
3. ``dpcalc --help`` and the README's quick-start command run from the wheel's console script.

Usage: python scripts/check_package.py   (exit status 0 when everything passed)
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICK_START = ["sigma", "--eps", "1.26", "--delta", "1e-5", "--batch-size", "600",
               "--dataset-size", "60000", "--epochs", "100", "--accountant", "all"]

CHECK_REQUIREMENTS = r"""
import importlib.metadata as md, sys
from packaging.requirements import Requirement
import dpcalc
venv = sys.argv[1]
assert dpcalc.__file__.startswith(venv), f"dpcalc imported from {dpcalc.__file__}, not the wheel"
bad = []
for line in md.requires("dpcalc") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue  # an extra's requirement
    try:
        version = md.version(req.name)
    except md.PackageNotFoundError:
        bad.append(f"{req}: not installed")
        continue
    if not req.specifier.contains(version, prereleases=True):
        bad.append(f"{req}: found {version}")
assert not bad, bad
print(f"dpcalc {dpcalc.__version__} imported from {dpcalc.__file__}; its requirements are met")
"""


def run(*cmd: str | Path, cwd: Path | None = None) -> str:
    out = subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"check_package: failed: {' '.join(map(str, cmd))}")
    return out.stdout


def main() -> None:
    py = sys.executable
    with tempfile.TemporaryDirectory(prefix="dpcalc-package-") as tmp:
        tmp_path = Path(tmp)
        dist = tmp_path / "dist"
        run(py, "-m", "build", "--outdir", dist, ROOT)
        files = sorted(dist.iterdir())
        wheels = [f for f in files if f.suffix == ".whl"]
        assert len(wheels) == 1 and any(f.name.endswith(".tar.gz") for f in files), files
        run(py, "-m", "twine", "check", "--strict", *files)

        venv = tmp_path / "venv"
        run(py, "-m", "venv", "--without-pip", venv)
        vpy = venv / "bin" / "python"
        run(py, "-m", "pip", "--python", vpy, "install", "-q", "--no-deps", wheels[0])
        site = run(vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
        (Path(site) / "_ci_runtime_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        print(run(vpy, "-c", CHECK_REQUIREMENTS, str(venv), cwd=tmp_path).strip())

        dpcalc = venv / "bin" / "dpcalc"
        help_text = run(dpcalc, "--help", cwd=tmp_path)
        assert "DP-SGD accounting" in help_text and "sigma" in help_text, help_text
        quick = run(dpcalc, *QUICK_START, cwd=tmp_path)
        assert "3.121529" in quick and "certified" in quick, quick
        print(f"built and checked: {', '.join(f.name for f in files)}; the wheel runs "
              "`dpcalc --help` and the quick start (pld σ = 3.121529) from a fresh environment")


if __name__ == "__main__":
    main()
