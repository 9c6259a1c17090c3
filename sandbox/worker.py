"""The sandbox worker: runs one episode's untrusted tool code behind the JSON-lines protocol.

Runnable as a plain script with the standard library (plus the libseccomp C library when seccomp is asked
for, and RestrictedPython, with ``policy.py`` next to this file, for ``policy="restricted"``); it never
imports hopgym, so the same file runs under bubblewrap, raw namespaces or inside a container.
Usage: ``python -I -S -B worker.py CONFIG_JSON`` (or its compiled ``.pyc``); ``-S`` keeps start-up short,
and ``python_path`` in the config lists the directories to import RestrictedPython from. The config keys are
built by ``isolation.worker_command``: namespaces, view, tmpfs_bytes, drop_uid, preload, host_pid, seccomp,
rlimits, policy, python_path, output_cap, result_cap, template.

Before it reads any request it hardens itself, in this order: optional raw namespaces (``namespaces``),
rlimits, the ``preload`` imports, dropping root to an unprivileged uid, then a seccomp filter. Only then
does it say ``ready``.
The protocol itself is described in ``protocol.py``; the message shapes below must match it.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import io
import json
import marshal
import os
import resource
import signal
import sys
import types
from binascii import a2b_base64, b2a_base64
from importlib._bootstrap_external import MAGIC_NUMBER  # loaded at every interpreter start

# The host reads these from this file (it never defines its own): the worker imports no hopgym.
# ---------------------------------------------------------------------------------------------------- main


def main(argv: list[str]) -> int:
    config = json.loads(argv[1])
    sys.path[:0] = config.get("python_path", [])
    if config.get("namespaces"):
        die_with_host(config["host_pid"])
        enter_namespaces(config["view"], config["tmpfs_bytes"])
    if config.get("template"):
        return serve_template(config)
    channel = Channel()
    try:
        policy = load_policy(config.get("policy"))
        load_seccomp = prepare_seccomp() if config.get("seccomp") else None
    except Exception as exc:
        channel.send({"type": "fatal", "error": describe_error(exc)})
        return 1
    return serve_episode(channel, config, policy, load_seccomp)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
