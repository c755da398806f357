"""``dpcalc serve`` end to end in a real browser (issue 30; the pages, their DOM ids and the API are
described in docs/how-to/web.md): Debian's chromium (``/usr/bin/chromium``) driven by Playwright's sync
API, headless, against a server started here (``python -m dpcalc serve --port 0``, one per pytest
worker).

For every page: the form is filled field by field (fields named as the CLI's options), submitted,
the result read from ``#result-json`` and compared with the CLI's own ``--json`` for the same
arguments (run through click's CliRunner as the console script runs it; the copied command line is
also run as a ``python -m dpcalc`` process); a bad value first shows the CLI's exact error line next
to its field; the plot is drawn (an element screenshot with many distinct colours); the page
requests nothing but the server (every request is recorded; the browser resolves no name but
loopback; one test aborts every other request outright — the page works offline) and logs no
error (a Content-Security-Policy violation is a console error). Also: the copy buttons, the
shareable URL, live update, and the plan page's progress and cancel.

The examples are small (σ by the rdp accountant, a 2 × 2 plan grid): these tests check the web
layer — same options, same JSON, same errors — not the accountants, which have their own tests.
Most of each test's time is chromium evaluating Plotly (4.8 MB) on each page load.

Outside CI the module skips when chromium or Playwright is missing; in CI (``CI`` set) it fails
instead (.ci/run installs both; tests/test_ci_environment.py checks them too).
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
URL_LINE = re.compile(r"dpcalc serve: (http://\S+?)/? ")
REFUSED = re.compile(r"Failed to load resource: the server responded with a status of (400|408|413|422) ")
TIMEOUT_MS = 60_000  # the slowest page's result on a loaded 2-core machine


def _unavailable(reason: str) -> None:
    """Skip outside CI; fail in CI (a browser test that skips there protects nothing)."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}: in CI the browser tests must run (.ci/run installs it)")
    pytest.skip(reason)


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))


# ---------------------------------------------------------------------------------------------
# the pages, each with a CLI command line whose options are its form's fields


@dataclass(frozen=True)
class Page:
    """One page of the contract: its path, the CLI arguments its example fills in, uploads (option
    -> file content, sent to the CLI on stdin as ``-``), a bad value (field, value) and whether the
    contract gives it a plot."""

    path: str
    argv: tuple[str, ...]
    bad: tuple[str, str]
    plot: bool = True
    uploads: dict[str, bytes] = field(default_factory=dict)


PATE_VOTES = (ROOT / "docs" / "examples" / "pate_votes.csv").read_bytes()
SCORES = b"a,10\nb,8\nc,3\n"

PAGES: dict[str, Page] = {
    "sigma": Page("/sigma", ("sigma", "--eps", "3", "--delta", "1e-5", "--batch-size", "256",
                             "--dataset-size", "60000", "--epochs", "60", "--accountant", "rdp"), ("eps", "-3")),
    "epsilon": Page("/epsilon", ("epsilon", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000",
                                 "--epochs", "5", "--delta", "1e-5"), ("delta", "2")),
    "samplers": Page("/samplers", ("sampling-cost", "--sigma", "2", "--batch-size", "1000", "--dataset-size", "10000",
                                   "--epochs", "1", "--delta", "1e-5", "--no-monte-carlo"), ("sigma", "-1")),
    "risk": Page("/risk", ("risk", "--sigma", "1.1", "--batch-size", "256", "--dataset-size", "60000",
                           "--epochs", "5", "--delta", "1e-5", "--fpr", "1e-3"), ("fpr", "1.5")),
    "plan": Page("/plan", ("plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000",
                           "--batch-size", "256,1024", "--epochs", "3:30:2", "--accountant", "rdp"),
                 ("eps", "-3")),
    "compose": Page("/compose", ("compose", "--gaussian", "4", "--sample-rate", "0.01", "--count", "10000",
                                 "--delta", "1e-5"), ("delta", "-1")),
    "laplace": Page("/mechanisms/laplace", ("laplace", "--eps", "1", "--sensitivity", "1", "--beta", "0.05"),
                    ("eps", "-3")),
    "gaussian": Page("/mechanisms/gaussian", ("gaussian", "--eps", "1", "--delta", "1e-5"), ("eps", "-3")),
    "exponential": Page("/mechanisms/exponential", ("exponential", "--eps", "1", "--sensitivity", "1",
                                                    "--scores", "-"), ("eps", "-3"), uploads={"scores": SCORES}),
    "rr": Page("/mechanisms/rr", ("rr", "--eps", "1", "--categories", "3"), ("eps", "-3")),
    "pate": Page("/pate", ("pate", "--mechanism", "gnmax", "--sigma", "40", "--votes", "-", "--delta", "1e-5"),
                 ("sigma", "-1"), uploads={"votes": PATE_VOTES}),
    "mf": Page("/mf", ("mf", "--strategy", "sqrt", "--steps", "1000", "--eps", "3", "--delta", "1e-5",
                       "--no-poisson"), ("steps", "0")),
    "ldp": Page("/ldp", ("ldp", "--eps", "1", "--domain-size", "1024", "--users", "100000"), ("users", "0"),
                plot=False),
    "ldp-rappor": Page("/ldp/rappor", ("ldp", "rappor", "--f", "0.5", "--p", "0.5", "--q", "0.75", "--hashes", "2"),
                       ("f", "2"), plot=False),
    "ldp-mean": Page("/ldp/mean", ("ldp", "mean", "--eps", "1", "--users", "100000"), ("eps", "-3")),
}


