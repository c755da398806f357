"""``dpcalc serve``: the calculator as a local web page (optional extra ``web``).

A second front end over the CLI's own command definitions: each page is one CLI command, its
form is generated from the click options (:mod:`dpcalc.web.pages`), a submission becomes the
CLI's argv (:mod:`dpcalc.web.forms`) and is run by the same click command with ``--json`` in a
persistent worker process (:mod:`dpcalc.web.worker`). Validation, error text and results are
therefore the CLI's by construction. The web layer does no mathematics (import-linter contract
in pyproject.toml): tables and plots are drawn from the CLI's JSON (:mod:`dpcalc.web.views`).

Starlette, Jinja2 and uvicorn are imported only by :mod:`dpcalc.web.app` and the ``serve``
command, never at ``dpcalc`` start-up.
"""
