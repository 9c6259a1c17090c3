"""How the worker hardens itself before it reads any request: raw namespaces (``namespaces``), rlimits, the
uid drop and the seccomp filter; security-critical, and it changes rarely.

One of the worker's modules (``isolation.WORKER_FILES``): it runs inside the sandbox, so it imports only the
standard library and the worker's own modules (ctypes lazily, for libc and libseccomp); the host imports
its seccomp library and device names from here (one definition each).
"""

from __future__ import annotations

import errno
import os
import resource
import signal

from hopgym.sandbox.wire import ready

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

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
MS_REMOUNT, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 0x20, 0x1000, 0x2000, 0x4000, 0x40000
_NEW_ROOT = "/tmp"  # where the namespaces mode builds the worker's root, in its own mount namespace
_NAMESPACE_FLAGS = 0x00020000 | 0x04000000 | 0x08000000 | 0x40000000 | 0x20000000  # mnt uts ipc net pid
PR_SET_PDEATHSIG = 1
CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWPID = 0x00020000, 0x08000000, 0x20000000


def open_libc():  # imported lazily: only the namespaces mode needs ctypes
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def check(result: int, what: str) -> None:
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
    libc = open_libc()
    check(libc.unshare(_NAMESPACE_FLAGS), "unshare")
    _fork_and_relay(libc, signal_as_code=False)  # this side stays outside the new PID namespace

    # Now PID 1 of the namespace. The kernel ignores default-action signals (SIGXCPU ...) sent to a
    # namespace's init, so the worker itself runs as PID 2, forked after the mounts below.
    def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None) -> None:
        sys_mount(libc, source, target, fstype, flags, data)

    def bind(source: str, target: str, flags: int = MS_RDONLY | MS_NOSUID | MS_NODEV) -> None:
        sys_bind(libc, source, target, flags)

    def place(path: str, directory: bool) -> str:
        return mount_point(_NEW_ROOT + path, directory)

    mount(None, "/", None, MS_REC | MS_PRIVATE, None)
    # Held open while the new root is mounted over /tmp, then bound through /proc/self/fd.
    sources = [(path, os.open(path, os.O_PATH)) for path in view["binds"]]
    mount("tmpfs", _NEW_ROOT, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path, target in view["symlinks"]:
        os.symlink(target, _NEW_ROOT + path)
    # The private /tmp first: a bind under /tmp (a checkout or venv there) goes on top of it.
    mount(
        "tmpfs",
        place("/tmp", directory=True),
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={tmpfs_bytes},mode=1777",
    )
    for path, fd in sources:
        bind(f"/proc/self/fd/{fd}", place(path, directory=os.path.isdir(f"/proc/self/fd/{fd}")))
        os.close(fd)
    mount("proc", place("/proc", directory=True), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    dev = place("/dev", directory=True)
    mount("tmpfs", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        bind(f"/dev/{name}", place(f"/dev/{name}", directory=False), MS_NOSUID | MS_NOEXEC)
    os.symlink("/proc/self/fd", f"{dev}/fd")
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink(f"/proc/self/fd/{fd}", f"{dev}/{name}")
    os.chdir(_NEW_ROOT)
    mount(_NEW_ROOT, "/", None, MS_MOVE, None)
    check(libc.chroot(b"."), "chroot")
    os.chdir("/")
    for target in ("/dev", "/"):
        mount(None, target, None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, None)
    _fork_and_relay(libc, signal_as_code=True)


def sys_mount(
    libc, source: str | None, target: str, fstype: str | None, flags: int, data: str | None
) -> None:
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    check(libc.mount(encode(source), encode(target), encode(fstype), flags, encode(data)), f"mount {target}")


def sys_bind(libc, source: str, target: str, flags: int = MS_RDONLY | MS_NOSUID | MS_NODEV) -> None:
    """Bind ``source`` (and the mounts below it) at ``target``, then make it read-only (or ``flags``)."""
    sys_mount(libc, source, target, None, MS_BIND | MS_REC, None)
    sys_mount(libc, None, target, None, MS_REMOUNT | MS_BIND | flags, None)


def mount_point(target: str, directory: bool) -> str:
    """``target`` made to bind a folder (``directory``) or a file onto, with traversable folders above it."""
    os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
    if directory:
        os.makedirs(target, mode=0o755, exist_ok=True)
    elif not os.path.exists(target):
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
    return target


def die_with_host(host_pid: int) -> None:
    """Be killed when the host dies (the relays and the worker below die with this process in turn)."""
    check(open_libc().prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
    if os.getppid() != host_pid:  # the host died before the line above
        os._exit(1)


def _fork_and_relay(libc, signal_as_code: bool) -> None:
    """Fork; the child returns (and dies with its parent), the parent waits and exits as the child did.

    A namespace's init cannot die by its own signal, so it reports one as exit code 128 + n (as bubblewrap
    does); the outermost parent turns such a code back into that signal for the host to see."""
    child = os.fork()
    if child == 0:
        check(libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
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


def apply_rlimits(limits: dict[str, int], namespace_init: bool = False) -> None:
    """Cap memory, CPU seconds, file size and open files; core dumps off.

    A namespace's init (a forked worker) ignores a default-action SIGXCPU, so its CPU limit is the hard
    one: the kernel's SIGKILL, which no process escapes, at the limit itself (the fork-server reports it as
    SIGXCPU: see ``template._exit_code``)."""
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
