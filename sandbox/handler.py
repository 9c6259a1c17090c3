"""The worker's request handler: one episode's ``load``, ``call`` and ``execute`` requests served on the
protocol stream, once :func:`serve_episode` has hardened the process and said ``ready``.

One of the worker's modules (``isolation.WORKER_FILES``): it runs inside the sandbox, so it imports only the
standard library and the worker's own modules.
"""

from __future__ import annotations

import builtins
import os
import sys
import types
from importlib._bootstrap_external import MAGIC_NUMBER  # loaded at every interpreter start

from hopgym.sandbox.hardening import apply_rlimits, drop_privileges
from hopgym.sandbox.wire import (
    PROTOCOL_VERSION,
    CappedOutput,
    Channel,
    describe_error,
    dumps,
    encode_value,
    loads,
    status_of,
)


class ToolCallRefused(Exception):
    """Raised inside executed code when the host's hook refuses a tool call."""


class ToolError(Exception):
    """Raised inside executed code when a tool call failed in a way no builtin exception names."""


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
        for this interpreter (see ``code_policy.PlainPolicy.load_code``). Every source is compiled or read
        before any of them runs, so no data of the host is read after tool code ran."""
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
                value = dumps(value, ensure_ascii=False)
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
            channel.send({"type": "tool_call", "name": name, "call": loads(call_json)})
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
