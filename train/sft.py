"""A supervised warm start before GRPO: the env's own gold solution paths, played through the env, as chat
demonstrations for TRL's ``SFTTrainer``.

A 135M model writes no parseable tool call from a prompt's format description alone (0 of 120 completions
in a 30-step GRPO run), so the call and correctness terms of a reward never vary within a group and GRPO
has nothing to learn from. KG2Tool's answer is instruction data from verified solution paths; here each
path is played through the env itself (the prompt, tool schemas and tool messages the model will see in
GRPO, every call run in the sandbox) and kept only when the env scores the episode correct.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym

from hopgym.agents.evaluation.training_record import training_stages, write_record
from hopgym.envs.chat import chat_env
from hopgym.errors import ConfigError
from hopgym.serving.rollouts import make_env
from hopgym.train.config import EMBEDDED
from hopgym.train.model import load_model, load_tokenizer


def demonstrations(env: gym.Env, indices: Sequence[int]) -> list[dict[str, Any]]:
    """One chat per task whose gold solution path the env scores correct: the env's first messages, one
    assistant call per solution step with the env's tool message after it, then the answer names."""
    inner = chat_env(env)
    tasks = inner.tasks
    if not indices or not hasattr(tasks[indices[0]], "solution"):
        raise ConfigError(f"{env.spec.id if env.spec else env}: its tasks carry no gold solution path")
    chats = []
    for index in indices:
        task = tasks[index]
        observation, _ = env.reset(options={"index": index})
        for number, call in enumerate(task.solution):
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            function = {"name": call.name, "arguments": arguments}
            tool_call = {"id": f"call_{number}", "type": "function", "function": function}
            observation, _, terminated, truncated, _ = env.step(
                {"role": "assistant", "content": "", "tool_calls": [tool_call]}
            )
            if terminated or truncated:  # a path as long as max_turns: no turn left to answer
                break
        else:
            answer = "\n".join(sorted({inner.source.label(a) for a in task.answers}))  # type: ignore[attr-defined]
            observation, reward, terminated, _, _ = env.step(answer)
            if terminated and reward == 1.0:
                chats.append(
                    {"messages": observation["messages"], "tools": observation["tools"], "task_id": task.id}
                )
    return chats


def tokenized(tokenizer: Any, chat: dict[str, Any]) -> dict[str, list[int]]:
    """The chat's tokens, with labels on the assistant turns only (-100 elsewhere): the model learns to write
    its calls and its answer, not the prompt or the sandbox's tool results, which the env supplies."""
    messages = [_with_argument_objects(message) for message in chat["messages"]]
    tools = chat["tools"]

    def render(upto: int, generation_prompt: bool = False) -> str:
        return tokenizer.apply_chat_template(
            messages[:upto], tools=tools, add_generation_prompt=generation_prompt, tokenize=False
        )

    whole = render(len(messages))
    spans = []
    for index, message in enumerate(messages):
        if message["role"] == "assistant":
            turn = render(index + 1)
            if not whole.startswith(turn):
                raise ConfigError("the chat template renders a turn differently inside the whole chat")
            spans.append((len(render(index, generation_prompt=True)), len(turn)))
    encoded = tokenizer(whole, add_special_tokens=False, return_offsets_mapping=True)
    labels = [
        token if any(start <= first and last <= end for start, end in spans) else -100
        for token, (first, last) in zip(encoded["input_ids"], encoded["offset_mapping"], strict=True)
    ]
    return {"input_ids": encoded["input_ids"], "labels": labels}


def _with_argument_objects(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant message whose calls' arguments are objects, as chat templates render them (the env keeps
    OpenAI's JSON text, which a template would render as a quoted string)."""
    calls = message.get("tool_calls")
    if not calls:
        return message
    rendered = [
        {**call, "function": {**call["function"], "arguments": json.loads(call["function"]["arguments"])}}
        for call in calls
    ]
    return {**message, "tool_calls": rendered}


def warm_start(
    env_id: str,
    env_kwargs: dict[str, Any],
    out: Path,
    model: str = EMBEDDED,
    limit: int | None = None,
    epochs: float = 1.0,
    learning_rate: float = 5e-5,
    batch_size: int = 4,
    train_layers: int | None = None,
    threads: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Fine-tune ``model`` on the env's verified demonstrations and save it (and its tokenizer) in ``out``,
    a folder ``hopgym train grpo --model`` takes. Returns the run's figures."""
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from hopgym.train.grpo import freeze_below

    if (out / "config.json").exists():
        raise ConfigError(f"{out} holds a model already; choose another --out")
    if threads is not None:
        torch.set_num_threads(threads)
    env = make_env(env_id, env_kwargs)
    try:
        count = len(chat_env(env).tasks)
        chats = demonstrations(env, range(min(count, limit) if limit else count))
        stages = training_stages(model, "sft", env_id, env_kwargs, env, [chat["task_id"] for chat in chats])
    finally:
        env.close()
    if not chats:
        raise ConfigError(f"no gold solution path of {env_id} {env_kwargs} scored correct")
    tokenizer = load_tokenizer(model)
    tokenizer.padding_side = "right"  # training pads after the text
    dataset = Dataset.from_list([tokenized(tokenizer, chat) for chat in chats])
    network = load_model(model)
    if train_layers is not None:
        freeze_below(network, train_layers)
    arguments = SFTConfig(
        output_dir=str(out),
        num_train_epochs=epochs,
        learning_rate=learning_rate,
        per_device_train_batch_size=batch_size,
        logging_steps=5,
        save_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        disable_tqdm=not progress,
        dataloader_num_workers=0,
        activation_checkpointing=False,
    )
    trainer = SFTTrainer(model=network, args=arguments, train_dataset=dataset, processing_class=tokenizer)
    result = trainer.train()
    trainer.save_model(str(out))
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(str(out))
    write_record(out, stages)
    figures = {
        "demonstrations": len(chats),
        "tasks": count if not limit else min(count, limit),
        "loss": result.training_loss,
    }
    (out / "sft.json").write_text(
        json.dumps({"env": env_id, "env_kwargs": env_kwargs, "model": model, **figures}, indent=2)
    )
    return figures
