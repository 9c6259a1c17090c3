"""KG2Tool query refinement (paper Appendix A.2): a model rewords each sampled task's template query with
the FOL translation prompt (tasks/kg2tool/query_prompt.py); a reply that is not the expected JSON, or drops an
entity mention the tools need, leaves that task's template query in place."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from hopgym.agents.model.client import ModelClient
from hopgym.errors import ConfigError
from hopgym.tasks.kg2tool.assembly import KGSource, SolutionBuilder
from hopgym.tasks.kg2tool.query_prompt import (
    anchor_entities,
    parse_translation,
    translation_input,
    translation_messages,
)
from hopgym.tasks.kg2tool.task_file import KG2ToolTask


async def refine_queries(
    tasks: Sequence[KG2ToolTask], source: KGSource, client: ModelClient, concurrency: int
) -> tuple[list[KG2ToolTask], list[str]]:
    """The tasks, each with its query reworded (the template kept as ``query_template``), and one line
    per task that kept its template query, saying why; at most ``concurrency`` requests at once."""
    if concurrency < 1:
        raise ConfigError(f"--concurrency must be at least 1, got {concurrency}")
    builder = SolutionBuilder(source)
    limit = asyncio.Semaphore(concurrency)
    refined = list(tasks)
    problems: list[str] = []

    async def refine(index: int) -> None:
        task = tasks[index]
        messages = translation_messages(translation_input(task, builder.relation_tool, source.mention))
        async with limit:
            reply = await client.complete(messages)
        mentions = [source.mention(entity) for entity in anchor_entities(task.fol)]
        question, problem = parse_translation(reply.message.get("content") or "", mentions)
        if question is None:
            problems.append(f"{task.id}: {problem}")
        else:
            refined[index] = dataclasses.replace(task, query=question, query_template=task.query)

    await asyncio.gather(*(refine(index) for index in range(len(tasks))))
    return refined, sorted(problems)
