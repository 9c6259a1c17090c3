"""``hopgym data download``: every env's data from its public source, at a pinned revision, sha256-checked,
into a folder laid out as ``$HOPGYM_DATA`` expects (by default the user cache, which the loaders read when
``HOPGYM_DATA`` is unset).

FamilyTool comes from github.com/yxzwang/FamilyTool, FB15k-237 from github.com/thunlp/OpenKE (triples and
ids) and github.com/yao8839836/kg-bert (names), both as raw files of a pinned commit; ToolHop from the
Hugging Face hub (:mod:`hopgym.tasks.toolhop.hub`). A file whose digest differs is removed, never used.
"""

from __future__ import annotations

import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from hopgym.errors import ConfigError, DownloadError
from hopgym.tasks.toolhop.hub import download_toolhop, sha256_of

GITHUB_RAW = "https://raw.githubusercontent.com"


@dataclass(frozen=True)
class RemoteFile:
    """One upstream file: ``repo`` at ``commit``, its ``path`` there, saved as ``<folder>/<name>``."""

    repo: str
    commit: str
    path: str
    sha256: str

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def url(self, base: str) -> str:
        return f"{base.rstrip('/')}/{self.repo}/{self.commit}/{self.path}"


# (repo, commit, folder there, {file name: sha256}): the revisions and paths of ../shared/data/*/SOURCE.md;
# the digests are those of the files at them.
_SOURCES: dict[str, tuple[tuple[str, str, str, dict[str, str]], ...]] = {
    "familytool": (
        ("yxzwang/FamilyTool", "c3c5fc7e2496df3db4ffa045f0dbf34114c27802", "datasets", {
            "familytool-b.jsonl": "fe036758285e7f5dfab272a05bb34970fea33a435808b94941e300a2fab969e8",
            "familytool-e.jsonl": "ad81a53f62a0163c57f0a3669d1f4670a5ee17f5b93408f2987e99602dcc8dbb",
        }),
        ("yxzwang/FamilyTool", "c3c5fc7e2496df3db4ffa045f0dbf34114c27802", "KG", {
            "familykg-b.txt": "546daa7fe96f3b45bcdb79fc98edcc335fcd12c19b13c954cf3a2cd270f41e9e",
            "familykg-e.txt": "732ec34b012bc0a2ec73e50514492aa4a0556e40baafd91a8520896958897e3b",
        }),
    ),
    "fb15k-237": (
        ("thunlp/OpenKE", "64c4ec8157abfc39112772e9825a349091da45f1", "benchmarks/FB15K237", {
            "train2id.txt": "5f44223a02b39b8e398e77a787feb4f06e9ffccf1ae87047bbf38fcc8cc08bd2",
            "valid2id.txt": "7d21e778de4369d5348f5cff23a08dc847ab5fce4b5f07c80113297d2dc60a86",
            "test2id.txt": "6027e649c1716ac9c1ef2f24672a416aa277aff3e14850ef915ac5a21df70417",
            "entity2id.txt": "e4546cfdcd0b9bd0151cc0f6ef2edee29eb2bb55a3d47e668194999c036fba0d",
            "relation2id.txt": "fefd26d6cd5ff9d360efe5360c11bf112d019f42b3acf165a5c04aa2b66a42d9",
        }),
        ("yao8839836/kg-bert", "0b8f625108efcb9b43603b6840f2548ff3d3c973", "data/FB15k-237", {
            "entity2text.txt": "16beedcfad3d32696e8b0b98cfa0f5eeb144f5142225f227a64fd9ce37447da5",
            "relation2text.txt": "4bf7cb6ea0ac09b17ad210889f723be5e079669f6ae5d507787e1320bbaa0f72",
        }),
    ),
}  # fmt: skip
DATASETS: dict[str, tuple[RemoteFile, ...]] = {
    name: tuple(
        RemoteFile(repo, commit, f"{folder}/{filename}", sha256)
        for repo, commit, folder, files in sources
        for filename, sha256 in files.items()
    )
    for name, sources in _SOURCES.items()
}
NAMES = (*DATASETS, "toolhop")


def fetch_file(remote: RemoteFile, destination: Path, base_url: str, timeout: float = 60.0) -> Path:
    """``remote`` into ``destination`` (kept when already there with the pinned digest); a partial or
    mismatching download is removed and raises DownloadError."""
    if destination.is_file() and sha256_of(destination) == remote.sha256:
        return destination
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    url = remote.url(base_url)
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response, partial.open("wb") as handle:
            shutil.copyfileobj(response, handle)
    except (urllib.error.URLError, OSError) as exc:
        partial.unlink(missing_ok=True)
        raise DownloadError(f"could not download {url}: {exc}") from exc
    digest = sha256_of(partial)
    if digest != remote.sha256:
        partial.unlink()
        raise DownloadError(f"{url} has sha256 {digest}, expected {remote.sha256}; the download was removed")
    partial.replace(destination)
    return destination


def download_dataset(name: str, root: Path, base_url: str = GITHUB_RAW) -> list[Path]:
    """Every file of dataset ``name`` into ``root/<name>/``; returns their paths."""
    if name == "toolhop":
        return [download_toolhop(root / "toolhop")]
    if name not in DATASETS:
        raise ConfigError(f"unknown dataset {name!r}; valid datasets: {list(NAMES)}")
    return [fetch_file(remote, root / name / remote.name, base_url) for remote in DATASETS[name]]
