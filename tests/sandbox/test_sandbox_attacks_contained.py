"""Runs ``tests/attacks`` contained: in its own PID namespace (``unshare --pid --fork --mount-proc``) and in
fresh pids and memory cgroups (v1), so that a sandbox regression cannot fork-bomb, exhaust or kill the
machine running the suite. Asserts the attack suite passed. One contained run per file of the suite, so that
the two test workers of ``make test`` share them."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.paths import ROOT

ATTACKS = ROOT / "tests" / "attacks"
ATTACK_FILES = sorted(path.name for path in ATTACKS.glob("test_*.py"))
CGROUP_ROOT = Path("/sys/fs/cgroup")
LIMITS = {"pids": {"pids.max": "512"}, "memory": {"memory.limit_in_bytes": str(3 << 30)}}


def _missing_prerequisite() -> str | None:
    if os.geteuid() != 0:
        return "containing the attack tests needs root (cgroups and PID namespaces)"
    if shutil.which("unshare") is None:
        return "the unshare command (util-linux) is not installed"
    for controller in LIMITS:
        if not (CGROUP_ROOT / controller).is_dir():
            return f"the cgroup v1 {controller} controller is not mounted at {CGROUP_ROOT / controller}"
    return None


@pytest.fixture
def cgroups() -> Iterator[list[Path]]:
    missing = _missing_prerequisite()
    if missing is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"cannot run the attack tests contained: {missing}")
        pytest.skip(missing)
    name = f"hopgym-attacks-{os.getpid()}"
    groups = []
    try:
        for controller, settings in LIMITS.items():
            group = CGROUP_ROOT / controller / name
            group.mkdir()
            groups.append(group)
            for key, value in settings.items():
                (group / key).write_text(value)
        yield groups
    finally:
        for group in groups:
            _empty_and_remove(group)


def _empty_and_remove(group: Path) -> None:
    for _ in range(100):
        pids = [int(pid) for pid in (group / "cgroup.procs").read_text().split()]
        if not pids:
            group.rmdir()
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    raise RuntimeError(f"processes remain in {group}")


@pytest.mark.early  # each run takes up to two minutes on 2 busy cores (tests/conftest.py)
@pytest.mark.parametrize("attack_file", ATTACK_FILES)
def test_attack_suite_passes_contained(cgroups: list[Path], attack_file: str) -> None:
    def join_cgroups() -> None:
        for group in cgroups:
            (group / "cgroup.procs").write_text(str(os.getpid()))

    command = ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-m", "pytest"]
    command += [str(ATTACKS / attack_file), "-q", "-p", "no:cacheprovider", "-o", "addopts="]
    completed = subprocess.run(
        command,
        cwd=ROOT,
        env={**os.environ, "HOPGYM_ATTACKS_CONTAINED": "1"},
        preexec_fn=join_cgroups,
        capture_output=True,
        text=True,
        timeout=900,
    )
    report = completed.stdout[-6000:] + completed.stderr[-2000:]
    assert completed.returncode == 0, report
    assert " passed" in completed.stdout, report