def click_command(argv: tuple[str, ...]):
    """The click command of ``argv`` and the rest of ``argv`` (its options): ``ldp mean ...`` is
    the ``mean`` command of the ``ldp`` group."""
    import click

    from dpcalc.cli import cli

    with click.Context(cli) as ctx:
        cmd = cli.get_command(ctx, argv[0])
    rest = list(argv[1:])
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-"):
        cmd = cmd.commands[rest.pop(0)]
    return cmd, rest


def fields_of(argv: tuple[str, ...]) -> list[tuple[str, str | bool, tuple[str, ...]]]:
    """``argv``'s options as form fields: (the flag as typed, the value — a string, or True for a
    flag — , the option's long names without dashes: the field is one of them)."""
    cmd, args = click_command(argv)
    by_opt = {o: p for p in cmd.params for o in (*p.opts, *p.secondary_opts)}
    out = []
    while args:
        tok = args.pop(0)
        p = by_opt[tok]
        longs = tuple(o[2:] for o in p.opts if o.startswith("--"))
        value: str | bool = True if p.is_flag else args.pop(0)
        out.append((tok, value, longs))
    return out


def run_cli(argv: tuple[str, ...] | list[str], uploads: dict[str, bytes]) -> tuple[int, str, str]:
    """``dpcalc <argv> --json`` in this process through click's CliRunner, as the console script
    maps errors (one ``Error:`` line, exit 2 or 1); an upload goes to stdin (its option is ``-``).

    Returns:
        (exit status, stdout, stderr).
    """
    from click.testing import CliRunner

    from dpcalc.cli import cli

    res = CliRunner().invoke(cli, [*argv, "--json"], input=next(iter(uploads.values()), b""), prog_name="dpcalc")
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.stdout, res.stderr


def cli_json(argv: tuple[str, ...] | list[str], uploads: dict[str, bytes]) -> dict:
    """The CLI's ``--json`` object for ``argv``."""
    code, out, err = run_cli(argv, uploads)
    assert code == 0, err
    return json.loads(out)


def cli_error(argv: tuple[str, ...] | list[str], uploads: dict[str, bytes]) -> str:
    """The CLI's one ``Error:`` line for ``argv`` (exit 2, nothing on stdout)."""
    code, out, err = run_cli(argv, uploads)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and lines[0].startswith("Error: "), (code, out, err)
    return lines[0]


# ---------------------------------------------------------------------------------------------
# fixtures: one server and one browser per pytest worker


@pytest.fixture(scope="session")
def server():
    """``python -m dpcalc serve --port 0`` (a free port: safe under pytest-xdist); its base URL.
    Stopped (SIGINT, as Ctrl-C) at the end of the session."""
    try:
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        _unavailable(f"the web extra is not installed ({e})")
    fd, log_name = tempfile.mkstemp(prefix="dpcalc_serve_", suffix=".log")
    log = Path(log_name)
    with os.fdopen(fd, "wb") as err:  # a file, not a pipe: the server's log can never block it
        proc = subprocess.Popen([sys.executable, "-m", "dpcalc", "serve", "--port", "0"], cwd=ROOT, env=_env(),
                                stdout=subprocess.DEVNULL, stderr=err)
    base = None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        m = URL_LINE.search(log.read_text(errors="replace"))
        if m:
            base = m.group(1).rstrip("/")
            break
        time.sleep(0.05)
    if base is None:
        proc.kill()
        pytest.fail(f"dpcalc serve did not start: {log.read_text(errors='replace')[-3000:]}")
    yield base
    proc.send_signal(2)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    text = log.read_text(errors="replace")
    log.unlink(missing_ok=True)
    assert "Traceback" not in text, text[-3000:]


