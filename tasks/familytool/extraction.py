"""KGETool path extraction: ``KG.search(start=..., path=[...])`` text from a model -> a sub-KG string.

Three modes, each in two readings (``official`` by default, so numbers compare with the paper's tables;
``paper`` follows the paper's prose, Section 5.1.2):

- ``exact``: strict matching, no expansion. A call whose path cannot be walked to its end yields nothing
  and marks the result ``<bad_extract>``. Official reading: each hop follows the first tail of a relation
  (the official walk); paper reading: every tail.
- ``greedy``: the paper's Greedy Search, which the official code names "exact". Official reading: each hop
  follows the first tail; at a failing hop (a made-up relation, a relation missing at the current node, a
  hop from a leaf) all outgoing edges of the node are added in the KG's triple order, the result is marked
  bad, no later failing hop of that call expands again, and only the longest branches are kept. Paper
  reading: a made-up relation is a wildcard (any outgoing edge), every tail is followed, and walks that
  cannot finish are dropped; a made-up relation marks the result bad.
- ``retrieval``: Relation Retrieval. Made-up relations are replaced by the top-k real relations of a
  retriever (the official code fixes k at 3) and the cartesian product of the candidates is walked,
  deduplicated by end entity (the first path to reach it wins), only the longest kept, never marked bad.
  Official quirks kept in the official reading: a hop is tried only when the call's *original start* entity
  has that relation, and a hop that cannot be taken is skipped, so later hops are skipped and the walk can
  end on the wrong entity (``start=Alice, path=[son, teacher, prefer_pickup_location]`` in familykg-e ends
  on Bob's pickup location, since Alice has no teacher). The official lookup table is a ``defaultdict``:
  looking up a node that lacks the relation stores an empty entry, and a *later call of the same output*
  whose start is that node then passes the check for that relation (familykg-b: after
  ``start=Jack, path=[wife, prefer_departure]``, the call ``start=Alice, path=[son, prefer_departure]``
  walks to Bob's departure although Alice has no prefer_departure; in the other order it stops at Bob).
  Paper reading: hops are checked at the current node, paths that cannot be walked to the end are dropped,
  and the result is bad only when none is left.

The official path parser glues the "all relations" item ``全部`` onto the relation before it when the path
has two items or more (``path=[mother, 全部]`` is the one relation ``mother全部``), which then counts as a
made-up relation: greedy expands it, retrieval asks the retriever for it. The paper reading keeps the items
as written. All spaces are deleted before parsing, so a start such as ``"Mr. Smith"`` (familykg-e) becomes
the unknown ``Mr.Smith``; a call whose start the KG does not hold contributes nothing, in every mode.

The output is rendered as the official code renders it: one ``([[h, r, t], ...])`` group per extracted path,
each followed by the call's marker (``<bad_extract>`` or nothing); ``""`` when no call yields anything,
which the metrics count as a format error.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from hopgym.errors import ConfigError
from hopgym.model_text import parsed_text
from hopgym.options import check_choice
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.kg.triples import Triple

ExtractionMode = Literal["exact", "greedy", "retrieval"]
Reading = Literal["official", "paper"]
Retriever = Callable[[str, list[str], int], list[str]]
"""``f(made_up_relation, real_relations, k) -> the k real relations nearest to it``."""

EXTRACTION_MODES: tuple[ExtractionMode, ...] = get_args(ExtractionMode)
READINGS: tuple[Reading, ...] = get_args(Reading)
BAD_EXTRACT = "<bad_extract>"
ALL_RELATIONS = "\u5168\u90e8"  # 全部, "all": the official parser glues it onto the relation before it

# The official parser reads calls with the patterns ``KG.search\((.*?)\)`` (an unescaped dot, so
# ``KG_search(`` matches too; no match across lines; the first ")"), ``start=([^,]+)``,
# ``path=\[([^\]]+)\]`` and removes ``<.*?>``. The scanners below have their meaning in linear time
# (Python's re took quadratic time and more on a reply of many "KG.search(" or "path=[" without an end).
_CALL_HEAD = re.compile(r"KG[^\n]search\(")
_START = re.compile(r"start=([^,]+)")
_PATH_HEAD = "path=["
_DELETED = str.maketrans(
    {
        "'": None,
        '"': None,
        "`": None,
        "\u2018": None,
        "\u2019": None,
        "\u201c": None,
        "\u201d": None,
        " ": None,
    }
)
_FULL_WIDTH = str.maketrans({"\uff0c": ",", "\u3010": "[", "\u3011": "]"})


@dataclass(frozen=True)
class SearchCall:
    """One parsed ``KG.search`` call: ``start`` or ``path`` is None when the call did not give it usably."""

    text: str
    start: str | None
    path: tuple[str, ...] | None


@dataclass(frozen=True)
class Extraction:
    """The extraction of one model reply: the rendered sub-KG string and what it was made of."""

    text: str
    """What the tool-use step and the metrics receive, markers included; ``""`` is a format error."""
    paths: tuple[tuple[Triple, ...], ...]
    calls: tuple[SearchCall, ...]

    @property
    def triples(self) -> tuple[Triple, ...]:
        """Every extracted triple once, in order."""
        return tuple(dict.fromkeys(triple for path in self.paths for triple in path))


def parse_search_calls(text: str, reading: str = "official") -> list[SearchCall]:
    """Every ``KG.search(...)`` call of a reply, parsed as the official code parses it.

    Quotes and all spaces are deleted, full-width punctuation is made ASCII and ``<...>`` tags (the prompt's
    ``<relationship>`` prefix) are removed; keywords are the lowercase ``start=`` / ``path=``. In the
    official reading an item ``全部`` is glued onto the item before it (see :func:`glue_all_relations`).
    Only the first :data:`~hopgym.model_text.MAX_PARSED_CHARS` characters of ``text`` are read.
    """
    check_reading(reading)
    calls = []
    for raw in _call_texts(parsed_text(text)):
        cleaned = _without_tags(raw.translate(_DELETED).translate(_FULL_WIDTH))
        start = _START.search(cleaned)
        path = _path_text(cleaned)
        items = tuple(item.strip() for item in path.split(",")) if path is not None else None
        if items is not None and reading == "official":
            items = glue_all_relations(items)
        calls.append(SearchCall(text=raw, start=start.group(1).strip() if start else None, path=items))
    return calls


def _call_texts(text: str) -> list[str]:
    r"""``re.findall(r"KG.search\((.*?)\)", text)``: the next ")" on the line ends a call's text."""
    texts = []
    position = 0
    close = newline = -1
    while (head := _CALL_HEAD.search(text, position)) is not None:
        body = head.end()
        if close < body:  # where the next ")" and newline are, each found once per stretch of text
            close = _find(text, ")", body)
        if newline < body:
            newline = _find(text, "\n", body)
        if close < min(newline, len(text)):
            texts.append(text[body:close])
            position = close + 1
        else:  # no ")" before the line ends: neither has any call starting on this line
            position = newline + 1
    return texts


