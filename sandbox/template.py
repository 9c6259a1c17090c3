"""The fork-server's template (``start="fork"``), the worker's side of ``forkserver.py``: an initialised
interpreter that forks one fresh, warmed-up worker per request into a PID, mount and IPC namespace of its
own, reaps it and reports its exit.

One of the worker's modules (``isolation.WORKER_FILES``): it runs inside the sandbox, so it imports only the
standard library and the worker's own modules.
"""

from __future__ import annotations

import contextlib
import marshal
import os
import resource
import signal
from binascii import b2a_base64
from importlib._bootstrap_external import MAGIC_NUMBER  # loaded at every interpreter start

from hopgym.sandbox.code_policy import load_policy
from hopgym.sandbox.handler import Worker, serve_episode
from hopgym.sandbox.hardening import (
    CLONE_NEWIPC,
    CLONE_NEWNS,
    CLONE_NEWPID,
    MS_NODEV,
    MS_NOEXEC,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    PR_SET_PDEATHSIG,
    check,
    mount_point,
    open_libc,
    prepare_seccomp,
    sys_bind,
    sys_mount,
)
from hopgym.sandbox.wire import PROTOCOL_VERSION, Channel, DiscardingChannel, describe_error, dumps, loads

_CPU_SAMPLED = 0.5
"""The part of its CPU limit a worker killed at that limit is reported to have used, at least: the kernel
checks the limit against tick-charged time, the reaped usage is the exact run time, and the two part under
contention (0.96 s of 1 s seen on an idle machine); half leaves a wide margin, and the status is
``resource_limit`` either way."""
_EPISODE_FDS = 4
"""What the host sends with each fork request: the episode's stdin, stdout, stderr and exit-status pipes."""
_CONTROL_BYTES = 256
"""The longest control message to the template: ``fork``, or a schedule request (a few dozen bytes)."""
_PTS_OPTIONS = "newinstance,ptmxmode=0666,mode=0620"
TEMPLATE_MODULES = ("math", "datetime", "calendar", "string", "unicodedata", "csv")
"""Standard-library modules tool code commonly imports (beyond ``re``, ``json``, ``collections``, ``io`` ...
that the worker's modules import anyway), imported once by the template so that an episode's import is a
look-up in ``sys.modules``, not milliseconds of reading files. Each fork gets its own copy-on-write copy of
them, so what one episode changes in a module the next never sees. Never a module that draws random state
when imported (``random``, ``secrets``, ``tempfile``, ``uuid``): every worker forked from the template would
share that state."""
_WARM_TOOL = '''
def NAME(name: str, kind: str = "birth", years: list = None, detail: dict = None):
    """Shaped like a benchmark's tool (a docstring, argument checks, constants, a look-up), so that the
    warm-up's load touches what an episode's load will: the allocator's pages, the interned strings.

    :param name: a name to look up.
    :param kind: one of the kinds below.
    :return: a record, or an error message.
    """
    if not name:
        return {"error": 'The parameter "name" is required.'}
    kinds = ["birth", "death", "major_contribution", "award", "publication", "political_event"]
    if kind not in kinds:
        return {"error": f"Invalid kind. Must be one of {kinds}."}
    if years and (len(years) != 2 or not all(isinstance(year, int) for year in years)):
        return {"error": "years must be a list of two integers."}
    if detail and ("start" not in detail or "end" not in detail):
        return {"error": 'detail must include "start" and "end".'}
    table = {"NAME": 1974, "other": 2.5, "list": [1, 2, 3]}
    print(name)
    return {"name": name.lower(), "value": table.get(name.lower()), "kind": kind}
'''
_WARM_SOURCES = tuple(_WARM_TOOL.replace("NAME", f"warm_{index}") for index in range(4))
"""The warm-up's tools: about the size of a ToolHop task's (four tools, 9 KB compiled)."""