@pytest.fixture(scope="session")
def browser():
    """Headless Debian chromium through Playwright (no browser download), shared by the tests.
    DNS resolves nothing but loopback: a page that reached out would fail loudly, not silently."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("playwright is not installed (the dev extra)")
    if not os.access(CHROMIUM, os.X_OK):
        _unavailable(f"{CHROMIUM} is missing (apt-get install chromium chromium-driver)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                              args=["--no-sandbox", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"])
        yield b
        b.close()


class Watched:
    """A page whose every request is recorded, and its console errors and uncaught errors.

    With ``block``, the context's requests to anything but the server are also aborted (and
    recorded): Playwright's routing, which disables the browser's HTTP cache, so only the offline
    test uses it; the other tests record every request the page makes and check it went to the
    server (and the browser resolves no name but loopback: see the ``browser`` fixture)."""

    def __init__(self, context, base: str, block: bool = False):
        self.base = base
        self.origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
        self.context = context
        self.requests: list[str] = []
        self.external: list[str] = []
        self.errors: list[str] = []
        if block:
            context.route("**/*", self._route)
        self.page = context.new_page()
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("console", self._console)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("response", self._response)

    def _console(self, msg) -> None:
        # a refused input is answered 4xx on purpose, and chromium logs each such response as an
        # error: those are checked in _response instead
        if msg.type == "error" and not REFUSED.match(msg.text):
            self.errors.append(msg.text)

    def _response(self, response) -> None:
        if response.status >= 500 or response.status == 404:
            self.errors.append(f"{response.status} {response.request.method} {response.url}")

    def _route(self, route) -> None:
        url = route.request.url
        if url.startswith(self.origin + "/") or url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            self.external.append(url)
            route.abort()

    def check_clean(self) -> None:
        """Nothing fetched but the server (the page works offline), no console or page error."""
        assert self.external == [], f"the page fetched outside the server: {self.external}"
        outside = [u for u in self.requests if not u.startswith((self.origin + "/", "data:", "blob:"))]
        assert outside == [], f"the page fetched outside the server: {outside}"
        assert self.errors == [], f"console/page errors: {self.errors}"
        linked = self.page.eval_on_selector_all(
            "script[src], link[href], img[src], iframe[src], source[src], video[src], audio[src]",
            "els => els.map(e => e.src || e.href)")
        assert [u for u in linked if not u.startswith((self.origin + "/", "data:", "blob:"))] == [], linked


def new_context(browser, base: str):
    """A browser context for the server at ``base``: 1280 × 900, clipboard allowed, long timeout."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=base)
    return context


@pytest.fixture(scope="session")
def shared_context(browser, server):
    """One context for the tests of a worker: its HTTP cache keeps Plotly (4.8 MB) compiled."""
    context = new_context(browser, server)
    yield context
    context.close()


@pytest.fixture
def web(shared_context, server):
    w = Watched(shared_context, server)
    yield w
    w.page.close()


# ---------------------------------------------------------------------------------------------
# helpers on a page


def fill(page, argv: tuple[str, ...], uploads: dict[str, bytes]) -> None:
    """Type each option of ``argv`` into the form field of its name (check/uncheck flags, choose in
    selects, attach uploads)."""
    for tok, value, longs in fields_of(argv):
        name = next((n for n in longs if page.locator(f'#form [name="{n}"]').count()), None)
        names = page.eval_on_selector_all("#form [name]", "els => els.map(e => e.name)")
        assert name is not None, f"no form field for {tok} (tried {longs}); the form has {names}"
        el = page.locator(f'#form [name="{name}"]').first
        kind = el.evaluate("e => e.tagName.toLowerCase() + ':' + (e.type || '')")
        if isinstance(value, bool):
            if kind == "input:checkbox":  # a flag: --no-monte-carlo
                el.set_checked(True)
            else:  # --x/--no-x: a choice of the two flags
                el.select_option(tok)
        elif kind == "input:file":
            el.set_input_files({"name": f"{name}.csv", "mimeType": "text/csv", "buffer": uploads[name]})
        elif kind.startswith("select"):
            el.select_option(value)
        else:
            el.fill(value)


#: the page has settled after a submit: the page's output was replaced since the submit (submit()
#: marks the old one stale), no request in flight (#status empty: set to "computing…" by a submit
#: and cleared only by the latest answer) and no job running (#cancel hidden)
SETTLED = """() => {
  const s = document.getElementById("status"), c = document.getElementById("cancel");
  const o = document.getElementById("output");
  return !!o && !o.dataset.stale && !(s && s.textContent !== "") && !(c && !c.hidden);
}"""


