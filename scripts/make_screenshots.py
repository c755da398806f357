"""Regenerate the pictures of docs/how-to/plots.md in docs/img/ (issue 25).

    python scripts/make_screenshots.py            # all of them
    python scripts/make_screenshots.py help       # only docs/img/cli_help.png
    python scripts/make_screenshots.py readme     # only the README's older plots (risk, compose, ...)
    python scripts/make_screenshots.py web        # only the pages of `dpcalc serve` (docs/img/web_*.png)

* ``cli_help.png`` — ``dpcalc --help`` as a terminal shows it: the grouped help rendered by
  rich-click with its colours (ANSI), each styled run of text drawn with matplotlib in DejaVu
  Sans Mono (bundled with matplotlib: no browser, no cairo, no font download), written through
  dpcalc's deterministic PNG writer.
* ``epsilon_plot.png``, ``sigma_plot.png``, ``tune_plot.png``, ``train_plot.png`` — the
  ``--plot`` of each command, by running the commands of docs/how-to/plots.md. ``train`` runs on
  a small synthetic MNIST-format dataset generated here (seeded: the run needs no download); it
  needs the ``train`` extra (torch).
* the README's pictures of ``risk``, ``compose``, ``sampling-cost`` and ``plan``, by the README's
  commands (:data:`README_PLOTS`).

* ``web_<page>.png`` — each page of ``dpcalc serve`` (:data:`WEB_PAGES`) with an example filled in
  and its result and plot drawn, as Debian's chromium shows it headless (1280 px wide), driven by
  Playwright; the server is started here (port 8765, or a free one) and stopped at the end. Needs the ``web``
  extra, playwright (``dev``) and ``/usr/bin/chromium``. Not byte-for-byte reproducible (fonts
  and anti-aliasing of the browser).

Needs the ``plot`` extra (matplotlib). Same inputs, same bytes: the files are deterministic for a
given matplotlib version.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"

#: the commands of docs/how-to/plots.md, the image each writes
PLOTS = {
    "epsilon_plot.png": ["epsilon", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000",
                         "--epochs", "60", "--delta", "1e-5"],
    "sigma_plot.png": ["sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256", "--dataset-size", "60000",
                       "--epochs", "60", "--accountant", "all"],
    "tune_plot.png": ["tune", "--sigma", "1", "--sample-rate", "0.01", "--steps", "1000", "--delta", "1e-5",
                      "--runs-distribution", "negative-binomial", "--eta", "0.5", "--mean-runs", "10"],
}
#: the older pictures the README shows (same style since issue 25), by the README's commands
README_PLOTS = [
    ["risk", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "60", "--delta", "1e-5",
     "--plot", "docs/img/risk_opacus_mnist.png"],
    ["compose", "--gaussian", "4", "--sample-rate", "0.01", "--count", "10000", "--delta", "1e-5",
     "--plot", "docs/img/compose_abadi_steps.png", "--plot-curve", "docs/img/compose_abadi_curve.png"],
    ["sampling-cost", "--sigma", "1", "--batch-size", "256", "--dataset-size", "60000", "--epochs", "10",
     "--delta", "1e-5", "--max-batch-size", "300", "--plot", "docs/img/sampling_cost.png"],
    ["plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000", "--batch-size", "256:8192:8",
     "--epochs", "3:100:8", "--rows", "10", "--plot", "docs/img/plan_grid.png"],
]
#: the pages of `dpcalc serve` shown in the docs: image name -> (path, query or form fields,
#: uploads field -> file). The query is the CLI's options by name (the shareable URL).
WEB_PAGES: dict[str, tuple[str, dict[str, str], dict[str, Path]]] = {
    "sigma": ("/sigma", {"eps": "3", "delta": "1e-5", "batch-size": "256", "dataset-size": "60000", "epochs": "60"},
              {}),
    "epsilon": ("/epsilon", {"sigma": "1.1", "batch-size": "256", "dataset-size": "60000", "epochs": "60",
                             "delta": "1e-5"}, {}),
    "samplers": ("/samplers", {"sigma": "1", "batch-size": "256", "dataset-size": "60000", "epochs": "10",
                               "delta": "1e-5", "max-batch-size": "300"}, {}),
    "risk": ("/risk", {"sigma": "1.1", "batch-size": "256", "dataset-size": "60000", "epochs": "60",
                       "delta": "1e-5", "fpr": "1e-3"}, {}),
    "plan": ("/plan", {"eps": "3", "delta": "1e-5", "dataset-size": "50000", "batch-size": "256:8192:4",
                       "epochs": "3:100:4", "accountant": "rdp"}, {}),
    "compose": ("/compose", {"gaussian": "4", "sample-rate": "0.01", "count": "10000", "delta": "1e-5"}, {}),
    "mechanisms": ("/mechanisms/gaussian", {"eps": "1", "delta": "1e-5", "beta": "0.05"}, {}),
    "pate": ("/pate", {"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
             {"votes": ROOT / "docs" / "examples" / "pate_votes.csv"}),
    "mf": ("/mf", {"strategy": "banded:8", "steps": "2000", "epochs": "10", "eps": "3", "delta": "1e-5"}, {}),
    "ldp": ("/ldp/mean", {"eps": "1", "users": "100000"}, {}),
}
WEB_WIDTH, WEB_MAX_HEIGHT = 1280, 2400  # px: the viewport's width; taller pages are cut there

TRAIN = ["train", "--model", "logistic", "--epochs", "10", "--batch-size", "250", "--noise-multiplier", "1.1",
         "--lr", "1", "--max-grad-norm", "1", "--delta", "1e-5", "--threads", "1", "--quiet"]

#: terminal size of the help screenshot (characters) and its colours (rich's MONOKAI theme)
COLUMNS = 100
FONT_SIZE = 10.0  # points
CHAR_WIDTH = 0.6021  # DejaVu Sans Mono's advance, in em
LINE_HEIGHT = 1.22  # em


def _dpcalc(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "COLUMNS": "120"}
    out = subprocess.run([sys.executable, "-m", "dpcalc", *args], capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"dpcalc {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def help_ansi() -> str:
    """``dpcalc --help`` with its ANSI colours, as a colour terminal of :data:`COLUMNS` columns shows it."""
    os.environ["FORCE_COLOR"] = "1"  # read by rich-click when it builds its configuration
    import click

    from dpcalc.cli import cli

    ctx = click.Context(cli, info_name="dpcalc", color=True, max_content_width=COLUMNS, terminal_width=COLUMNS)
    return cli.get_help(ctx)


def draw_terminal(ansi: str, path: Path) -> None:
    """Draw ANSI-coloured text as a terminal window (dark background) into a PNG."""
    from rich.style import Style
    from rich.terminal_theme import MONOKAI
    from rich.text import Text

    from dpcalc.cli.plot_style import require_matplotlib, save_figure

    plt = require_matplotlib()
    # no hinting: glyph advances not snapped to whole pixels, so long runs keep the columns aligned
    plt.rcParams.update({"text.hinting": "none", "text.hinting_factor": 1})
    lines = [Text.from_ansi(line) for line in ansi.rstrip("\n").splitlines()]
    cols = max(COLUMNS, *(len(t.plain) for t in lines))
    cw, lh = CHAR_WIDTH * FONT_SIZE, LINE_HEIGHT * FONT_SIZE  # points
    pad = 1.5
    width, height = (cols + 2 * pad) * cw, (len(lines) + 2 * pad) * lh
    fig = plt.figure(figsize=(width / 72, height / 72))
    bg = "#{:02x}{:02x}{:02x}".format(*MONOKAI.background_color)
    fg = MONOKAI.foreground_color
    fig.patch.set_facecolor(bg)

    def colour(style: Style) -> tuple[str, float]:
        rgb = style.color.get_truecolor(MONOKAI) if style.color is not None else fg
        return "#{:02x}{:02x}{:02x}".format(*rgb), 0.55 if style.dim else 1.0

    for row, text in enumerate(lines):
        styles = [Style()] * len(text.plain)
        for span in text.spans:
            st = Style.parse(span.style) if isinstance(span.style, str) else span.style
            for k in range(span.start, min(span.end, len(styles))):
                styles[k] = styles[k] + st
        start = 0
        y = 1 - (pad + row + 0.8) * lh / height
        while start < len(text.plain):
            end = start
            while end < len(text.plain) and styles[end] == styles[start]:
                end += 1
            run = text.plain[start:end]
            if run.strip():
                c, alpha = colour(styles[start])
                fig.text((pad + start) * cw / width, y, run, fontfamily=["DejaVu Sans Mono", "DejaVu Sans"], fontsize=FONT_SIZE,
                         color=c, alpha=alpha, fontweight="bold" if styles[start].bold else "normal",
                         ha="left", va="baseline")
            start = end
    save_figure(fig, str(path))
    plt.close(fig)


def make_help() -> None:
    draw_terminal(help_ansi(), IMG / "cli_help.png")
    print(f"wrote {IMG / 'cli_help.png'}")


def make_plots() -> None:
    for name, args in PLOTS.items():
        _dpcalc(*args, "--plot", f"docs/img/{name}")
        print(f"wrote {IMG / name}")


def make_readme_plots() -> None:
    for args in README_PLOTS:
        _dpcalc(*args)
        print("wrote " + ", ".join(a for a in args if a.startswith("docs/img/")))


def synthetic_mnist(directory: Path, n_train: int = 5000, n_test: int = 1000, seed: int = 0) -> None:
    """MNIST-format IDX files of seeded synthetic images: class c lights block c of a 2×5 grid on a
    noisy background (learnable, not trivially), as the trainer's tests do."""
    import numpy as np

    sys.path.insert(0, str(ROOT))
    from dpcalc.train.data import write_idx

    rng = np.random.default_rng(seed)

    def images(n: int):
        y = rng.integers(0, 10, n)
        x = rng.normal(60, 150, (n, 28, 28))
        for c in range(10):
            r, col = divmod(c, 5)
            x[y == c, 3 + r * 12: 13 + r * 12, 1 + col * 5: 6 + col * 5] += 60
        return x.clip(0, 255).astype(np.uint8), y.astype(np.uint8)

    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x, y = images(n)
        write_idx(directory / f"{prefix}-images-idx3-ubyte.gz", x)
        write_idx(directory / f"{prefix}-labels-idx1-ubyte.gz", y)