def serve_template(config: dict) -> int:
    """The fork-server (``start="fork"``): an initialised interpreter that never runs untrusted code and
    forks one fresh worker per request received on its control socket (fd 0, from the host only).

    It holds only what every worker would build the same way at start: the worker's modules, the code
    policy and the seccomp filter (built, not loaded). Each fork request carries the worker's own pipes;
    the template closes its copies at once, so no worker inherits another's, but for the exit-status pipe,
    where it writes the worker's exit code once it has reaped it (see :func:`_exit_code`)."""
    import select
    import socket

    libc = open_libc()
    policy = load_policy(config.get("policy"))
    load_seccomp = prepare_seccomp() if config.get("seccomp") else None
    for name in TEMPLATE_MODULES:
        __import__(name)
    warm_request = _warm_request(policy)
    own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    control = socket.socket(fileno=os.dup(0))
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    import gc

    gc.freeze()  # the collector never writes to what the template built: forked pages stay shared
    control.send(dumps({"type": "template", "version": PROTOCOL_VERSION, "pid": os.getpid()}).encode())
    workers: dict[int, tuple[int, int, int]] = {}
    """Each live worker's pidfd: its pid, the write end of its exit-status pipe and its fork number."""
    forks = 0
    waiting = select.poll()  # not select(): descriptors may pass 1024 with hundreds of live workers
    waiting.register(control.fileno(), select.POLLIN)
    while True:
        ready = {fd for fd, _ in waiting.poll()}
        for pidfd in ready & workers.keys():
            waiting.unregister(pidfd)
            pid, status, _ = workers.pop(pidfd)
            _report_exit(pid, status, config["rlimits"].get("cpu_seconds"))
            os.close(pidfd)
        if control.fileno() not in ready:
            continue
        message, fds, _, _ = socket.recv_fds(control, _CONTROL_BYTES, _EPISODE_FDS)
        if not message:
            return 0
        try:
            if message.startswith(b"{"):
                reply = _schedule(loads(message.decode()), {fork: pid for pid, _, fork in workers.values()})
            elif message != b"fork" or len(fds) != _EPISODE_FDS:
                raise ValueError(f"expected a fork request with {_EPISODE_FDS} descriptors or a schedule one")
            else:
                pid = _fork_episode(libc, own_pid_namespace, fds, config, policy, load_seccomp, warm_request)
                pidfd = os.pidfd_open(pid)
                forks += 1
                workers[pidfd] = (pid, os.dup(fds[3]), forks)
                waiting.register(pidfd, select.POLLIN)
                reply = {"type": "forked", "pid": pid, "fork": forks}
        except Exception as exc:
            reply = {"type": "fatal", "error": describe_error(exc)}
        finally:
            for fd in fds:
                os.close(fd)
        control.send(dumps(reply).encode())


def _schedule(request: dict, unreaped: dict) -> dict:
    """Set the scheduling policy of the worker of fork number ``request["fork"]`` for the host (see
    ``forkserver._ForkedWorker.kill``), answering with the one it had, or None for a worker already reaped.
    Race-free because the template is the worker's parent: it reaps its workers in this loop only, so the
    pid of one it has not reaped is still that worker's (alive or a zombie), where the host could only
    check a pidfd and then act on a pid that may have been reaped and reused between the two. Fork numbers,
    unlike pids, are never reused."""
    pid = unreaped.get(request.get("fork")) if request.get("op") == "schedule" else None
    if pid is None:
        return {"type": "scheduled", "had": None}
    try:
        had = [os.sched_getscheduler(pid), os.sched_getparam(pid).sched_priority]
        os.sched_setscheduler(pid, request["policy"], os.sched_param(request["priority"]))
    except OSError:  # a zombie has no scheduling to change: it is gone as far as the host cares
        return {"type": "scheduled", "had": None}
    return {"type": "scheduled", "had": had}


def _report_exit(pid: int, status_fd: int, cpu_seconds: int | None) -> None:
    """Reap the exited worker ``pid`` and write its exit code to its exit-status pipe."""
    _, status, usage = os.wait4(pid, 0)
    with contextlib.suppress(OSError):  # the host already closed its end: nobody asks any more
        os.write(status_fd, f"{_exit_code(status, usage, cpu_seconds)}\n".encode())
    os.close(status_fd)


def _exit_code(status: int, usage, cpu_seconds: int | None) -> int:
    """The worker's exit code, negative for the signal that killed it; the kernel's SIGKILL at the CPU
    limit (see ``hardening.apply_rlimits``) as SIGXCPU, told from another SIGKILL (the host's, the OOM
    killer's) by the CPU time used (see ``_CPU_SAMPLED``)."""
    if not os.WIFSIGNALED(status):
        return os.WEXITSTATUS(status)
    killed_by = os.WTERMSIG(status)
    used = usage.ru_utime + usage.ru_stime
    if killed_by == signal.SIGKILL and cpu_seconds is not None and used >= _CPU_SAMPLED * cpu_seconds:
        return -signal.SIGXCPU
    return -killed_by


