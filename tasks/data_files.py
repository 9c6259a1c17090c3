"""Where dataset files live: a path the caller gives, ``$HOPGYM_DATA``, or the download cache that
``hopgym data download`` fills (laid out like ``$HOPGYM_DATA``)."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs

from hopgym.errors import DataError


def data_cache_root() -> Path:
    """The default download folder (e.g. ``~/.cache/hopgym``), laid out like ``$HOPGYM_DATA``."""
    return Path(platformdirs.user_cache_dir("hopgym"))


def resolve_data_file(explicit: str | os.PathLike[str] | None, folder: str, filename: str) -> Path:
    """The explicit path when given, else ``$HOPGYM_DATA/<folder>/<filename>``, else the download cache
    (``hopgym data download``); it must exist."""
    if explicit is not None:
        path = Path(explicit)
    elif os.environ.get("HOPGYM_DATA"):
        path = Path(os.environ["HOPGYM_DATA"]) / folder / filename
    elif (data_cache_root() / folder / filename).exists():
        path = data_cache_root() / folder / filename
    else:
        raise DataError(
            f"no path given for {folder}/{filename}, HOPGYM_DATA is not set and the download cache "
            f"{data_cache_root()} has no {folder}/: run `hopgym data download {folder}`, pass the path "
            f"explicitly or set HOPGYM_DATA to the folder that holds {folder}/"
        )
    if not path.exists():
        raise DataError(f"{path} does not exist (looked for {folder}/{filename})")
    return path