def make_train() -> None:
    with tempfile.TemporaryDirectory() as d:
        synthetic_mnist(Path(d))
        print(_dpcalc(*TRAIN, "--data-dir", d, "--plot", "docs/img/train_plot.png"))
    print(f"wrote {IMG / 'train_plot.png'}")


def start_server() -> tuple[subprocess.Popen, str]:
    """``python -m dpcalc serve`` on its default port 8765 (the shareable links in the pictures
    show it) or, when that is taken, on a free one; (the process, its base URL) once it printed it."""
    import re
    import socket
    import time

    with socket.socket() as probe:
        port = "8765" if probe.connect_ex(("127.0.0.1", 8765)) != 0 else "0"
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    log = tempfile.TemporaryFile()  # a file, not a pipe: the server's log can never block it
    proc = subprocess.Popen([sys.executable, "-m", "dpcalc", "serve", "--port", port], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        log.seek(0)
        m = re.search(r"dpcalc serve: (http://\S+?)/? ", log.read().decode(errors="replace"))
        if m:
            return proc, m.group(1).rstrip("/")
        time.sleep(0.05)
    proc.kill()
    log.seek(0)
    raise SystemExit(f"dpcalc serve did not start: {log.read().decode(errors='replace')[-2000:]}")


def make_web() -> None:
    """Screenshot each page of :data:`WEB_PAGES` into ``docs/img/web_<page>.png``."""
    from urllib.parse import urlencode

    from playwright.sync_api import sync_playwright

    from dpcalc.cli.plot_style import require_matplotlib

    require_matplotlib()
    from PIL import Image

    proc, base = start_server()
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", headless=True, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": WEB_WIDTH, "height": 900})
            page.set_default_timeout(120_000)
            for name, (path, fields, uploads) in WEB_PAGES.items():
                if uploads:  # a file: filled in the form and submitted (POST multipart)
                    page.goto(base + path)
                    for key, value in fields.items():
                        el = page.locator(f'#form [name="{key}"]').first
                        if el.evaluate("e => e.tagName") == "SELECT":
                            el.select_option(value)
                        else:
                            el.fill(value)
                    for key, file in uploads.items():
                        page.locator(f'#form [name="{key}"]').set_input_files(str(file))
                    page.click("#submit")
                else:  # the shareable URL: the form filled and the result drawn by the server
                    page.goto(f"{base}{path}?{urlencode(fields)}")
                page.wait_for_selector("#result-json", state="attached")
                if page.locator("#plot").count():
                    page.wait_for_selector("#plot svg.main-svg")
                    if page.get_attribute("#plot", "data-curve"):  # σ, ε: the --plot curve, fetched after
                        page.wait_for_selector("#plot[data-curve-state='drawn']")
                page.wait_for_timeout(300)  # Plotly's transitions
                height = min(page.evaluate("document.documentElement.scrollHeight"), WEB_MAX_HEIGHT)
                png = page.screenshot(full_page=True, clip={"x": 0, "y": 0, "width": WEB_WIDTH, "height": height})
                out = IMG / f"web_{name}.png"
                img = Image.open(io.BytesIO(png)).convert("RGB")
                # 256 colours: a page is flat colours and text; a third of the bytes
                img.quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
                print(f"wrote {out} ({out.stat().st_size // 1024} KB)")
            browser.close()
    finally:
        proc.send_signal(2)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()


def main(argv: list[str]) -> None:
    what = set(argv) or {"help", "plots", "train", "readme", "web"}
    if "help" in what:
        make_help()
    if "plots" in what:
        make_plots()
    if "train" in what:
        make_train()
    if "readme" in what:
        make_readme_plots()
    if "web" in what:
        make_web()


if __name__ == "__main__":
    main(sys.argv[1:])
