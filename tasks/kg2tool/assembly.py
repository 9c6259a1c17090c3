"""KG2Tool task assembly: a sampled FOL query becomes a task with its query text, answers and solution path.

The solution path is the query's execution in post-order (paper Section 4.3) expressed as calls of the
generated KG2Tool tools (tasks/kg2tool/generated_tools.py, style ``kg2tool``): a projection is one call of its
relation's tool (forward or inverse) on the anchor or on the previous step's whole result; an intersection is
one ``get_intersection_of`` call over its positive branches, then one ``get_negation_of`` call per
complemented branch (the entities of the intersection not in that branch); a union is one ``get_union_of``
call. The results are those of the KG itself (``fol.queries.trace``), so re-executing the calls reproduces
them exactly.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from hopgym.errors import ConfigError, DataError
from hopgym.tasks.familytool.dataset import load_family_kg
from hopgym.tasks.fol.queries import PATTERN_NAMES, FolStep, FolTree, trace
from hopgym.tasks.fol.sampler import DEFAULT_MAX_ANSWERS, FolSample, sample_queries
from hopgym.tasks.fol.text import RelationWording, generic_wording, query_text
from hopgym.tasks.kg.fb15k237 import freebase_wording, load_fb15k237
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg2tool.generated_tools import GeneratedTool, committed_tools, generate_kg_tools
from hopgym.tasks.kg2tool.task_file import KG2ToolTask, SolutionCall

KGName = Literal["fb15k-237", "family-e"]
KG_NAMES: tuple[KGName, ...] = get_args(KGName)
INTERSECTION, UNION, NEGATION = "get_intersection_of", "get_union_of", "get_negation_of"


@dataclass(frozen=True)
class KGSource:
    """A KG with what tasks over it need: readable names, relation wording and its generated tools."""

    name: str
    kg: KnowledgeGraph
    label: Callable[[str], str]
    """The readable name of an entity id (identity when ids are names)."""
    mention: Callable[[str], str]
    """How a query mentions an anchor: its name, with the id the tools take when the two differ."""
    wording: RelationWording
    tools: tuple[GeneratedTool, ...]

    def tools_by_name(self) -> dict[str, GeneratedTool]:
        return {tool.name: tool for tool in self.tools}

    def resolve(self, text: str) -> str:
        """The readable name for an answer item that is an entity id, else the item itself."""
        return self.label(text) if self.kg.has_entity(text) else text


@functools.lru_cache(maxsize=2)
def load_kg_source(name: str, data_dir: str | Path | None = None) -> KGSource:
    """``fb15k-237`` (mids, Freebase paths; its committed tools) or ``family-e`` (names; KG2Tool-style tools
    generated on the fly); ``data_dir`` is the dataset folder (default ``$HOPGYM_DATA/<folder>``).

    Cached: loading FB15k-237 takes seconds, and envs, commands and tests share the read-only graph.
    """
    if name == "fb15k-237":
        fb = load_fb15k237(data_dir)

        def mention(mid: str) -> str:
            return f"{fb.name(mid)} ({mid})"

        return KGSource(name, fb.kg, fb.name, mention, freebase_wording, tuple(committed_tools(name)))
    if name == "family-e":
        kg = load_family_kg("e", None if data_dir is None else Path(data_dir) / "familykg-e.txt")
        # The committed family-e tools are FamilyTool's style; KG2Tool tasks need the set tools too.
        tools = generate_kg_tools(kg, "kg2tool")
        return KGSource(name, kg, str, str, generic_wording, tuple(tools))
    raise ConfigError(f"unknown KG {name!r}; valid: {', '.join(KG_NAMES)}")


def parse_patterns(spec: str | Sequence[str]) -> list[str]:
    """``"all"``, a comma-separated string or a list of pattern names, checked."""
    names = list(PATTERN_NAMES) if spec == "all" else spec.split(",") if isinstance(spec, str) else list(spec)
    names = [name.strip() for name in names if name.strip()]
    unknown = [name for name in names if name not in PATTERN_NAMES]
    if unknown or not names:
        raise ConfigError(
            f"unknown FOL pattern(s) {unknown or names}; valid: all, {', '.join(PATTERN_NAMES)}"
        )
    return names


def sample_tasks(
    source: KGSource,
    patterns: Sequence[str],
    n: int,
    seed: int,
    max_answers: int = DEFAULT_MAX_ANSWERS,
    keep: Callable[[FolTree], bool] | None = None,
) -> list[KG2ToolTask]:
    """``n`` tasks per pattern, pattern by pattern; the same arguments always give the same tasks.

    With ``keep`` (a split's rule), the first ``n`` samples it keeps: the pattern's sample stream is drawn
    further (a longer draw begins with the shorter one), so a task's id, its place in that stream, is the
    same with or without ``keep``."""
    builder = SolutionBuilder(source)
    tasks = []
    for pattern in patterns:
        for index, sample in _kept_samples(source.kg, pattern, n, seed, max_answers, keep):
            tasks.append(
                KG2ToolTask(
                    id=f"{source.name}-{pattern}-s{seed}-{index:05d}",
                    kg=source.name,
                    pattern=pattern,
                    fol=sample.fol,
                    query=query_text(sample.fol, entity_label=source.mention, wording=source.wording),
                    answers=sample.answers,
                    solution=builder.solution(sample.fol),
                )
            )
    return tasks


KEEP_DRAW_LIMIT = 64
"""The most samples per kept one drawn for a split before giving up (a fifth of the entities is held out,
so a 3-anchor held-out entity task is about 1 in 125; ask the patterns a split can fill)."""


def _kept_samples(
    kg: KnowledgeGraph,
    pattern: str,
    n: int,
    seed: int,
    max_answers: int,
    keep: Callable[[FolTree], bool] | None,
) -> list[tuple[int, FolSample]]:
    """(stream index, sample) of the first ``n`` samples of the pattern's stream that ``keep`` keeps."""
    if keep is None:
        return list(enumerate(sample_queries(kg, pattern, n, seed, max_answers=max_answers)))
    drawn = n
    while True:
        samples = sample_queries(kg, pattern, drawn, seed, max_answers=max_answers, partial=True)
        kept = [(i, sample) for i, sample in enumerate(samples) if keep(sample.fol)]
        if len(kept) >= n:
            return kept[:n]
        if len(samples) < drawn or drawn >= KEEP_DRAW_LIMIT * max(n, 1):
            holds = " (all the KG holds)" if len(samples) < drawn else ""
            raise DataError(
                f"pattern {pattern}: the split keeps {len(kept)} of {len(samples)} sampled tasks{holds}, "
                f"fewer than n={n}; lower n, or sample other patterns or another KG"
            )
        drawn = min(drawn * 4, KEEP_DRAW_LIMIT * max(n, 1))


class SolutionBuilder:
    """Turns a FOL tree into the ordered tool calls that compute it (see the module docstring)."""

    def __init__(self, source: KGSource) -> None:
        self.source = source
        self._relation_tools: dict[tuple[str, bool], GeneratedTool] = {
            (tool.relation, tool.inverse): tool
            for tool in source.tools
            if tool.kind == "relation" and tool.relation
        }
        missing = [name for name in (INTERSECTION, UNION, NEGATION) if name not in source.tools_by_name()]
        if missing:
            raise DataError(f"the generated tools of {source.name} lack the set tool(s) {missing}")

    def relation_tool(self, relation: str, inverse: bool) -> GeneratedTool:
        try:
            return self._relation_tools[(relation, inverse)]
        except KeyError:
            direction = "inverse" if inverse else "forward"
            raise DataError(
                f"no generated {direction} tool for relation {relation!r} of {self.source.name}"
            ) from None

    def solution(self, tree: FolTree) -> tuple[SolutionCall, ...]:
        steps = trace(tree, self.source.kg)
        nodes = _post_order(tree)
        if len(nodes) != len(steps):
            raise DataError(f"FOL trace has {len(steps)} steps for {len(nodes)} operations")
        calls: list[SolutionCall] = []
        produced_by: dict[int, int] = {}  # id(node) -> number (1-based) of the call that produced its set
        for node, step in zip(nodes, steps, strict=True):
            if step.op == "p":
                calls.append(self._projection(node, step, produced_by))
            else:
                calls += self._combination(node, step, produced_by, len(calls))
            produced_by[id(node)] = len(calls)
        return tuple(calls)

    def _projection(self, node: FolTree, step: FolStep, produced_by: Mapping[int, int]) -> SolutionCall:
        tool = self.relation_tool(step.relation or "", step.inverse)
        parameter = next(iter(tool.parameters["properties"]))
        source = node["arg"]
        if source["op"] == "e":
            argument: str | list[str] = source["entity"]
            subject = self.source.mention(source["entity"])
        else:
            argument = list(step.inputs[0])
            subject = f"the results of step {produced_by[id(source)]}"
        goal = f"Find {self.source.wording(step.relation or '', step.inverse, subject)}"
        return SolutionCall(tool.name, {parameter: argument}, list(step.result), goal)

    def _combination(
        self, node: FolTree, step: FolStep, produced_by: Mapping[int, int], done: int
    ) -> list[SolutionCall]:
        branches = [arg["arg"] if arg["op"] == "n" else arg for arg in node["args"]]
        numbers = [produced_by[id(branch)] for branch in branches]
        positives = [(n, s) for n, s, neg in zip(numbers, step.inputs, step.negated, strict=True) if not neg]
        negatives = [(n, s) for n, s, neg in zip(numbers, step.inputs, step.negated, strict=True) if neg]
        calls = []
        if len(positives) == 1:
            current_number, current = positives[0]
        else:
            which = _steps_phrase([n for n, _ in positives])
            if step.op == "u":
                name, goal, combined = (
                    UNION,
                    f"Find the entities in any of the results of {which}",
                    step.result,
                )
            else:
                combined = tuple(sorted(set.intersection(*(set(s) for _, s in positives))))
                name, goal = INTERSECTION, f"Find the entities in all of the results of {which}"
            calls.append(SolutionCall(name, {"sets": [list(s) for _, s in positives]}, list(combined), goal))
            current_number, current = done + len(calls), combined
        for number, excluded in negatives:
            kept = tuple(sorted(set(current) - set(excluded)))
            goal = f"Remove the results of step {number} from the results of step {current_number}"
            arguments = {"entities": list(excluded), "within": list(current)}
            calls.append(SolutionCall(NEGATION, arguments, list(kept), goal))
            current_number, current = done + len(calls), kept
        if tuple(current) != step.result:
            raise DataError(
                f"set calls give {len(current)} entities but the query step has {len(step.result)}"
            )
        return calls


def _post_order(tree: FolTree) -> list[FolTree]:
    """The operation nodes (p, i, u) in the order ``fol.queries.trace`` executes them; complements are
    folded in."""
    op = tree["op"]
    if op == "e":
        return []
    if op in ("p", "n"):
        inner = _post_order(tree["arg"])
        return [*inner, tree] if op == "p" else inner
    return [node for arg in tree["args"] for node in _post_order(arg)] + [tree]


def _steps_phrase(numbers: Sequence[int]) -> str:
    words = [str(n) for n in numbers]
    return f"steps {', '.join(words[:-1])} and {words[-1]}"


def offered_tool_names(
    task: KG2ToolTask, tools: Sequence[GeneratedTool], n_distractors: int, seed: int
) -> list[str]:
    """The tools offered with a task: the ones its solution calls plus ``n_distractors`` others, shuffled.

    Deterministic for (task id, seed). Distractors are drawn from every other generated tool.
    """
    if n_distractors < 0:
        raise ConfigError(f"n_distractors must be >= 0, got {n_distractors}")
    needed = list(task.tool_names)
    others = sorted(tool.name for tool in tools if tool.name not in set(needed))
    rng = random.Random(f"{seed}:{task.id}")
    offered = needed + rng.sample(others, min(n_distractors, len(others)))
    rng.shuffle(offered)
    return offered
