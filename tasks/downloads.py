"""``hopgym data download``: every env's data from its public source, at a pinned revision, sha256-checked,
into a folder laid out as ``$HOPGYM_DATA`` expects (by default the user cache, which the loaders read when
``HOPGYM_DATA`` is unset).

FamilyTool comes from github.com/yxzwang/FamilyTool, FB15k-237 from github.com/thunlp/OpenKE (triples and
ids) and github.com/yao8839836/kg-bert (names), both as raw files of a pinned commit; ToolHop from the
Hugging Face hub (:mod:`hopgym.tasks.toolhop.hub`). A file whose digest differs is removed, never used.
A mirror (``--base-url``) is not trusted either: each body is streamed into a partial file, refused before
anything is written when its Content-Length is not the pinned size, cut as soon as it runs past that size,
and hashed while it streams; only a file of the pinned size and digest is renamed into place.
"""

from __future__ import annotations

import hashlib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hopgym.errors import ConfigError, DownloadError
from hopgym.tasks.toolhop.hub import download_toolhop, sha256_of

GITHUB_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file: ``repo`` at ``commit``, its ``path`` there, saved as ``<folder>/<name>``; its
    ``sha256`` and ``size`` in bytes are those of the file at that commit."""

    repo: str
    commit: str
    path: str
    sha256: str
    size: int

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


# (repo, commit, folder there, {file name: (sha256, size)}): the revisions and paths of
# ../shared/data/*/SOURCE.md; the digests and sizes are those of the files at them.
_SOURCES: dict[str, tuple[tuple[str, str, str, dict[str, tuple[str, int]]], ...]] = {
    "familytool": (
        ("yxzwang/FamilyTool", "c3c5fc7e2496df3db4ffa045f0dbf34114c27802", "datasets", {
            "familytool-b.jsonl":
                ("fe036758285e7f5dfab272a05bb34970fea33a435808b94941e300a2fab969e8", 3872306),
            "familytool-e.jsonl":
                ("ad81a53f62a0163c57f0a3669d1f4670a5ee17f5b93408f2987e99602dcc8dbb", 3533815),
        }),
        ("yxzwang/FamilyTool", "c3c5fc7e2496df3db4ffa045f0dbf34114c27802", "KG", {
            "familykg-b.txt": ("546daa7fe96f3b45bcdb79fc98edcc335fcd12c19b13c954cf3a2cd270f41e9e", 7088),
            "familykg-e.txt": ("732ec34b012bc0a2ec73e50514492aa4a0556e40baafd91a8520896958897e3b", 24568),
        }),
    ),
    "fb15k-237": (
        ("thunlp/OpenKE", "64c4ec8157abfc39112772e9825a349091da45f1", "benchmarks/FB15K237", {
            "train2id.txt": ("5f44223a02b39b8e398e77a787feb4f06e9ffccf1ae87047bbf38fcc8cc08bd2", 3416118),
            "valid2id.txt": ("7d21e778de4369d5348f5cff23a08dc847ab5fce4b5f07c80113297d2dc60a86", 222093),
            "test2id.txt": ("6027e649c1716ac9c1ef2f24672a416aa277aff3e14850ef915ac5a21df70417", 259074),
            "entity2id.txt": ("e4546cfdcd0b9bd0151cc0f6ef2edee29eb2bb55a3d47e668194999c036fba0d", 233099),
            "relation2id.txt": ("fefd26d6cd5ff9d360efe5360c11bf112d019f42b3acf165a5c04aa2b66a42d9", 15764),
        }),
        ("yao8839836/kg-bert", "0b8f625108efcb9b43603b6840f2548ff3d3c973", "data/FB15k-237", {
            "entity2text.txt": ("16beedcfad3d32696e8b0b98cfa0f5eeb144f5142225f227a64fd9ce37447da5", 392383),
            "relation2text.txt": ("4bf7cb6ea0ac09b17ad210889f723be5e079669f6ae5d507787e1320bbaa0f72", 29130),
        }),
    ),
}  # fmt: skip
DATASETS: dict[str, tuple[RemoteFile, ...]] = {
    name: tuple(
        RemoteFile(repo, commit, f"{folder}/{filename}", sha256, size)
        for repo, commit, folder, files in sources
        for filename, (sha256, size) in files.items()
    )
    for name, sources in _SOURCES.items()
}
NAMES = (*DATASETS, "toolhop")
_CHUNK = 1 << 16


def fetch_file(remote: RemoteFile, destination: Path, base_url: str, timeout: float = 60.0) -> Path:
    """``remote`` into ``destination`` (kept when already there with the pinned digest); a partial, oversized
    or mismatching download is removed (at most ``remote.size`` bytes and one chunk are ever written) and
    raises DownloadError; nothing is then left under ``destination``'s name."""
    if destination.is_file() and sha256_of(destination) == remote.sha256:
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    url = remote.url(base_url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            digest = _stream(response, partial, remote.size, url)
    except (urllib.error.URLError, OSError, DownloadError) as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, DownloadError):
            raise
        raise DownloadError(f"could not download {url}: {exc}") from exc
    if digest != remote.sha256:
        partial.unlink()
        raise DownloadError(f"{url} has sha256 {digest}, expected {remote.sha256}; the download was removed")
    partial.replace(destination)
    return destination


def _stream(response, path: Path, size: int, url: str) -> str:
    """Write the body of ``response`` to ``path``, ``size`` bytes at most, and return its sha256: a declared
    length that differs is refused before anything is written, a body that runs past ``size`` is cut."""
    declared = response.headers.get("Content-Length")
    if declared is not None and declared.strip() != str(size):
        raise DownloadError(
            f"{url} is {declared.strip()[:40]} bytes long, expected {size}; nothing was written"
        )
    digest = hashlib.sha256()
    received = 0
    with path.open("wb") as handle:
        while chunk := response.read(min(_CHUNK, size + 1 - received)):
            received += len(chunk)
            if received > size:
                raise DownloadError(f"{url} is longer than the expected {size} bytes; the download was cut")
            digest.update(chunk)
            handle.write(chunk)
    if received != size:
        raise DownloadError(f"{url} ended after {received} bytes, expected {size}; the download was removed")
    return digest.hexdigest()


def download_dataset(name: str, root: Path, base_url: str = GITHUB_RAW) -> list[Path]:
    """Every file of dataset ``name`` into ``root/<name>/``; returns their paths."""
    if name == "toolhop":
        return [download_toolhop(root / "toolhop")]
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; valid datasets: {list(NAMES)}")
    return [fetch_file(remote, root / name / remote.name, base_url) for remote in DATASETS[name]]
