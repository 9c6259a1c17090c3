"""Keyword options checked against what they are for, so a typo is named with what would be valid."""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from hopgym.errors import ConfigError

ChoiceT = TypeVar("ChoiceT")


def check_choice(what: str, value: object, valid: tuple[ChoiceT, ...]) -> ChoiceT:
    """``value`` when it is one of ``valid`` (a ``Literal`` option's values, ``typing.get_args``), else
    :class:`ConfigError` naming the closest valid value and all of them; every enumerated option of the
    envs, tasks and agents is checked here."""
    if value in valid:
        return valid[valid.index(value)]
    names = [str(choice) for choice in valid]
    close = difflib.get_close_matches(str(value), names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    raise ConfigError(f"unknown {what} {value!r}{hint}; valid: {', '.join(names)}")


def accepted_keywords(target: Callable[..., Any], unpacked: Sequence[str] = ()) -> list[str] | None:
    """The keyword arguments ``target`` takes (``self`` aside), or None when it takes any (``**kwargs``);
    ``unpacked``: the keys its ``**kwargs`` stands for (the ``TypedDict`` it is typed ``Unpack[...]`` by),
    which it then takes instead of any."""
    parameters = inspect.signature(target).parameters.values()
    if not unpacked and any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    keyword_kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in parameters if p.kind in keyword_kinds and p.name != "self"] + list(unpacked)


def check_keywords(
    target: Callable[..., Any],
    given: Mapping[str, Any],
    what: str,
    unpacked: Sequence[str] = (),
    supplied: Sequence[str] = (),
) -> None:
    """Raise :class:`ConfigError` naming each key of ``given`` that ``target`` does not take, with the
    closest valid name and the full list (``unpacked``: see :func:`accepted_keywords`; ``supplied``: what
    the caller passes itself, so no option and not listed)."""
    accepted = accepted_keywords(target, unpacked)
    if accepted is None:
        return
    accepted = [name for name in accepted if name not in supplied]
    unknown = [key for key in given if key not in accepted]
    if not unknown:
        return
    named = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), accepted, n=1)
        named.append(f"{key!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    raise ConfigError(f"{what} has no option {', '.join(named)}; valid: {', '.join(accepted) or 'none'}")
