"""Each attack must fail, come back as an error result (never an exception on the host), and leave the
episode usable: the next call, in the same episode, works."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from hopgym.sandbox import CallResult, Sandbox

pytestmark = pytest.mark.attack

BENIGN = "def still_works(x):\n    return {'echo': x}\n"


SECRET_MARK = "host-secret"
"""A prefix of the conftest's host secret: no result may contain it."""


ENDLESS_TIMEOUT = 1.0
"""The call timeout of the attacks that can only end by timing out (endless loops): their verdict does not
depend on it, and each second of it is a core spinning while the rest of the suite waits for CPU."""


def attack(sandbox: Sandbox, body: str, timeout: float | None = None, **arguments: object) -> CallResult:
    """Load ``def attack(...)`` with ``body`` next to a benign tool, run it (within ``timeout`` seconds, else
    the sandbox's own), and check the episode goes on."""
    parameters = ", ".join(arguments)
    indented = "\n".join("    " + line for line in body.strip().splitlines())
    loaded = sandbox.load([f"def attack({parameters}):\n{indented}\n", BENIGN])
    assert loaded.errors == ()
    result = sandbox.call("attack", arguments, timeout)
    after = sandbox.call("still_works", {"x": 7})
    assert after.status == "ok", after
    assert after.value == {"echo": 7}
    assert SECRET_MARK not in repr(result)
    return result


def assert_denied(result: CallResult) -> None:
    assert result.status == "error", result
    assert "Operation not permitted" in result.error or "Permission denied" in result.error, result.error


def test_reading_a_root_only_host_file_fails(sandbox: Sandbox, host_dir: Path) -> None:
    result = attack(sandbox, "return open(path).read()", path=str(host_dir / "secret.txt"))
    # Every backend shows the worker only its own view (a container's root, a minimal set of binds):
    # host files do not exist there.
    assert result.status == "error" and result.error.startswith("FileNotFoundError"), result


def test_writing_outside_the_sandbox_fails(sandbox: Sandbox, host_dir: Path) -> None:
    target = host_dir / "written-by-tool"
    result = attack(sandbox, "open(path, 'w').write('pwned')\nreturn 'written'", path=str(target))
    assert result.status == "error"
    assert not target.exists()


@pytest.mark.parametrize("family", ["AF_INET", "AF_INET6", "AF_UNIX"])
def test_opening_a_socket_fails(sandbox: Sandbox, family: str) -> None:
    result = attack(sandbox, f"import socket\nreturn str(socket.socket(socket.{family}, socket.SOCK_STREAM))")
    assert_denied(result)


SPAWNS = {
    "subprocess": "import subprocess\nsubprocess.run(['/bin/sh', '-c', 'touch ' + marker], check=True)",
    "os_system": (
        "import os\nif os.system('touch ' + marker) != 0:\n"
        "    raise PermissionError('Operation not permitted')"
    ),
    "os_posix_spawn": "import os\nos.posix_spawn('/usr/bin/touch', ['touch', marker], {})",
    "ctypes_fork": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\npid = libc.fork()\n"
        "if pid == 0:\n    os._exit(0)\n"
        "if pid < 0:\n    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))\nreturn pid"
    ),
    "ctypes_execve": (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "argv = (ctypes.c_char_p * 3)(b'/usr/bin/touch', marker.encode(), None)\n"
        "libc.execve(b'/usr/bin/touch', argv, None)\n"
        "raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))"
    ),
}


@pytest.mark.parametrize("how", sorted(SPAWNS))
def test_spawning_a_process_fails(sandbox: Sandbox, host_dir: Path, how: str) -> None:
    marker = "/tmp/spawned-marker"  # inside the sandbox's private /tmp; the tool checks it did not appear
    body = SPAWNS[how] + "\nimport os\nreturn os.path.exists(marker)"
    assert_denied(attack(sandbox, body, marker=marker))


def test_fork_bomb_fails_fast(sandbox: Sandbox, attack_limits: dict[str, float]) -> None:
    started = time.monotonic()
    result = attack(sandbox, "import os\nwhile True:\n    os.fork()")
    assert_denied(result)
    assert time.monotonic() - started < attack_limits["timeout"]


