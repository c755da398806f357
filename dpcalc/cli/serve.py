"""``dpcalc serve``: the calculator as a local web page (needs the ``web`` extra).

Starlette, uvicorn and Jinja2 are imported when the command runs, never when dpcalc starts
(tests/test_imports.py): this module only declares the command.
"""

from __future__ import annotations

import click

from dpcalc.cli.options import Number, StrictCommand, example_epilog, number_option
from dpcalc.errors import ParameterError

#: the modules of the web extra
WEB_MODULES = ("starlette", "uvicorn", "jinja2", "multipart", "plotly")

LOOPBACK = ("127.0.0.1", "localhost", "::1")

PORT = Number("[0, 65535]", whole=True, domain_text="a whole number in [0, 65535]")
WORKERS = Number("[1, 64]", whole=True, domain_text="a whole number in [1, 64]")
TIME_LIMIT = Number("(0, 86400]", domain_text="a number of seconds in (0, 86400]")


def _require_web() -> None:
    import importlib.util

    missing = [m for m in WEB_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        raise click.UsageError(
            f"dpcalc serve needs the web extra ({', '.join(missing)} not installed): pip install 'dpcalc[web]'")


@click.command("serve", cls=StrictCommand, epilog=example_epilog(
    "dpcalc serve",
    "dpcalc serve --port 0 --workers 2 --time-limit 60",
))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on. Anything but the loopback address exposes the calculator to the "
                   "network (a warning is printed): it runs computations for anyone who can reach it. "
                   "Requests must name this machine (a loopback name, the address given, or with "
                   "0.0.0.0 / :: this machine's host name or address); other names are refused.")
@number_option("--port", kind=PORT, default=8765, show_default=True,
               help="TCP port (0: a free port, printed).")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default web browser.")
@number_option("--workers", kind=WORKERS, default=2, show_default=True,
               help="Worker processes running the computations (each a persistent Python process).")
@number_option("--time-limit", kind=TIME_LIMIT, default=30.0, show_default=True,
               help="Seconds allowed per request (a long job from the page: 4 times as long); over it the "
                    "worker is stopped and replaced and the request gets 503.")
def serve_command(host, port, open_browser, workers, time_limit):
    """Serve the calculator as a local web page (forms, plots, copy as command or Python).

    Every page is one dpcalc command: its fields are the command's options, the result is the
    command's --json output, an error is the command's error line. Binds 127.0.0.1 by default.
    Needs the web extra: pip install 'dpcalc[web]'.
    """
    _require_web()
    if not host or any(c.isspace() for c in host):
        raise ParameterError("host", "an address", host, message=f"--host must be an address, got {host!r}")
    import socket

    import uvicorn

    from dpcalc.web.app import create_app

    if host not in LOOPBACK:
        click.echo(f"Warning: --host {host} is not the loopback address: anyone who can reach this machine "
                   "can use the calculator (and its CPU); there is no authentication.", err=True)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket says it is TCP; without it every response on a kept-alive connection waits
    # ~40 ms for Nagle's algorithm and the peer's delayed ACK (measured: /healthz 44 ms → 1.5 ms)
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as e:
        sock.close()
        raise ParameterError("port", "a free port", port,
                             message=f"--port {port} on {host} cannot be used: {e.strerror or e}") from None
    real_port = sock.getsockname()[1]
    from dpcalc.web.app import allowed_hosts_for

    # the loopback names, the address asked for, and on every interface (0.0.0.0, ::) this
    # machine's names and addresses: never any name (DNS rebinding)
    allowed = allowed_hosts_for(host)
    app = create_app(workers=workers, time_limit=time_limit, allowed_hosts=allowed)
    shown = f"[{host}]" if ":" in host else host
    url = f"http://{shown}:{real_port}/"
    # at most 100 connections at once (more get 503 from uvicorn): each waits for a worker in a thread
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=2,
                            limit_concurrency=100)
    server = uvicorn.Server(config)

    startup = server.startup

    async def announced_startup(sockets=None):
        await startup(sockets=sockets)
        click.echo(f"dpcalc serve: {url} (Ctrl-C to stop)", err=True)
        if open_browser:
            import webbrowser

            webbrowser.open(url)

    server.startup = announced_startup
    try:
        server.run(sockets=[sock])
    finally:
        app.state.pool.close()
        sock.close()
