"""Attacks through what a task row or an agent hands the host: tool schemas that reach for the network or
files or make validation run for hours, oversized tool sources, and agent arguments that break parsers.
A hostile row is rejected with a DataError naming it; a hostile argument becomes an error the agent sees and
a recorded call, and the episode goes on."""

from __future__ import annotations

import inspect
import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.envs.validation import ToolValidator
from hopgym.errors import DataError
from hopgym.sandbox import Sandbox
from hopgym.tasks.toolhop.loader import load_toolhop

pytestmark = [pytest.mark.attack, pytest.mark.host_side]

ECHO_SOURCE = "def echo(text):\n    return {'echo': text}\n"
ECHO_SCHEMA = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
HOURS = 120.0
"""Seconds a check may take in these tests: each attack below runs for hours (or forever) on an unsafe
host and in milliseconds on a safe one, so the verdict does not depend on the machine's speed."""


def row(row_id: str, schema: dict[str, Any], source: str = ECHO_SOURCE, name: str = "echo") -> dict[str, Any]:
    document = {"name": name, "description": "Echo the text.", "parameters": schema}
    return {
        "id": row_id,
        "question": "What is echoed?",
        "answer": "hi",
        "sub_task": {"What is echoed?": "hi"},
        "tools": {name: document},
        "functions": [source],
    }


def write_rows(path: Path, *rows: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def finishes(check: Callable[[], Any]) -> Any:
    """Run ``check`` in a thread and return its result; fail if it is still running after HOURS."""
    outcome: list[Any] = []
    thread = threading.Thread(target=lambda: outcome.append(check()), daemon=True)
    thread.start()
    thread.join(HOURS)
    assert outcome, "the check was still running: the host would hang on this input"
    return outcome[0]


# ------------------------------------------------------------------------------------------ tool documents


class _Recorder(BaseHTTPRequestHandler):
    requests: list[str] = []  # noqa: RUF012 - shared by the server's handler instances

    def do_GET(self) -> None:
        _Recorder.requests.append(self.path)
        body = json.dumps({"type": "string"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        return


@pytest.fixture
def loopback_server() -> Iterator[str]:
    _Recorder.requests.clear()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def ref_schema(ref: str) -> dict[str, Any]:
    return {"type": "object", "properties": {"text": {"$ref": ref}}, "required": ["text"]}


def test_a_remote_ref_is_refused_and_never_fetched(tmp_path: Path, loopback_server: str) -> None:
    hostile = row("remote-ref", ref_schema(f"{loopback_server}/schema.json"))
    with pytest.raises(
        DataError, match=r"ToolHop row remote-ref, tool 'echo': \$ref .* does not point inside"
    ):
        load_toolhop(write_rows(tmp_path / "rows.jsonl", row("fine", ECHO_SCHEMA), hostile))
    with pytest.raises(DataError, match="does not point inside"):
        ToolValidator([{"type": "function", "function": hostile["tools"]["echo"]}])
    assert _Recorder.requests == []


def test_a_file_ref_is_refused_and_never_read(tmp_path: Path, host_dir: Path) -> None:
    secret = host_dir / "secret.json"
    secret.write_text(json.dumps({"enum": ["host-secret-in-a-file"]}))
    secret.chmod(0o600)
    rows = write_rows(tmp_path / "rows.jsonl", row("file-ref", ref_schema(secret.as_uri())))
    with pytest.raises(DataError, match="ToolHop row file-ref") as raised:
        load_toolhop(rows)
    assert "host-secret-in-a-file" not in str(raised.value)


def test_a_pattern_the_linear_time_engine_cannot_run_is_refused(tmp_path: Path) -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a)\\1$"}}}
    with pytest.raises(DataError, match="ToolHop row backreference, tool 'echo': pattern"):
        load_toolhop(write_rows(tmp_path / "rows.jsonl", row("backreference", schema)))


DRAFT7 = "http://json-schema.org/draft-07/schema#"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"text": {"$schema": DRAFT7, "pattern": "^(a|a)+$"}}},
        {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object", "properties": {}},
        {  # reachable only through the $ref, under a keyword Draft 2020-12 does not look into
            "type": "object",
            "properties": {"text": {"$ref": "#/hidden"}},
            "hidden": {"$schema": DRAFT7, "dependencies": {"a": ["b"]}},
        },
    ],
    ids=["nested", "root", "behind-a-ref"],
)
def test_a_dialect_switch_is_refused(tmp_path: Path, schema: dict[str, Any]) -> None:
    """Below a ``$schema`` jsonschema validates with that dialect's own validator, which has Python's
    backtracking ``re`` and no time budget: a catastrophic pattern would hold the host for hours."""
    with pytest.raises(DataError, match=r"ToolHop row dialect, tool 'echo': \$schema is refused"):
        load_toolhop(write_rows(tmp_path / "rows.jsonl", row("dialect", schema)))


