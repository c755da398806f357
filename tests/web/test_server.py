"""``dpcalc serve`` (issue 30), the server side, through Starlette's TestClient: each page's result
is the CLI's own ``--json`` output for the same argv (run here with click's CliRunner); bad input
is the CLI's error line with the field it names; hostile requests get 4xx with a message and the
server keeps serving; cache, jobs (progress, cancel), the time budget, the security headers.
The browser tests are tests/web/test_browser*.py."""

from __future__ import annotations

import contextlib
import io
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
    with TestClient(create_app(pool=pool, time_limit=60)) as c:
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


def test_job_cancel_replaces_the_worker(client):
    r = client.post(f"/api/jobs/plan?{HEAVY_PLAN}")
    assert r.status_code == 202
    job = r.json()["job"]
    time.sleep(0.5)
    d = client.delete(f"/api/jobs/{job}")
    assert d.json()["state"] == "cancelled"
    j, _ = _wait_job(client, job, 10)
    assert j["state"] == "cancelled"
    assert client.get("/api/mechanisms/laplace?eps=0.7").status_code == 200


def test_bad_job_input_is_refused_at_once(client):
    r = client.post("/api/jobs/plan?eps=-1")
    assert r.status_code == 202
    j, _ = _wait_job(client, r.json()["job"], 30)
    assert j["state"] == "error" and j["status"] == 400 and j["response"]["field"] == "eps"
    assert client.post("/api/jobs/plan?bogus=1").status_code == 400


def test_time_budget(pool, client):
    with TestClient(create_app(pool=pool, time_limit=0.5)) as fast:
        t0 = time.monotonic()
        r = fast.get(f"/api/plan?{HEAVY_PLAN}")
        assert r.status_code == 503 and "time limit" in r.json()["error"]
        assert time.monotonic() - t0 < 10
        assert fast.get("/healthz").status_code == 200
    assert client.get("/api/mechanisms/laplace?eps=0.3").status_code == 200


def _run_snippet(code: str) -> float:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "<snippet>", "exec"), {})
    return float(out.getvalue().split()[0])


@pytest.mark.parametrize("path,query,main", [
    ("sigma", QUICK_START, lambda res: res["results"][0]["noise_multiplier"]),
    ("epsilon", "sigma=1&delta=1e-5&batch-size=256&dataset-size=60000&epochs=10",
     lambda res: res["results"][0]["epsilon"]),
    ("risk", "eps=1&delta=1e-5&fpr=0.01",
     lambda res: next(r["bound"] for r in res["results"] if r.get("quantity") == "tpr_at_fpr")),
    ("mechanisms/laplace", "eps=1&sensitivity=1&beta=0.05&dims=10000", lambda res: res["results"][0]["scale"]),
    ("mechanisms/gaussian", "eps=1&delta=1e-5&sensitivity=1", lambda res: res["results"][0]["noise_std"]),
])
def test_python_snippet_gives_the_same_number(client, path, query, main):
    body = client.get(f"/api/{path}?{query}").json()
    assert "import dpcalc" in body["python"]
    assert _run_snippet(body["python"]) == main(body["result"])


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
    finally:
        proc.terminate()
        proc.wait(20)
    bad = CliRunner().invoke(cli, ["serve", "--port", "70000"])
    assert bad.exit_code == 2 and "--port must be a whole number in [0, 65535], got 70000" in bad.stderr
