"""Entry point of the checkpoint server: a trained model answering OpenAI chat requests on CPU with
transformers' own generation, reading replies exactly as training does.

Each request is prompted with the checkpoint's tokenizer given the training chat template
(agents/model/chat_template.py) and the request's tools, generated with ``model.generate`` (greedy at
temperature 0, else sampled) and read with the training parser (agents/model/reply_parser.py); calls come
back as OpenAI ``tool_calls``. Greedy requests that arrive together are generated as one left-padded batch
(up to ``--max-batch``): a small model on CPU spends most of a step in per-step overhead, so eight replies
cost little more than one (benchmarks/bench_checkpoint.py). A sampled request runs alone, so its seed
alone decides it. Run as ``python -m hopgym.agents.model.checkpoint_entry --model DIR --port N``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from hopgym.agents.model.chat_template import prepare_tokenizer
from hopgym.agents.model.reply_parser import parse_reply
from hopgym.messages import tool_call

DEFAULT_MAX_TOKENS = 512
MAX_BATCH = 8
"""Greedy requests generated together at most; ``hopgym eval`` runs this many episodes at once."""
GATHER_SECONDS = 0.02
"""How long the first request of a batch waits for others: the episodes of an eval send their next
request within milliseconds of each other's replies, and a generation takes seconds."""
MAX_BODY_BYTES = 16 * 1024 * 1024
"""A request body larger than this is refused unread: a conversation of hopgym's is far smaller."""


def request_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The request's messages as training renders them: a call's arguments as an object (the OpenAI wire
    carries JSON text; the template would print that text as a quoted string)."""
    shown = []
    for message in messages:
        calls = message.get("tool_calls")
        if calls:
            message = {**message, "tool_calls": [_decoded_call(call) for call in calls]}
        shown.append(message)
    return shown


def _decoded_call(call: dict[str, Any]) -> dict[str, Any]:
    function = dict(call.get("function") or {})
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(json.JSONDecodeError):  # else shown as the model wrote it
            function["arguments"] = json.loads(arguments)
    return {**call, "function": function}


def reply_message(
    tokenizer: Any, ids: Sequence[int], prefix: Sequence[int], tools: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """The OpenAI assistant message for the reply ``ids``: the training parser's content and calls, or
    the decoded text when the reply does not parse (the agent then sees what the model wrote)."""
    parsed = parse_reply(tokenizer, ids, prefix, tools)
    if parsed is None:
        return {"role": "assistant", "content": tokenizer.decode(list(ids), skip_special_tokens=True)}
    message: dict[str, Any] = {"role": "assistant", "content": parsed.get("content") or ""}
    calls = [call.get("function", call) for call in parsed.get("tool_calls") or []]
    if calls:
        message["tool_calls"] = [tool_call(call.get("name"), call.get("arguments")) for call in calls]
    return message


@dataclass
class _Generation:
    """One request's generation, waiting for the batch loop to fill ``ids`` or ``error``."""

    prefix: list[int]
    limit: int
    sampling: dict[str, Any]
    seed: int | None
    done: threading.Event = field(default_factory=threading.Event)
    ids: list[int] = field(default_factory=list)
    error: BaseException | None = None

    @property
    def greedy(self) -> bool:
        return not self.sampling["do_sample"]


