"""``dpcalc serve`` (issue 30), the server side, through Starlette's TestClient: each page's result
is the CLI's own ``--json`` output for the same argv (run here with click's CliRunner); bad input
is the CLI's error line with the field it names; hostile requests get 4xx with a message and the
server keeps serving; cache, jobs (progress, cancel), the time budget, the security headers.
The browser tests are tests/web/test_browser*.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import warnings

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from click.testing import CliRunner  # noqa: E402

from dpcalc.cli import cli  # noqa: E402
from dpcalc.web.pages import PAGES, example_query, page_for  # noqa: E402

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

from dpcalc.web.app import CSP, create_app  # noqa: E402
from dpcalc.web.worker import WorkerPool  # noqa: E402

QUICK_START = "eps=3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60"
#: time.monotonic itself, whatever a test later patches onto the time module
_REAL_MONOTONIC = time.monotonic
VOTES = b"10,0,0\n5,5,0\n0,2,8\n"
SCORES = b"a,10\nb,8\nc,3\n"
#: a plan grid that runs for many seconds under pld (for the time budget and cancel)
HEAVY_PLAN = "eps=3&delta=1e-5&dataset-size=50000&batch-size=64:4096:8&epochs=1:100:8&accountant=pld"


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, warm=sorted({pg.command[0] for pg in PAGES}))
    assert p.wait_ready(120)
    yield p
    p.close()


@pytest.fixture(scope="module")
def client(pool):
    with TestClient(create_app(pool=pool, time_limit=60), base_url="http://127.0.0.1:8765") as c:
        yield c


def cli_json(argv: list[str], stdin: bytes | None = None) -> dict:
    """The CLI's ``--json`` object for ``argv`` (click's CliRunner, in this process)."""
    res = CliRunner().invoke(cli, [*argv, "--json"], input=stdin)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def cli_error(argv: list[str]) -> tuple[int, str]:
    """The CLI's exit status and its ``Error: ...`` line for ``argv``."""
    res = CliRunner().invoke(cli, [*argv, "--json"])
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("Error: ")]
    return res.exit_code, lines[-1]


def argv_of(page_path: str, query: str) -> list[str]:
    from urllib.parse import parse_qsl

    page = page_for(page_path)
    argv = list(page.command)
    for k, v in parse_qsl(query, keep_blank_values=True):
        argv += [f"--{k}"] if v == "on" else [f"--{k}", v]
    return argv


@pytest.mark.parametrize("page", [pytest.param(p, marks=[pytest.mark.slow] if p.path == "samplers" else [])
                                  for p in PAGES if p.example], ids=lambda p: p.path)
