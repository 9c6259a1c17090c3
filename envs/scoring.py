"""Answer correctness for ToolHop: the official substring rule and a stricter normalized match."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from decimal import Decimal, InvalidOperation

from hopgym.errors import ConfigError


def official_match(gold: str, response: str) -> bool:
    """The official evaluation rule, quirks included for comparability with published numbers.

    ``gold.lower().rstrip(".0")`` must be a substring of ``response.lower()`` with commas removed.
    Quirks: gold "0" strips to "" and matches any response; "10" becomes "1" (so "1" or "21" match);
    "2.50" becomes "2.5"; substrings count ("1" matches "1302").
    """
    stripped_gold = str(gold).lower().rstrip(".0")
    return stripped_gold in str(response).lower().replace(",", "")


_TOKEN = re.compile(r"\d+(?:\.\d+)?|[^\W\d_]+")


def _canonical_number(token: str) -> str:
    try:
        number = Decimal(token)
    except InvalidOperation:
        return token
    text = format(number.normalize(), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def normalize_tokens(text: str) -> list[str]:
    """Lower-cased, accent-free words and canonical numbers ("1,302" -> "1302", "15.0" -> "15")."""
    decomposed = unicodedata.normalize("NFKD", str(text).lower())
    without_accents = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    without_grouping = re.sub(r"(?<=\d),(?=\d{3}\b)", "", without_accents)
    return [_canonical_number(tok) if tok[0].isdigit() else tok for tok in _TOKEN.findall(without_grouping)]


def normalized_match(gold: str, response: str) -> bool:
    """The gold answer's tokens appear as a contiguous run of whole tokens in the response.

    No quirks: "0" needs a "0" token, "10" does not match "1" or "100", "1" does not match "1302".
    """
    gold_tokens = normalize_tokens(gold)
    if not gold_tokens:
        return False
    tokens = normalize_tokens(response)
    width = len(gold_tokens)
    return any(tokens[i : i + width] == gold_tokens for i in range(len(tokens) - width + 1))


SCORERS: dict[str, Callable[[str, str], bool]] = {"official": official_match, "normalized": normalized_match}


def get_scorer(name: str) -> Callable[[str, str], bool]:
    """The scorer called ``name``; a clear error lists the valid names."""
    try:
        return SCORERS[name]
    except KeyError:
        raise ConfigError(f"unknown scorer {name!r}; valid scorers: {sorted(SCORERS)}") from None