class CheckpointModel:
    """A model folder loaded for CPU inference, with its tokenizer prepared as training prepares it;
    one thread generates, batching the greedy requests that wait together."""

    def __init__(self, folder: str, name: str, max_batch: int = MAX_BATCH) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.name = name
        self.max_batch = max(1, max_batch)
        self.tokenizer = prepare_tokenizer(AutoTokenizer.from_pretrained(folder, trust_remote_code=False))
        self.model = AutoModelForCausalLM.from_pretrained(  # a folder is user input: weights, no code
            folder, dtype=torch.float32, use_safetensors=True, trust_remote_code=False
        ).eval()
        self._waiting: list[_Generation] = []
        self._arrived = threading.Condition()
        threading.Thread(target=self._generate_forever, name="generate", daemon=True).start()

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """An OpenAI chat completion for the request ``body``."""
        tools = body.get("tools") or None
        prefix = list(
            self.tokenizer.apply_chat_template(
                request_messages(body.get("messages") or []),
                tools=tools,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
        )
        limit = int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        temperature = float(body.get("temperature") or 0.0)
        sampling: dict[str, Any] = {"do_sample": False}
        if temperature > 0:
            sampling = {
                "do_sample": True,
                "temperature": temperature,
                "top_p": float(body.get("top_p") or 1.0),
            }
        seed = int(body["seed"]) if body.get("seed") is not None else None
        ids = self.generate(_Generation(prefix, max(1, limit), sampling, seed))
        finished = bool(ids) and ids[-1] == self.tokenizer.eos_token_id
        message = reply_message(self.tokenizer, ids, prefix, tools)
        reason = "tool_calls" if message.get("tool_calls") else "stop" if finished else "length"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": reason}],
            "usage": {
                "prompt_tokens": len(prefix),
                "completion_tokens": len(ids),
                "total_tokens": len(prefix) + len(ids),
            },
        }

    def generate(self, request: _Generation) -> list[int]:
        """The reply ids of ``request``, generated alone or in a batch with others that wait with it."""
        with self._arrived:
            self._waiting.append(request)
            self._arrived.notify()
        request.done.wait()
        if request.error is not None:
            raise request.error
        return request.ids

    def _generate_forever(self) -> None:
        while True:
            batch = self._next_batch()
            try:
                self._generate_batch(batch)
            except Exception as exc:  # every waiting request gets the failure, the loop goes on
                for request in batch:
                    request.error = exc
            for request in batch:
                request.done.set()

    def _next_batch(self) -> list[_Generation]:
        """The oldest waiting request, with the greedy ones waiting beside it if it is greedy."""
        with self._arrived:
            while not self._waiting:
                self._arrived.wait()
            if self._waiting[0].greedy:
                deadline = time.monotonic() + GATHER_SECONDS
                while len(self._waiting) < self.max_batch and (left := deadline - time.monotonic()) > 0:
                    self._arrived.wait(left)
            first = self._waiting[0]
            batch = [r for r in self._waiting if r.greedy][: self.max_batch] if first.greedy else [first]
            self._waiting = [r for r in self._waiting if r not in batch]
            return batch

    def _generate_batch(self, batch: list[_Generation]) -> None:
        """Generate ``batch`` as one left-padded tensor; each reply is cut at its own end of text and
        limit, as a greedy generation of that request alone would end."""
        import torch

        width = max(len(request.prefix) for request in batch)
        pad, eos = self.tokenizer.pad_token_id, self.tokenizer.eos_token_id
        ids = torch.tensor([[pad] * (width - len(r.prefix)) + r.prefix for r in batch])
        mask = torch.tensor([[0] * (width - len(r.prefix)) + [1] * len(r.prefix) for r in batch])
        if batch[0].seed is not None:
            torch.manual_seed(batch[0].seed)
        with torch.inference_mode():
            output = self.model.generate(
                ids,
                attention_mask=mask,
                max_new_tokens=max(request.limit for request in batch),
                eos_token_id=eos,
                pad_token_id=pad,
                top_k=None,
                **batch[0].sampling,
            )
        for request, row in zip(batch, output[:, width:].tolist(), strict=True):
            reply = row[: request.limit]
            request.ids = reply[: reply.index(eos) + 1] if eos in reply else reply


def handler_for(model: CheckpointModel) -> type[BaseHTTPRequestHandler]:
    """The HTTP handler serving ``model``: GET /v1/models, POST /v1/chat/completions."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.rstrip("/") != "/v1/models":
                self._send(404, {"error": {"message": f"no such path {self.path}; try /v1/models"}})
                return
            self._send(200, {"object": "list", "data": [{"id": model.name, "object": "model"}]})

        def do_POST(self) -> None:
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._send(404, {"error": {"message": f"no such path {self.path}; try /v1/chat/completions"}})
                return
            declared = self.headers.get("Content-Length") or "0"
            length = int(declared) if declared.isascii() and declared.isdigit() and len(declared) < 12 else 0
            if not 0 < length <= MAX_BODY_BYTES:
                self.close_connection = True  # the unread body must not be taken for the next request
                self._send(413, {"error": {"message": f"a body of {length} bytes; 1 to {MAX_BODY_BYTES}"}})
                return
            try:
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                    raise ValueError("the body must be a JSON object with a list of messages")
                answer = model.complete(body)
            except (ValueError, TypeError, KeyError) as exc:
                self._send(400, {"error": {"message": f"bad request: {exc}"}})
                return
            self._send(200, answer)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a line per request would fill the kept log; failures are logged by the client

    return Handler


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--model", required=True, help="a transformers model folder")
    parser.add_argument("--name", default="checkpoint", help="the model name the server answers to")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--threads", type=int, help="torch's CPU threads (default: torch's choice)")
    parser.add_argument(
        "--max-batch", type=int, default=MAX_BATCH, help="greedy requests generated together at most"
    )
    args = parser.parse_args(argv)
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    model = CheckpointModel(args.model, args.name, args.max_batch)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), handler_for(model))
    print(f"serving {args.model} as {args.name} at http://127.0.0.1:{args.port}/v1", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
