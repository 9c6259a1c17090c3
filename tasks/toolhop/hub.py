"""Finding the ToolHop data file: explicit path, ``$HOPGYM_DATA``, the user cache, or a hub download."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

from hopgym.errors import DataError, DownloadError, error_text
from hopgym.tasks.data_files import data_cache_root
from hopgym.tasks.user_files import open_user_file

HUB_REPO_ID = "bytedance-research/ToolHop"
HUB_FILENAME = "data/ToolHop.json"
HUB_REVISION = "b439d7279af359fda46e8117ae4f0245b75f5c6b"
HUB_SHA256 = "0a51f71a44b7025645e452123af3caf2e348301922af91778e268db0188a7fab"
"""The pinned upstream file (995 rows); a download with another digest is rejected."""

DATA_DIR_FILENAMES = ("toolhop_subset100.jsonl", "ToolHop.json", HUB_FILENAME)
"""Files looked for in ``$HOPGYM_DATA/toolhop/``, in this order."""


def cache_dir() -> Path:
    """Where downloaded ToolHop data lives: the user cache dir (e.g. ``~/.cache/hopgym/toolhop``)."""
    return data_cache_root() / "toolhop"


def resolve_toolhop_path(data_path: str | os.PathLike[str] | None = None) -> Path:
    """The data file to load: ``data_path``, else ``$HOPGYM_DATA/toolhop/``, else the cache, else download."""
    if data_path is not None:
        path = Path(data_path)
        if not path.exists():  # what is there, of any kind, is judged when it is read (tasks/user_files.py)
            raise DataError(f"ToolHop data_path {str(path)!r} is not a file (expected a JSON list or JSONL)")
        return path
    data_root = os.environ.get("HOPGYM_DATA")
    if data_root:
        folder = Path(data_root) / "toolhop"
        for name in DATA_DIR_FILENAMES:
            if (folder / name).is_file():
                return folder / name
        raise DataError(
            f"HOPGYM_DATA={data_root!r} but {str(folder)!r} holds none of {list(DATA_DIR_FILENAMES)}; "
            "fix the variable or unset it to use the download"
        )
    cached = cache_dir() / HUB_FILENAME
    if cached.is_file():
        return cached
    return download_toolhop(cache_dir())


def hf_hub_download(**kwargs: Any) -> str:
    """``huggingface_hub.hf_hub_download``, imported when a download happens: every ``hopgym`` command
    imports this module (``hopgym data`` lists its names), and the hub client's import is 0.2 s of CPU."""
    from huggingface_hub import hf_hub_download as download

    return str(download(**kwargs))


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open_user_file(path, "file to hash") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def download_hub_file(filename: str, destination: Path, expected_sha256: str, hint: str) -> Path:
    """Download ``filename`` of the dataset repo at the pinned revision into ``destination``, sha256-checked:
    the data and the official evaluation code come from the same revision, so both are fetched here."""
    try:
        downloaded = Path(
            hf_hub_download(
                repo_id=HUB_REPO_ID,
                filename=filename,
                repo_type="dataset",
                revision=HUB_REVISION,
                local_dir=destination,
            )
        )
    except Exception as exc:  # the hub client raises many unrelated types (HTTP, OS, validation)
        raise DownloadError(
            f"could not download {filename} from the Hugging Face dataset {HUB_REPO_ID} "
            f"({error_text(exc)}); {hint}"
        ) from exc
    digest = sha256_of(downloaded)
    if digest != expected_sha256:
        downloaded.unlink()
        raise DownloadError(
            f"downloaded {filename} has sha256 {digest}, expected {expected_sha256}; the file was removed"
        )
    return downloaded


def download_toolhop(destination: Path, expected_sha256: str = HUB_SHA256) -> Path:
    """Download the pinned ``data/ToolHop.json`` from the Hugging Face hub into ``destination``."""
    return download_hub_file(HUB_FILENAME, destination, expected_sha256, "pass data_path= or set HOPGYM_DATA")