def _find(text: str, sub: str, start: int) -> int:
    found = text.find(sub, start)
    return len(text) if found < 0 else found


def _without_tags(text: str) -> str:
    """``re.sub(r"<.*?>", "", text)`` for a text without newlines (a call's text has none)."""
    kept = []
    position = 0
    while (start := text.find("<", position)) >= 0 and (end := text.find(">", start + 1)) >= 0:
        kept.append(text[position:start])
        position = end + 1
    kept.append(text[position:])
    return "".join(kept)


def _path_text(text: str) -> str | None:
    r"""The group of ``re.search(r"path=\[([^\]]+)\]", text)``, or None when it does not match."""
    position = 0
    while (start := text.find(_PATH_HEAD, position)) >= 0:
        end = text.find("]", start + len(_PATH_HEAD))
        if end < 0:
            return None
        if end > start + len(_PATH_HEAD):
            return text[start + len(_PATH_HEAD) : end]
        position = start + 1
    return None


def glue_all_relations(items: Sequence[str]) -> tuple[str, ...]:
    """The official ``merge_with_previous``, applied to paths of two items or more: every ``全部`` item is
    appended to the item before it (``[mother, 全部, x]`` -> ``[mother全部, x]``); a leading one stays."""
    if len(items) < 2:
        return tuple(items)
    glued: list[str] = []
    for item in items:
        if item == ALL_RELATIONS and glued:
            glued[-1] += item
        else:
            glued.append(item)
    return tuple(glued)


