"""Write the screenshot of ``dpcalc --help`` shown in the documentation (docs/img/help.png).

The help is rendered as a terminal would show it (80 columns, rich-click's panels) and drawn in
a monospace font with matplotlib (the ``plot`` extra); ℓ, which the font lacks, is drawn as l. Run it again after a command is added or
its one-line help changes.

Usage: python scripts/help_screenshot.py [OUT.png]   (default: docs/img/help.png)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def help_text(columns: int = 80) -> str:
    """``dpcalc --help`` as printed at ``columns`` columns (plain text, no colour)."""
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1", "TERM": "dumb", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "dpcalc", "--help"], capture_output=True, text=True,
                         env=env, check=True)
    return "\n".join(line.rstrip() for line in out.stdout.rstrip("\n").splitlines())


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img" / "help.png"
    # DejaVu Sans Mono has no ℓ (U+2113): drawn as l, the one character that differs
    text = "$ dpcalc --help\n" + help_text().replace("ℓ", "l")
    lines = text.count("\n") + 1
    fig = plt.figure(figsize=(8.2, 0.158 * lines + 0.2), dpi=110)
    fig.patch.set_facecolor("#1e1e1e")
    fig.text(0.015, 0.99, text, family="DejaVu Sans Mono", size=9.2, color="#e6e6e6",
             va="top", ha="left", linespacing=1.22)
    fig.savefig(out, facecolor=fig.get_facecolor(), metadata={"Software": None})
    plt.close(fig)
    print(f"wrote {out} ({lines} lines)")


if __name__ == "__main__":
    main()
