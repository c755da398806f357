"""The ``dpcalc serve`` application (Starlette + Jinja2): pages, the JSON API, jobs, the cache and
the security headers. Needs the ``web`` extra (``pip install 'dpcalc[web]'``).

Routes: ``/`` (index), ``/healthz``, ``/static/...``, ``GET /<page>`` (the form; with a query
string also the result), ``POST /<page>`` (multipart, pages with an upload), ``GET|POST
/api/<page>`` (JSON), ``GET /api/<page>/plot`` (the curve the command's ``--plot`` draws: σ and ε
pages), ``POST /api/jobs/<page>``, ``GET|DELETE /api/jobs/<id>``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders, UploadFile
from starlette.formparsers import MultiPartParser
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    PlainTextResponse,
    Response,
)
from starlette.routing import Route

from dpcalc.web import views
from dpcalc.web.forms import (
    MAX_BODY,
    MAX_FIELDS,
    FormError,
    Submission,
    build,
    error_field,
    parse_query,
)
from dpcalc.web.pages import PAGES, Page, example_query, fields_of, page_for, sections
from dpcalc.web.snippets import python_snippet
from dpcalc.web.worker import (
    BUG,
    MEMORY_LIMIT,
    OUT_OF_MEMORY,
    Busy,
    Cancelled,
    TimedOut,
    WorkerDied,
    WorkerPool,
)

__all__ = ["create_app", "CSP", "ResultCache", "allowed_hosts_for"]

log = logging.getLogger("dpcalc.web")

HERE = Path(__file__).parent

#: Content-Security-Policy of every response. Styles allow 'unsafe-inline' ONLY because
#: Plotly.js injects its own <style> rules at run time; scripts are 'self' only (no inline code).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
       "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


class SecurityHeaders:
    """ASGI middleware: CSP, no sniffing, no referrer, no framing; no-store on the API."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: dict) -> None:
            if message["type"] == "http.response.start":
                h = MutableHeaders(scope=message)
                h["Content-Security-Policy"] = CSP
                h["X-Content-Type-Options"] = "nosniff"
                h["Referrer-Policy"] = "no-referrer"
                h["X-Frame-Options"] = "DENY"
                h["Cross-Origin-Opener-Policy"] = "same-origin"
                if scope.get("path", "").startswith("/api/"):
                    h["Cache-Control"] = "no-store"
            await send(message)

        await self.app(scope, receive, send_with_headers)


#: Host headers accepted by default (any port): the loopback names. A page of another site that
#: makes its own name resolve to 127.0.0.1 (DNS rebinding) sends its own name and is refused.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def allowed_hosts_for(host: str) -> tuple[str, ...]:
    """The Host header names a server bound to ``host`` answers to: the loopback names, ``host``
    itself, and — bound to every interface (``0.0.0.0``, ``::``) — this machine's host name, its
    fully qualified name and their addresses, and the address of the interface of the default
    route. Any other name is refused (DNS rebinding: another site's name made to resolve to this
    machine), whatever the address the server listens on."""
    import socket

    names = [*LOOPBACK_HOSTS, host]
    if host in ("0.0.0.0", "::", ""):
        for name in {socket.gethostname(), socket.getfqdn()}:
            names.append(name)
            with contextlib.suppress(OSError, UnicodeError):
                names += [info[4][0] for info in socket.getaddrinfo(name, None, proto=socket.IPPROTO_TCP)]
        for family, probe in ((socket.AF_INET, "192.0.2.1"), (socket.AF_INET6, "2001:db8::1")):
            with contextlib.suppress(OSError), socket.socket(family, socket.SOCK_DGRAM) as s:
                s.connect((probe, 9))  # a UDP "connection" sends nothing: it picks the route
                names.append(s.getsockname()[0])
    out = []
    for name in names:
        name = name.split("%", 1)[0].lower()  # no IPv6 zone in a Host header
        if name and name not in ("0.0.0.0", "::") and name not in out:
            out.append(name)
    return tuple(out)


