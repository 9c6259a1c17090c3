"""Worker output is hostile input under every protocol: tool code (or a code block) that makes its worker send
a result that is not JSON text, nested past the host's stack, or millions of objects within the byte caps.
``env.step`` must return an observation (the call failed or was cut, with a reason) and never raise; what
the host keeps of a call, and of a code block's calls, is bounded in parsed objects; the next step and the
next episode work."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hopgym.envs.toolhop.env import ToolHopEnv
from hopgym.sandbox import Sandbox
from hopgym.sandbox.bounded import MAX_DEPTH
from tests.attacks.test_attacks import BENIGN, attack
from tests.attacks.test_tool_document_attacks import row, write_rows

pytestmark = [pytest.mark.attack, pytest.mark.host_side]

WORKER_GLOBALS = (
    "import gc, json\n"
    "_g = next(o for o in gc.get_objects() if type(o).__name__ == 'Worker')._send_result.__globals__\n"
)
"""Code that reaches the worker's request handler, whose ``encode_value`` encodes each result and each call
a code block sends (tool code and code blocks share their worker's process)."""
RAW_REPLY = (  # inside a function: a task's tool source keeps only its imports and definitions
    "def _send_raw(text):\n"  # the next result's value field is ``text``, as it is, past every cap
    "    import gc\n"
    "    g = next(o for o in gc.get_objects() if type(o).__name__ == 'Worker')._send_result.__globals__\n"
    "    encode = g['encode_value']\n"
    "    def once(value, cap):\n"
    "        g['encode_value'] = encode\n"
    "        return text, False\n"
    "    g['encode_value'] = once\n"
)
HOSTILE_TOOLS = (
    (  # the tool first: the official code finds a tool by the first ``def`` of its source
        "def forge(kind):\n"
        "    deep, deeper = '[' * 30000 + ']' * 30000, '[' * 100000 + ']' * 100000\n"
        "    texts = {'not-json': 'this is { not JSON', 'deep': deep, 'deeper': deeper}\n"
        "    values = {'deep-value': '[' * 900 + ']' * 900, 'objects': '[' + '{},' * 300000 + '{}]'}\n"
        "    _send_raw(json.dumps(texts[kind]) if kind in texts else values[kind])\n"
        "    return None\n"
    )
    + "import json\n"
    + RAW_REPLY
)
SCHEMA = {"type": "object", "properties": {"kind": {"type": "string"}}, "required": ["kind"]}
ECHO_SCHEMA = {"type": "object", "properties": {"x": {}}, "required": ["x"]}


@pytest.fixture(params=["official", "hopgym"])
def env(request: pytest.FixtureRequest, tmp_path: Path, sandbox: Sandbox) -> Iterator[ToolHopEnv]:
    rows = write_rows(
        tmp_path / "rows.jsonl",
        row("forge", SCHEMA, HOSTILE_TOOLS, name="forge"),
        row("echo", ECHO_SCHEMA, BENIGN, name="still_works"),
    )
    environment = ToolHopEnv(data_path=rows, sandbox=sandbox, scenario="free", protocol=request.param)
    yield environment
    environment.close()


def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    tool_call = {
        "id": "c1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }
    return {"role": "assistant", "content": "", "tool_calls": [tool_call]}


def still_works(env: ToolHopEnv) -> None:
    """The same episode takes another call, and the next episode runs."""
    _, _, _, _, info = env.step(call("forge", {"kind": "nothing"}))  # a KeyError of the tool: reported
    assert info["calls"][0]["status"] == "tool_error", info["calls"][0]
    env.reset(options={"task_id": "echo"})
    _, _, _, _, info = env.step(call("still_works", {"x": 5}))
    assert info["calls"][0]["status"] == "ok" and '"echo": 5' in info["calls"][0]["feedback"]


@pytest.mark.parametrize("kind", ["not-json", "deep", "deeper", "deep-value", "objects"])
def test_whatever_text_a_tool_makes_its_worker_send_step_returns_an_observation(
    env: ToolHopEnv, kind: str
) -> None:
    env.reset(options={"task_id": "forge"})
    observation, _, terminated, truncated, info = env.step(call("forge", {"kind": kind}))
    (record,) = info["calls"]
    assert not terminated and not truncated
    text = observation["messages"][-1]["content"]
    assert text == record["feedback"] and len(text) < 200_000
    official = env.protocol == "official"
    if official and kind in ("not-json", "deep"):  # JSON text that is not JSON, or too deep to read
        assert record["status"] == "tool_error", record
        assert text.startswith("an error occured when call forge: the tool's result is not JSON text ("), text
    elif kind in ("deeper", "objects"):  # past the caps: cut, as a result over its cap is
        assert record["truncated"], record
    elif kind == "deep-value" and not official:  # parsed, then cut at the host's depth
        assert record["status"] == "ok" and record["truncated"], record
        assert f"nested deeper than {MAX_DEPTH} levels" in text
    json.dumps(info, ensure_ascii=False).encode("utf-8")  # a run's log can write the record
    still_works(env)


def test_a_call_value_is_bounded_in_objects_on_the_host(sandbox: Sandbox) -> None:
    """The sandbox itself (every env's calls go through it: ToolHop, FamilyTool, KGTool): a reply of 300,000
    empty objects within the byte cap comes back cut to what a value of ``result_cap`` characters holds."""
    tracemalloc.start()
    try:
        result = attack(sandbox, RAW_REPLY + "_send_raw('[' + '{},' * 300000 + '{}]')\nreturn None")
        kept = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert result.status == "ok" and result.truncated, result
    assert result.value[-1].startswith("...[truncated: "), result.value[-1]
    assert kept < 8 << 20, f"the host kept {kept >> 20} MiB of one call's value"


def test_a_code_block_of_object_floods_keeps_a_bounded_record(tmp_path: Path, sandbox: Sandbox) -> None:
    """One CodeAct step whose calls carry arrays of empty objects in compact JSON (within the 4 MiB event
    cap): before the bound its records held ~72 MiB of host objects; now a few MiB, the overrunning call
    recorded cut, the block ended as a resource limit."""
    rows = write_rows(tmp_path / "rows.jsonl", row("echo", ECHO_SCHEMA, BENIGN, name="still_works"))
    # A deadline far past the flood's own time (~10 s under tracemalloc on a slow backend): the bound ends it.
    environment = ToolHopEnv(
        data_path=rows, sandbox=sandbox, scenario="free", protocol="hopgym", call_timeout=300
    )
    compact = WORKER_GLOBALS + (
        "_g['encode_value'] = lambda v, cap: (json.dumps(v, separators=(',', ':')), False)\n"
        "for i in range(200):\n"
        "    still_works(x=[{}] * 65000)\n"
    )
    try:
        environment.reset(options={"task_id": "echo"})
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            _, _, _, _, info = environment.step({"role": "assistant", "content": "", "code": compact})
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert kept < 16 << 20, f"one step's records kept {kept >> 20} MiB"
        assert info["calls"] and info["calls"][-1]["truncated"], info["calls"][-1:]
        assert "came to more than" in info["calls"][-1]["feedback"]
        _, _, _, _, info = environment.step({"role": "assistant", "content": "", "code": "still_works(x=3)"})
        assert info["calls"][0]["status"] == "ok", info["calls"][0]
    finally:
        environment.close()
