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
PROTOCOL_VERSION = 2
"""Bumped whenever a message changes shape; the worker reports its own in the ready message."""
ERROR_TEXT_CAP = 2000
"""Characters of an error text the worker sends (:func:`describe_error`)."""
LIBSECCOMP = "libseccomp.so.2"
DEVICES = ("null", "zero", "full", "random", "urandom")
"""The device nodes of the worker's own ``/dev``."""
CLONE_THREAD = 0x00010000
_SCMP_ACT_ALLOW, _SCMP_ACT_ERRNO, _SCMP_CMP_EQ, _SCMP_CMP_MASKED_EQ = 0x7FFF0000, 0x00050000, 4, 7
DENIED_SYSCALLS = (
    # networking
    "socket", "socketpair",
    # running programs and creating processes (clone without CLONE_THREAD is handled separately)
    "execve", "execveat", "fork", "vfork",
    # touching other processes
    "ptrace", "process_vm_readv", "process_vm_writev", "kill", "tkill", "tgkill",
    "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
    # escaping or reshaping the sandbox
    "mount", "umount2", "pivot_root", "chroot", "unshare", "setns", "io_uring_setup",
    # kernel attack surface no tool needs
    "bpf", "perf_event_open", "userfaultfd", "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "reboot", "swapon", "swapoff",
    # holding locks on, or watching, files the host shares (fcntl's lock commands are denied separately)
    "flock", "inotify_init", "inotify_init1", "fanotify_init",
)  # fmt: skip
FCNTL_LOCKS = (6, 7, 37, 38)  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW

_dumps, _loads = json.dumps, json.loads  # private references: tool code may patch the json module
_unmarshal = marshal.loads
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_MOVE, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x2000, 0x4000, 0x40000
_NEW_ROOT = "/tmp"  # where the namespaces mode builds the worker's root, in its own mount namespace
_NAMESPACE_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x40000000 | 0x20000000  # mnt uts ipc net pid
_PR_SET_PDEATHSIG = 1
_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000


class ToolCallRefused(Exception):
    """Raised inside executed code when the host's hook refuses a tool call."""


class ToolError(Exception):
    """Raised inside executed code when a tool call failed in a way no builtin exception names."""


# ---------------------------------------------------------------------------------------------- hardening