def _fork_episode(
    libc, own_pid_namespace: int, fds: list, config: dict, policy, load_seccomp, warm_request: str
) -> int:
    """Fork the worker as the first process (the init) of a new PID namespace; its pid in the template's
    namespace is returned. It builds its own mounts and IPC namespace, then hardens itself and serves."""
    check(libc.unshare(CLONE_NEWPID), "unshare(pid)")
    try:
        child = os.fork()
    except BaseException:
        check(libc.setns(own_pid_namespace, CLONE_NEWPID), "setns(pid)")
        raise
    if child == 0:
        try:
            _become_episode(libc, fds, config)
            _warm_up(policy, config, warm_request)
            serve_episode(Channel(), config, policy, load_seccomp, namespace_init=True)
        except BaseException as exc:
            os.write(2, f"{describe_error(exc)}\n".encode(errors="replace"))
            os._exit(1)
        os._exit(0)
    # Back to the template's own namespace for later children (a second unshare would fail otherwise).
    check(libc.setns(own_pid_namespace, CLONE_NEWPID), "setns(pid)")
    return child


def _warm_request(policy) -> str:
    """The warm-up's load request as the host would send it to this policy: its sources as code the
    template compiled (see ``code_policy.PlainPolicy.load_code``), or, for a policy that compiles every source
    itself (``restricted``), one source as text (its compiler's cost dwarfs what the others would warm)."""
    if not hasattr(policy, "load_code"):
        return dumps({"op": "load", "sources": list(_WARM_SOURCES[:1])})
    codes = [
        MAGIC_NUMBER + marshal.dumps(compile(source, f"<tool source {index}>", "exec"))
        for index, source in enumerate(_WARM_SOURCES)
    ]
    texts = [b2a_base64(code, newline=False).decode("ascii") for code in codes]
    return dumps({"op": "load", "sources": [{"code": text} for text in texts]})


def _warm_up(policy, config: dict, warm_request: str) -> None:
    """Serve a load and a call of trusted code, shaped like an episode's, to a discarding channel, in a
    throwaway namespace, before saying ``ready``: the pages those paths write to (reference counts,
    caches, the allocator's free blocks) are copied from the template now, while this worker is a spare,
    not during the episode's first request (on this kind of machine, a fresh fork's first load of a task
    took several times longer than the same load warm)."""
    worker = Worker(DiscardingChannel(), policy, config["output_cap"], config["result_cap"])
    worker.load(loads(warm_request))
    worker.call({"name": "warm_0", "arguments": {"name": "warm", "years": [1, 2]}})


def _become_episode(libc, fds: list, config: dict) -> None:
    """In the fork: take the episode's stdin, stdout and stderr as fds 0-2 and nothing else (its exit
    status is the template's to write), die with the template (until the uid drop clears that; the
    template's own sandbox and the host's kill of each worker still end it), get a private mount and IPC
    namespace with a fresh /tmp, /proc and /dev/pts. The worker stays PID 1 of its namespace: it cannot
    fork (seccomp), so it has no children to reap, and what the kernel does not deliver to an init (a
    default-action SIGXCPU) is covered in ``hardening.apply_rlimits``; other default-action signals it raises
    itself without kill() (alarm(), interval timers) are ignored too, where a spawned worker would die."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC), "unshare(mount, ipc)")
    sys_mount(libc, None, "/", None, MS_REC | MS_PRIVATE, None)
    # The view's folders under /tmp (a checkout or venv there) are bound again over the fresh /tmp.
    kept = [(path, os.open(path, os.O_PATH)) for path in config["view"]["binds"] if path.startswith("/tmp/")]
    tmp_options = f"size={config['tmpfs_bytes']},mode=1777"
    sys_mount(libc, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, tmp_options)
    for path, fd in kept:
        sys_bind(libc, f"/proc/self/fd/{fd}", mount_point(path, os.path.isdir(f"/proc/self/fd/{fd}")))
        os.close(fd)
    sys_mount(libc, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    if os.path.isdir("/dev/pts"):
        sys_mount(libc, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, _PTS_OPTIONS)