def submit(page) -> None:
    """Click the submit button and wait until the page shows this submit's answer."""
    page.evaluate("() => { document.getElementById('output').dataset.stale = '1'; }")
    page.click("#submit")
    page.wait_for_function(SETTLED, polling=100)


def submit_and_read(page) -> dict:
    """Submit the form, wait for ``#result-json`` and parse it."""
    submit(page)
    assert page.locator("#result #result-json").count() == 1, page.inner_text("#output")
    return json.loads(page.inner_text("#result-json"))


def non_blank(png: bytes) -> tuple[int, float]:
    """(distinct colours, fraction of pixels unlike the most common one) of a PNG."""
    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("RGB")
    colours = img.getcolors(maxcolors=1 << 24)
    n = sum(c for c, _ in colours)
    top = max(c for c, _ in colours)
    return len(colours), 1 - top / n


# ---------------------------------------------------------------------------------------------
# the tests


def with_value(argv: tuple[str, ...], name: str, value: str) -> tuple[str, ...]:
    """``argv`` with option ``--name``'s value replaced by ``value``."""
    out = list(argv)
    k = out.index(f"--{name}")
    out[k + 1] = value
    return tuple(out)


@pytest.mark.parametrize("name", list(PAGES))
def test_page_equals_cli(web, name: str) -> None:
    """One page, as a user would: fill the form with a bad value -> the CLI's exact error line next
    to that field and no result; correct it and submit -> ``#result-json`` is exactly the CLI's
    ``--json`` for the same options, the rows are in a table, the plot is drawn and is not blank;
    nothing was fetched outside the server, no error was logged."""
    spec = PAGES[name]
    field_name, bad_value = spec.bad
    bad = with_value(spec.argv, field_name, bad_value)
    page = web.page
    page.goto(web.base + spec.path)
    fill(page, bad, spec.uploads)
    submit(page)
    shown = page.locator(f'.field-error[data-for="{field_name}"]').inner_text().strip()
    expected = cli_error(bad, spec.uploads)
    assert expected.removeprefix("Error: ") in shown, (shown, expected)
    assert page.locator("#result-json").count() == 0

    fill(page, spec.argv, spec.uploads)
    got = submit_and_read(page)
    assert got == cli_json(spec.argv, spec.uploads)
    assert page.locator(f'.field-error[data-for="{field_name}"]').inner_text().strip() == ""
    assert page.locator("#result table.result-table").count() >= 1
    if spec.plot:
        page.wait_for_selector("#plot svg.main-svg")
        if page.get_attribute("#plot", "data-curve"):  # σ, ε: the --plot curve replaces the bars
            page.wait_for_selector("#plot[data-curve-state='drawn'], #plot[data-curve-state='failed']")
            assert page.get_attribute("#plot", "data-curve-state") == "drawn", page.inner_text("#output")
        assert page.locator("#plot g.trace, #plot g.hm").count() >= 1  # scatter or bar traces, a heatmap
        colours, inked = non_blank(page.locator("#plot").screenshot())
        assert colours >= 16 and inked >= 0.01, (colours, inked)
    web.check_clean()


def test_copy_buttons_shareable_url_and_live_update(web) -> None:
    """The σ page: the copy buttons put the command and the Python into the clipboard; the copied
    command, run as a new process, prints the page's JSON; the copied Python prints the same σ; the
    page's URL, opened anew, shows the same result; changing a field updates the result without a
    submit (live update)."""
    spec = PAGES["sigma"]
    page = web.page
    page.goto(web.base + spec.path)
    fill(page, spec.argv, spec.uploads)
    got = submit_and_read(page)

    copied = {}
    for pre in ("copy-cli", "copy-python"):
        text = page.inner_text(f"#{pre}").strip()
        page.locator(f"button.copy[data-target='{pre}']").click()
        clip = page.evaluate("() => navigator.clipboard.readText()")
        assert clip.strip() == text, (pre, clip, text)
        copied[pre] = text

    command = shlex.split(copied["copy-cli"])
    assert command[:2] == ["dpcalc", "sigma"], command
    run = subprocess.run([sys.executable, "-m", "dpcalc", *command[1:], "--json"], capture_output=True, text=True,
                         cwd=ROOT, env=_env(), timeout=300)
    assert run.returncode == 0 and json.loads(run.stdout) == got, run.stderr
    run = subprocess.run([sys.executable, "-c", copied["copy-python"]], capture_output=True, text=True,
                         cwd=ROOT, env=_env(), timeout=300)
    assert run.returncode == 0, run.stderr
    sigma = got["results"][0]["noise_multiplier"]
    assert float(run.stdout.split()[-1]) == pytest.approx(sigma, rel=1e-6), (run.stdout, sigma)

    shared = page.url
    assert "eps=3" in urlsplit(shared).query, shared  # the inputs are in the query string
    again = web.context.new_page()
    again.goto(shared)
    assert json.loads(again.inner_text("#result-json")) == got  # rendered by the server
    again.close()

    page.evaluate("() => { document.getElementById('output').dataset.stale = '1'; }")
    page.fill('#form [name="eps"]', "2")  # no submit
    page.wait_for_function("() => { const r = document.getElementById('result-json');"
                           " return !!r && JSON.parse(r.textContent).inputs.epsilon === 2; }")
    page.wait_for_function(SETTLED, polling=100)
    live = json.loads(page.inner_text("#result-json"))
    assert live == cli_json(with_value(spec.argv, "eps", "2"), {})
    assert "eps=2" in urlsplit(page.url).query
    web.check_clean()