def extract(
    text: str,
    kg: KnowledgeGraph,
    mode: str = "greedy",
    *,
    reading: str = "official",
    retriever: Retriever | None = None,
    top_k: int = 3,
) -> Extraction:
    """The sub-KG that the ``KG.search`` calls of ``text`` extract from ``kg`` (the live graph)."""
    check_options(mode, reading, top_k)
    if mode == "retrieval" and retriever is None:
        raise ConfigError("retrieval extraction needs a retriever: f(relation, relations, k) -> list[str]")
    calls = parse_search_calls(text, reading)
    pieces: list[str] = []
    paths: list[tuple[Triple, ...]] = []
    relations = kg.relations()
    probed: set[tuple[str, str]] = set()  # the official lookup table's empty entries, shared by the calls
    for call in calls:
        if call.path is None:  # a malformed call: scored as a hallucination, not a format error
            pieces.append(BAD_EXTRACT)
            continue
        if call.start is None or not _is_head(kg, call.start):
            continue  # an unknown start contributes nothing (a format error when no other call does)
        if mode == "exact":
            found, bad = _exact(kg, call.start, call.path, reading)
        elif mode == "greedy":
            walk = _greedy_official if reading == "official" else _greedy_paper
            found, bad = walk(kg, call.start, call.path)
        else:
            candidates = _candidate_paths(call.path, relations, retriever, top_k)  # type: ignore[arg-type]
            found, bad = _retrieval(kg, call.start, candidates, reading, probed)
        found = _longest(found)
        for path in found:
            pieces.append(f"({[list(triple) for triple in path]})" + (BAD_EXTRACT if bad else ""))
        if not found and bad:
            pieces.append(BAD_EXTRACT)
        paths.extend(found)
    return Extraction(text="".join(pieces), paths=tuple(paths), calls=tuple(calls))


def check_options(mode: str, reading: str, top_k: int) -> None:
    """ConfigError naming the valid values when an extraction option is not one of them."""
    check_choice("extraction", mode, EXTRACTION_MODES)
    check_reading(reading)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise ConfigError(f"top_k must be a positive integer, got {top_k!r}")


def check_reading(reading: str) -> Reading:
    return check_choice("reading", reading, READINGS)


# -- the walks ------------------------------------------------------------------------------------------

Found = tuple[list[tuple[Triple, ...]], bool]


def _is_head(kg: KnowledgeGraph, entity: str) -> bool:
    """Whether the entity has outgoing edges (the official ``check_start_entity``)."""
    return kg.has_entity(entity) and bool(kg.out_relations(entity))


def _first_edge(kg: KnowledgeGraph, entity: str, relation: str) -> Triple | None:
    if not (kg.has_entity(entity) and kg.has_relation(relation)):
        return None
    tails = kg.tails(entity, relation)
    return (entity, relation, tails[0]) if tails else None


def _exact(kg: KnowledgeGraph, start: str, path: Sequence[str], reading: str) -> Found:
    result = kg.search(start, path, first_tail_only=reading == "official")
    if not result.complete:
        return [], True
    if reading == "official":
        return [result.triples], False
    return _walks(kg, start, [[relation] for relation in path]), False


def _greedy_official(kg: KnowledgeGraph, start: str, path: Sequence[str]) -> Found:
    """The official ``extractpath``, hop by hop (its quirks included; see the module docstring)."""
    branches: list[list[Triple]] = []
    ends: list[str] = []
    bad = False
    for hop, relation in enumerate(path):
        if hop == 0:
            edge = _first_edge(kg, start, relation)
            if edge is None:
                branches = [[out] for out in _edges_in_kg_order(kg, start)]
                ends = [branch[0][2] for branch in branches]
                bad = True
            else:
                branches, ends = [[edge]], [edge[2]]
            continue
        if not ends:
            bad = True
            continue
        for index, node in enumerate(ends):
            if not _is_head(kg, node):
                bad = True
                continue
            edge = _first_edge(kg, node, relation)
            if edge is None:
                if not bad:
                    branches[index].extend(_edges_in_kg_order(kg, node))
                    bad = True
            else:
                branches[index].append(edge)
                ends[index] = edge[2]
    return [tuple(branch) for branch in branches], bad


