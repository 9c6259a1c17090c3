"""The code policy tool code is compiled and run under: plain Python here (the OS-level isolation is the
boundary), or ``restricted``, RestrictedPython's, from ``policy.py``.

One of the worker's modules (``isolation.WORKER_FILES``): it runs inside the sandbox, so it imports only the
standard library and the worker's own modules.
"""

from __future__ import annotations

import builtins
import marshal
import types
from binascii import a2b_base64
from importlib._bootstrap_external import MAGIC_NUMBER  # loaded at every interpreter start

_unmarshal = marshal.loads
"""The worker's own reference: tool code may patch the marshal module."""


class PlainPolicy:
    """Ordinary Python: the OS-level isolation is the boundary."""

    name = None

    def compile(self, source: str, filename: str, mode: str) -> types.CodeType:
        return compile(source, filename, mode)

    def globals(self) -> dict:
        return {"__name__": "__tools__", "__builtins__": builtins}

    @staticmethod
    def load_code(source: dict) -> types.CodeType:
        """Code the host compiled (``{"code": base64 of MAGIC_NUMBER + marshal data}``), what the host sends
        instead of a source's text when this worker's ready message names its bytecode: the host made it
        with ``compile`` from the text (tasks/tool_source.py), never from anything tool code wrote."""
        data = a2b_base64(source["code"])
        if data[: len(MAGIC_NUMBER)] != MAGIC_NUMBER:
            raise ValueError("the code was compiled for another Python version")
        code = _unmarshal(data[len(MAGIC_NUMBER) :])
        if type(code) is not types.CodeType:
            raise TypeError(f"expected code, got {type(code).__name__}")
        return code


def load_policy(name: str | None):
    """The code policy; ``restricted`` is ``policy.py``'s, imported only when asked for (it needs
    RestrictedPython, which the worker imports from the config's ``python_path``)."""
    if name is None:
        return PlainPolicy()
    from hopgym.sandbox.policy import make_policy

    return make_policy(name)