def test_memory_bomb_hits_the_limit(sandbox: Sandbox) -> None:
    result = attack(sandbox, "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))")
    assert result.status == "resource_limit", result


def test_infinite_loop_times_out_and_the_episode_goes_on(sandbox: Sandbox) -> None:
    result = attack(sandbox, "while True:\n    pass", timeout=ENDLESS_TIMEOUT)
    assert result.status == "timeout"
    assert result.latency_ms >= ENDLESS_TIMEOUT * 1000


def test_output_flood_is_truncated(sandbox: Sandbox) -> None:
    result = attack(sandbox, "return 'x' * (50 << 20)")
    assert result.status == "ok"
    assert result.truncated
    assert len(result.value) < 100_000
    assert "truncated" in result.value


def test_print_flood_is_capped(sandbox: Sandbox) -> None:
    result = attack(sandbox, "for _ in range(2000):\n    print('y' * 10000)\nreturn 'done'")
    assert result.value == "done"
    assert result.truncated
    assert len(result.stdout) < 100_000


def test_endless_printing_times_out(sandbox: Sandbox) -> None:
    result = attack(sandbox, "while True:\n    print('z' * 1000)", timeout=ENDLESS_TIMEOUT)
    assert result.status == "timeout"


def test_forging_protocol_messages_costs_only_the_worker(sandbox: Sandbox) -> None:
    body = (
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'{not json' * 100000 + b'\\n')\n"
        "    except OSError:\n        pass\nreturn 'forged'"
    )
    result = attack(sandbox, body)
    assert result.status in ("ok", "error")
    assert result.value in ("forged", None)


@pytest.mark.parametrize(
    "body",
    [
        "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
        "import os, signal\nos.kill(-1, signal.SIGKILL)",
        "import os, signal\nos.kill(1, signal.SIGKILL)",
    ],
    ids=["parent", "everything", "pid1"],
)
def test_killing_other_processes_fails(sandbox: Sandbox, body: str) -> None:
    assert_denied(attack(sandbox, body))


def test_walking_subclasses_to_os_system_fails(sandbox: Sandbox) -> None:
    body = """
for cls in ().__class__.__base__.__subclasses__():
    if cls.__name__ == '_wrap_close':
        system = cls.__init__.__globals__['system']
        if system('touch /tmp/walked') != 0:
            raise PermissionError('Operation not permitted: system() failed')
        return 'escaped'
raise LookupError('os._wrap_close not found')
"""
    assert_denied(attack(sandbox, body))


def test_patched_builtins_modules_and_globals_do_not_leak(sandbox: Sandbox) -> None:
    poison = """def poison():
    import builtins, sys, json
    builtins.len = lambda obj: 42
    sys.modules['json'] = None
    json.dumps = lambda *a, **k: 'poisoned'
    globals()['LEAKED'] = True
    return 'poisoned'
"""
    sandbox.load([poison])
    # Within its own episode the tool owns its worker and may break it; the host only sees results.
    assert sandbox.call("poison", {}).status in ("ok", "error")
    check = (
        "def check():\n    import json\n    return [len([1, 2, 3]), json.dumps([1]), 'LEAKED' in globals()]\n"
    )
    sandbox.load([check])
    assert sandbox.call("check", {}).value == [3, "[1]", False]


def test_host_environment_is_not_visible(sandbox: Sandbox, host_secret: tuple[str, str]) -> None:
    name, secret = host_secret
    assert secret.startswith(SECRET_MARK)
    body = f"import os\nreturn os.environ[{name!r}]"
    result = attack(sandbox, body)
    assert result.status == "error"
    assert result.error.startswith("KeyError")
    for path in ("/proc/1/environ", "/proc/self/environ"):
        leaked = attack(sandbox, "return open(path).read()", path=path)
        assert secret not in str(leaked.value)


def test_the_worker_runs_unprivileged(sandbox: Sandbox) -> None:
    body = "import os\nreturn [os.getresuid(), os.getresgid(), os.getgroups()]"
    uids, gids, groups = attack(sandbox, body).value
    assert 0 not in uids and 0 not in gids and 0 not in groups