def test_repeated_type_names_do_not_multiply_the_work_per_value() -> None:
    """The fast acceptor runs before the validation budget starts, so its cost must be linear in the
    arguments: a 64 KiB ``type`` list of repeats checked over 87,000 items would be ~7 * 10^8 type tests."""
    names = ["null"] * 8_000 + ["integer"]
    schema = {"type": "object", "properties": {"text": {"type": "array", "items": {"type": names}}}}
    validator = ToolValidator([{"type": "function", "function": {"name": "echo", "parameters": schema}}])
    arguments = json.dumps({"text": [0] * 87_000})  # under the 256 KiB cap on arguments
    started = time.monotonic()
    check = finishes(lambda: validator.check("echo", arguments))
    assert check.status == "ok", check.messages
    assert time.monotonic() - started < 5.0  # about 0.05 s here; the quadratic walk took about a minute


def test_an_oversized_tool_source_is_refused_before_it_is_parsed(tmp_path: Path) -> None:
    source = ECHO_SOURCE + "DATA = [\n" + "    1,\n" * 200_000 + "]\n"  # 1.2 MB: ~300 MB of host syntax tree
    with pytest.raises(DataError, match=r"task big-source, function 0: tool code is \d+ characters long"):
        load_toolhop(write_rows(tmp_path / "rows.jsonl", row("big-source", ECHO_SCHEMA, source)))


def exponential_schema(depth: int = 40) -> dict[str, Any]:
    """A few hundred bytes whose validation visits 2**depth subschemas."""
    defs: dict[str, Any] = {
        f"d{i}": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(depth)
    }
    defs[f"d{depth}"] = {"type": "integer"}
    return {"type": "object", "properties": {"text": {"$ref": "#/$defs/d0"}}, "$defs": defs}


SLOW_SCHEMAS = {
    "catastrophic-pattern": (
        {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}},
        {"text": "a" * 40 + "!"},
    ),
    "unique-items": (
        {"type": "object", "properties": {"text": {"type": "array", "uniqueItems": True}}},
        {"text": [item for i in range(25_000) for item in (i, str(i))]},  # unsortable: compared pairwise
    ),
    "exponential-refs": (exponential_schema(), {"text": "not an integer"}),
}


@pytest.mark.parametrize("kind", sorted(SLOW_SCHEMAS))
def test_validation_of_a_hostile_schema_ends_with_an_error(kind: str) -> None:
    schema, arguments = SLOW_SCHEMAS[kind]
    validator = ToolValidator([{"type": "function", "function": {"name": "echo", "parameters": schema}}])
    check = finishes(lambda: validator.check("echo", json.dumps(arguments)))
    assert check.status == "invalid_arguments", check.messages
    assert finishes(lambda: validator.check("echo", {"text": "aaa"})).errors != ("tool_hallucination",)


# ------------------------------------------------------------------------------------ agent arguments in env


def hopgym_protocol() -> dict[str, str]:
    """``protocol="hopgym"`` (schema-validated calls) where the env has the option (ToolHop-v0's default
    became ``official``, which runs calls without schema refusal)."""
    return {"protocol": "hopgym"} if "protocol" in inspect.signature(ToolHopEnv).parameters else {}


