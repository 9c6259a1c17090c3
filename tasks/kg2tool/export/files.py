"""Export files: records written as a JSON array or JSON Lines as they come, and read back."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Any

from hopgym.errors import DataError
from hopgym.tasks.user_files import read_user_text


def write_export(records: Iterable[Mapping[str, Any]], path: str | Path) -> int:
    """Write records as one JSON array (a ``.json`` path, as Alpaca and ShareGPT files usually are, the
    bytes of ``json.dumps(records, ensure_ascii=False, indent=1)``) or as JSON Lines (any other suffix);
    returns how many were written. Records are written as they come (an export can be hundreds of MB),
    into a file renamed to ``path`` once complete, so an interrupted export leaves no partial file under
    that name (a symlink's file is replaced, not the link; a device or pipe, e.g. /dev/stdout, is written
    through)."""
    target = Path(path)
    array = target.suffix == ".json"
    if target.exists() and not target.is_file():
        try:
            with target.open("w", encoding="utf-8") as handle:
                return _write_rows(handle, records, array)
        except OSError as exc:
            raise DataError(f"cannot write the export to {target}: {exc}") from exc
    final = target.resolve()
    partial = final.with_name(f"{final.name}.partial")
    try:
        with partial.open("w", encoding="utf-8") as handle:
            count = _write_rows(handle, records, array)
        partial.replace(final)
    except BaseException as exc:  # interrupted or failed: the partial file goes, a previous export stays
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DataError(f"cannot write the export to {target}: {exc}") from exc
        raise
    return count


def _write_rows(handle: IO[str], records: Iterable[Mapping[str, Any]], array: bool) -> int:
    count = 0
    for row in records:
        if array:  # an array element of indent=1: each line of the record one space in
            element = json.dumps(row, ensure_ascii=False, indent=1).replace("\n", "\n ")
            handle.write(("[\n " if count == 0 else ",\n ") + element)
        else:
            handle.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        count += 1
    if array:
        handle.write("\n]\n" if count else "[]\n")
    return count


def read_export(path: str | Path) -> list[dict[str, Any]]:
    """The records of a file written by :func:`write_export` (a JSON array or JSON Lines)."""
    target = Path(path)
    try:
        text = read_user_text(target, "KG2Tool export")
        if target.suffix == ".json":
            rows = json.loads(text)
        else:
            rows = [json.loads(line) for line in text.split("\n") if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read the export {target}: {exc}") from exc
    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise DataError(f"{target}: an export holds a list of JSON objects")
    return rows