def _host_name(value: str) -> str:
    """``host`` of a ``host[:port]`` header value (``[::1]:8765`` → ``[::1]``), lower case."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[: value.find("]") + 1] if "]" in value else value
    return value.split(":", 1)[0]


class HostAndOriginCheck:
    """ASGI middleware: refuse (403) a Host header outside ``allowed`` (None: any), and a
    state-changing request (POST, DELETE) whose Origin is another site (cross-site request
    forgery: another page's form starting computations here)."""

    def __init__(self, app: Any, allowed: tuple[str, ...] | None) -> None:
        self.app = app
        self.allowed = None if allowed is None else {_host_name(h) if ":" not in h or h.startswith("[")
                                                     else f"[{h.lower()}]" for h in allowed}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        reason = None
        if self.allowed is not None and _host_name(host) not in self.allowed:
            reason = "Error: this server answers only to its own address (Host header refused)"
        elif scope.get("method") not in ("GET", "HEAD") and "origin" in headers:
            origin = headers["origin"].lower()
            if origin == "null" or origin.split("://", 1)[-1].rstrip("/") != host.strip().lower():
                reason = "Error: a request from another site is refused (Origin does not match)"
        if reason is not None:
            await JSONResponse(_error_body(reason), status_code=403)(scope, receive, send)
            return
        await self.app(scope, receive, send)


class ResultCache:
    """A small LRU of responses keyed on (page, argv, upload hash), capped in entries and bytes."""

    def __init__(self, entries: int = 256, max_bytes: int = 32 * 2**20) -> None:
        self.entries, self.max_bytes = entries, max_bytes
        self._d: OrderedDict[Any, tuple[int, dict, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> tuple[int, dict] | None:
        with self._lock:
            hit = self._d.get(key)
            if hit is None:
                return None
            self._d.move_to_end(key)
            return hit[0], hit[1]

    def put(self, key: Any, status: int, body: dict) -> None:
        size = len(json.dumps(body))
        if size > self.max_bytes // 4:
            return
        with self._lock:
            if key in self._d:
                self._bytes -= self._d.pop(key)[2]
            self._d[key] = (status, body, size)
            self._bytes += size
            while len(self._d) > self.entries or self._bytes > self.max_bytes:
                self._bytes -= self._d.popitem(last=False)[1][2]

    def __len__(self) -> int:
        return len(self._d)


@dataclass
class Job:
    """A long computation run off the request (``POST /api/jobs/<page>``)."""

    id: str
    page: Page
    state: str = "running"
    progress: dict | None = None
    response: dict | None = None
    status: int = 0
    cancel: threading.Event = field(default_factory=threading.Event)
    created: float = field(default_factory=time.monotonic)
    #: when it finished (time.monotonic), and the size of its response in bytes
    finished: float | None = None
    size: int = 0

    def finish(self, state: str, status: int = 0, response: dict | None = None) -> None:
        """Record the end of the job (``state``: done, error, cancelled)."""
        self.status, self.response = status, response
        self.size = len(json.dumps(response)) if response is not None else 0
        self.finished = time.monotonic()
        self.state = state

    def as_json(self) -> dict:
        return {"job": self.id, "state": self.state, "progress": self.progress, "response": self.response,
                "status": self.status or None}


def _error_body(message: str, fld: str | None = None) -> dict:
    return {"ok": False, "error": message, "field": fld}


class Runner:
    """Runs submissions on the worker pool with the cache; maps outcomes to HTTP bodies."""

    def __init__(self, pool: WorkerPool, cache: ResultCache, time_limit: float) -> None:
        self.pool, self.cache, self.time_limit = pool, cache, time_limit

    def run(self, page: Page, sub: Submission, *, time_limit: float | None = None,
            progress: Any = None, cancelled: threading.Event | None = None) -> tuple[int, dict]:
        """``(status, body)`` of the /api/<page> response (blocking)."""
        key = sub.key(page)
        hit = self.cache.get(key)
        if hit is not None:  # the same argv and upload bytes; the upload's name may differ
            return hit[0], {**self._named(page, sub, hit[1]), "cached": True, "seconds": 0.0}
        limit = self.time_limit if time_limit is None else time_limit
        t0 = time.perf_counter()
        out = self._on_pool([*sub.argv, "--json"], sub.stdin, limit, progress=progress, cancelled=cancelled,
                            upload=page.upload if sub.stdin else None)
        if isinstance(out, tuple):
            return out
        seconds = time.perf_counter() - t0
        status, body = self._respond(page, sub, out.code, out.stdout, out.stderr)
        body["seconds"] = round(seconds, 4)
        if status in (200, 400, 422):
            self.cache.put(key, status, body)
        return status, {**body, "cached": False}

    @staticmethod
    def _named(page: Page, sub: Submission, body: dict) -> dict:
        """``body`` with its ``command`` and ``python`` rebuilt from ``sub`` (a cached body was made
        for another submission of the same inputs: its upload may have had another file name)."""
        body = dict(body)
        if "command" in body:
            body["command"] = sub.cli_line()
        if "python" in body and body.get("ok"):
            body["python"] = python_snippet(page.path, sub.argv, body["result"], sub.upload_name)
        return body

    def run_plot(self, page: Page, sub: Submission, *, time_limit: float | None = None) -> tuple[int, dict]:
        """``(status, body)`` of ``GET /api/<page>/plot`` (blocking): ``{"ok": true, "plot": <the
        Plotly figure of the series the command's --plot draws>, "cached", "seconds"}``; errors
        as :meth:`run` (the same parser, the same ``Error: ...`` line and status). Cached like
        results, with the same time budget."""
        key = ("plot", *sub.key(page))
        hit = self.cache.get(key)
        if hit is not None:
            return hit[0], {**hit[1], "cached": True, "seconds": 0.0}
        limit = self.time_limit if time_limit is None else time_limit
        t0 = time.perf_counter()
        out = self._on_pool(list(sub.argv), sub.stdin, limit, kind="plot",
                            upload=page.upload if sub.stdin else None)
        if isinstance(out, tuple):
            return out
        if out.code == 0:
            try:
                fig = views.curve_figure(json.loads(out.stdout))
            except (ValueError, KeyError, TypeError):
                log.error("plot series of dpcalc %s are not as expected: %r", " ".join(sub.argv), out.stdout[:300])
                return 500, _error_body("Error: internal error: the plot series are not as expected")
            status, body = 200, {"ok": True, "plot": fig}
        else:
            status, body = self._failure(page, sub, out.code, out.stderr)
        body["seconds"] = round(time.perf_counter() - t0, 4)
        if status in (200, 400, 422):
            self.cache.put(key, status, body)
        return status, {**body, "cached": False}

    def _on_pool(self, argv: list[str], stdin: bytes, limit: float, **kw: Any) -> Any:
        """The pool's :class:`~dpcalc.web.worker.Outcome`, or ``(status, body)`` when the job did
        not finish (over the budget, no free worker, the worker died)."""
        try:
            return self.pool.run(argv, stdin, time_limit=limit, **kw)
        except TimedOut:
            return 503, _error_body(f"Error: the computation took longer than the time limit of {limit:g} s "
                                    "and was stopped (dpcalc serve --time-limit; or run the command in a terminal)")
        except Busy:
            return 503, _error_body(f"Error: the server is busy: no worker was free within {limit:g} s; try again")
        except WorkerDied:
            return 503, _error_body("Error: the computation stopped unexpectedly (the worker process ended, "
                                    "e.g. out of memory); try smaller inputs")

    def _respond(self, page: Page, sub: Submission, code: int, stdout: str, stderr: str) -> tuple[int, dict]:
        if code == 0:
            try:
                result = json.loads(stdout)
            except ValueError:
                log.error("dpcalc %s: exit 0 but stdout is not one JSON object: %r", " ".join(sub.argv),
                          stdout[:300])
                return 500, _error_body("Error: internal error: the command's output is not JSON")
            return 200, {"ok": True, "result": result, "command": sub.cli_line(),
                         "python": python_snippet(page.path, sub.argv, result, sub.upload_name),
                         "plot": views.figure(page.plot, result, sub.argv)}
        return self._failure(page, sub, code, stderr)

    def _failure(self, page: Page, sub: Submission, code: int, stderr: str) -> tuple[int, dict]:
        """``(status, body)`` of a job that exited with ``code`` ≠ 0."""
        if code == OUT_OF_MEMORY:
            return 503, _error_body(f"Error: the computation needs more memory than a worker may use "
                                    f"({MEMORY_LIMIT / 2**30:g} GiB); try smaller inputs")
        if code == BUG:
            log.error("dpcalc %s raised:\n%s", " ".join(sub.argv), stderr)
            return 500, _error_body(stderr.splitlines()[0] if stderr else "Error: internal error")
        lines = [ln for ln in stderr.splitlines() if ln.startswith("Error: ")]
        message = lines[-1] if lines else (stderr.strip().splitlines() or ["Error: failed"])[-1]
        status = 422 if code == 1 else 400
        return status, {**_error_body(message, error_field(page, message)), "command": sub.cli_line()}


async def _read_body(request: Request, cap: int) -> bytes:
    """The request body, refused with 413 as soon as it passes ``cap`` bytes (never buffered whole)."""
    cl = request.headers.get("content-length")
    if cl is not None and (not cl.isdigit() or int(cl) > cap):
        raise FormError(413, f"the request is too large: {cl[:20]} bytes (at most {cap:,})")
    chunks, n = [], 0
    async for chunk in request.stream():
        n += len(chunk)
        if n > cap:
            raise FormError(413, f"the request is too large: more than {cap:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _submission(request: Request, page: Page) -> Submission:
    """The submission of a request: the query string (GET) or the body (POST, form-encoded or
    multipart), checked against the limits."""
    items = parse_query(request.scope.get("query_string", b""))
    upload = None
    upload_field = None
    if request.method == "POST":
        body = await _read_body(request, MAX_BODY)
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("multipart/form-data"):
            form = await _parse_multipart(request, body)
            for name, value in form.multi_items():
                if isinstance(value, UploadFile):
                    data = await value.read()
                    if value.filename or data:
                        if upload is not None:
                            raise FormError(400, "at most one file may be uploaded")
                        upload, upload_field = (value.filename or "upload.csv", data), name
                else:
                    items.append((name, value))
            await form.close()
        elif body:
            items.extend(parse_query(body) if len(body) <= 8192 else _too_large(len(body)))
    return build(page, items, upload, upload_field)


async def _run_watched(request: Request, run: Any, page: Page, sub: Submission) -> tuple[int, dict] | None:
    """``run(page, sub, cancelled=event)`` in a thread while the client is watched: when it goes
    away (the browser left the page, the request was aborted) the job is cancelled — it stops
    waiting for a worker, or its worker is stopped and replaced — and None is returned."""
    cancel = threading.Event()
    out: tuple[int, dict] | None = None

    async def watch(scope: anyio.CancelScope) -> None:
        while not scope.cancel_called:
            if await request.is_disconnected():
                cancel.set()
                return
            await anyio.sleep(0.1)

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch, tg.cancel_scope)
        try:
            out = await anyio.to_thread.run_sync(lambda: run(page, sub, cancelled=cancel))
        except Cancelled:
            out = None
        finally:
            tg.cancel_scope.cancel()
    return None if cancel.is_set() else out


class _InMemoryMultiPartParser(MultiPartParser):
    """Starlette's multipart parser with the file parts held in memory: the body is already
    buffered (at most :data:`MAX_BODY` bytes), so no upload is ever spooled to a temporary file
    on disk (starlette spools file parts over 1 MB by default)."""

    spool_max_size = MAX_BODY + 1


async def _parse_multipart(request: Request, body: bytes) -> Any:
    """The form of the multipart ``body`` (already read; at most one file, :data:`MAX_FIELDS`
    fields, 64 kB a field), parsed in memory.

    Raises:
        FormError: 400 for a malformed body or one over those limits.
    """
    async def replay():  # type: ignore[no-untyped-def]
        yield body

    parser = _InMemoryMultiPartParser(request.headers, replay(), max_files=1, max_fields=MAX_FIELDS,
                                      max_part_size=64 * 1024)
    try:
        return await parser.parse()
    except Exception as e:  # MultiPartException, or a ValueError of a malformed header
        raise FormError(400, f"the form data cannot be read: {str(getattr(e, 'message', e))[:100]}") from None


def _too_large(n: int) -> list:
    raise FormError(413, f"the form body is too large: {n:,} bytes (at most 8,192 without an upload)")


def create_app(*, workers: int = 2, time_limit: float = 30.0, pool: WorkerPool | None = None,
               cache_entries: int = 256, allowed_hosts: tuple[str, ...] | None = LOOPBACK_HOSTS,
               job_ttl: float = 600.0, job_count: int = 200, job_bytes: int = 64 * 2**20) -> Starlette:
    """The ASGI application.

    Args:
        workers: worker processes (ignored when ``pool`` is given).
        time_limit: seconds allowed per request (jobs: 4 times as long).
        pool: an existing :class:`WorkerPool` (tests share one).
        cache_entries: LRU size.
        allowed_hosts: host names accepted in the Host header (any port); None: any.
        job_ttl: seconds a finished job (and its response) is kept.
        job_count, job_bytes: at most this many jobs, and finished responses of at most this
            many bytes in all, are kept (the oldest finished jobs are forgotten first).
    """
    own_pool = pool is None
    warm = sorted({p.command[0] for p in PAGES})
    pool = pool or WorkerPool(workers, warm=warm)
    runner = Runner(pool, ResultCache(cache_entries), time_limit)
    jobs: OrderedDict[str, Job] = OrderedDict()
    job_slots = threading.BoundedSemaphore(max(1, pool.size - 1))
    plot_slots = threading.BoundedSemaphore(max(1, pool.size - 1))
    jobs_lock = threading.Lock()
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(HERE / "templates")),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    plotly_js = _plotly_path()
    static = {"app.js": (HERE / "static" / "app.js", "text/javascript"),
              "style.css": (HERE / "static" / "style.css", "text/css"),
              "plotly.min.js": (plotly_js, "text/javascript")}

    def page_or_404(path: str) -> Page | None:
        return page_for(path.strip("/"))

    def json_error(status: int, message: str, fld: str | None = None) -> JSONResponse:
        return JSONResponse(_error_body(message, fld), status_code=status)

    async def index(request: Request) -> Response:
        html = env.get_template("index.html").render(sections=sections(), example_query=example_query)
        return HTMLResponse(html)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok")

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static or static[name][0] is None:
            return PlainTextResponse("not found", status_code=404)
        path, media = static[name]
        return FileResponse(path, media_type=media, headers={"Cache-Control": "public, max-age=3600"})

    async def page_submission(request: Request, *, curve: bool = False):
        """The page a request names and its parsed inputs, or the error response (404 for no
        such page — or no curve, with ``curve`` —, the form's 4xx, 400 for no inputs)."""
        page = page_or_404(request.path_params["page"])
        if page is None or (curve and not page.curve):
            what = "curve for page" if curve else "page"
            return None, json_error(404, f"Error: no {what} {request.path_params['page'][:60]!r}")
        try:
            sub = await _submission(request, page)
        except FormError as e:
            return None, json_error(e.status, e.message, e.field)
        if len(sub.argv) == len(page.command):
            return None, json_error(400, "Error: no inputs given")
        return (page, sub), None

    async def api(request: Request) -> Response:
        got, refused = await page_submission(request)
        if refused is not None:
            return refused
        page, sub = got
        done = await _run_watched(request, runner.run, page, sub)
        if done is None:
            return Response(status_code=204)
        status, body = done
        return JSONResponse(body, status_code=status)

    async def api_plot(request: Request) -> Response:
        got, refused = await page_submission(request, curve=True)
        if refused is not None:
            return refused
        page, sub = got
        # curves take at most all workers but one (the results of the pages always get one), and a
        # curve whose page has moved on (the browser aborted the request) is never started
        hit = runner.cache.get(("plot", *sub.key(page)))
        waited = 0.0
        while hit is None and not plot_slots.acquire(blocking=False):
            if await request.is_disconnected():
                return Response(status_code=204)
            if waited >= runner.time_limit:
                return json_error(503, f"Error: the server is busy: no worker was free within "
                                       f"{runner.time_limit:g} s; try again")
            await anyio.sleep(0.1)
            waited += 0.1
        try:
            status, body = await anyio.to_thread.run_sync(runner.run_plot, page, sub)
        finally:
            if hit is None:
                plot_slots.release()
        return JSONResponse(body, status_code=status)

    async def page_view(request: Request) -> Response:
        page = page_or_404(request.path_params["page"])
        if page is None:
            return HTMLResponse(env.get_template("index.html").render(
                sections=sections(), example_query=example_query, missing=request.url.path[:80]), status_code=404)
        status, body, values = 200, None, []
        try:
            sub = await _submission(request, page)
            values = list(sub.values)
            if len(sub.argv) > len(page.command):
                done = await _run_watched(request, runner.run, page, sub)
                if done is None:
                    return Response(status_code=204)
                status, body = done
        except FormError as e:
            status, body = e.status, _error_body(e.message, e.field)
        html = env.get_template("page.html").render(
            page=page, fields=fields_of(page), values=_values_map(values), body=body,
            tables=views.tables(body["result"]) if body and body.get("ok") else [],
            sources=views.sources(body["result"]) if body and body.get("ok") else [],
            notes=views.notes(body["result"]) if body and body.get("ok") else [],
            warnings=(body["result"].get("warnings") or []) if body and body.get("ok") else [],
            result_json=json.dumps(body["result"], indent=2, ensure_ascii=False) if body and body.get("ok") else "",
            plot_json=_script_json(body.get("plot")) if body and body.get("ok") and body.get("plot") else "",
            example=example_query(page))
        return HTMLResponse(html, status_code=status)

    async def job_start(request: Request) -> Response:
        got, refused = await page_submission(request)
        if refused is not None:
            return refused
        page, sub = got
        if not page.long:
            return json_error(400, f"Error: the page {page.path!r} runs as a request, not as a job "
                                   f"(GET /api/{page.path})")
        job = Job(secrets.token_urlsafe(12), page)
        with jobs_lock:
            prune_jobs()
            running = sum(1 for j in jobs.values() if j.state == "running")
            if running >= 16:
                return json_error(503, "Error: too many jobs are running; wait for one to finish or cancel it")
            jobs[job.id] = job

        def progress(done: int, total: int) -> None:
            job.progress = {"done": done, "total": total}

        def work() -> None:
            # jobs take at most all workers but one, so that the pages' quick requests still get one
            while not job_slots.acquire(timeout=0.1):
                if job.cancel.is_set():
                    job.finish("cancelled")
                    return
            try:
                if job.cancel.is_set():
                    job.finish("cancelled")
                    return
                status, body = runner.run(page, sub, time_limit=4 * runner.time_limit, progress=progress,
                                          cancelled=job.cancel)
            except Cancelled:
                job.finish("cancelled")
                return
            except Exception:  # a bug: logged, the job reports it
                log.exception("job %s failed", job.id)
                job.finish("error", 500, _error_body("Error: internal error"))
                return
            finally:
                job_slots.release()
            if job.cancel.is_set():  # cancelled as it finished: it stays cancelled
                job.finish("cancelled")
                return
            job.finish("done" if status == 200 else "error", status, body)

        threading.Thread(target=work, name=f"dpcalc-job-{job.id}", daemon=True).start()
        return JSONResponse({"job": job.id}, status_code=202)

    def prune_jobs() -> None:
        """Forget finished jobs older than ``job_ttl``, then the oldest finished ones while there
        are more than ``job_count`` jobs or their responses pass ``job_bytes`` (call with
        ``jobs_lock`` held)."""
        now = time.monotonic()
        for k in [k for k, j in jobs.items() if j.finished is not None and now - j.finished > job_ttl]:
            jobs.pop(k)
        kept = sum(j.size for j in jobs.values())
        for k in [k for k, j in jobs.items() if j.finished is not None]:
            if len(jobs) <= job_count and kept <= job_bytes:
                break
            kept -= jobs.pop(k).size

    async def job_get(request: Request) -> Response:
        with jobs_lock:
            prune_jobs()
            job = jobs.get(request.path_params["id"])
        if job is None:
            return json_error(404, f"Error: no such job (a finished job is kept {job_ttl / 60:g} minutes)")
        if request.method == "DELETE":
            if job.state == "running":
                job.cancel.set()
                job.finish("cancelled")
            return JSONResponse(job.as_json())
        return JSONResponse(job.as_json())

    async def shutdown() -> None:
        if own_pool:
            pool.close()

    routes = [
        Route("/", index),
        Route("/healthz", healthz),
        Route("/favicon.ico", lambda request: Response(status_code=204)),
        Route("/static/{name}", static_file),
        Route("/api/jobs/{page:path}", job_start, methods=["POST"]),
        Route("/api/jobs/{id}", job_get, methods=["GET", "DELETE"]),
        Route("/api/{page:path}/plot", api_plot, methods=["GET"]),
        Route("/api/{page:path}", api, methods=["GET", "POST"]),
        Route("/{page:path}", page_view, methods=["GET", "POST"]),
    ]
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):  # type: ignore[no-untyped-def]
        yield
        await shutdown()

    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(HostAndOriginCheck, allowed=allowed_hosts)
    app.add_middleware(SecurityHeaders)
    app.state.pool = pool
    app.state.runner = runner
    app.state.jobs = jobs
    return app


def _values_map(values: list[tuple[str, str]]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in values:
        out.setdefault(k, v)
    return out


def _script_json(obj: Any) -> str:
    """JSON safe inside <script type="application/json"> (no '</' can close the element)."""
    return json.dumps(obj).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _plotly_path() -> Path | None:
    try:
        import plotly
    except ImportError:  # pragma: no cover - the web extra installs it
        return None
    p = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    return p if p.is_file() else None
