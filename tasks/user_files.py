"""Files a user names to hopgym (a data path, a KG file, a task file, a model file to hash) are untrusted
input, as run folders are: a path may name ``/dev/zero``, a FIFO nobody writes, a directory or a link to a
sparse file of terabytes, and each must cost a clear :class:`DataError`, never a hang or an exhausted memory.

- The path is opened once, without blocking (``O_NONBLOCK``: a FIFO opens at once and is then refused), and
  the opened file is checked with ``fstat``: anything but a regular file is refused, naming what it is. The
  checks and the read are on one descriptor, so the file cannot be swapped between them.
- A link the user's path goes through is followed (data folders are often links); what it reaches is
  checked like any file.
- At most :data:`MAX_USER_FILE_BYTES` are read: a larger file is refused before its first byte is read, and
  a file that grows past the cap while it is read is refused when it crosses it.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from typing import BinaryIO

from hopgym.errors import DataError

MAX_USER_FILE_BYTES = 2**30
"""The largest file hopgym reads whole for a user (1 GiB): the full ToolHop set is ~20 MB, FB15k-237's
triples ~15 MB, a KG2Tool export of 2,800 tasks ~100 MB."""
_CHUNK = 2**20
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)


def file_kind(mode: int) -> str:
    """What an ``st_mode`` that is not a regular file's is, in words (for refusals)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


@contextlib.contextmanager
def open_user_file(path: str | os.PathLike[str], what: str) -> Iterator[BinaryIO]:
    """``path`` opened for reading once it is checked to be a regular file; :class:`DataError` naming
    ``what`` it was meant to be and the path otherwise (see the module docstring)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise DataError(f"cannot read the {what} {os.fspath(path)!r}: {exc.strerror}") from exc
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise DataError(
            f"the {what} {os.fspath(path)!r} is {file_kind(mode)}; hopgym reads only regular files (refused)"
        )
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as stream:
        yield stream


def read_user_bytes(path: str | os.PathLike[str], what: str, cap: int = MAX_USER_FILE_BYTES) -> bytes:
    """The bytes of the regular file at ``path``, at most ``cap`` of them, else :class:`DataError`."""
    with open_user_file(path, what) as stream:
        size = os.fstat(stream.fileno()).st_size
        if size > cap:
            raise DataError(_over_cap(path, what, size, cap))
        chunks, total = [], 0
        while chunk := stream.read(min(_CHUNK, cap + 1 - total)):
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise DataError(_over_cap(path, what, total, cap))
        return b"".join(chunks)


def read_user_text(path: str | os.PathLike[str], what: str, cap: int = MAX_USER_FILE_BYTES) -> str:
    """The UTF-8 text of the regular file at ``path`` (see :func:`read_user_bytes`)."""
    data = read_user_bytes(path, what, cap)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"the {what} {os.fspath(path)!r} is not UTF-8 text (byte {exc.start})") from exc


def _over_cap(path: str | os.PathLike[str], what: str, size: int, cap: int) -> str:
    return (
        f"the {what} {os.fspath(path)!r} holds {size:,} bytes or more, over the {cap:,} hopgym reads "
        "(refused; see tasks/user_files.py)"
    )
