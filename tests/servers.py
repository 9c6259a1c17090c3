"""hopgym's servers as the tests start them: ``hopgym serve env`` and ``hopgym serve scripted`` as
subprocesses, an env server on a thread of the test's own process, ``hopgym view`` and the raw GETs its tests
send; and the /proc checks that no process outlives them."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

ENV_SERVER_READY = re.compile(r"^ready: --base-url (http://127\.0\.0\.1:\d+)$")
MODEL_SERVER_READY = re.compile(
    r"^ready: --model (\S+) --api-base (http://127\.0\.0\.1:\d+/v1) --api-key (\S+)$"
)


def hopgym(*args: str) -> list[str]:
    """The ``hopgym`` console command, as this interpreter runs it."""
    return [sys.executable, "-m", "hopgym.cli", *args]


def env_server_url(process: subprocess.Popen) -> str:
    """The base URL a ``hopgym serve env`` process prints on its ready line (its first)."""
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    match = ENV_SERVER_READY.match(line)
    assert match, f"serve env did not print its ready line: {line!r}"
    return match.group(1)


@contextlib.contextmanager
def env_server(*args: str) -> Iterator[tuple[str, subprocess.Popen]]:
    """``hopgym serve env ARGS`` until the block ends; yields its base URL and process. SIGTERM stops it
    like Ctrl-C, and it leaves no process behind."""
    server = subprocess.Popen(hopgym("serve", "env", *args), stdout=subprocess.PIPE, text=True)
    try:
        yield env_server_url(server), server
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 130
    assert descendants(server.pid) == []


@contextlib.contextmanager
def env_servers(count: int, *args: str) -> Iterator[list[tuple[str, subprocess.Popen]]]:
    """``count`` ``hopgym serve env ARGS`` processes, started at once; killed (if still alive) when the
    block ends, and each process's sandbox workers with it."""
    processes = [
        subprocess.Popen(hopgym("serve", "env", *args), stdout=subprocess.PIPE, text=True)
        for _ in range(count)
    ]
    try:
        yield [(env_server_url(process), process) for process in processes]
    finally:
        for process in processes:
            workers = descendants(process.pid)
            process.kill()
            process.wait(timeout=60)
            assert wait_until(lambda workers=workers: not any(alive(pid) for pid in workers))


@contextlib.contextmanager
def env_server_in_thread(
    api_key: str, env_id: str = "ToolHop-v0", env_kwargs: Mapping[str, Any] | None = None
) -> Iterator[str]:
    """The app serving ``env_id`` with an API key on a uvicorn server in a thread of this process (on
    127.0.0.1)."""
    import threading

    import uvicorn

    from hopgym.serving.openenv_server import ServedEnv, env_app, serving

    served = ServedEnv(env_id, dict(env_kwargs or {}), 1)
    listener = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(env_app(served, api_key), log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    with serving(served), listener:
        thread.start()
        assert wait_until(lambda: server.started, timeout=30)
        try:
            yield f"http://127.0.0.1:{listener.getsockname()[1]}"
        finally:
            server.should_exit = True
            thread.join(timeout=30)


@contextlib.contextmanager
def model_server(*args: str) -> Iterator[tuple[str, str, str]]:
    """Run ``hopgym serve scripted ARGS`` until the block ends; yields the (model, api base, api key) it
    prints. SIGTERM stops it like Ctrl-C."""
    server = subprocess.Popen(hopgym("serve", "scripted", *args), stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        match = MODEL_SERVER_READY.match(server.stdout.readline().strip())
        assert match, "serve scripted did not print its ready line"
        yield match.group(1), match.group(2), match.group(3)
    finally:
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=30) == 130  # stopped as by Ctrl-C: "hopgym: interrupted"


def viewed_episodes(command: list[str], cwd: Path) -> int:
    """Start ``hopgym view ...`` as the README does, read the episode count its page's API reports for the
    one run, and stop it with SIGTERM."""
    viewer = subprocess.Popen(hopgym(*command[1:]), cwd=cwd, stdout=subprocess.PIPE, text=True)
    try:
        assert viewer.stdout is not None
        found = re.search(r"(http://127\.0\.0\.1:\d+/)(\?token=[\w-]+)", viewer.stdout.readline())
        assert found, "hopgym view did not print its URL"
        with urllib.request.urlopen(found.group(1) + "api/runs" + found.group(2), timeout=30) as response:
            (run,) = json.load(response)
        return int(run["episodes"])
    finally:
        viewer.send_signal(signal.SIGTERM)
        assert viewer.wait(timeout=30) == 0


def descendants(pid: int) -> list[int]:
    """Every live process under ``pid`` (its sandbox workers, their bwrap and templates), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def wait_until(check: Any, timeout: float = 20.0) -> bool:
    """Whether ``check()`` came true within ``timeout`` s (polled every 50 ms)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def get(
    url: str, path: str, host: str | None = None, token: str | None = ""
) -> tuple[int, bytes, http.client.HTTPMessage]:
    """GET ``path`` sent exactly as given (no client-side normalization of ``..``), with the token of
    ``url`` (``token=""``), another one, or none (``None``) added to its query."""
    address = urlsplit(url)
    if token is not None:
        token = token or parse_qs(address.query)["token"][0]
        path += ("&" if "?" in path else "?") + urlencode({"token": token})
    connection = http.client.HTTPConnection(address.hostname, address.port, timeout=10)
    try:
        connection.putrequest("GET", path, skip_host=True)
        connection.putheader("Host", host or address.netloc)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read(), response.headers
    finally:
        connection.close()


def get_json(url: str, path: str) -> Any:
    """GET ``path`` with the token of ``url``: its JSON body (status 200 and a JSON content type asserted)."""
    status, body, headers = get(url, path)
    assert status == 200 and headers["Content-Type"] == "application/json"
    return json.loads(body)
