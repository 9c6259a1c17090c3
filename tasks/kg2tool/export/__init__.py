"""Instruction data from KG2Tool tasks (paper Section 4.4, Appendix A.3), as ShareGPT, Alpaca or OpenAI
chat records.

Every task gives four kinds of record, each tagged with ``kind`` and ``task_id``:

- ``trajectory``: the system prompt listing the tools, the query, each tool call and its response, and the
  final answer (entity names one per line). ShareGPT follows LLaMA-Factory's function-calling layout
  (``human``/``function_call``/``observation``/``gpt`` turns, ``system``, ``tools``): the tool list is in
  ``tools`` only, since LLaMA-Factory's template writes it into the system prompt itself. Alpaca has no
  tool column, so its ``system`` lists the tools; it puts the earlier turns in ``history`` (tool responses
  on the user side) and the final answer in ``output``. OpenAI is the chat-completions layout that TRL's
  SFTTrainer and Hugging Face chat templates read: ``messages`` (system, user, assistant turns with
  ``tool_calls`` whose ``arguments`` are a JSON string, ``tool`` turns answering them by
  ``tool_call_id``) and ``tools`` (``{"type": "function", "function": ...}`` documents).
- ``steps``: the per-step questions of Figure 12 (the goal of the step, the tool to call, its arguments,
  then the call, its response and a summary), ending with the final answer.
- ``plan``: the query broken down into numbered subtasks (the step goals).
- ``review``: one step's tool response, either the true one or a corrupted one (an entity dropped, an
  entity replaced, or an empty response), with the question whether it achieves the step; the true one is
  answered "Yes", the corrupted one "No". Corrupted responses always differ from the truth as sets.

``read_trajectory`` parses a trajectory record back into its calls and answer names (the round trip), and
``validate_record`` checks a record against its format. One module per format (``sharegpt``, ``alpaca``,
``openai_chat``) builds, validates and reads back its records; ``dialogues`` holds the turns they share
and ``records`` the dispatch over formats, ``files`` the export files. The fixed texts are in
tasks/prompts/kg2tool_export.yaml.
"""

from hopgym.tasks.kg2tool.export.alpaca import system_prompt
from hopgym.tasks.kg2tool.export.dialogues import (
    ANSWER_QUESTION,
    ARGUMENTS_QUESTION,
    CALL_REQUEST,
    CORRUPTIONS,
    GOAL_QUESTION,
    PLAN_QUESTION,
    PROMPTS,
    REVIEW_QUESTION,
    SYSTEM_PROMPT,
    TOOL_LIST_INTRO,
    TOOL_QUESTION,
    ExportPrompts,
    ToolDocs,
    Trajectory,
    answer_text,
    corrupt_result,
    plan_text,
)
from hopgym.tasks.kg2tool.export.files import read_export, write_export
from hopgym.tasks.kg2tool.export.records import (
    EXPORT_FORMATS,
    RECORD_KINDS,
    export_records,
    read_trajectory,
    validate_record,
)

__all__ = [
    "ANSWER_QUESTION",
    "ARGUMENTS_QUESTION",
    "CALL_REQUEST",
    "CORRUPTIONS",
    "EXPORT_FORMATS",
    "GOAL_QUESTION",
    "PLAN_QUESTION",
    "PROMPTS",
    "RECORD_KINDS",
    "REVIEW_QUESTION",
    "SYSTEM_PROMPT",
    "TOOL_LIST_INTRO",
    "TOOL_QUESTION",
    "ExportPrompts",
    "ToolDocs",
    "Trajectory",
    "answer_text",
    "corrupt_result",
    "export_records",
    "plan_text",
    "read_export",
    "read_trajectory",
    "system_prompt",
    "validate_record",
    "write_export",
]