@pytest.fixture
def env(tmp_path: Path, sandbox: Sandbox) -> Iterator[ToolHopEnv]:
    surrogate_source = "def surrogate(text):\n    return 'bad \\ud800 value ' + text\n"
    rows = write_rows(
        tmp_path / "rows.jsonl",
        row("echo", ECHO_SCHEMA),
        row("surrogate", ECHO_SCHEMA, surrogate_source, name="surrogate"),
    )
    environment = ToolHopEnv(data_path=rows, sandbox=sandbox, scenario="free", **hopgym_protocol())
    yield environment
    environment.close()


def nested_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def call(name: Any, arguments: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "function": {"name": name, "arguments": arguments}}],
    }


HOSTILE_CALLS = {
    "deep-json": ("echo", "[" * 100_000, "invalid_arguments"),
    "deep-json-object": ("echo", '{"text": ' + "[" * 100_000, "invalid_arguments"),
    "5000-digit-json-integer": ("echo", '{"text": ' + "9" * 5000 + "}", "invalid_arguments"),
    "5000-digit-integer": ("echo", {"text": 10**5000}, "invalid_arguments"),
    "lone-surrogate-escape": ("echo", '{"text": "\\ud800"}', "invalid_arguments"),
    # A lone surrogate in a string of the action is made U+FFFD where the action enters (model_text.py);
    # one escaped inside argument JSON text is no valid JSON for a call.
    "lone-surrogate": ("echo", {"text": "\ud800"}, "ok"),
    "8-MiB-arguments": ("echo", json.dumps({"text": "x" * (8 << 20)}), "invalid_arguments"),
    "not-json-values": ("echo", {"text": {1, 2}}, "invalid_arguments"),
    "list-name": (["echo"], {"text": "hi"}, "tool_hallucination"),
    "dict-name": ({"name": "echo"}, {"text": "hi"}, "tool_hallucination"),
    "deep-name": (nested_list(100_000), {"text": "hi"}, "tool_hallucination"),
    "5000-digit-name": (10**5000, {"text": "hi"}, "tool_hallucination"),
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_CALLS))
def test_hostile_arguments_become_a_recorded_error(env: ToolHopEnv, kind: str) -> None:
    name, arguments, status = HOSTILE_CALLS[kind]
    env.reset(options={"task_id": "echo"})
    observation, _, terminated, _, info = env.step(call(name, arguments))
    (record,) = info["calls"]
    assert record["status"] == status, record["feedback"]
    assert not terminated
    json.dumps(info["calls"], ensure_ascii=False).encode("utf-8")  # a run's log can write the record
    assert len(observation["messages"][-1]["content"]) < 10_000
    _, _, _, _, info = env.step(call("echo", {"text": "still works"}))
    assert info["calls"][0]["status"] == "ok", info["calls"][0]


def test_a_lone_surrogate_result_reaches_the_agent_as_valid_unicode(env: ToolHopEnv) -> None:
    env.reset(options={"task_id": "surrogate"})
    observation, _, _, _, info = env.step(call("surrogate", {"text": "x"}))
    assert info["calls"][0]["status"] == "ok", info["calls"][0]
    json.dumps([list(observation["messages"]), info], ensure_ascii=False).encode("utf-8")
    assert "bad \ufffd value x" in observation["messages"][-1]["content"]


def test_a_catastrophic_pattern_argument_does_not_stall_the_step(tmp_path: Path, sandbox: Sandbox) -> None:
    schema = {"type": "object", "properties": {"text": {"type": "string", "pattern": "^(a+)+$"}}}
    rows = write_rows(tmp_path / "rows.jsonl", row("redos", schema))
    environment = ToolHopEnv(data_path=rows, sandbox=sandbox, scenario="free", **hopgym_protocol())
    try:
        environment.reset(options={"task_id": "redos"})
        _, _, _, _, info = finishes(lambda: environment.step(call("echo", {"text": "a" * 40 + "!"})))
        assert (
            "invalid_arguments" in info["calls"][0]["errors"]
            or info["calls"][0]["status"] == "invalid_arguments"
        )
        _, _, _, _, info = environment.step(call("echo", {"text": "aaaa"}))
        assert info["calls"][0]["status"] == "ok", info["calls"][0]
    finally:
        environment.close()
