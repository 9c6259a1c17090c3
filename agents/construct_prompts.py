"""The three prompts of query-driven tool construction (ToolHop paper, Appendix B), in our own words.

Each keeps the paper's structure: a task statement, numbered steps, notes, an output format asking for
one JSON object and nothing else, then the inputs. The code-generation prompt also asks for the call
that answers the sub-question, which verification runs in the sandbox.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

CREATION_EXAMPLE = {
    "analysis": "The question asks when an album came out. A release-date lookup keyed by album name, "
    "with the artist to tell apart albums sharing a title, answers it and similar questions.",
    "tool": {
        "name": "album_release_date_lookup",
        "description": "Looks up the release date of a music album.",
        "parameters": {
            "type": "object",
            "properties": {
                "album_name": {"type": "string", "description": "Title of the album."},
                "artist_name": {"type": "string", "description": "Artist or band, to disambiguate."},
            },
            "required": ["album_name"],
        },
    },
}

CREATION = """Design one tool that answers the question below, explain the design, and give the tool's \
JSON document.

# Steps
1. **Understand the question**: decide what information it asks for and what input identifies it.
2. **Design the tool**: a tool that answers this question and others of the same kind, not only this one.
3. **Specify the parameters**: name and type each input, describe it, and mark the required ones.
4. **Write the output**: the analysis and the tool document, as JSON.

# Notes
- The tool must be general: it should serve similar questions about other entities too.
- Think about edge cases of the input.
- The tool name is a Python identifier in snake_case; it needs at least one parameter.

# Output Format
One JSON object and nothing else, with the keys:
- "analysis": your reasoning about the design.
- "tool": a JSON schema document of the tool with "name", "description" and "parameters" (an object \
schema with "type": "object", "properties" and "required").

# Example
{example}

**Question**: {question}
**Output**:"""

REFINEMENT = """Improve the tool document below: a richer description and more, or more structured, \
parameters, while every call that was valid for the original stays valid.

# Steps
1. **Study the tool**: what it does now, and what it cannot do.
2. **Find improvements**: options real users would want, such as filtering results or choosing an output \
format.
3. **Rewrite the description**: say clearly what the refined tool does.
4. **Add and refine parameters**: new optional parameters, richer types (arrays, objects, enums) where \
they help.
5. **Check compatibility**: keep the name, keep every original parameter with a compatible type, and do \
not make any new parameter required.

# Output Format
One JSON object and nothing else:
{{"analysis": "how and why the tool was refined", "refined_version": <the refined tool, a JSON schema \
document in the same form as the original>}}

# Notes
- Every new parameter must be relevant to what the tool does.
- The refined tool must stay backward compatible with the original.

**Tool**:
{tool}"""

GENERATION = """Write the Python function that implements the tool document below, so that the call you \
propose for the question returns the answer.

# Steps
1. **Read the document**: the function name, each parameter's name and type, which are required.
2. **Relate question and answer**: decide which call of the tool the question needs.
3. **Implement the function**:
   - name it exactly as the tool;
   - take exactly the document's parameters, required ones first, optional ones with defaults;
   - return the given answer for the question's call, and plausible values for other inputs;
   - use only the Python standard library, no network or files.
4. **Handle errors**: for a missing or empty required value, a value of the wrong type or a value outside \
an enum, return a dict {{"error": "<what is wrong and what is valid>"}}; never raise.

# Notes
- Parameter names and types must match the document exactly.
- Simulate the other outputs the document describes.
- Error messages must say what was wrong with the input.

# Output Format
One JSON object and nothing else:
{{"analysis": "how the function was designed, its parameters and its error handling", \
"function": "the complete Python source of the function, with comments", \
"call": "the call that answers the question, as Python, e.g. {name}(...)"}}

**Tool Document**:
{document}
**Question**: {question}
**Answer**: {answer}"""

RETRY = """Your answer failed verification:
{failure}
Correct it and answer again with one JSON object in the same format, and nothing else."""


def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def creation_prompt(question: str) -> str:
    return CREATION.format(example=_json(CREATION_EXAMPLE), question=question)


def refinement_prompt(tool: Mapping[str, Any]) -> str:
    return REFINEMENT.format(tool=_json(tool))


def generation_prompt(document: Mapping[str, Any], question: str, answer: str) -> str:
    return GENERATION.format(
        document=_json(document), question=question, answer=answer, name=document.get("name", "tool")
    )


def retry_prompt(failure: str) -> str:
    return RETRY.format(failure=failure)