def test_each_page_gives_the_cli_json(client, page):
    query = example_query(page)
    r = client.get(f"/api/{page.path}?{query}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True
    assert body["result"] == cli_json(argv_of(page.path, query))
    assert body["command"].startswith("dpcalc " + " ".join(page.command))
    assert body["cached"] is False and body["seconds"] >= 0
    if page.plot:
        assert body["plot"]["data"], page.path
    html = client.get(f"/{page.path}?{query}")
    assert html.status_code == 200
    for marker in ('id="result"', 'class="result-table"', 'id="result-json"', 'id="copy-cli"', 'id="copy-python"'):
        assert marker in html.text
    start = html.text.index('id="result-json"')
    pre = html.text[html.text.index(">", start) + 1:html.text.index("</pre>", start)]
    import html as htmllib

    assert json.loads(htmllib.unescape(pre)) == body["result"]


def test_uploads_run_as_standard_input(client):
    r = client.post("/api/mechanisms/exponential", data={"eps": "1", "sensitivity": "1"},
                    files={"scores": ("scores.csv", SCORES, "text/csv")})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == cli_json(["exponential", "--eps", "1", "--sensitivity", "1", "--scores", "-"], SCORES)
    assert r.json()["command"] == "dpcalc exponential --eps 1 --sensitivity 1 --scores scores.csv"
    r = client.post("/api/pate", data={"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
                    files={"votes": ("votes.csv", VOTES, "text/csv")})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == cli_json(["pate", "--mechanism", "gnmax", "--sigma", "40", "--delta", "1e-5",
                                           "--votes", "-"], VOTES)
    page = client.post("/pate", data={"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
                       files={"votes": ("votes.csv", VOTES, "text/csv")})
    assert page.status_code == 200 and 'id="result-json"' in page.text


@pytest.mark.parametrize("path,query,field", [
    ("sigma", "eps=-3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60", "eps"),
    ("sigma", "eps=3&delta=1.5&batch-size=256&dataset-size=60000&epochs=60", "delta"),
    ("epsilon", "delta=1e-5&batch-size=256&dataset-size=60000&epochs=10", "sigma"),
    ("epsilon", "sigma=1&delta=1e-5&batch-size=256&dataset-size=60000&epochs=10&accountant=nope", "accountant"),
    ("mechanisms/laplace", "eps=abc", "eps"),
    ("plan", "eps=3&delta=1e-5&dataset-size=100&batch-size=256&epochs=1", "batch-size"),
])
def test_bad_input_is_the_cli_error_at_its_field(client, path, query, field):
    r = client.get(f"/api/{path}?{query}")
    code, line = cli_error(argv_of(path, query))
    assert code == 2
    assert r.status_code == 400
    assert r.json() == {**r.json(), "ok": False, "error": line, "field": field}
    html = client.get(f"/{path}?{query}")
    assert html.status_code == 400
    import html as htmllib

    assert f'data-for="{field}">{htmllib.escape(line, quote=False)}</div>' in html.text.replace("&#39;", "'")


def test_risk_plot_marks_the_chosen_fpr(client):
    fig = client.get("/api/risk?eps=1&delta=1e-5&fpr=0.02").json()["plot"]
    star = [t for t in fig["data"] if t.get("marker", {}).get("symbol") == "star"]
    assert star and star[0]["x"] == [0.02]


def test_infeasible_is_422(client):
    q = "eps=0.01&delta=1e-5&steps=1000000&sample-rate=1&accountant=rdp"
    r = client.get(f"/api/sigma?{q}")
    code, line = cli_error(argv_of("sigma", q))
    assert code == 1 and r.status_code == 422 and r.json()["error"] == line


HOSTILE_QUERIES = [
    "eps=1e308&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=1e400&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=nan&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=inf&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=-0&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=%F0%9F%92%A9%00&delta=1e-5",
    "eps=%FF%FE&delta=1e-5",
    "%E2%80%AEeps=1",
    "../../etc/passwd=1",
    "eps=3&plot=/tmp/x.png",
    "eps=3&json=on",
    "eps=3&eps=4&delta=1e-5&steps=10&sample-rate=0.01",
    "eps=" + "9" * 500,
    "accountant=" + "%00" * 10,
    "&".join(f"f{i}=1" for i in range(1000)),
    "eps=" + "1" * 20000,
]


@pytest.mark.parametrize("query", HOSTILE_QUERIES, ids=range(len(HOSTILE_QUERIES)))
def test_hostile_queries_get_4xx_with_a_message(client, query):
    for path in ("/api/sigma", "/sigma"):
        r = client.get(f"{path}?{query}")
        assert 400 <= r.status_code < 500, (path, r.status_code, r.text[:300])
        if path.startswith("/api"):
            assert r.json()["ok"] is False and r.json()["error"].startswith("Error: ")
            assert "Traceback" not in r.text
        else:
            assert 'class="error"' in r.text or 'class="field-error"' in r.text


def test_file_options_take_uploads_only(client):
    for path, query in (("mechanisms/exponential", "eps=1&scores=/etc/passwd"),
                        ("pate", "mechanism=gnmax&sigma=40&delta=1e-5&votes=/etc/passwd"),
                        ("pate", "mechanism=gnmax&sigma=40&delta=1e-5&answered=/etc/passwd"),
                        ("risk", "spec=/etc/passwd"),
                        ("mf", "strategy=/etc/passwd&steps=10&eps=1&delta=1e-5"),
                        ("mf", "strategy=..%2F..%2Fetc%2Fpasswd&steps=10&eps=1&delta=1e-5"),
                        ("compose", "spec=/dev/zero&delta=1e-5")):
        r = client.get(f"/api/{path}?{query}")
        assert r.status_code == 400, (path, r.text)
        assert "passwd" not in r.json().get("result", "") and r.json()["ok"] is False


def test_big_uploads_are_refused_while_streaming(client):
    big = b"1,2,3\n" * (10 * 2**20 // 6)
    r = client.post("/api/pate", data={"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
                    files={"votes": ("votes.csv", big, "text/csv")})
    assert r.status_code == 413 and r.json()["error"].startswith("Error: ")

    def chunks():  # no Content-Length: the cap is enforced on the stream
        for _ in range(10):
            yield b"x" * 2**20

    r = client.post("/api/pate", content=chunks(), headers={"content-type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 413
    r = client.post("/api/mechanisms/exponential", data={"eps": "1"},
                    files={"scores": ("a.csv", SCORES), "other": ("b.csv", SCORES)})
    assert r.status_code == 400
    r = client.post("/api/sigma", content=b"--zz\r\nbroken", headers={"content-type": "multipart/form-data; boundary=zz"})
    assert r.status_code == 400


def test_other_hosts_and_cross_site_posts_are_refused(client):
    r = client.get("/sigma", headers={"host": "evil.example:8765"})  # DNS rebinding
    assert r.status_code == 403 and "Host" in r.json()["error"]
    r = client.post("/api/jobs/plan?eps=1", headers={"origin": "http://evil.example"})
    assert r.status_code == 403 and "another site" in r.json()["error"]
    r = client.post("/api/mechanisms/laplace", content=b"eps=1",
                    headers={"origin": "http://127.0.0.1:8765", "content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 200


def test_post_bodies_have_the_same_limits(client):
    many = "&".join(f"f{i}=1" for i in range(1000)).encode()
    r = client.post("/api/sigma", content=many, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code in (400, 413) and r.json()["error"].startswith("Error: ")
    r = client.post("/api/sigma", data={f"f{i}": "1" for i in range(1000)}, files={"x": ("x", b"1")})
    assert r.status_code == 400
    r = client.post("/api/sigma", data={"../../etc/passwd": "1"}, files={"x": ("x", b"")})
    assert r.status_code == 400 and "passwd" in r.json()["error"]


def test_upload_page_as_a_job(client):
    r = client.post("/api/jobs/pate", data={"mechanism": "gnmax", "sigma": "41", "delta": "1e-5"},
                    files={"votes": ("votes.csv", VOTES, "text/csv")})
    assert r.status_code == 202
    j, _ = _wait_job(client, r.json()["job"], 60)
    assert j["state"] == "done" and j["response"]["result"]["inputs"]["sigma"] == 41.0


def test_unknown_pages_and_jobs_are_404(client):
    assert client.get("/api/nope?eps=1").status_code == 404
    assert client.get("/nope/../../etc/passwd").status_code == 404
    assert client.get("/api/jobs/nope").status_code == 404
    assert client.get("/static/../pyproject.toml").status_code == 404


def test_server_still_serves_after_hostile_requests(client):
    r = client.get(f"/api/sigma?{QUICK_START}")
    assert r.status_code == 200 and r.json()["result"]["results"][0]["noise_multiplier"] == 0.96860046


def test_same_inputs_are_served_from_the_cache(client):
    q = "eps=1&delta=1e-6&sensitivity=2"
    first = client.get(f"/api/mechanisms/gaussian?{q}").json()
    second = client.get(f"/api/mechanisms/gaussian?{q}").json()
    assert second["cached"] is True and second["result"] == first["result"]


def test_headers(client):
    for path in ("/", "/sigma", f"/api/sigma?{QUICK_START}", "/static/app.js"):
        r = client.get(path)
        assert r.headers["content-security-policy"] == CSP
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["referrer-policy"] == "no-referrer"
    assert client.get(f"/api/sigma?{QUICK_START}").headers["cache-control"] == "no-store"
    assert "script-src 'self';" in CSP and "unsafe-eval" not in CSP
    page = client.get("/sigma").text
    assert "<script>" not in page and "<style" not in page and " style=" not in page
    assert client.get("/static/plotly.min.js").status_code == 200
    assert client.get("/healthz").text == "ok"


def test_index_links_every_page(client):
    html = client.get("/").text
    for p in PAGES:
        assert f'href="/{p.path}"' in html
        assert client.get(f"/{p.path}").status_code == 200


def _wait_job(client, job, timeout=120.0):
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        j = client.get(f"/api/jobs/{job}").json()
        if j["progress"]:
            seen.append(j["progress"])
        if j["state"] != "running":
            return j, seen
        time.sleep(0.05)
    raise AssertionError("job did not finish")


def test_job_lifecycle_with_progress(client):
    q = "eps=3&delta=1e-5&dataset-size=50000&batch-size=256,1024&epochs=10,30&accountant=pld"
    r = client.post("/api/jobs/plan", content=q, headers={"content-type": "application/x-www-form-urlencoded"})
    assert r.status_code == 202
    j, seen = _wait_job(client, r.json()["job"])
    assert j["state"] == "done", j
    assert j["progress"] == {"done": 4, "total": 4}
    assert all(p["total"] == 4 for p in seen)
    assert j["response"]["result"] == cli_json(argv_of("plan", q))
    # the same inputs again: from the cache, done at once
    again = client.get(f"/api/plan?{q}").json()
    assert again["cached"] is True


def _groups(pool) -> set[int]:
    return {w.proc.pid for w in list(pool._all)}


def _left_in(groups: set[int]) -> list[tuple[int, str, str]]:
    """Processes still running in the process groups ``groups`` (a stopped worker and what it
    forked); zombies (dead, waiting to be reaped) run nothing and are not counted."""
    import os

    time.sleep(0.5)
    left = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as fh:
                state = fh.read().rsplit(")", 1)[1].split()[0]
            if os.getpgid(int(d)) in groups and state not in ("Z", "X"):
                with open(f"/proc/{d}/cmdline") as fh:
                    left.append((int(d), state, fh.read()[:80]))
        except OSError:
            pass
    return left


def test_job_cancel_replaces_the_worker(client, pool):
    before = _groups(pool)
    r = client.post(f"/api/jobs/plan?{HEAVY_PLAN}")
    assert r.status_code == 202
    job = r.json()["job"]
    time.sleep(0.5)
    d = client.delete(f"/api/jobs/{job}")
    assert d.json()["state"] == "cancelled"
    j, _ = _wait_job(client, job, 10)
    assert j["state"] == "cancelled"
    assert client.get("/api/mechanisms/laplace?eps=0.7").status_code == 200
    deadline = time.monotonic() + 10  # the job's thread replaces the worker within its next poll
    while not before - _groups(pool) and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped = before - _groups(pool)
    assert len(stopped) == 1
    assert _left_in(stopped) == []  # the worker and its forked calibration pool are gone


def test_bad_job_input_is_refused_at_once(client):
    r = client.post("/api/jobs/plan?eps=-1")
    assert r.status_code == 202
    j, _ = _wait_job(client, r.json()["job"], 30)
    assert j["state"] == "error" and j["status"] == 400 and j["response"]["field"] == "eps"
    assert client.post("/api/jobs/plan?bogus=1").status_code == 400


def test_time_budget(pool, client):
    before = _groups(pool)
    with TestClient(create_app(pool=pool, time_limit=0.5), base_url="http://localhost") as fast:
        t0 = time.monotonic()
        r = fast.get(f"/api/plan?{HEAVY_PLAN}")
        assert r.status_code == 503 and "time limit" in r.json()["error"]
        assert time.monotonic() - t0 < 10
        assert fast.get("/healthz").status_code == 200
    assert _left_in(before - _groups(pool)) == []
    assert client.get("/api/mechanisms/laplace?eps=0.3").status_code == 200


def _run_snippet(code: str, cwd=None, files: dict | None = None) -> str:
    """Run a copy-as-Python snippet in a fresh interpreter (this checkout on PYTHONPATH) in
    ``cwd`` (with ``files`` written there: an upload the snippet reads); its stdout."""
    import os
    import pathlib
    import tempfile

    root = str(pathlib.Path(__file__).resolve().parents[2])
    with tempfile.TemporaryDirectory() as tmp:
        for name, data in (files or {}).items():
            (pathlib.Path(tmp) / name).write_bytes(data)
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        out = subprocess.run([sys.executable, "-c", code], cwd=cwd or tmp, env=env, capture_output=True,
                             text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _main_number(stdout: str) -> float:
    return float(stdout.split()[0])


def _row(key, where=None):
    return lambda res: next(r[key] for r in res["results"] if where is None or where(r))


#: (page, query, the result's main number): every page's snippet calls the library
SNIPPET_CASES = [
    ("sigma", QUICK_START, _row("noise_multiplier")),
    ("epsilon", "sigma=1&delta=1e-5&batch-size=256&dataset-size=60000&epochs=10", _row("epsilon")),
    ("samplers", "sigma=1&batch-size=256&dataset-size=60000&epochs=10&delta=1e-5&no-monte-carlo=on",
     _row("epsilon")),
    ("risk", "eps=1&delta=1e-5&fpr=0.01", _row("bound", lambda r: r.get("quantity") == "tpr_at_fpr")),
    ("risk", "sigma=1&sample-rate=0.01&steps=1000&delta=1e-5",
     _row("bound", lambda r: r.get("quantity") == "tpr_at_fpr")),
    ("risk", "gdp=1&fpr=0.05", _row("bound", lambda r: r.get("quantity") == "tpr_at_fpr")),
    ("plan", "eps=3&delta=1e-5&dataset-size=50000&batch-size=256,1024,4096&epochs=10,30&accountant=rdp",
     _row("noise_multiplier")),
    ("compose", "dp=0.1&count=100&delta=1e-5", _row("epsilon")),
    ("compose", "gaussian=4&sample-rate=0.01&count=100&eps=1&method=rdp&method=basic", _row("delta")),
    ("mechanisms/laplace", "eps=1&sensitivity=1&beta=0.05&dims=10000", _row("scale")),
    ("mechanisms/gaussian", "eps=1&delta=1e-5&sensitivity=1", _row("noise_std")),
    ("mechanisms/rr", "eps=1&categories=3&observed=500,300,200", _row("p_truth")),
    ("mechanisms/rr", "eps=2&categories=5", _row("p_truth")),
    ("pate", "mechanism=gnmax&sigma=40&queries=1000&delta=1e-5", _row("epsilon")),
    ("pate", "mechanism=lnmax&scale=20&queries=100&delta=1e-5", _row("epsilon")),
    ("mf", "strategy=sqrt&steps=1000&eps=3&delta=1e-5&no-poisson=on", _row("rmse")),
    ("ldp/rappor", "f=0.5&p=0.5&q=0.75&hashes=2", _row("epsilon_one")),
    ("ldp/mean", "eps=1&users=100000", _row("standard_error")),
]


@pytest.mark.parametrize("path,query,main", SNIPPET_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(SNIPPET_CASES)])
def test_python_snippet_gives_the_same_number(client, path, query, main):
    body = client.get(f"/api/{path}?{query}").json()
    assert body["ok"], body
    assert "from dpcalc.cli import main" not in body["python"], body["python"]  # a library call, not the CLI
    assert _main_number(_run_snippet(body["python"])) == main(body["result"])


def test_python_snippet_of_an_upload_reads_the_file(client):
    r = client.post("/api/mechanisms/exponential", data={"eps": "1", "sensitivity": "1"},
                    files={"scores": ("scores.csv", SCORES, "text/csv")}).json()
    assert "scores.csv" in r["python"] and "from dpcalc.cli import main" not in r["python"]
    out = _run_snippet(r["python"], files={"scores.csv": SCORES})
    assert _main_number(out) == r["result"]["results"][0]["probabilities"][0]


def test_python_snippet_without_a_library_call_says_why_and_runs(client):
    # PATE's data-dependent analysis of uploaded votes is assembled by the command: the snippet runs
    # the command (on the uploaded file's name) and says why
    r = client.post("/api/pate", data={"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
                    files={"votes": ("votes.csv", VOTES, "text/csv")}).json()
    assert r["python"].startswith("# No single library call covers these inputs: ")
    assert "'--votes', 'votes.csv'" in r["python"]
    out = _run_snippet(r["python"], files={"votes.csv": VOTES})
    assert json.loads(out)["results"] == r["result"]["results"]  # (inputs echo the file's name, not '-')


def test_cli_line_reproduces_the_result(client):
    import shlex

    body = client.get(f"/api/sigma?{QUICK_START}").json()
    words = shlex.split(body["command"])
    assert words[0] == "dpcalc"
    assert cli_json(words[1:]) == body["result"]


def test_serve_without_the_web_extra(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "starlette" else real(name, *a))
    res = CliRunner().invoke(cli, ["serve"])
    assert res.exit_code == 2
    assert res.stderr.strip().splitlines() == [
        "Error: dpcalc serve needs the web extra (starlette not installed): pip install 'dpcalc[web]'"]


def test_serve_module_is_light():
    code = ("import sys\nimport dpcalc.cli.serve\n"
            "print([m for m in ('starlette', 'uvicorn', 'jinja2', 'plotly', 'multipart') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_serve_command_listens_and_warns_off_loopback():
    import socket

    import httpx

    proc = subprocess.Popen([sys.executable, "-m", "dpcalc", "serve", "--host", "0.0.0.0", "--port", "0",
                             "--workers", "1"], stderr=subprocess.PIPE, text=True)
    try:
        warning = proc.stderr.readline()
        line = proc.stderr.readline()
        assert warning.startswith("Warning: --host 0.0.0.0 is not the loopback address")
        assert line.startswith("dpcalc serve: http://0.0.0.0:") and line.rstrip().endswith("(Ctrl-C to stop)")
        port = int(line.split(":")[3].split("/")[0])
        assert port > 0
        with httpx.Client(trust_env=False) as c:
            assert c.get(f"http://127.0.0.1:{port}/healthz").text == "ok"
            # every interface, but still only this machine's names (DNS rebinding)
            r = c.get(f"http://127.0.0.1:{port}/healthz", headers={"host": f"evil.example:{port}"})
            assert r.status_code == 403
            r = c.get(f"http://127.0.0.1:{port}/healthz", headers={"host": f"{socket.gethostname()}:{port}"})
            assert r.status_code == 200
    finally:
        proc.terminate()
        proc.wait(20)
    bad = CliRunner().invoke(cli, ["serve", "--port", "70000"])
    assert bad.exit_code == 2 and "--port must be a whole number in [0, 65535], got 70000" in bad.stderr


def test_worker_outcomes_map_to_statuses(monkeypatch):
    """A command that runs out of memory is 503 with a message; an unexpected exception is a bug:
    500 with one line (logged), never the user's error."""
    import dpcalc.cli
    from dpcalc.web.app import ResultCache, Runner
    from dpcalc.web.forms import Submission
    from dpcalc.web.worker import BUG, OUT_OF_MEMORY, run_cli

    def boom(argv):
        raise MemoryError()

    monkeypatch.setattr(dpcalc.cli, "main", boom)
    assert run_cli(["sigma"])[0] == OUT_OF_MEMORY
    monkeypatch.setattr(dpcalc.cli, "main", lambda argv: 1 / 0)
    code, _, err = run_cli(["sigma"])
    assert code == BUG and err.startswith("Error: internal error: ZeroDivisionError")
    runner = Runner(None, ResultCache(), 1.0)
    sub = Submission(("sigma", "--eps", "1"))
    page = page_for("sigma")
    assert runner._respond(page, sub, OUT_OF_MEMORY, "", "")[0] == 503
    status, body = runner._respond(page, sub, BUG, "", err)
    assert status == 500 and body["error"] == err.splitlines()[0]
    status, body = runner._respond(page, sub, 0, "not json", "")
    assert status == 500


def test_random_inputs_never_reach_a_500(client):
    """Random text in random fields of random pages: always a status with a message, never 500."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from dpcalc.web.pages import fields_of

    names = {p.path: [f.name for f in fields_of(p)] + ["x", "../a"] for p in PAGES}

    @settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck))
    @given(st.sampled_from([p.path for p in PAGES if not p.long]), st.data())
    def check(path, data):
        pairs = data.draw(st.lists(st.tuples(st.sampled_from(names[path]),
                                             st.one_of(st.text(max_size=12),
                                                       st.sampled_from(["1e308", "-0", "nan", "1e-400", "0x10",
                                                                        "１", "1_0", "∞", "1,2", "1:9:3"]))),
                                   max_size=5))
        r = client.get(f"/api/{path}", params=pairs)
        assert r.status_code in (200, 400, 413, 422, 503), (path, pairs, r.text[:300])
        if r.status_code != 200:
            assert r.json()["error"].startswith("Error: ")

    check()
    assert client.get(f"/api/sigma?{QUICK_START}").status_code == 200


def test_workers_never_outlive_a_killed_server(tmp_path):
    """A server killed outright (SIGKILL: no shutdown code runs) leaves no worker process behind:
    each worker watches its parent and leaves with its whole process group."""
    import signal
    import subprocess
    import sys

    code = ("import os, sys, time\n"
            "from dpcalc.web.worker import WorkerPool\n"
            "pool = WorkerPool(size=2)\n"
            "print(' '.join(str(w.proc.pid) for w in pool._all), flush=True)\n"
            "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        assert len(pids) == 2
        groups = set(pids)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def running(pid: int) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    deadline = time.monotonic() + 60  # a worker killed while still starting leaves once it starts
    while (any(map(running, pids)) or _left_in(groups)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [p for p in pids if running(p)] == []
    assert _left_in(groups) == []


# -- curves: GET /api/<page>/plot gives the series the command's --plot draws ----------------------

EPS_RUN = "sigma=1&delta=1e-5&sample-rate=0.01&steps=1000"
SIGMA_RUN = "eps=2&delta=1e-5&sample-rate=0.01&steps=1000"


def _lines(fig: dict) -> dict[str, dict]:
    """The drawn lines of a curve figure by name (the bracket band's traces left out)."""
    return {t["name"]: t for t in fig["data"] if t.get("mode") == "lines+markers"}


def _band(fig: dict, name: str) -> list | None:
    lower = [t for t in fig["data"] if t["name"] == f"{name} lower"]
    return lower[0]["y"] if lower else None


def test_epsilon_curve_is_the_cli_plot_series(client):
    from dpcalc.accounting.registry import available
    from dpcalc.cli.run_plots import epsilon_series
    from dpcalc.schedule import resolve_schedule

    r = client.get(f"/api/epsilon/plot?{EPS_RUN}")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["ok"] is True and body["cached"] is False
    series = epsilon_series(noise_multiplier=1.0, schedule=resolve_schedule(sample_rate=0.01, steps=1000), delta=1e-5,
                            accountants=list(available()), neighboring="add-remove", options={})
    lines = _lines(body["plot"])
    drawn = [c for c in series.curves if c.drawn]
    assert len(lines) == len(drawn) >= 2
    for c in drawn:
        line = lines[c.name + ("" if c.certified else " (approx.)")]
        assert line["x"] == list(series.x) and line["y"] == list(c.values)
        assert _band(body["plot"], c.name) == (None if c.lower is None else list(c.lower))
    assert _band(body["plot"], "pld") is not None  # pld's certified bracket is drawn as a band


def test_sigma_curve_is_the_cli_plot_series(client):
    from dpcalc.accounting.registry import default_accountant
    from dpcalc.cli.run_plots import sigma_series
    from dpcalc.schedule import resolve_schedule

    body = client.get(f"/api/sigma/plot?{SIGMA_RUN}").json()
    series = sigma_series(target_epsilon=2.0, delta=1e-5, schedule=resolve_schedule(sample_rate=0.01, steps=1000),
                          accountants=[default_accountant()], neighboring="add-remove", options={}, fallback=True)
    (line,) = _lines(body["plot"]).values()
    assert line["x"] == list(series.x) and line["y"] == list(series.curves[0].values)
    assert line["x"][0] == pytest.approx(1.0) and line["x"][-1] == pytest.approx(4.0)  # ½× to 2× the target
    assert body["plot"]["layout"]["shapes"][0]["x0"] == 2.0  # the requested ε marked


def test_curves_end_at_the_result(client):
    # consistency: the ε curve at the run's own epochs is the result's row (pld: ε and its bracket's
    # lower end), and σ at the requested ε is the result's σ — computed by two different requests
    res = client.get(f"/api/epsilon?{EPS_RUN}").json()["result"]
    fig = client.get(f"/api/epsilon/plot?{EPS_RUN}").json()["plot"]
    pld = next(r for r in res["results"] if r["accountant"] == "pld")
    line = _lines(fig)["pld"]
    at = line["x"].index(fig["layout"]["shapes"][0]["x0"])
    assert at == len(line["x"]) - 1 and line["x"][at] == pytest.approx(10.0)  # T·q = 10 epochs
    assert line["y"][at] == pld["epsilon"]
    assert _band(fig, "pld")[at] == pld["details"]["epsilon_lower"]
    for r in res["results"]:
        if r.get("applicable", True) and r.get("epsilon") is not None:
            name = r["accountant"] + ("" if r.get("certified", True) else " (approx.)")
            assert _lines(fig)[name]["y"][-1] == r["epsilon"]
    res = client.get(f"/api/sigma?{SIGMA_RUN}").json()["result"]
    (line,) = _lines(client.get(f"/api/sigma/plot?{SIGMA_RUN}").json()["plot"]).values()
    assert line["y"][line["x"].index(2.0)] == res["results"][0]["noise_multiplier"]


@pytest.mark.parametrize("path,query", [
    ("sigma", "eps=-3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60"),
    ("sigma", "eps=3&delta=1e-5&batch-size=256&dataset-size=100&epochs=60"),
    ("epsilon", "delta=1e-5&batch-size=256&dataset-size=60000&epochs=10"),
    ("epsilon", "sigma=1&delta=1e-5&steps=10&accountant=nope"),
    ("epsilon", "sigma=1&delta=1e-5&steps=10&bogus=1"),
])
def test_curve_bad_input_is_the_result_pages_error(client, path, query):
    a = client.get(f"/api/{path}?{query}")
    b = client.get(f"/api/{path}/plot?{query}")
    assert a.status_code == b.status_code == 400
    keep = ("ok", "error", "field")
    assert {k: b.json()[k] for k in keep} == {k: a.json()[k] for k in keep}
    assert b.json()["error"].startswith("Error: ") and "Traceback" not in b.text


def test_curve_is_cached_and_only_for_the_curve_pages(client):
    q = "sigma=2&delta=1e-5&sample-rate=0.01&steps=200&accountant=rdp"
    first = client.get(f"/api/epsilon/plot?{q}").json()
    second = client.get(f"/api/epsilon/plot?{q}").json()
    assert first["cached"] is False and second["cached"] is True and second["plot"] == first["plot"]
    assert client.get(f"/api/epsilon?{q}").json()["cached"] is False  # the result has its own entry
    assert client.get("/api/mechanisms/laplace/plot?eps=1").status_code == 404
    assert client.get("/api/nope/plot?eps=1").status_code == 404
    html = client.get(f"/epsilon?{q}").text
    assert 'data-curve="/api/epsilon/plot"' in html and 'id="plot-status"' in html
    assert "data-curve" not in client.get("/mechanisms/laplace?eps=1").text


def test_curves_never_take_every_worker():
    """Curves take at most all workers but one: while slow curves compute, a page's result still
    gets a worker (a fake pool: the curves block until released)."""
    import threading

    from dpcalc.cli.plot_data import plot_series
    from dpcalc.web.worker import Outcome

    series = json.dumps(plot_series("epsilon", ["--sigma", "1", "--steps", "10", "--delta", "1e-5",
                                                "--accountant", "rdp"]))
    laplace = json.dumps(cli_json(["laplace", "--eps", "1"]))

    class SlowCurves:
        size = 2

        def __init__(self) -> None:
            self.release, self.lock = threading.Event(), threading.Lock()
            self.curves = self.most = 0

        def run(self, argv, stdin, *, time_limit, kind="cli", **kw):
            if kind != "plot":
                return Outcome(0, laplace, "", 0.0)
            with self.lock:
                self.curves += 1
                self.most = max(self.most, self.curves)
            self.release.wait(20)
            with self.lock:
                self.curves -= 1
            return Outcome(0, series, "", 0.0)

        def close(self) -> None:
            pass

    pool = SlowCurves()
    with TestClient(create_app(pool=pool, time_limit=20), base_url="http://127.0.0.1") as c:
        got = []
        threads = [threading.Thread(target=lambda s=s: got.append(
            c.get(f"/api/epsilon/plot?sigma=1&delta=1e-5&steps={s}&accountant=rdp").status_code)) for s in (10, 11)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 10
        while pool.curves == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.3)
        assert pool.curves == 1  # the second curve waits for the first
        r = c.get("/api/mechanisms/laplace?eps=1")
        assert r.status_code == 200 and r.json()["result"] == json.loads(laplace)
        pool.release.set()
        for t in threads:
            t.join(30)
    assert got == [200, 200] and pool.most == 1


# -- review fixes: files, uploads, cache, disconnects, jobs, dead workers, hosts -------------------

#: (value typed in a field, pieces of the files it names that must never appear in a response)
_FILE_NAMES = ("pyproject.toml", "README.md", "dense:pyproject.toml", "-", "5|pyproject.toml")


def _secrets() -> list[str]:
    from pathlib import Path

    out = []
    for name in ("pyproject.toml", "README.md"):
        raw = Path(name).read_text(encoding="utf-8")
        out += [raw[:6], raw.splitlines()[0]]
    return out


def test_no_field_of_any_page_reads_a_file(client):
    """Every field of every page (the upload fields too), given a file name of the server's
    working directory, is refused with a 4xx and no byte of the file: the workers run in
    dpcalc._files.web_mode, where every input file named in a field is refused."""
    from pathlib import Path
    from urllib.parse import urlencode

    from dpcalc.web.pages import fields_of

    assert Path("pyproject.toml").is_file() and Path("README.md").is_file()  # the server's cwd
    secrets_ = _secrets()
    checked = 0
    for page in PAGES:
        base = dict(pair.split("=", 1) for pair in example_query(page).split("&") if pair)
        for f in fields_of(page):
            if f.kind == "flag":
                continue
            # a number option is parsed as a number by the CLI: one file name is enough there
            for value in _FILE_NAMES if f.kind != "number" else _FILE_NAMES[:1]:
                q = urlencode({**{k: v for k, v in base.items() if k != f.name}, f.name: value})
                urls = [f"/api/{page.path}?{q}"] + ([f"/api/{page.path}/plot?{q}"] if page.curve else [])
                for url in urls:
                    r = client.get(url)
                    assert 400 <= r.status_code < 500, (url, r.status_code, r.text[:300])
                    assert not any(s in r.text for s in secrets_), (url, r.text[:300])
                    checked += 1
    assert checked > 80


def test_web_mode_refuses_every_named_file(tmp_path, monkeypatch):
    """dpcalc._files.web_mode: a named file is refused before it is opened; ``-`` only for the
    upload's option; the message is one line naming the option."""
    import dpcalc._files as files
    from dpcalc.errors import ParameterError
    from dpcalc.mechanisms.correlated.spec import parse_strategy

    p = tmp_path / "x.csv"
    p.write_text("1\n")
    saved = dict(files._WEB)
    try:
        files.web_mode("scores")
        for path, option in ((str(p), "scores"), (str(p), "strategy"), ("-", "records_per_user"),
                             ("-", "--spec")):
            with pytest.raises(ParameterError, match="files cannot be named on the web page"):
                files.read_input_file(path, option=option, max_bytes=100)
            with pytest.raises(ParameterError, match="files cannot be named on the web page"):
                files.open_input_file(path, option=option, max_bytes=100)
        with pytest.raises(ParameterError, match=r"^--strategy: files cannot be named"):
            parse_strategy(f"dense:{p}", steps=4)
        files.web_mode("--scores")
        import io

        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"a,1\n")))
        assert files.read_input_file("-", option="scores", max_bytes=100) == b"a,1\n"
    finally:
        files._WEB.update(saved)
    assert files.read_input_file(str(p), option="scores", max_bytes=100) == b"1\n"


def test_dash_is_only_for_the_upload(client):
    r = client.get("/api/sigma?eps=3&delta=1e-5&batch-size=256&dataset-size=60000&epochs=60"
                   "&privacy-unit=user&records-per-user=-")
    assert r.status_code == 400 and "standard input" in r.json()["error"]
    r = client.post("/api/compose", data={"delta": "1e-5", "dp": "-"},
                    files={"spec": ("s.json", b'{"delta": 1e-5, "steps": []}', "application/json")})
    assert r.status_code == 400 and r.json()["field"] == "dp"


class _FakePool:
    """A pool that records the jobs it is given and answers at once (or waits for ``gate``)."""

    size = 2

    def __init__(self) -> None:
        import threading

        self.jobs: list = []
        self.gate = threading.Event()
        self.gate.set()

    def run(self, argv, stdin, *, time_limit, cancelled=None, **kw):
        from dpcalc.web.worker import Cancelled, Outcome

        self.jobs.append((list(argv), len(stdin), kw))
        # the real clock, bound at import: a test may move time.monotonic ten minutes ahead to age the
        # job table, and this job's own budget must not see that jump (it did, under load: flaky)
        deadline = _REAL_MONOTONIC() + time_limit
        while not self.gate.wait(0.02):
            if cancelled is not None and cancelled.is_set():
                raise Cancelled()
            if _REAL_MONOTONIC() > deadline:
                from dpcalc.web.worker import TimedOut

                raise TimedOut()
        return Outcome(2, "", "Error: --votes: fake\n", 0.0)

    def close(self) -> None:
        pass


def test_uploads_over_1mb_stay_in_memory(monkeypatch):
    """Starlette spools a multipart file part over 1 MB to a temporary file on disk; ours never."""
    import tempfile

    from dpcalc.web.pages import UPLOAD_CAP

    def refuse(self):
        raise AssertionError("an upload was spooled to disk")

    monkeypatch.setattr(tempfile.SpooledTemporaryFile, "rollover", refuse)
    pool = _FakePool()
    data = b"1,2\n" * (1_500_000 // 4)
    assert 2**20 < len(data) <= min(UPLOAD_CAP, page_for("pate").upload_cap)
    with TestClient(create_app(pool=pool), base_url="http://127.0.0.1") as c:
        r = c.post("/api/pate", data={"mechanism": "gnmax", "sigma": "40", "delta": "1e-5"},
                   files={"votes": ("v.csv", data, "text/csv")})
    assert r.status_code == 400 and r.json()["error"] == "Error: --votes: fake"
    assert pool.jobs[0][1] == len(data) and pool.jobs[0][2]["upload"] == "votes"


def test_cached_result_names_the_current_upload(client):
    """Two uploads of the same bytes under two names: the second is served from the cache, but
    its command line and Python snippet name its own file."""
    data = b"x,4\ny,2\nz,1\n"
    bodies = []
    for name in ("alice_scores.csv", "bob.csv"):
        r = client.post("/api/mechanisms/exponential", data={"eps": "1.25"},
                        files={"scores": (name, data, "text/csv")})
        assert r.status_code == 200
        bodies.append(r.json())
    assert bodies[1]["cached"] is True and bodies[1]["result"] == bodies[0]["result"]
    assert "bob.csv" in bodies[1]["command"] and "alice" not in bodies[1]["command"]
    assert "bob.csv" in bodies[1]["python"] and "alice" not in bodies[1]["python"]


def test_a_request_whose_client_left_frees_its_worker():
    """A slow request whose client disconnects is cancelled (while it waits for a worker and while
    it runs): the next request gets the worker at once. A real server (uvicorn, a real socket):
    TestClient cannot disconnect."""
    import socket
    import threading

    import uvicorn

    from dpcalc.web.worker import Cancelled, Outcome

    class OneWorker:
        """One worker: a job with sigma=9 runs until cancelled; others answer at once."""

        size = 1

        def __init__(self) -> None:
            self.slot = threading.Semaphore(1)
            self.cancelled = 0

        def run(self, argv, stdin, *, time_limit, cancelled=None, **kw):
            while not self.slot.acquire(timeout=0.02):
                if cancelled is not None and cancelled.is_set():
                    self.cancelled += 1
                    raise Cancelled()
            try:
                while "9" in argv and not (cancelled is not None and cancelled.wait(0.02)):
                    pass
                if cancelled is not None and cancelled.is_set():
                    self.cancelled += 1
                    raise Cancelled()
                return Outcome(2, "", "Error: --eps: fake\n", 0.0)
            finally:
                self.slot.release()

        def close(self) -> None:
            pass

    pool = OneWorker()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(pool=pool, time_limit=60), log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)

        def leave(path: str) -> None:  # send a request, then go away without reading the answer
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            time.sleep(0.3)
            s.close()

        leave("/api/mechanisms/laplace?eps=9&sensitivity=1")  # runs until cancelled
        leave("/mechanisms/laplace?eps=9&sensitivity=2")  # the page: waits for the worker, then runs
        import httpx

        t0 = time.monotonic()
        r = httpx.get(f"http://127.0.0.1:{port}/api/mechanisms/laplace?eps=1&sensitivity=1", timeout=10,
                      trust_env=False)
        assert r.status_code == 400 and r.json()["error"] == "Error: --eps: fake"
        assert time.monotonic() - t0 < 3
        assert pool.cancelled == 2
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_pool_stops_waiting_for_a_worker_when_cancelled(pool):
    import queue
    import threading

    from dpcalc.web.worker import Cancelled

    taken = []
    try:
        while True:
            taken.append(pool._idle.get_nowait())  # every worker busy
    except queue.Empty:
        pass
    cancel = threading.Event()
    threading.Timer(0.3, cancel.set).start()
    t0 = time.monotonic()
    try:
        with pytest.raises(Cancelled):
            pool.run(["laplace", "--eps", "1", "--json"], b"", time_limit=30, cancelled=cancel)
    finally:
        for w in taken:
            pool._idle.put(w)
    assert time.monotonic() - t0 < 2


def test_job_table_is_capped_and_only_for_long_pages(monkeypatch):
    """Jobs only for the pages declared long; finished jobs are forgotten after ``job_ttl`` and
    while their responses pass ``job_bytes`` (the oldest first); a running job is never dropped."""
    import dpcalc.web.app as web_app

    pool = _FakePool()
    with TestClient(create_app(pool=pool, job_ttl=600, job_bytes=400), base_url="http://127.0.0.1") as c:
        r = c.post("/api/jobs/mechanisms/laplace?eps=1&sensitivity=1")
        assert r.status_code == 400 and "'mechanisms/laplace'" in r.json()["error"]

        def finished_job() -> str:
            job = c.post("/api/jobs/mf?steps=10&eps=1&delta=1e-5").json()["job"]
            j, _ = _wait_job(c, job, 10)
            assert j["state"] == "error"
            return job

        first = finished_job()  # a response of ~150 bytes
        assert c.get(f"/api/jobs/{first}").status_code == 200
        second = finished_job()
        third = finished_job()  # three responses pass 400 bytes: the oldest is forgotten
        assert c.get(f"/api/jobs/{first}").status_code == 404
        assert c.get(f"/api/jobs/{second}").status_code == 200 and c.get(f"/api/jobs/{third}").status_code == 200
        pool.gate.clear()
        running = c.post("/api/jobs/mf?steps=10&eps=2&delta=1e-5").json()["job"]
        now = time.monotonic()
        monkeypatch.setattr(web_app.time, "monotonic", lambda: now + 601)  # ten minutes later
        r = c.get(f"/api/jobs/{second}")
        assert r.status_code == 404 and "10 minutes" in r.json()["error"]
        assert c.get(f"/api/jobs/{running}").json()["state"] == "running"
        monkeypatch.undo()
        pool.gate.set()
        assert _wait_job(c, running, 10)[0]["state"] == "error"


def test_a_worker_killed_while_idle_is_replaced_not_handed_out(client, pool):
    import os
    import signal

    nxt = pool._idle.queue[0]  # the worker the next request gets
    os.kill(nxt.proc.pid, signal.SIGKILL)
    nxt.proc.join(10)
    r = client.get("/api/mechanisms/laplace?eps=0.7&sensitivity=3")
    assert r.status_code == 200, r.text
    assert nxt not in pool._all


def test_allowed_hosts_on_every_interface_are_this_machines_names():
    import socket

    from dpcalc.web.app import allowed_hosts_for

    names = allowed_hosts_for("0.0.0.0")
    assert {"127.0.0.1", "localhost", "[::1]", socket.gethostname().lower()} <= set(names)
    assert "0.0.0.0" not in names and "evil.example" not in names
    assert allowed_hosts_for("192.168.1.5") == ("127.0.0.1", "localhost", "[::1]", "192.168.1.5")
    with TestClient(create_app(pool=_FakePool(), allowed_hosts=allowed_hosts_for("::")),
                    base_url="http://127.0.0.1") as c:
        assert c.get("/healthz", headers={"host": "evil.example"}).status_code == 403
        assert c.get("/healthz", headers={"host": f"{socket.gethostname()}:8765"}).status_code == 200