def _libc():  # imported lazily: only the namespaces mode needs ctypes
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        import ctypes

        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def enter_namespaces(view: dict, tmpfs_bytes: int) -> None:
    """Raw-namespace isolation without bubblewrap (needs root): new mount/pid/net/ipc/uts namespaces and a
    new root that holds only ``view`` (its ``binds`` read-only at their own paths, its ``symlinks``), a
    private /tmp, a fresh /proc and a /dev of a few device nodes; the host's root lies out of reach below.

    The calling process stays outside the new PID namespace and only relays its child's fate; the
    worker returns from this function as PID 2 of the namespace."""
    libc = _libc()
    _check(libc.unshare(_NAMESPACE_FLAGS), "unshare")
    _fork_and_relay(libc, signal_as_code=False)  # this side stays outside the new PID namespace

    # Now PID 1 of the namespace. The kernel ignores default-action signals (SIGXCPU ...) sent to a
    # namespace's init, so the worker itself runs as PID 2, forked after the mounts below.
    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        _mount(libc, source, target, fstype, flags, data)

    def bind(source: str, target: str, flags: int = _MS_RDONLY | _MS_NOSUID | _MS_NODEV) -> None:
        _bind(libc, source, target, flags)

    def place(path: str, directory: bool) -> str:
        return _mount_point(_NEW_ROOT + path, directory)

    mount(None, "/", None, _MS_REC | _MS_PRIVATE, None)
    # Held open while the new root is mounted over /tmp, then bound through /proc/self/fd.
    sources = [(path, os.open(path, os.O_PATH)) for path in view["binds"]]
    mount("tmpfs", _NEW_ROOT, "tmpfs", _MS_NOSUID | _MS_NODEV, "mode=0755,size=1m")
    for path, target in view["symlinks"]:
        os.symlink(target, _NEW_ROOT + path)
    # The private /tmp first: a bind under /tmp (a checkout or venv there) goes on top of it.
    mount(
        "tmpfs",
        place("/tmp", directory=True),
        "tmpfs",
        _MS_NOSUID | _MS_NODEV,
        f"size={tmpfs_bytes},mode=1777",
    )
    for path, fd in sources:
        bind(f"/proc/self/fd/{fd}", place(path, directory=os.path.isdir(f"/proc/self/fd/{fd}")))
        os.close(fd)
    mount("proc", place("/proc", directory=True), "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    dev = place("/dev", directory=True)
    mount("tmpfs", dev, "tmpfs", _MS_NOSUID | _MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        bind(f"/dev/{name}", place(f"/dev/{name}", directory=False), _MS_NOSUID | _MS_NOEXEC)
    os.symlink("/proc/self/fd", f"{dev}/fd")
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{fd}", f"{dev}/{name}")
    os.chdir(_NEW_ROOT)
    mount(_NEW_ROOT, "/", None, _MS_MOVE, None)
    _check(libc.chroot(b"."), "chroot")
    os.chdir("/")
    for target in ("/dev", "/"):
        mount(None, target, None, _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)
    _fork_and_relay(libc, signal_as_code=True)


def _mount(libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    _check(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def _bind(libc, source: str, target: str, flags: int = _MS_RDONLY | _MS_NOSUID | _MS_NODEV) -> None:
    """Bind ``source`` (and the mounts below it) at ``target``, then make it read-only (or ``flags``)."""
    _mount(libc, source, target, None, _MS_BIND | _MS_REC, None)
    _mount(libc, None, target, None, _MS_REMOUNT | _MS_BIND | flags, None)


def _mount_point(target: str, directory: bool) -> str:
    """``target`` made to bind a folder (``directory``) or a file onto, with traversable folders above it."""
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if directory:
        os.makedirs(target, mode=0o755, exist_ok=True)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    return target


def die_with_host(host_pid: int) -> None:
    """Be killed when the host dies (the relays and the worker below die with this process in turn)."""
    _check(_libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != host_pid:  # the host died before the line above
        os._exit(1)


def _fork_and_relay(libc, signal_as_code: bool) -> None:
    """Fork; the child returns (and dies with its parent), the parent waits and exits as the child did.

    A namespace's init cannot die by its own signal, so it reports one as exit code 128 + n (as bubblewrap
    does); the outermost parent turns such a code back into that signal for the host to see."""
    child = os.fork()
    if child == 0:
        _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        return
    for fd in (0, 1, 2):
        os.close(fd)
    status = wait_for_exit(child)
    killed_by = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    code = os.WEXITSTATUS(status) if killed_by is None else 128 + killed_by
    if not signal_as_code and code > 128:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if code - 128 != signal.SIGKILL:  # its disposition cannot be set (EINVAL), nor needs to be
            signal.signal(code - 128, signal.SIG_DFL)
        os.kill(os.getpid(), code - 128)
    os._exit(code)


def wait_for_exit(child: int) -> int:
    """The wait status of ``child``, waited for on a pidfd: only its exit wakes this process. A parent in
    ``waitpid`` is woken by each stop and continue of its child too, and the host stops and continues the
    worker around every call."""
    pidfd = os.pidfd_open(child)
    ready(pidfd, None)
    os.close(pidfd)
    return os.waitpid(child, 0)[1]


def ready(fd: int, timeout: float | None, writing: bool = False) -> bool:
    """Whether ``fd`` is readable (or writable), waiting at most ``timeout`` seconds (None: no limit); an
    end of file, a hang-up or an error counts as ready, as in ``select``. Through ``poll``, not ``select``:
    a host with many sessions holds descriptors numbered past ``select``'s limit of 1024. The host's side
    of the protocol waits with it too (``protocol.ready``)."""
    import select  # not at start-up: most workers never wait on a descriptor

    waiting = select.poll()
    waiting.register(fd, select.POLLOUT if writing else select.POLLIN)
    events = waiting.poll(None if timeout is None else max(timeout, 0.0) * 1000)
    if events and events[0][1] & select.POLLNVAL:
        raise OSError(errno.EBADF, f"descriptor {fd} is not open")
    return bool(events)


def apply_rlimits(limits: dict[str, int], namespace_init: bool = False) -> None:
    """Cap memory, CPU seconds, file size and open files; core dumps off.

    A namespace's init (a forked worker) ignores a default-action SIGXCPU, so its CPU limit is the hard
    one: the kernel's SIGKILL, which no process escapes, at the limit itself (the fork-server reports it as
    SIGXCPU: see :func:`_exit_code`)."""
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an oversized write raises OSError instead of killing
    table = {
        "memory_bytes": resource.RLIMIT_AS,
        "cpu_seconds": resource.RLIMIT_CPU,
        "file_bytes": resource.RLIMIT_FSIZE,
        "open_files": resource.RLIMIT_NOFILE,
    }
    for key, value in limits.items():
        # CPU: SIGXCPU at the soft limit (reported as a resource limit), SIGKILL a second later
        hard = value + 1 if key == "cpu_seconds" and not namespace_init else value
        resource.setrlimit(table[key], (value, hard))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def drop_privileges(uid: int | None) -> int:
    """Become ``uid`` for real when running as root; prove root cannot be regained."""
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        try:
            os.setuid(0)
        except PermissionError:
            pass
        else:
            raise PermissionError("dropped privileges but could become root again")
    if set(os.getresuid()) != {os.getuid()}:
        raise PermissionError(f"inconsistent user ids after dropping: {os.getresuid()}")
    return os.getuid()


def install_seccomp() -> None:
    """Build and load the filter of :func:`prepare_seccomp` in this process."""
    prepare_seccomp()()


def prepare_seccomp():
    """Build (not yet load) a filter that denies sockets, exec, process creation, signalling, ptrace, file
    locks and watches; ``clone3`` says ENOSYS so that the C library falls back to ``clone``, where creating
    threads (CLONE_THREAD) stays allowed.

    Calls libseccomp directly (ctypes): other architectures' syscall tables are killed by its default.
    Returns the function that loads it into the calling process: a fork-server builds the filter once and
    each forked worker only loads it."""
    import ctypes

    class ArgCompare(ctypes.Structure):
        _fields_ = [
            ("arg", ctypes.c_uint),
            ("op", ctypes.c_int),
            ("a", ctypes.c_uint64),
            ("b", ctypes.c_uint64),
        ]

    lib = ctypes.CDLL(LIBSECCOMP, use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_rule_add_array.argtypes = [
        ctypes.c_void_p,
        ctypes.c_uint32,
        ctypes.c_int,
        ctypes.c_uint,
        ctypes.POINTER(ArgCompare),
    ]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    context = lib.seccomp_init(_SCMP_ACT_ALLOW)
    if not context:
        raise OSError("seccomp_init failed")

    def deny(name: str, code: int, *compare: ArgCompare) -> None:
        number = lib.seccomp_syscall_resolve_name(name.encode())
        if number < 0:
            raise OSError(f"libseccomp does not know the syscall {name!r}")
        array = (ArgCompare * len(compare))(*compare) if compare else None
        result = lib.seccomp_rule_add_array(context, _SCMP_ACT_ERRNO | code, number, len(compare), array)
        if result != 0:
            raise OSError(-result, f"seccomp rule for {name}: {os.strerror(-result)}")

    try:
        for name in DENIED_SYSCALLS:
            deny(name, errno.EPERM)
        deny("clone", errno.EPERM, ArgCompare(0, _SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0))
        deny("clone3", errno.ENOSYS)
        for command in FCNTL_LOCKS:
            deny("fcntl", errno.EPERM, ArgCompare(1, _SCMP_CMP_EQ, command, 0))
    except BaseException:
        lib.seccomp_release(context)
        raise

    def load() -> None:
        result = lib.seccomp_load(context)
        if result != 0:
            raise OSError(-result, f"seccomp_load: {os.strerror(-result)}")

    return load


# -------------------------------------------------------------------------------------------- fork-server

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
that this module imports anyway), imported once by the template so that an episode's import is a look-up
in ``sys.modules``, not milliseconds of reading files. Each fork gets its own copy-on-write copy of them,
so what one episode changes in a module the next never sees. Never a module that draws random state when
imported (``random``, ``secrets``, ``tempfile``, ``uuid``): every worker forked from the template would
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

    It holds only what every worker would build the same way at start: this module, the code policy and
    the seccomp filter (built, not loaded). Each fork request carries the worker's own pipes; the template
    closes its copies at once, so no worker inherits another's, but for the exit-status pipe, where it
    writes the worker's exit code once it has reaped it (see :func:`_exit_code`)."""
    import select
    import socket

    libc = _libc()
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
    control.send(_dumps({"type": "template", "version": PROTOCOL_VERSION, "pid": os.getpid()}).encode())
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
                reply = _schedule(_loads(message.decode()), {fork: pid for pid, _, fork in workers.values()})
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
        control.send(_dumps(reply).encode())


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
    limit (see :func:`apply_rlimits`) as SIGXCPU, told from another SIGKILL (the host's, the OOM killer's)
    by the CPU time used (see ``_CPU_SAMPLED``)."""
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
    _check(libc.unshare(_CLONE_NEWPID), "unshare(pid)")
    try:
        child = os.fork()
    except BaseException:
        _check(libc.setns(own_pid_namespace, _CLONE_NEWPID), "setns(pid)")
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
    _check(libc.setns(own_pid_namespace, _CLONE_NEWPID), "setns(pid)")
    return child


def _warm_request(policy) -> str:
    """The warm-up's load request as the host would send it to this policy: its sources as code the
    template compiled (see :meth:`PlainPolicy.load_code`), or, for a policy that compiles every source
    itself (``restricted``), one source as text (its compiler's cost dwarfs what the others would warm)."""
    if not hasattr(policy, "load_code"):
        return _dumps({"op": "load", "sources": list(_WARM_SOURCES[:1])})
    codes = [
        MAGIC_NUMBER + marshal.dumps(compile(source, f"<tool source {index}>", "exec"))
        for index, source in enumerate(_WARM_SOURCES)
    ]
    texts = [b2a_base64(code, newline=False).decode("ascii") for code in codes]
    return _dumps({"op": "load", "sources": [{"code": text} for text in texts]})


def _warm_up(policy, config: dict, warm_request: str) -> None:
    """Serve a load and a call of trusted code, shaped like an episode's, to a discarding channel, in a
    throwaway namespace, before saying ``ready``: the pages those paths write to (reference counts,
    caches, the allocator's free blocks) are copied from the template now, while this worker is a spare,
    not during the episode's first request (on this kind of machine, a fresh fork's first load of a task
    took several times longer than the same load warm)."""
    worker = Worker(_DiscardingChannel(), policy, config["output_cap"], config["result_cap"])
    worker.load(_loads(warm_request))
    worker.call({"name": "warm_0", "arguments": {"name": "warm", "years": [1, 2]}})


def _become_episode(libc, fds: list, config: dict) -> None:
    """In the fork: take the episode's stdin, stdout and stderr as fds 0-2 and nothing else (its exit
    status is the template's to write), die with the template (until the uid drop clears that; the
    template's own sandbox and the host's kill of each worker still end it), get a private mount and IPC
    namespace with a fresh /tmp, /proc and /dev/pts. The worker stays PID 1 of its namespace: it cannot
    fork (seccomp), so it has no children to reap, and what the kernel does not deliver to an init (a
    default-action SIGXCPU) is covered in :func:`apply_rlimits`; other default-action signals it raises
    itself without kill() (alarm(), interval timers) are ignored too, where a spawned worker would die."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    _check(libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC), "unshare(mount, ipc)")
    _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
    # The view's folders under /tmp (a checkout or venv there) are bound again over the fresh /tmp.
    kept = [(path, os.open(path, os.O_PATH)) for path in config["view"]["binds"] if path.startswith("/tmp/")]
    tmp_options = f"size={config['tmpfs_bytes']},mode=1777"
    _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, tmp_options)
    for path, fd in kept:
        _bind(libc, f"/proc/self/fd/{fd}", _mount_point(path, os.path.isdir(f"/proc/self/fd/{fd}")))
        os.close(fd)
    _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    if os.path.isdir("/dev/pts"):
        _mount(libc, "devpts", "/dev/pts", "devpts", _MS_NOSUID | _MS_NOEXEC, _PTS_OPTIONS)


# ------------------------------------------------------------------------------------------------- policy


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
    """The code policy; ``restricted`` loads ``policy.py`` from next to this file."""
    if name is None:
        return PlainPolicy()
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    if os.path.basename(here) == "__pycache__":  # run from its compiled form (see isolation.worker_program)
        here = os.path.dirname(here)
    path = os.path.join(here, "policy.py")
    spec = importlib.util.spec_from_file_location("hopgym_worker_policy", path)
    assert spec is not None and spec.loader is not None  # a .py path always has a source loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.make_policy(name)


# ------------------------------------------------------------------------------------------------ channel


class Channel:
    """The protocol stream, moved off fds 0-2 so that tools writing to fd 1 cannot corrupt it."""

    def __init__(self) -> None:
        self.request_id: str | None = None
        """The id of the request being served; every message sent carries it (see ``protocol.py``)."""
        self._reader = os.fdopen(os.dup(0), "rb")
        self._out = os.dup(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)

    def send(self, message: dict, value_json: str | None = None) -> None:
        """Write one message; ``value_json`` is spliced in as the already-serialised ``value`` field."""
        text = _dumps(message if self.request_id is None else {**message, "id": self.request_id})
        if value_json is not None:
            text = text[:-1] + (', "value": ' if message else '"value": ') + value_json + "}"
        data = (text + "\n").encode("ascii")
        while data:
            data = data[os.write(self._out, data) :]

    def receive(self) -> dict | None:
        line = self._reader.readline()
        return _loads(line.decode()) if line else None  # str: json.loads would detect the encoding


class _DiscardingChannel(Channel):
    """Stands in for the host during :func:`_warm_up`: builds each message's text, sends nothing."""

    def __init__(self) -> None:  # no streams: nothing is read or written
        self.request_id = None

    def send(self, message: dict, value_json: str | None = None) -> None:
        _dumps(message)


# ------------------------------------------------------------------------------------------------ results


class CappedOutput(io.TextIOBase):
    """A text stream that keeps the first ``cap`` characters and counts the rest."""

    def __init__(self, cap: int) -> None:
        self._parts: list[str] = []
        self._size = 0
        self._cap = cap
        self.overflow = 0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        room = self._cap - self._size
        if room > 0:
            kept = text[:room]
            self._parts.append(kept)
            self._size += len(kept)
        self.overflow += max(0, len(text) - max(room, 0))
        return len(text)

    def getvalue(self) -> str:
        marker = f"\n...[output truncated: {self.overflow} more characters]" if self.overflow else ""
        return "".join(self._parts) + marker


def encode_value(value: object, cap: int) -> tuple[str, bool]:
    """JSON text of ``value`` (non-JSON parts as their repr); past ``cap`` characters, a string holding the
    first ``cap`` characters and a marker, and True."""
    try:
        text = _encode_with_repr(value)
    except BaseException:  # whatever a hostile value raises, the reply is still sent
        text = _dumps(_safe_repr(value))
    if len(text) <= cap:
        return text, False
    # A long string is cut as text (a str subclass's own methods are not trusted), anything else as JSON.
    shown = str.__str__(value) if isinstance(value, str) else text
    return _dumps(f"{shown[:cap]}...[truncated: {len(shown)} characters in all]"), True


def _safe_repr(value: object) -> str:
    try:
        text = repr(value)
        if type(text) is str:
            return text
        raise TypeError(f"__repr__ returned {type(text).__name__}")
    except BaseException as exc:  # a hostile __repr__ must not break the worker
        return f"<unrepresentable {type(value).__name__}: {type(exc).__name__}>"


_encode_with_repr = json.JSONEncoder(default=_safe_repr).encode
"""``json.dumps(value, default=_safe_repr)`` without building a new encoder for every result."""


def describe_error(exc: BaseException, limit: int = ERROR_TEXT_CAP) -> str:
    return f"{type(exc).__name__}: {_safe_repr_message(exc)}"[:limit]


def _safe_repr_message(exc: BaseException) -> str:
    try:
        text = str(exc)
        return text if type(text) is str else "<message not printable>"
    except BaseException:  # a hostile __str__ must not break the worker
        return "<message not printable>"


def status_of(exc: BaseException) -> str:
    return "resource_limit" if isinstance(exc, MemoryError) else "error"


# ----------------------------------------------------------------------------------------------- episodes


class Worker:
    """Serves one episode: a single ``load`` then any number of ``call`` / ``execute`` requests."""

    def __init__(self, channel: Channel, policy, output_cap: int, result_cap: int) -> None:
        self.channel = channel
        self.policy = policy
        self.output_cap = output_cap
        self.result_cap = result_cap
        self.namespace: dict | None = None
        self.functions: dict[str, types.FunctionType] = {}

    def serve(self) -> None:
        handlers = {
            "ping": self.ping,
            "load": self.load,
            "call": self.call,
            "execute": self.execute,
        }
        while (request := self.channel.receive()) is not None:
            self.channel.request_id = request.get("id")
            handler = handlers.get(request.get("op", ""))
            if handler is None:
                self.channel.send({"type": "fatal", "error": f"unknown request {request.get('op')!r}"})
                return
            handler(request)

    def ping(self, request: dict) -> None:
        self.channel.send({"type": "pong"})

    def _run_sources(self, sources: list, namespace: dict) -> list:
        """Execute each source in ``namespace``; one ``"source <index>: <error>"`` per failing source.

        A source is its text, compiled here by the policy, or ``{"code": base64}``: code the host compiled
        for this interpreter (see :meth:`PlainPolicy.load_code`). Every source is compiled or read before
        any of them runs, so no data of the host is read after tool code ran."""
        errors = []
        sink = CappedOutput(self.output_cap)
        codes: list[types.CodeType | BaseException] = []
        for index, source in enumerate(sources):
            try:
                codes.append(self._code_of(source, f"<tool source {index}>"))
            except BaseException as exc:
                codes.append(exc)
        for index, code in enumerate(codes):
            try:
                if isinstance(code, BaseException):
                    raise code
                with _redirected(sink):
                    exec(code, namespace)
            except BaseException as exc:
                errors.append(f"source {index}: {describe_error(exc)}")
        return errors

    def _code_of(self, source, filename: str) -> types.CodeType:
        if isinstance(source, str):
            return self.policy.compile(source, filename, "exec")
        load_code = getattr(self.policy, "load_code", None)
        if load_code is None:
            raise ValueError(f"the {self.policy.name} policy compiles every source itself")
        return load_code(source)

    def load(self, request: dict) -> None:
        if self.namespace is not None:
            self.channel.send({"type": "fatal", "error": "a worker serves one episode; load was repeated"})
            return
        namespace = self.policy.globals()
        errors = self._run_sources(request["sources"], namespace)
        self.namespace = namespace
        self.functions = {
            name: value
            for name, value in namespace.items()
            if isinstance(value, types.FunctionType) and value.__globals__ is namespace
        }
        parameters = {name: _positional_parameters(function) for name, function in self.functions.items()}
        message = {"type": "loaded", "functions": sorted(self.functions), "errors": errors}
        self.channel.send({**message, "parameters": parameters})

    def call(self, request: dict) -> None:
        function = self.functions.get(request.get("name", ""))
        arguments = request.get("arguments")
        output = CappedOutput(self.output_cap)
        if function is None:
            self._send_result("error", None, f"NameError: no loaded function named {request.get('name')!r}")
            return
        if not isinstance(arguments, dict):
            self._send_result("error", None, "TypeError: arguments must be a JSON object")
            return
        try:
            with _redirected(output):
                value = function(**arguments)
            if request.get("as_json_text"):  # the call's value is its JSON text, or the error of making it
                value = _dumps(value, ensure_ascii=False)
        except BaseException as exc:
            self._send_result(status_of(exc), None, describe_error(exc), output)
            return
        self._send_result("ok", value, None, output)

    def execute(self, request: dict) -> None:
        """Run code in a fresh namespace where each tool is a proxy: this worker holds no tool code (the host
        runs every call in the episode's own worker), so the code cannot reach a tool unseen by the host."""
        import ast

        output = CappedOutput(self.output_cap)
        namespace = self.policy.globals()
        namespace.update({name: self._proxy(name) for name in request.get("tools", ())})
        try:
            body = ast.parse(request["code"])
            last = body.body.pop() if body.body and isinstance(body.body[-1], ast.Expr) else None
            code = self.policy.compile(ast.unparse(body), "<code>", "exec")
            expression = (
                None if last is None else self.policy.compile(ast.unparse(last.value), "<code>", "eval")
            )
            with _redirected(output):
                exec(code, namespace)
                value = None if expression is None else eval(expression, namespace)
        except BaseException as exc:
            self._send_result(status_of(exc), None, describe_error(exc), output)
            return
        self._send_result("ok", value, None, output)

    def _proxy(self, name: str):
        """A stand-in that sends each call to the host, prints what the tool printed, and returns the value
        (JSON) the host sends back."""
        channel, cap = self.channel, self.result_cap

        def tool(*args, **kwargs):
            call_json, _ = encode_value({"args": list(args), "kwargs": kwargs}, cap)
            channel.send({"type": "tool_call", "name": name, "call": _loads(call_json)})
            reply = channel.receive()
            if not isinstance(reply, dict):
                raise ToolCallRefused("no reply from the host")
            if isinstance(reply.get("stdout"), str):
                sys.stdout.write(reply["stdout"])  # what the tool printed, as if it had run here
            if reply.get("status") == "ok":
                return reply.get("value")
            if reply.get("status") == "refused":
                raise ToolCallRefused(str(reply.get("error")))
            raise _tool_exception(str(reply.get("error")))

        tool.__name__ = name
        return tool

    def _send_result(self, status: str, value: object, error: str | None, output=None) -> None:
        value_json, truncated = encode_value(value, self.result_cap)
        stdout = output.getvalue() if output is not None else ""
        truncated = truncated or bool(output is not None and output.overflow)
        message = {
            "type": "result",
            "status": status,
            "error": error,
            "stdout": stdout,
            "truncated": truncated,
        }
        self.channel.send(message, value_json)


def _positional_parameters(function: types.FunctionType) -> list:
    """The names a positional argument can bind to, in order (the host binds a code block's calls by them).
    Read from the code object: importing ``inspect`` would add tens of milliseconds to every episode."""
    wrapped = getattr(function, "__wrapped__", None)  # functools.wraps: the parameters are the wrapped ones
    code = (wrapped if isinstance(wrapped, types.FunctionType) else function).__code__
    return [name for name in code.co_varnames[: code.co_argcount] if type(name) is str]


def _tool_exception(error: str) -> Exception:
    """The exception a failed tool call raises in the code: the builtin type its error text names (so that
    ``except ValueError`` works as if the tool ran here), else a ToolError."""
    type_name, _, message = error.partition(": ")
    kind = getattr(builtins, type_name, None)
    if isinstance(kind, type) and issubclass(kind, Exception):
        try:
            return kind(message)
        except Exception:  # a builtin that takes other arguments (UnicodeDecodeError ...)
            pass
    return ToolError(error)


class _redirected:
    """Send ``print`` and ``sys.stderr`` writes of tool code into a capped buffer."""

    def __init__(self, sink: CappedOutput) -> None:
        self.sink = sink

    def __enter__(self) -> None:
        self.saved = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = self.sink

    def __exit__(self, *exc: object) -> None:
        sys.stdout, sys.stderr = self.saved


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


def serve_episode(channel: Channel, config: dict, policy, load_seccomp, namespace_init: bool = False) -> int:
    """Harden this process (rlimits, uid, seccomp), say ``ready``, then serve one episode."""
    try:
        apply_rlimits(config["rlimits"], namespace_init)
        for name in config.get("preload", ()):
            __import__(name)
        uid = drop_privileges(config.get("drop_uid"))
        if load_seccomp is not None:
            load_seccomp()
    except Exception as exc:
        channel.send({"type": "fatal", "error": describe_error(exc)})
        return 1
    channel.send(
        {
            "type": "ready",
            "version": PROTOCOL_VERSION,
            "pid": os.getpid(),
            "uid": uid,
            "seccomp": load_seccomp is not None,
            "namespaces": bool(config.get("namespaces")),
            "rlimits": config["rlimits"],
            "policy": policy.name,
            "bytecode": MAGIC_NUMBER.hex() if hasattr(policy, "load_code") else None,
        }
    )
    Worker(channel, policy, config["output_cap"], config["result_cap"]).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