def _edges_in_kg_order(kg: KnowledgeGraph, entity: str) -> list[Triple]:
    """The entity's outgoing edges in the order the KG holds its triples (the official ``get_links``), not
    grouped by relation: familykg-b lists Bob's second prefer_travel_city tail 17 lines after the first."""
    return [triple for triple in kg if triple[0] == entity]


def _greedy_paper(kg: KnowledgeGraph, start: str, path: Sequence[str]) -> Found:
    """Made-up relations are wildcards; every tail is followed; walks that cannot finish are dropped.
    Bad when a relation was made up or nothing could be walked."""
    hops = [[relation] if kg.has_relation(relation) else None for relation in path]
    walks = _walks(kg, start, hops)
    return walks, not walks or any(hop is None for hop in hops)


def _candidate_paths(
    path: Sequence[str], relations: list[str], retriever: Retriever, top_k: int
) -> list[tuple[str, ...]]:
    """The cartesian product of each hop's candidates: itself when real, else the retriever's top-k."""
    known = set(relations)
    if all(relation in known for relation in path):
        return [tuple(path)]
    retrieved: dict[str, list[str]] = {}
    for relation in path:
        if relation not in known and relation not in retrieved:
            candidates = list(retriever(relation, list(relations), top_k))[:top_k]
            unknown = [c for c in candidates if c not in known]
            if unknown:
                raise ConfigError(f"the retriever returned relations the KG does not hold: {unknown}")
            retrieved[relation] = candidates
    options = [[relation] if relation in known else retrieved[relation] for relation in path]
    return [tuple(choice) for choice in itertools.product(*options)]


def _retrieval(
    kg: KnowledgeGraph,
    start: str,
    candidates: list[tuple[str, ...]],
    reading: str,
    probed: set[tuple[str, str]],
) -> Found:
    """``probed`` holds the (entity, relation) pairs earlier lookups of the same output stored empty."""
    paths: list[tuple[Triple, ...]] = []
    if reading == "official":
        for relations in candidates:
            walk: list[Triple] = []
            node = start
            for relation in relations:
                # The official existence check looks at the start entity, not the current node; an empty
                # entry left by an earlier lookup passes it.
                if (start, relation) not in probed and _first_edge(kg, start, relation) is None:
                    continue
                edge = _first_edge(kg, node, relation)
                if edge is None:
                    probed.add((node, relation))  # the defaultdict lookup stores an empty entry
                    continue
                walk.append(edge)
                node = edge[2]
            if walk:
                paths.append(tuple(walk))
    else:
        for relations in candidates:
            paths.extend(_walks(kg, start, [[relation] for relation in relations]))
    by_end: dict[str, tuple[Triple, ...]] = {}
    for path in paths:
        by_end.setdefault(path[-1][2], path)
    return list(by_end.values()), reading == "paper" and not by_end


def _walks(kg: KnowledgeGraph, start: str, hops: Sequence[Sequence[str] | None]) -> list[tuple[Triple, ...]]:
    """Every walk from ``start`` taking, at each hop, an edge of one of the hop's relations (any edge when
    the hop is None), following every tail; only walks that reach the end are returned."""
    walks: list[tuple[Triple, ...]] = [()]
    for hop in hops:
        extended: list[tuple[Triple, ...]] = []
        for walk in walks:
            node = walk[-1][2] if walk else start
            if not kg.has_entity(node):
                continue
            edges = kg.out_edges(node)
            extended.extend((*walk, edge) for edge in edges if hop is None or edge[1] in hop)
        walks = extended
    return [walk for walk in walks if walk]


def _longest(paths: list[tuple[Triple, ...]]) -> list[tuple[Triple, ...]]:
    """The official ``filter_longest_lists``: all paths when their lengths agree, else only the longest."""
    if not paths:
        return paths
    longest = max(len(path) for path in paths)
    return [path for path in paths if len(path) == longest]