def test_works_offline(browser, server) -> None:
    """Every request that is not to the server is aborted (Playwright's routing, HTTP cache off):
    the index and the σ page's shareable URL still load, the result and its Plotly chart are drawn
    (Plotly comes from the server), and no request outside the server was even attempted."""
    context = new_context(browser, server)
    try:
        w = Watched(context, server, block=True)
        w.page.goto(server + "/")
        links = w.page.eval_on_selector_all("a[href]", "els => els.map(e => e.getAttribute('href'))")
        for spec in PAGES.values():
            assert any(h.split("?")[0] == spec.path for h in links), (spec.path, links)
        w.page.goto(server + "/sigma?eps=3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60&accountant=rdp")
        w.page.wait_for_selector("#plot svg.main-svg")
        assert json.loads(w.page.inner_text("#result-json")) == cli_json(PAGES["sigma"].argv, {})
        assert any(u.endswith("/static/plotly.min.js") for u in w.requests), w.requests
        w.check_clean()
    finally:
        context.close()


def test_plan_progress_and_cancel(web, server) -> None:
    """A long plan grid (pld, 12 × 12: tens of seconds) runs as a job: the page shows its progress
    (``done/total`` when the command reports it, ``running…`` until then — a pld grid reports per
    worker's chunk), Cancel sends ``DELETE /api/jobs/<id>``, the job ends ``cancelled`` and no
    result is shown; the same page then answers a small grid (a fresh worker)."""
    import httpx

    page = web.page
    page.goto(web.base + "/plan")
    long_run = ("plan", "--eps", "3", "--delta", "1e-5", "--dataset-size", "50000", "--batch-size", "64:8192:12",
                "--epochs", "1:200:12", "--accountant", "pld")
    fill(page, long_run, {})
    page.click("#submit")
    page.wait_for_function("() => /^(\\d+\\/\\d+|running…)$/.test(document.getElementById('progress').textContent)")
    with page.expect_request(lambda r: r.method == "DELETE" and "/api/jobs/" in r.url) as req:
        page.click("#cancel")
    job = req.value.url.rsplit("/", 1)[1]
    deadline = time.monotonic() + 30
    while True:
        state = httpx.get(f"{server}/api/jobs/{job}").json()["state"]
        if state != "running" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert state == "cancelled"
    page.wait_for_function("() => document.getElementById('progress').textContent === 'cancelled'")
    assert page.locator("#cancel").is_hidden() and page.locator("#result-json").count() == 0

    spec = PAGES["plan"]  # the same page, a small grid: answered by a fresh worker
    fill(page, spec.argv, {})
    assert submit_and_read(page) == cli_json(spec.argv, {})
    web.check_clean()


def test_a_link_repeating_an_option_keeps_its_meaning(web) -> None:
    """Review finding: /compose?dp=0.1&count=100&gaussian=2&count=50 showed the right result, but
    the share link was rebuilt from the form (one field per option) as …&gaussian=2&count=100 — a
    different composition. The share link is now the link itself, and a note says the form shows
    the first values only."""
    link = "/compose?dp=0.1&count=100&gaussian=2&count=50&delta=1e-5"
    page = web.page
    page.goto(web.base + link)
    got = json.loads(page.inner_text("#result-json"))
    want = cli_json(("compose", "--dp", "0.1", "--count", "100", "--gaussian", "2", "--count", "50",
                     "--delta", "1e-5"), {})
    assert got == want
    assert page.inner_text("#share-url").strip() == web.base + link
    assert "more than once" in page.inner_text("#repeat-note")
    web.check_clean()
