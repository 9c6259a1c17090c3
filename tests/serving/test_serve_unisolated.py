"""``hopgym serve env`` where the sandbox does not isolate the files (isolation ``none``), and its key file:
a real server subprocess driven by hopgym's client. CodeAct code is refused on the session (which goes on)
and ToolTasks-v0 refuses to start unless the operator passes ``--allow-unisolated-code``; with it, code runs
and reads what the workers' uid can. The key comes from a file only its owner reads; ``--api-key`` warns."""

from __future__ import annotations

import asyncio
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tests.extras import require_extra

require_extra("openenv.core", "serve")

from hopgym.errors import EnvServerError  # noqa: E402
from tests.servers import env_server, hopgym  # noqa: E402

UNISOLATED = ["--env-arg", 'sandbox_options={"isolation": "none", "cgroup": "none"}']
OPTION = "--allow-unisolated-code"


async def code_then_answer(url: str, code: str, api_key: str | None = None) -> tuple[Any, float]:
    """Send ``code`` as a CodeAct action (what it printed, or the error the server sent), then finish the
    same session's episode with a final answer (its reward)."""
    from hopgym.serving.openenv_client import HopgymEnvClient
    from hopgym.serving.openenv_types import HopgymAction

    async with HopgymEnvClient(url, api_key=api_key) as client:
        await client.reset(index=0)
        try:
            result = await client.step(HopgymAction(code=code))
            printed: Any = result.observation.messages[-1]["content"]
        except EnvServerError as exc:
            printed = exc
        answered = await client.step(HopgymAction(content="Final answer: unknown"))
        assert answered.done
        return printed, float(answered.reward or 0.0)


def test_code_is_refused_on_the_session_without_the_option_and_the_session_goes_on(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    with env_server(*UNISOLATED) as (url, _):
        refused, reward = asyncio.run(code_then_answer(url, code))
        assert isinstance(refused, EnvServerError) and OPTION in str(refused), refused
        assert reward == 0.0 and not marker.exists()
        again, _ = asyncio.run(code_then_answer(url, code))  # the server serves the next session alike
        assert isinstance(again, EnvServerError) and not marker.exists()


def test_with_the_option_code_runs_and_reads_what_the_workers_uid_can() -> None:
    with tempfile.TemporaryDirectory(dir="/tmp") as folder:  # pytest's tmp_path lies in a 0700 folder
        Path(folder).chmod(0o755)
        code_reads(Path(folder))


def code_reads(folder: Path) -> None:
    shared, private = folder / "shared.txt", folder / "private.txt"
    shared.write_text("anyone's")
    private.write_text("the server user's")
    private.chmod(0o600)
    code = (
        "import os\n"
        f"for path in ({str(shared)!r}, {str(private)!r}):\n"
        "    try:\n"
        "        print(os.getuid(), open(path).read())\n"
        "    except OSError as exc:\n"
        "        print(os.getuid(), type(exc).__name__)\n"
    )
    with env_server(*UNISOLATED, OPTION) as (url, _):
        printed, _ = asyncio.run(code_then_answer(url, code))
    # started as root the workers run as nobody; otherwise as the server's own user, reading its files
    uid = 65534 if os.geteuid() == 0 else os.geteuid()
    private_text = "PermissionError" if os.geteuid() == 0 else "the server user's"
    assert f"{uid} anyone's" in printed and f"{uid} {private_text}" in printed, printed


def test_tooltasks_refuses_to_start_unisolated_without_the_option() -> None:
    command = hopgym("serve", "env", "--env", "ToolTasks-v0", *UNISOLATED)
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and OPTION in refused.stderr and "ready:" not in refused.stdout
    with env_server("--env", "ToolTasks-v0", *UNISOLATED, OPTION) as (url, _):
        _, reward = asyncio.run(code_then_answer(url, "print(1)"))
        assert reward == 0.0


def write_key(path: Path, mode: int, text: str = "file-key\n") -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_key_file_guards_the_server(tmp_path: Path) -> None:
    from hopgym.serving.openenv_client import HopgymEnvClient

    key = write_key(tmp_path / "key", 0o600)

    async def sessions(url: str) -> None:
        with pytest.raises((EnvServerError, ConnectionError)):
            async with HopgymEnvClient(url, api_key="wrong") as client:
                await client.reset(index=0)
        async with HopgymEnvClient(url, api_key="file-key") as client:
            assert (await client.reset(index=0)).observation.info["task_id"]

    with env_server("--api-key-file", str(key)) as (url, server):
        asyncio.run(sessions(url))
        assert "file-key" not in Path(f"/proc/{server.pid}/cmdline").read_text()
        assert b"file-key" not in Path(f"/proc/{server.pid}/environ").read_bytes()


@pytest.mark.parametrize(
    ("mode", "text", "named"),
    [
        (0o640, "k\n", "chmod 600"),
        (0o604, "k\n", "mode 0604"),
        (0o600, "\n\n", "is empty"),
        (0o600, "k" * 5000, "over 4096 bytes"),
    ],
)
def test_a_key_file_others_can_read_or_without_a_key_is_refused(
    tmp_path: Path, mode: int, text: str, named: str
) -> None:
    key = write_key(tmp_path / "key", mode, text)
    command = hopgym("serve", "env", "--api-key-file", str(key))
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and named in refused.stderr and "ready:" not in refused.stdout


def test_a_missing_key_file_a_fifo_and_two_keys_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    for flags, named in (
        (["--api-key-file", str(tmp_path / "none")], "cannot be read"),
        (["--api-key", "k", "--api-key-file", str(write_key(tmp_path / "key", 0o600))], "not both"),
        (["--api-key-file", str(fifo)], "not a regular file"),
    ):
        refused = subprocess.run(hopgym("serve", "env", *flags), capture_output=True, text=True, timeout=120)
        assert refused.returncode == 2 and named in refused.stderr, refused.stderr


def test_a_key_on_the_command_line_warns_where_it_shows() -> None:
    command = hopgym("serve", "env", "--api-key", "cli-key", "--max-sessions", "0")
    refused = subprocess.run(command, capture_output=True, text=True, timeout=120)  # stops after the warning
    assert "--api-key-file" in refused.stderr and "command line" in refused.stderr
