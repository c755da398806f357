"""A form submission → the CLI's argv (and the upload as its standard input), with the web
layer's own limits. Every value check beyond the limits is the CLI's: the argv is run by the
same click command, so validation and error text are the CLI's by construction.

Limits (refused before anything runs): at most :data:`MAX_FIELDS` fields, each value at most
:data:`MAX_VALUE` characters, a query string of at most :data:`MAX_QUERY` bytes, a request body
of at most :data:`MAX_BODY` bytes (an upload at most the page's cap); an unknown field name is
refused naming it; a value for a text option that looks like a file name is refused, and ``-``
(standard input) for any field but the upload (only an upload may feed a file option, and it is
held in memory). The root of that rule is in the workers: they run every command in
:func:`dpcalc._files.web_mode`, where no input file named in a field is ever opened.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass

from dpcalc.web.pages import UPLOAD_CAP, Page, alias_index, field_index

__all__ = ["FormError", "Submission", "build", "error_field", "MAX_FIELDS", "MAX_VALUE", "MAX_QUERY",
           "MAX_BODY"]

MAX_FIELDS = 100
MAX_VALUE = 200
MAX_QUERY = 8192
#: a multipart body: the upload (≤ 2 MB) plus the other fields
MAX_BODY = UPLOAD_CAP + 64 * 1024

_TRUE = ("on", "1", "true", "yes")
#: a value naming a file or directory (never given to a text option: only uploads feed files)
_PATHLIKE = re.compile(r"[/\\]|^[~.]|^[A-Za-z]:")


class FormError(Exception):
    """A request refused by the web layer (before the CLI runs).

    Attributes:
        status: the HTTP status (400, 413).
        message: one line, ``Error: ...`` as the CLI writes its errors.
        field: the form field concerned, or None.
    """

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message if message.startswith("Error: ") else "Error: " + message
        self.field = field


@dataclass(frozen=True)
class Submission:
    """What a form submission runs.

    Attributes:
        argv: the CLI words after ``dpcalc`` without ``--json`` (``("sigma", "--eps", "3", ...)``).
        stdin: the upload's bytes (b"" without one).
        upload_name: the uploaded file's name as the browser gave it, sanitised (for the CLI line).
        values: the submitted (field, value) pairs in order (empty values dropped), to refill the form.
    """

    argv: tuple[str, ...]
    stdin: bytes = b""
    upload_name: str | None = None
    values: tuple[tuple[str, str], ...] = ()

    def key(self, page: Page) -> tuple[str, tuple[str, ...], str]:
        """The cache key: page, argv, hash of the upload."""
        return (page.path, self.argv, hashlib.sha256(self.stdin).hexdigest())

    def cli_line(self) -> str:
        """The shell command giving the same result (``dpcalc ...``; the upload as a file name)."""
        words = ["dpcalc", *self.argv]
        if self.stdin and self.upload_name:
            words = [self.upload_name if w == "-" else w for w in words]
        return shlex.join(words)


def _short(text: str, n: int = 60) -> str:
    return repr(text if len(text) <= n else text[:n] + "…")


def _safe_name(name: str | None) -> str:
    base = re.split(r"[/\\]", name or "")[-1]
    base = re.sub(r"[^A-Za-z0-9._-]", "_", base)[:60].lstrip(".")
    return base or "upload.csv"


def build(page: Page, items: Iterable[tuple[str, str]], upload: tuple[str, bytes] | None = None,
          upload_field: str | None = None) -> Submission:
    """The submission of ``page`` for the (field, value) pairs ``items`` (in order).

    Args:
        page: the page.
        items: the submitted fields (query string or form body), order kept: repeated
            options (``compose``'s sequence, ``risk --fpr``) keep their order.
        upload: ``(file name, bytes)`` of the page's upload, if one was sent.
        upload_field: the field the upload came in (must be the page's upload field).

    Raises:
        FormError: too many fields, a value too long, an unknown field, a flag with a value
            other than on/off, a path-like value, a file option without an upload.
    """
    fields = field_index(page)
    items = list(items)
    if len(items) > MAX_FIELDS:
        raise FormError(400, f"too many fields: {len(items)} (at most {MAX_FIELDS})")
    argv: list[str] = list(page.command)
    values = []
    for name, value in items:
        f = fields.get(name)
        if f is None:
            raise FormError(400, f"unknown field {_short(name)} for dpcalc {' '.join(page.command)}", None)
        if len(value) > MAX_VALUE:
            raise FormError(400, f"{f.flag} is too long: {len(value):,} characters (at most {MAX_VALUE})", f.name)
        if "\x00" in value:
            raise FormError(400, f"{f.flag} must not contain a null character", f.name)
        if value == "":
            continue
        values.append((name, value))
        if f.kind == "flag":
            if value.lower() not in _TRUE:
                raise FormError(400, f"{f.flag} is an on/off switch: 'on' or empty, got {_short(value)}", f.name)
            argv.append(f.flag)
        elif f.kind == "file":
            raise FormError(400, f"{f.flag} takes an uploaded file, not a name (got {_short(value)})", f.name)
        elif f.kind == "choice" and f.choices and f.choices[0].startswith("--"):
            if value not in f.choices:
                raise FormError(400, f"{f.flag} must be one of {', '.join(f.choices)}, got {_short(value)}", f.name)
            argv.append(value)
        else:
            if value.strip() == "-":  # standard input: only the page's upload feeds it
                raise FormError(400, f"{f.flag} must not be '-' (standard input): only an uploaded file "
                                     "is read", f.name)
            if f.kind == "text" and _PATHLIKE.search(value):
                raise FormError(400, f"{f.flag} must not name a file or directory, got {_short(value)}", f.name)
            argv.extend([f.flag, value])
    stdin = b""
    name = None
    if upload is not None:
        if page.upload is None or upload_field != page.upload:
            raise FormError(400, f"unknown upload field {_short(upload_field or '')} "
                                 f"for dpcalc {' '.join(page.command)}", None)
        fname, data = upload
        cap = min(page.upload_cap, UPLOAD_CAP)
        if len(data) > cap:
            raise FormError(413, f"--{page.upload} upload is too large: {len(data):,} bytes (at most {cap:,})",
                            page.upload)
        if data:
            argv.extend([f"--{page.upload}", "-"])
            stdin, name = data, _safe_name(fname)
            values.append((page.upload, name))
    return Submission(tuple(argv), stdin, name, tuple(values))


_FLAG = re.compile(r"(?<![\w-])(--[A-Za-z0-9][A-Za-z0-9-]*|-[A-Za-z])(?![\w-])")


def error_field(page: Page, message: str) -> str | None:
    """The form field a CLI error line names: the first flag of the page's options in it
    (``--eps must be ...`` → ``eps``; click's ``Missing option '--eps'`` too), or None."""
    aliases = alias_index(page)
    for m in _FLAG.finditer(message):
        if m.group(1) in aliases:
            return aliases[m.group(1)]
    return None


def parse_query(raw: bytes) -> list[tuple[str, str]]:
    """The (name, value) pairs of a raw query string, order kept, blank values kept.

    Raises:
        FormError: 413 over :data:`MAX_QUERY` bytes; 400 over :data:`MAX_FIELDS` fields.
    """
    from urllib.parse import parse_qsl

    if len(raw) > MAX_QUERY:
        raise FormError(413, f"the query string is too large: {len(raw):,} bytes (at most {MAX_QUERY:,})")
    if raw.count(b"&") + raw.count(b";") >= MAX_FIELDS:
        raise FormError(400, f"too many fields (at most {MAX_FIELDS})")
    try:
        return parse_qsl(raw.decode("latin-1"), keep_blank_values=True, max_num_fields=MAX_FIELDS,
                         encoding="utf-8", errors="replace", separator="&")
    except ValueError:
        raise FormError(400, f"too many fields (at most {MAX_FIELDS})") from None
