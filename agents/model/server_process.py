"""Starting a model server as a child process, waiting until it answers, and stopping it for sure.

Shared by the embedded llama.cpp server and vLLM: both are OpenAI-compatible and ready when
``GET {api_base}/models`` answers 200; with ``check_model`` set, a one-token chat request must also
complete before the server is handed out (a server can list its models and still crash on its first real
prompt, e.g. on CPU instructions the machine does not grant). The child runs in its own process group so
stopping it also stops whatever it spawned, and its output goes to a log file whose tail is shown when it
fails to start or dies mid-run (:meth:`ServerProcess.failure`). That file is kept, and named, when the
server failed or the ``with`` block it served was interrupted; when the block ends cleanly it is removed,
so that runs that start a server each do not fill /tmp with logs (``hopgym serve`` keeps its log: a server
that answers badly without dying is read there).
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from hopgym.errors import ModelError

logger = logging.getLogger(__name__)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def is_ready(api_base: str, timeout: float = 2.0) -> bool:
    """True when the server lists its models (the OpenAI-compatible readiness probe)."""
    try:
        with urllib.request.urlopen(f"{api_base.rstrip('/')}/models", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def describe_exit(code: int) -> str:
    """A child's return code in words: ``killed by signal SIGSEGV`` or ``exited with code 1``."""
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


class ServerProcess:
    """A model server child process: ``start()`` returns once it is ready; ``stop()`` ends it."""

    def __init__(
        self,
        name: str,
        command: Sequence[str],
        api_base: str,
        startup_timeout: float,
        env: Mapping[str, str] | None = None,
        log_path: Path | None = None,
        check_model: str | None = None,
    ) -> None:
        self.name = name
        self.command = list(command)
        self.api_base = api_base
        self.startup_timeout = startup_timeout
        self._env = {**os.environ, **(env or {})}
        self._owns_log = log_path is None
        self._log_path = log_path
        self.check_model = check_model
        self._process: subprocess.Popen[bytes] | None = None
        self._failure: str | None = None

    @classmethod
    def on_loopback(
        cls,
        name: str,
        command_for_port: Callable[[int], Sequence[str]],
        port: int | None,
        startup_timeout: float,
        check_model: str | None = None,
    ) -> ServerProcess:
        """An OpenAI-compatible server on 127.0.0.1 at ``port`` (a free one when None), serving under /v1."""
        port = port or free_port()
        api_base = f"http://127.0.0.1:{port}/v1"
        return cls(name, command_for_port(port), api_base, startup_timeout, check_model=check_model)

    def start(self) -> ServerProcess:
        """Launch the command and wait until the server answers (and passes its self-check), or raise
        ModelError with its log tail."""
        if is_ready(self.api_base, timeout=0.5):
            raise ModelError(
                f"{self.name}: something already answers at {self.api_base}; choose another port"
            )
        with self.log_path.open("wb") as log:
            try:
                self._process = subprocess.Popen(
                    self.command, stdout=log, stderr=subprocess.STDOUT, env=self._env, start_new_session=True
                )
            except FileNotFoundError as exc:
                self._remove_own_log()  # empty: the error says all there is
                raise ModelError(f"{self.name}: cannot run {self.command[0]!r}: {exc.strerror}") from exc
        self._failure = None
        try:
            self._wait_until_ready()
            if self.check_model:
                self._self_check(self.check_model)
        except BaseException as exc:  # a timeout, Ctrl-C or SIGTERM while waiting must not leave it behind
            self.stop()
            if not isinstance(exc, ModelError):  # a ModelError names the log itself
                logger.warning(
                    "%s was stopped while starting; its log is kept at %s", self.name, self.log_path
                )
            raise
        return self

    def _wait_until_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.startup_timeout
        delay = 0.05
        while not is_ready(self.api_base, timeout=1.0):
            code = self._process.poll()
            if code is not None:
                raise ModelError(
                    f"{self.name} {describe_exit(code)} before it was ready; {self.log_excerpt()}"
                )
            if time.monotonic() > deadline:
                raise ModelError(
                    f"{self.name} was not ready after {self.startup_timeout:.0f} s; {self.log_excerpt()}"
                )
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    def _self_check(self, model: str) -> None:
        """One short chat completion: the server must compute, not only listen."""
        assert self._process is not None
        body = {"model": model, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1}
        request = urllib.request.Request(
            f"{self.api_base.rstrip('/')}/chat/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=self.startup_timeout) as response:
                json.load(response)["choices"][0]
        except (OSError, ValueError, KeyError, IndexError) as exc:
            try:
                code = self._process.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                raise ModelError(
                    f"{self.name} failed its self-check (a one-token chat request): {exc}; "
                    f"{self.log_excerpt()}"
                ) from exc
            raise ModelError(
                f"{self.name} {describe_exit(code)} during its self-check (a one-token chat request); "
                f"{self.log_excerpt()}"
            ) from exc

    def failure(self, wait: float = 0.5) -> str | None:
        """Why the started server is gone (its exit and log tail), or None while it runs.

        Called when a request could not connect: a dying server may need ``wait`` seconds to be reaped.
        The first time it finds the server dead it also logs the reason, so the console shows it once.
        """
        if self._failure is not None or self._process is None:
            return self._failure
        try:
            code = self._process.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            return None
        self._failure = f"{self.name} {describe_exit(code)}; {self.log_excerpt()}"
        logger.error("the model server crashed: %s", self._failure)
        return self._failure

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    @property
    def log_path(self) -> Path:
        """The server's log file: the one given, else a temporary file made on first use (a server object
        that is never started, as for a printed command line, leaves none)."""
        if self._log_path is None:
            descriptor, name = tempfile.mkstemp(prefix=f"hopgym-{self.name}-", suffix=".log")
            os.close(descriptor)
            self._log_path = Path(name)
        return self._log_path

    def log_excerpt(self) -> str:
        """Where the log is and its last lines, for an error message."""
        return f"the end of {self.log_path}:\n{self.log_tail()}"

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the server's process group, then SIGKILL it after ``grace`` seconds."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(process.pid, sig)
            except ProcessLookupError:
                return
            try:
                process.wait(timeout=wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        """Stop the server; remove its log if it ran to this clean stop (see the module's docstring)."""
        clean = exc_type is None and self.running
        self.stop()
        if clean:
            self._remove_own_log()
        elif self._log_path is not None and self._log_path.exists():
            logger.warning("%s stopped; its log is kept at %s", self.name, self._log_path)

    def _remove_own_log(self) -> None:
        if self._owns_log and self._log_path is not None:
            self._log_path.unlink(missing_ok=True)
