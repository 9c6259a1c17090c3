"""KGETool's prompts: relation-path generation (with the KG's current relations) and the augmented query.

The path-generation prompt has the structure of the official one (our own wording): the ``KG.search``
signature and its documentation, the list of valid relations written ``<relationship>NAME`` (the parser
removes the tags), the rules, the output format ``<output><thought>...</thought><api_call>KG.search(...)
</api_call></output>``, and two worked examples. The relation list is read from the live KG on every call,
so a relation added at run time is offered at once.
"""

from __future__ import annotations

from collections.abc import Sequence

EXTRACTION_STOP = ("</output>",)
EXTRA_INFO = "The extra information for the query is"
"""The dataset's and the official pipeline's wording (the paper's prose says "for this query")."""

_INSTRUCTION = '''You are a helpful assistant that analyses the user's request. When the request refers to \
people, places or preferences that are only known from the user's knowledge graph, look them up with \
"KG.search".

def KG.search(start: str, path: List[str]) -> List[Tuple[str, str, str]]:
    """Follow a chain of relations through the knowledge graph of the user's family: who is related to \
whom, and which places, times and things each person prefers.

    Several hops can be chained, e.g. from a person to a relative and on to that relative's preference.

    Args:
        start: the entity the search starts from. For family relations, start from the speaker named in \
the <speak></speak> tag.
        path: the relations to follow, in order. Each one must be taken from Valid Relations, written \
exactly as listed there.

    Returns:
        The triples (head, relation, tail) of the whole path.

    Valid Relations:
{relations}

    Rules:
    - Use only relations from the list above, including the <relationship> prefix.
    - Every hop of a path must be a valid relation.
    - Never invent a relation that is not listed.
    """

Write your answer inside <output></output>, and put each KG.search call on its own line inside \
<api_call></api_call>.

Example 1:
<intent>
<speak>Speaker: Bob</speak> Please cancel the alarms set for my dad's usual dinner time.
</intent>

<output>
<thought>
"my dad's usual dinner time" is only known from the knowledge graph: Bob's father, then his preferred \
dinner time. One KG.search call is needed.
</thought>
<api_call>
KG.search(start="Bob", path=["<relationship>father","<relationship>prefer_dinnertime"])
</api_call>
</output>

Example 2:
<intent>
<speak>Speaker: Alice</speak> Book me a train from my son's favourite city to my husband's favourite city.
</intent>

<output>
<thought>
Two things are only known from the knowledge graph: the son's preferred city and the husband's preferred \
city. Two KG.search calls are needed.
</thought>
<api_call>
KG.search(start="Alice", path=["<relationship>son","<relationship>prefer_city"])
KG.search(start="Alice", path=["<relationship>husband","<relationship>prefer_city"])
</api_call>
</output>

Tags: <thought></thought> holds your step-by-step reasoning about which parts of the request need the \
knowledge graph; <api_call></api_call> holds the calls. Follow the format of the examples exactly and \
write nothing else.'''


def extraction_messages(intent: str, relations: Sequence[str]) -> list[dict[str, str]]:
    """The path-generation request: the instruction with the KG's relations, then the tagged intent."""
    listing = "\n".join(f"    - <relationship>{relation}" for relation in relations)
    return [
        {"role": "system", "content": _INSTRUCTION.replace("{relations}", listing)},
        {"role": "user", "content": f"<intent>\n{intent}\n</intent>\n"},
    ]


def augmented_query(query: str, extraction: str) -> str:
    """The tool-use query: the user's words, then the extracted sub-KG as the official pipeline renders it
    (``([[h, r, t], ...])`` groups with their markers; nothing between "is" and "." when none was found)."""
    return f"{query.rstrip()} {EXTRA_INFO} {extraction}."
