"""The sandbox worker: runs one episode's untrusted tool code behind the JSON-lines protocol.

Runnable as a plain script with the standard library (plus the libseccomp C library when seccomp is asked
for, and RestrictedPython for ``policy="restricted"``); it imports nothing of hopgym but the worker's own
modules beside it (``isolation.WORKER_FILES``, each with one job: ``hardening``, ``template``,
``code_policy`` and ``policy``, ``wire``, ``handler``), so the same files run under bubblewrap, raw
namespaces or inside a container.
Usage: ``python -I -S -B worker.py CONFIG_JSON`` (or its compiled ``.pyc``); ``-S`` keeps start-up short,
and ``python_path`` in the config lists the directories to import RestrictedPython from. The config keys are
built by ``isolation.worker_command``: namespaces, view, tmpfs_bytes, drop_uid, preload, host_pid, seccomp,
rlimits, policy, python_path, output_cap, result_cap, template.

Before it reads any request it hardens itself, in this order: optional raw namespaces (``namespaces``),
rlimits, the ``preload`` imports, dropping root to an unprivileged uid, then a seccomp filter. Only then
does it say ``ready``.
The protocol itself is described in ``protocol.py``; the message shapes in ``wire.py`` must match it.
"""

from __future__ import annotations

import json
import os
import sys
import types


def _own_folder_as_package() -> None:
    """Make this file's folder importable as ``hopgym.sandbox``, and nothing else of hopgym: the worker's
    modules import one another by the paths the host imports them by, and no ``__init__`` of hopgym (which
    imports the host's side) runs in the sandbox."""
    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.basename(here) == "__pycache__":  # run from its compiled form (see isolation.worker_program)
        here = os.path.dirname(here)
    for name, path in (("hopgym", []), ("hopgym.sandbox", [here])):
        package = types.ModuleType(name)
        package.__path__ = path
        sys.modules[name] = package


def main(argv: list[str]) -> int:
    from hopgym.sandbox.code_policy import load_policy
    from hopgym.sandbox.handler import serve_episode
    from hopgym.sandbox.hardening import die_with_host, enter_namespaces, prepare_seccomp
    from hopgym.sandbox.template import serve_template
    from hopgym.sandbox.wire import Channel, describe_error

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
    _own_folder_as_package()
    sys.exit(main(sys.argv))
