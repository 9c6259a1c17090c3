"""The files of a run folder, opened as untrusted input: a folder may come from anyone (a download, a shared
disk) and be changed while it is read, so whatever it holds costs at most a clear error or a skipped record.

- Every file is opened relative to its folder's descriptor with ``O_NOFOLLOW`` and checked after opening
  (``fstat``): a symbolic link, FIFO, device, socket or directory where a file belongs is refused with a
  :class:`DataError` naming it, so nothing is read from or written to outside the folder, and no check can be
  raced by swapping the file between the check and the use.
- Writes either append to such a file or replace it whole: the new content goes to ``NAME.tmp`` (created
  exclusively, never through a link) and is renamed over ``NAME`` within the folder, so an interrupted write
  leaves the old file whole and a planted link is never written through.
- Reads are bounded: a document (``run.json``, ``summary.*``) at most :data:`MAX_DOCUMENT_BYTES`, a records
  file at most :data:`MAX_RECORDS_BYTES` in all (its size when opened: a file still growing is read up to
  there) and :data:`MAX_LINE_BYTES` per record.
- A records file's malformed line (not UTF-8, not strict JSON: no ``NaN``, not an object, over the line cap,
  or refused by the caller's shape check) is named ``file:line``: readers skip it, ``--resume`` refuses the
  file (appending to or rewriting a damaged file would hide the damage). A partial last line (a run killed
  mid-write) is not damage: readers ignore it and ``--resume`` cuts it off, so the episode is redone once.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import math
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Generic, TypeVar

from hopgym.errors import DataError
from hopgym.model_text import valid_unicode
from hopgym.tasks.user_files import file_kind

MAX_DOCUMENT_BYTES = 64 * 2**20
"""A run folder's JSON or Markdown document (``run.json``, ``summary.json``, ``summary.md``)."""
MAX_LINE_BYTES = 128 * 2**20
"""One record of a records file (an episode's whole transcript, tool results included)."""
MAX_RECORDS_BYTES = 8 * 2**30
"""A whole records file (``episodes.jsonl``): thousands of episodes of a few MiB each."""
_CHUNK = 2**20
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
"""A ``\\uXXXX`` escape of a surrogate: the only way JSON text gives a lone one."""
log = logging.getLogger(__name__)

R = TypeVar("R")
RecordCheck = Callable[[dict[str, Any]], str | None]
"""What is wrong with a parsed record (None: nothing); such a record counts as malformed."""
RecordParse = Callable[[dict[str, Any]], R]
"""A parsed record in its typed form; a ``ValueError`` says what is wrong (the record counts as malformed)."""


def _refused(path: Path, kind: str) -> DataError:
    return DataError(f"{path} is {kind}; a run folder's {path.name} must be a regular file (refused)")


