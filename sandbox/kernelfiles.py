"""Reading and writing the kernel's small files (``/proc``, cgroup controls) with raw system calls.

A worker's start reads and writes about twenty of them on the host; through ``pathlib`` (a text file object
per access) each costs tens of microseconds of Python, several times the system calls themselves.
"""

from __future__ import annotations

import os

_READ_BYTES = 65_536
"""More than any file read here holds (a process's status, a group's few pids)."""


def read(path: str) -> str:
    """The text of ``path``, read with one ``read``."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, _READ_BYTES).decode()
    finally:
        os.close(fd)


def write(path: str, text: str) -> None:
    """Write ``text`` to ``path`` with one ``write`` (a control file takes each write as one value)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)
