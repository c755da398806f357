"""The one safe reader of user-named input files and the one atomic writer of output files.

A file named on the command line may be anything: a device that never ends (``/dev/zero``), a
FIFO that blocks, a directory, a multi-gigabyte file. :func:`read_input_file` opens it without
blocking, checks the *opened* file (no race between check and read), accepts regular files
only, and reads at most ``max_bytes`` (stating the limit when it refuses).

:func:`atomic_write` writes every file dpcalc produces (plots, ``--save-model``, ``--per-query``,
checkpoints, the trainer's ledger, the ScatterNet feature cache): a temporary file in the target's
directory, flushed and fsynced, given the mode a plain ``open()`` would give (0666 minus the umask,
not mkstemp's 0600; owner-only on request), then ``os.replace`` d onto the target and the directory
fsynced. A reader sees the old file or the new one, never half of one; an error or an interrupt
leaves nothing behind; a target that exists and is not a regular file (a device node such as
``/dev/null``, a directory, a FIFO) is refused, never replaced.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from collections.abc import Callable
from typing import IO, Any

from dpcalc.errors import ParameterError

__all__ = ["read_input_file", "open_input_file", "atomic_write", "atomic_write_bytes", "check_output_target",
           "web_mode"]


#: standard input given to :func:`open_input_file` is held in memory: at most this many bytes
STDIN_MAX_BYTES = 256 * 2**20


#: ``dpcalc serve``'s worker processes (:func:`web_mode`): ``{"on": True, "upload": <the option
#: whose ``-`` is the page's upload, or None>}``; outside the web page ``on`` is False
_WEB: dict = {"on": False, "upload": None}


def web_mode(upload: str | None) -> None:
    """Switch this process into the web page's mode (``dpcalc serve``'s workers call it before
    every job; it is never switched off): every user-named input file is refused, whatever its
    name — a form field's text never reaches the file system — and ``-`` (standard input, which
    holds the upload) is read only for the option ``upload``.

    Args:
        upload: the option of the page's upload (``scores``, ``--spec``...), or None (this job has
            no upload: ``-`` is refused too).
    """
    _WEB["on"] = True
    _WEB["upload"] = None if upload is None else upload.lstrip("-").replace("-", "_")


def _web_check(path: str, flag: str, name: str) -> None:
    """In :func:`web_mode`, refuse any input file but the upload (``-`` for the upload's option)."""
    if not _WEB["on"] or (path == "-" and _WEB["upload"] == name):
        return
    hint = "upload it" if _WEB["upload"] == name else "run the command in a terminal to read a file"
    raise ParameterError(name, "an uploaded file", path,
                         message=f"{flag}: files cannot be named on the web page; {hint}")


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
    _web_check(path, flag, name)
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
    --votes``: 10⁶ rows and more), read in chunks by the caller. ``-``: standard input, read
    whole into memory by :func:`read_input_file` (at most :data:`STDIN_MAX_BYTES` or
    ``max_bytes``, the smaller; ``dpcalc serve`` passes an upload this way).

    Returns:
        ``(file object, size in bytes)``; the caller closes the file.

    Raises:
        ParameterError: as :func:`read_input_file`.
    """
    flag = "--" + option.lstrip("-").replace("_", "-")
    name = option.lstrip("-").replace("-", "_")
    _web_check(path, flag, name)
    if path == "-":
        import io

        data = read_input_file(path, option=option, max_bytes=min(max_bytes, STDIN_MAX_BYTES))
        return io.BytesIO(data), len(data)
    if path == "":
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
    _web_check(path, flag, name)
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


# -- writing ---------------------------------------------------------------------------------------

def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")


def _flag_name(option: str | None) -> tuple[str, str]:
    if option is None:
        return "output file", "path"
    return "--" + option.lstrip("-"), option.lstrip("-").replace("-", "_")


def check_output_target(path: str | os.PathLike, *, option: str | None = None,
                        what: str = "a regular file", probe: bool = False) -> str:
    """Refuse an output target that cannot be (re)written as a regular file, before any work.

    Args:
        path: the file to write.
        option: the option that named it (``--plot``, ``--save-model``, ...), used in messages;
            None for files dpcalc names itself (messages say "output file").
        what: how to describe the expected file in the message (e.g. "a PNG file").
        probe: also create and remove an empty temporary file in the target's directory, as
            :func:`atomic_write` will (a read-only file system, a directory without write
            permission, a pseudo-file system such as /proc are then refused now, not after the
            work — e.g. before a ledger is charged).

    Returns:
        ``path`` as a string.

    Raises:
        ParameterError: empty path or a null byte in it; its directory missing or not a
            directory; the path an existing non-regular file (a device, a directory, a FIFO, ...);
            with ``probe``, no file can be created in the directory.
    """
    flag, name = _flag_name(option)
    path = os.fspath(path)
    if not path:
        raise ParameterError(name, "", path, message=f"{flag} needs a file name, got an empty path")
    if "\x00" in path:
        raise ParameterError(name, "", path, message=f"{flag} {path!r} is not a valid file name: it contains "
                             "a null byte")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        state = "does not exist" if not os.path.exists(directory) else "is not a directory"
        raise ParameterError(name, "", path, message=f"{flag} {path}: the directory {directory} {state}")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ParameterError(name, "", path, message=f"{flag} {path}: {e.strerror}") from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise ParameterError(name, "", path, message=f"{flag} {path} exists and is not a regular file "
                             f"({_kind(st.st_mode)}); give the name of {what} to write")
    if probe:
        import tempfile  # here, not at the top: it costs ~5 ms of every command's start-up (docs/design.md §2.3)

        try:
            fd, tmp = tempfile.mkstemp(prefix=".dpcalc-probe-", dir=directory)
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise ParameterError(name, "", path, message=f"{flag} {path} cannot be written: no file can be "
                                 f"created in {directory} ({e.strerror or e})") from None
    return path


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _fsync_dir(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - not supported on every platform
        return
    try:
        with contextlib.suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write: Callable[[IO[bytes]], Any], *, option: str | None = None,
                 sync: bool = True, private: bool = False, make_parents: bool = False,
                 what: str = "a regular file") -> None:
    """Write a file atomically: ``write(f)`` fills a temporary file in the target's directory, which
    is flushed, fsynced (``sync``), given its final mode and ``os.replace`` d onto ``path``.

    Args:
        path: the target file.
        write: called once with the temporary file, opened for writing in binary mode.
        option: the option that named the target (messages; errors become one-line
            :class:`ParameterError` s naming it). None: dpcalc's own files (an OS error propagates).
        sync: fsync the file before the rename and the directory after it (False for files
            rewritten at every training step, whose page-cache copy survives a killed process).
        private: mode 0600 (owner only) instead of 0666 minus the umask.
        make_parents: create missing parent directories first.
        what: the expected file, for the message refusing a non-regular target.

    Raises:
        ParameterError: the target exists and is not a regular file (refused before anything is
            written; :func:`check_output_target`), or its directory is missing; with ``option``,
            also for an OS error while writing (nothing is left behind).
        OSError: without ``option``, an OS error while writing (nothing is left behind).
        Whatever ``write`` raises (nothing is left behind).
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    if make_parents:
        os.makedirs(directory, exist_ok=True)
    check_output_target(path, option=option, what=what)
    flag, name = _flag_name(option)
    import tempfile  # here, not at the top: it costs ~5 ms of every command's start-up (docs/design.md §2.3)

    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=directory)
        with os.fdopen(fd, "wb") as f:
            if not private:  # mkstemp makes 0600; give the file the mode open() would
                os.fchmod(f.fileno(), 0o666 & ~_umask())
            write(f)
            f.flush()
            if sync:
                os.fsync(f.fileno())
        # the target may have become a directory or a device meanwhile: never replace one
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ParameterError(name, "", path, message=f"{flag} {path} exists and is not a regular "
                                     f"file ({_kind(st.st_mode)}); give the name of {what} to write")
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        if option is None:
            raise
        raise ParameterError(name, "", path, message=f"{flag} {path!r} cannot be written: "
                             f"{e.strerror or e}") from None
    finally:  # an error or an interrupt leaves no temporary file behind
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    if sync:
        _fsync_dir(directory)


def atomic_write_bytes(path: str | os.PathLike, data: bytes, **options: Any) -> None:
    """:func:`atomic_write` of ``data`` (same keyword options)."""
    atomic_write(path, lambda f: f.write(data), **options)