def open_in_folder(folder: Path, relative: str, flags: int = os.O_RDONLY, mode: int = 0o644) -> int:
    """A descriptor of the regular file at ``relative`` (``/``-separated, no ``.``/``..`` part) inside
    ``folder``, opened with ``flags``; no link on the way is followed and the opened file is checked, so
    what is returned is a regular file inside the folder. ``FileNotFoundError`` when there is none."""
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise DataError(f"{relative!r} does not name a file inside {folder}")
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | nofollow, dir_fd=directory)
            except NotADirectoryError:
                raise DataError(f"{folder / part} is not a directory inside the run folder") from None
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _refused(folder / part, "a symbolic link") from None
                raise
            os.close(directory)
            directory = inner
        # O_NONBLOCK: opening a FIFO neither waits for the other end nor fails later on a read.
        fd = os.open(parts[-1], flags | nofollow | os.O_NONBLOCK, mode, dir_fd=directory)
        return _checked(folder / relative, fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _refused(folder / relative, "a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise _refused(folder / relative, "a FIFO") from None
        if exc.errno == errno.EISDIR:
            raise _refused(folder / relative, "a directory") from None
        raise
    finally:
        os.close(directory)


def _checked(path: Path, fd: int) -> int:
    """``fd`` if it is a regular file (made blocking again), else closed and refused."""
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _refused(path, file_kind(mode))
    os.set_blocking(fd, True)
    return fd


def check_files(folder: Path, names: Iterable[str]) -> None:
    """Refuse ``folder`` if any of ``names`` in it is something other than a regular file (before a run
    that will write them starts; the writes check again)."""
    for name in names:
        try:
            mode = os.lstat(folder / name).st_mode
        except (FileNotFoundError, NotADirectoryError):
            continue
        if not stat.S_ISREG(mode):
            raise _refused(folder / name, file_kind(mode))


def exists(path: Path) -> bool:
    """Whether the folder holds an entry named ``path.name`` (of any kind: a link counts, unfollowed)."""
    return os.path.lexists(path)


def read_document(path: Path, cap: int = MAX_DOCUMENT_BYTES) -> bytes | None:
    """The bytes of a run folder's file (None when there is none), at most ``cap`` of them."""
    try:
        fd = open_in_folder(path.parent, path.name)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        size = os.fstat(fd).st_size
        if size > cap:
            raise DataError(f"{path} holds {size} bytes, over the {cap} a run folder's {path.name} may hold")
        return handle.read(size)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads(data: bytes) -> Any:
    """Strict JSON (no ``NaN`` or ``Infinity``; UTF-8); ``ValueError`` otherwise, also for nesting too deep
    to parse. Its strings are valid Unicode: a lone surrogate (an escape in the text, as :func:`json_bytes`
    writes one) is read as U+FFFD, so no reader fails to print or write what it read."""
    try:
        value = json.loads(data.decode(), parse_constant=_no_constant)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    return valid_unicode(value) if _SURROGATE_ESCAPE.search(data) else value


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object a run folder's file holds (None when there is none); anything else is refused."""
    data = read_document(path)
    if data is None:
        return None
    try:
        value = loads(data)
    except ValueError as exc:
        raise DataError(f"{path} is not JSON ({exc}); the run folder is damaged") from None
    if not isinstance(value, dict):
        kind = type(value).__name__
        raise DataError(f"{path} holds a JSON {kind}, not an object; the run folder is damaged")
    return value


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value


def json_bytes(value: Any, indent: int | None = None) -> bytes:
    """``value`` as strict UTF-8 JSON, so that :func:`loads` reads it back whatever it holds: a number that
    is not finite becomes null, a lone surrogate in a string (not encodable) its ``\\uXXXX`` escape (read
    back as U+FFFD)."""
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, default=repr, indent=indent)
    except ValueError:  # NaN or an infinity somewhere: the rare case pays for the walk
        text = json.dumps(_finite(value), ensure_ascii=False, allow_nan=False, default=repr, indent=indent)
    return text.encode("utf-8", "backslashreplace")


def json_line(value: Any) -> bytes:
    """``value`` as one line of a records file (:func:`json_bytes`: what is written reads back)."""
    return json_bytes(value) + b"\n"


def replace_file(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` as the new content of the folder's file ``path.name``: to ``NAME.tmp`` first (made
    anew, never through a link), flushed to disk, then renamed over ``NAME`` (a link there is replaced, its
    target untouched; any other special file is refused)."""
    folder, name = path.parent, path.name
    if exists(path):
        os.close(open_in_folder(folder, name, os.O_RDONLY))  # refuses what is no regular file
    temporary = f"{name}.tmp"
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=directory)  # a link or file left there: removed, not followed
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(temporary, flags, 0o644, dir_fd=directory), "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, name, src_dir_fd=directory, dst_dir_fd=directory)
    finally:
        os.close(directory)


def write_text(path: Path, text: str) -> None:
    """:func:`replace_file` with ``text`` (a lone surrogate written as its ``\\uXXXX`` escape)."""
    replace_file(path, [text.encode("utf-8", "backslashreplace")])


def write_json(path: Path, value: Any) -> None:
    """:func:`replace_file` with ``value`` as indented :func:`json_bytes`."""
    replace_file(path, [json_bytes(value, indent=2) + b"\n"])


def open_append(path: Path) -> IO[bytes]:
    """The folder's file ``path.name`` opened for appending (created if absent), never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND
    return os.fdopen(open_in_folder(path.parent, path.name, flags), "ab")


@dataclass
class RecordsRead(Generic[R]):
    """What a records file held: its well-formed records, and ``file:line: why`` of each one skipped."""

    records: list[R] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def warn(self) -> None:
        """Log each skipped record (a warning on stderr in the command line)."""
        for line in self.skipped:
            log.warning("skipped a malformed record: %s", line)


def _lines(handle: IO[bytes], size: int) -> Iterator[tuple[bytes | None, bool]]:
    """Each line of the first ``size`` bytes (None for one over :data:`MAX_LINE_BYTES`, read past in
    chunks), and whether it ended with a newline."""
    remaining = size
    while remaining > 0:
        line = handle.readline(min(remaining, MAX_LINE_BYTES + 1))
        if not line:
            return
        remaining -= len(line)
        if line.endswith(b"\n") or len(line) <= MAX_LINE_BYTES:
            yield line, line.endswith(b"\n")
            continue
        ended = False
        while remaining > 0 and not ended:
            rest = handle.readline(min(remaining, _CHUNK))
            if not rest:
                break
            remaining -= len(rest)
            ended = rest.endswith(b"\n")
        yield None, ended


def _parsed(line: bytes | None, parse: RecordParse[R]) -> R:
    """The record on ``line``; a ``ValueError`` says why there is none."""
    if line is None:
        raise ValueError(f"longer than {MAX_LINE_BYTES} bytes")
    try:
        record = loads(line)
    except ValueError as exc:
        raise ValueError(f"not a JSON record ({exc})") from None
    if not isinstance(record, dict):
        raise ValueError(f"a JSON {type(record).__name__}, not an object")
    return parse(record)


def _checked_by(check: RecordCheck | None) -> RecordParse[dict[str, Any]]:
    def parse(record: dict[str, Any]) -> dict[str, Any]:
        problem = check(record) if check else None
        if problem:
            raise ValueError(problem)
        return record

    return parse


def read_records(
    path: Path, check: RecordCheck | None = None, resume: bool = False
) -> RecordsRead[dict[str, Any]]:
    """:func:`parse_records` keeping each record as its JSON object (refused when ``check`` says why)."""
    return parse_records(path, _checked_by(check), resume)


def parse_records(path: Path, parse: RecordParse[R], resume: bool = False) -> RecordsRead[R]:
    """The records of a JSON-lines file of a run folder, each parsed once by ``parse`` (none when there is
    no file); a malformed one is skipped and named, or with ``resume`` refused (a :class:`DataError` naming
    ``file:line``) and a partial last line cut off the file."""
    try:
        fd = open_in_folder(path.parent, path.name, os.O_RDWR if resume else os.O_RDONLY)
    except FileNotFoundError:
        return RecordsRead()
    read: RecordsRead[R] = RecordsRead()
    with os.fdopen(fd, "r+b" if resume else "rb") as handle:
        size = os.fstat(fd).st_size
        if size > MAX_RECORDS_BYTES:
            raise DataError(f"{path} holds {size} bytes, over the {MAX_RECORDS_BYTES} a records file may")
        complete_end = 0
        for number, (line, ended) in enumerate(_lines(handle, size), start=1):
            if not ended:  # a partial last line: a write cut off, or still under way
                break
            complete_end = handle.tell()
            if line is not None and not line.strip():
                continue
            try:
                read.records.append(_parsed(line, parse))
                continue
            except ValueError as exc:
                problem = str(exc)
            if resume:
                raise DataError(
                    f"{path}:{number} is {problem}; the file is damaged and --resume does not rewrite it: "
                    "repair or delete that line, or pick another --out"
                )
            else:
                read.skipped.append(f"{path}:{number}: {problem}")
        if resume and complete_end < size:
            handle.truncate(complete_end)
    return read


class RecordWriter:
    """Appends JSON objects one line each (:func:`json_bytes`: what is written reads back), flushed at
    once: a killed process loses no finished record."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._handle = open_append(path)

    def write(self, record: Mapping[str, Any]) -> None:
        self._handle.write(json_line(record))
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()
