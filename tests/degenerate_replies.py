"""Degenerate model replies, seeded: truncations, a word and newlines repeated, invalid escapes, lone
surrogates, huge argument strings, thousands of calls, deep nesting. The eval parsers' fuzz
(tests/agents/test_model_output_fuzz.py) and training's reply reading
(tests/train/test_train_reply_attacks.py) read the same corpus."""

from __future__ import annotations

import random
from collections.abc import Iterator

SEED = 2025
PARSED_REPLIES = 10_000
"""How many replies the parsers read."""
CALL = '{"name": "search", "arguments": {"query": "Paris", "n": 3}}'
TEMPLATES = [
    CALL,
    f'{{"tool_calls": [{CALL}, {CALL}]}}',
    f"<tool_call>\n{CALL}\n</tool_call>",
    'Thought: look it up\nAction: search\nAction Input: {"query": "Paris"}\nObservation: x',
    "Thought: done\nFinal Answer: Paris",
    "```python\nresult = search(query='Paris')\nprint(result)\n```",
    "KG.search(start=Alice, path=[son, teacher, \u5168\u90e8])\nKG.search(start='Bob', path=[wife])",
    '```json\n["Paris", "London"]\n```',
    "- Paris\n- London\n* Rome",
]
UNITS = [
    "Action: search\n", "\n", "Action: search" + "\n" * 7, "{", "[", '{"a":', "[1,", "<tool_call>", "```",
    "```\n", "KG.search(", "path=[", "<", '"', "\\", "\\ud800", "\ud800", "Final Answer:", " ", "the ",
    CALL, "é\u3000", "\x00", "</tool_call>",
]  # fmt: skip
BAD_ESCAPES = ["\\x", "\\u12", "\\ud800", "\\udfff\\ud800", "\\", "\ud800", "\udfff", "\\u0000", "\x1f"]
ALPHABET = 'abc {}[]":,\\\n\t`<>()=_-.0123456789éß中\u2028\u3000\ufeff\x00\x1c\ud800\udc00'


def degenerate_replies(rng: random.Random, n: int) -> Iterator[str]:
    """``n`` replies of every degenerate kind: 99 in 100 up to a few KB, 1 in 100 scaled to 100-300 KB
    (thousands of calls, a 200 KB argument, 40,000 levels of nesting)."""
    for index in range(n):
        yield degenerate_reply(rng, rng.randint(100, 300) if index % 100 == 99 else 1)


def degenerate_reply(rng: random.Random, scale: int) -> str:
    template, unit = rng.choice(TEMPLATES), rng.choice(UNITS)
    kind = rng.randrange(8)
    if kind == 0:  # random characters, lone surrogates and controls included
        return "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 1000 * min(scale, 4))))
    if kind == 1:  # cut anywhere
        return (template * scale)[: rng.randint(0, 120 * scale)]
    if kind == 2:  # a word (and newlines) repeated
        return unit * rng.randint(1, 200 * scale)
    if kind == 3:  # invalid escapes
        return template.replace("a", rng.choice(BAD_ESCAPES), rng.randint(1, 3)) * scale
    if kind == 4:  # a huge argument string
        return CALL.replace("Paris", "x" * rng.randint(100, 1_000 * scale))
    if kind == 5:  # many calls
        return "\n".join([rng.choice(TEMPLATES[:3])] * rng.randint(2, 20 * scale))
    if kind == 6:  # deep nesting
        return rng.choice(["[", '{"a":', "<tool_call>[", "KG.search(["]) * rng.randint(100, 200 * scale)
    return template + unit * rng.randint(1, 50 * scale) + rng.choice(TEMPLATES)
