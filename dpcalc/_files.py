"""The one safe reader of user-named input files (score lists, spec files, membership guesses).

A file named on the command line may be anything: a device that never ends (``/dev/zero``), a
FIFO that blocks, a directory, a multi-gigabyte file. :func:`read_input_file` opens it without
blocking, checks the *opened* file (no race between check and read), accepts regular files
only, and reads at most ``max_bytes`` (stating the limit when it refuses).
"""

from __future__ import annotations

import os
import stat
import sys

from dpcalc.errors import ParameterError

__all__ = ["read_input_file", "open_input_file"]


def _size(n: int) -> str:
    return f"{n:,} bytes" if n < 10**6 else f"{n / 1e6:.4g} MB"


def read_input_file(path: str, *, option: str, max_bytes: int) -> bytes:
    """The bytes of a user-named input file (or ``-`` for standard input), read safely.

    Args:
        path: the file name as typed (``-``: standard input, read up to ``max_bytes``).
        option: the glossary name of the option that named it (``scores``, ``spec``,
            ``guesses``), used in messages as ``--option``.
        max_bytes: the size limit, in bytes (stated in the error).

    Returns:
        The file's bytes (at most ``max_bytes``).

    Raises:
        ParameterError: empty name or a name containing a null byte; missing or unreadable; not a regular file (a directory,
            a device such as /dev/zero, a FIFO); larger than ``max_bytes``.
    """
    flag = "--" + option.lstrip("-").replace("_", "-")
    name = option.lstrip("-").replace("-", "_")
    limit = f"a regular file of at most {_size(max_bytes)}"
    if path == "":
        raise ParameterError(name, "a file name", path, message=f"{flag} must be a file name, got ''")
    if path == "-":
        stream = getattr(sys.stdin, "buffer", None)
        data = stream.read(max_bytes + 1) if stream is not None else sys.stdin.read(max_bytes + 1).encode()
        if len(data) > max_bytes:
            raise ParameterError(name, limit, path, message=f"{flag} on standard input is too large: "
                                 f"more than the limit of {_size(max_bytes)}")
        return data
    fd, _ = _open_regular(path, flag=flag, name=name, max_bytes=max_bytes)
    try:
        with os.fdopen(fd, "rb", closefd=True) as fh:
            fd = -1
            data = fh.read(max_bytes + 1)
    except OSError as e:
        raise ParameterError(name, "a readable regular file", path,
                             message=f"{flag} {path!r} cannot be read: {e.strerror or e}") from None
    finally:
        if fd >= 0:
            os.close(fd)
    if len(data) > max_bytes:  # grew while being read
        raise ParameterError(name, limit, path, message=f"{flag} {path!r} is too large: more than "
                             f"the limit of {_size(max_bytes)}")
    return data


def open_input_file(path: str, *, option: str, max_bytes: int):
    """A user-named input file opened for streaming (binary), with the checks of
    :func:`read_input_file`: regular file (no device, FIFO or directory), at most ``max_bytes``
    (checked on the opened file). For inputs too large to hold as bytes (``dpcalc pate
    --votes``: 10⁶ rows and more), read in chunks by the caller. Standard input is not accepted.

    Returns:
        ``(file object, size in bytes)``; the caller closes the file.

    Raises:
        ParameterError: as :func:`read_input_file`, and for ``-``.
    """
    flag = "--" + option.lstrip("-").replace("_", "-")
    name = option.lstrip("-").replace("-", "_")
    if path in ("", "-"):
        raise ParameterError(name, "a file name", path, message=f"{flag} must name a regular file, got {path!r}")
    fd, st = _open_regular(path, flag=flag, name=name, max_bytes=max_bytes)
    try:
        fh = os.fdopen(fd, "rb", closefd=True)
    except BaseException:
        os.close(fd)
        raise
    return fh, int(st.st_size)


def _open_regular(path: str, *, flag: str, name: str, max_bytes: int) -> tuple[int, os.stat_result]:
    """Open ``path`` read-only without blocking and check it (the checks of both readers above):
    a file name without a null byte, readable, a regular file (no directory, device or FIFO), at
    most ``max_bytes``. Returns the descriptor (the caller closes it) and its stat.

    Raises:
        ParameterError: naming ``flag`` (e.g. ``--spec``) and the reason.
    """
    limit = f"a regular file of at most {_size(max_bytes)}"
    if "\x00" in path:  # os.open would raise a bare ValueError ("embedded null byte")
        raise ParameterError(name, "a file name", path,
                             message=f"{flag} {path!r} is not a valid file name: it contains a null byte")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as e:
        raise ParameterError(name, "a readable regular file", path,
                             message=f"{flag} {path!r} cannot be read: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a device"
                    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a FIFO"
                    if stat.S_ISFIFO(st.st_mode) else "not a regular file")
            raise ParameterError(name, "a regular file", path,
                                 message=f"{flag} {path!r} is not a regular file ({kind}); name a regular file")
        if st.st_size > max_bytes:
            raise ParameterError(name, limit, path, message=f"{flag} {path!r} is too large: "
                                 f"{_size(st.st_size)}, the limit is {_size(max_bytes)}")
    except BaseException:
        os.close(fd)
        raise
    return fd, st
