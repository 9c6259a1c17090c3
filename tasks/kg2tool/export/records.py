EXPORT_FORMATS = ("sharegpt", "alpaca", "openai")
RECORD_KINDS = ("trajectory", "steps", "plan", "review")

def export_records(
    tasks: Sequence[KG2ToolTask],
    fmt: str,
    tools_for: Callable[[KG2ToolTask], ToolDocs],
    label: Callable[[str], str],
    seed: int = 0,
    kinds: Sequence[str] = RECORD_KINDS,
) -> Iterator[dict[str, Any]]:
    """Every record of the chosen ``kinds`` for each task, in task order; deterministic for a seed.

    ``tools_for`` gives the tools offered with a task (its solution's tools and any distractors);
    ``label`` names an answer entity. Review corruptions replace entities with results of other steps
    and tasks in the batch, so they stay plausible.
    """
    if fmt not in EXPORT_FORMATS:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")
    unknown = [kind for kind in kinds if kind not in RECORD_KINDS]
    if unknown:
        raise ConfigError(f"unknown record kind(s) {unknown}; valid: {', '.join(RECORD_KINDS)}")
    pool = sorted({item for task in tasks for call in task.solution for item in call.result})
    for task in tasks:
        rng = random.Random(f"{seed}:{task.id}")
        tools = list(tools_for(task))
        dialogues: list[tuple[str, list[tuple[str, str]]]] = []
        if "trajectory" in kinds:
            dialogues.append(("trajectory", _trajectory_turns(task, label)))
        if "steps" in kinds:
            dialogues.append(("steps", _step_turns(task, label)))
        if "plan" in kinds:
            dialogues.append(("plan", _plan_turns(task)))
        if "review" in kinds:
            dialogues += [("review", turns) for turns in _review_turns(task, rng, pool)]
        for index, (kind, turns) in enumerate(dialogues):
            record = _FORMATTERS[fmt](turns, tools)
            record.update(id=f"{task.id}/{index}-{kind}", task_id=task.id, kind=kind)
            yield record


_FORMATTERS = {"sharegpt": _sharegpt, "alpaca": _alpaca, "openai": _openai}


def validate_record(record: Any, fmt: str) -> None:
    """Check one exported record against its format; DataError says what is wrong.

    ShareGPT: ``conversations`` alternates user-side (human, observation) and model-side (gpt,
    function_call) turns, starts with human, ends with gpt, every observation follows a function call
    whose value is a JSON ``{"name", "arguments"}``; ``system`` and ``tools`` are strings. Alpaca:
    string ``instruction``, ``input``, ``output``, ``system`` and ``history`` as [instruction, output]
    string pairs. OpenAI: ``tools`` lists function documents; ``messages`` is a system message, then the
    same alternation as ShareGPT (user, assistant, assistant with one tool call, tool answering that
    call's id), each call naming a listed tool with JSON-object arguments.
    """
    if not isinstance(record, Mapping):
        raise DataError(f"a {fmt} record must be an object, got {type(record).__name__}")
    for key in ("id", "task_id", "kind"):
        if not isinstance(record.get(key), str):
            raise DataError(f"{fmt} record lacks a string {key!r}")
    where = record["id"]
    if fmt == "sharegpt":
        _validate_sharegpt(record, where)
    elif fmt == "alpaca":
        _validate_alpaca(record, where)
    elif fmt == "openai":
        _validate_openai(record, where)
    else:
        raise ConfigError(f"unknown export format {fmt!r}; valid: {', '.join(EXPORT_FORMATS)}")


def read_trajectory(record: Mapping[str, Any], fmt: str) -> Trajectory:
    """The calls and answer names of an exported trajectory record (the inverse of the export)."""
    validate_record(record, fmt)
    if record["kind"] != "trajectory":
        raise DataError(
            f"{record['id']}: only trajectory records hold a whole solution, not {record['kind']!r}"
        )
    if fmt == "sharegpt":
        turns = [(turn["from"], turn["value"]) for turn in record["conversations"]]
    elif fmt == "openai":
        turns = _openai_turns(record["messages"][1:], record["id"])
    else:
        texts = [text for pair in record["history"] for text in pair] + [
            record["instruction"],
            record["output"],
        ]
        turns = [_alpaca_turn(text, position, record["id"]) for position, text in enumerate(texts)]
    calls = []
    for (role, text), (next_role, next_text) in pairwise(turns):
        if role == "function_call":
            if next_role != "observation":
                raise DataError(f"{record['id']}: a function call without its response")
            name, arguments = _parse_call(text, record["id"])
            calls.append((name, arguments, json.loads(next_text)))
    return Trajectory(calls=tuple(calls), answer=tuple(line for line in turns[-1][1].split("\n") if line))


