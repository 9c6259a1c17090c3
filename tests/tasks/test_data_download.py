"""``hopgym data download`` against a local file server on 127.0.0.1 that serves the upstream layout
(``<owner>/<repo>/<commit>/<path>``, as raw.githubusercontent.com does) from copies of the shared data."""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from hopgym.cli import main
from hopgym.tasks.downloads import DATASETS
from hopgym.tasks.familytool.dataset import load_family_kg, load_familytool
from hopgym.tasks.toolhop.hub import HUB_REVISION, HUB_SHA256
from tests.shared_data import DATA, needs_data

SHARED_FOLDER = {"familytool": DATA / "familytool", "fb15k-237": DATA / "fb15k-237"}


class QuietHandler(SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.requests.append(self.path)
        super().do_GET()


@pytest.fixture
def mirror(tmp_path: Path) -> Iterator[tuple[str, Path, list[str]]]:
    """(base URL, served folder, requested paths): every pinned file, copied from the shared data."""
    served = tmp_path / "served"
    for name, remotes in DATASETS.items():
        for remote in remotes:
            target = served / remote.repo / remote.commit / remote.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(SHARED_FOLDER[name] / remote.name, target)
    requests: list[str] = []
    handler = type("Handler", (QuietHandler,), {"requests": requests})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(served)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", served, requests
    finally:
        server.shutdown()
        server.server_close()


@needs_data("familytool/familytool-b.jsonl")
def test_familytool_downloads_checked_and_loads(mirror, tmp_path: Path, monkeypatch) -> None:
    base, _, requests = mirror
    root = tmp_path / "data"
    assert main(["data", "download", "familytool", "--to", str(root), "--base-url", base]) == 0
    for remote in DATASETS["familytool"]:
        saved = root / "familytool" / remote.name
        assert hashlib.sha256(saved.read_bytes()).hexdigest() == remote.sha256
    assert sorted(requests) == sorted(f"/{r.repo}/{r.commit}/{r.path}" for r in DATASETS["familytool"])
    monkeypatch.setenv("HOPGYM_DATA", str(root))
    assert len(load_familytool("b")) == 483 and len(load_familytool("e")) == 455
    # a second download finds the files in place, checks them, and asks the server for nothing
    requests.clear()
    assert main(["data", "download", "familytool", "--to", str(root), "--base-url", base]) == 0
    assert requests == []


@needs_data("fb15k-237/train2id.txt")
def test_a_file_with_another_digest_is_removed_and_named(mirror, tmp_path: Path, capsys) -> None:
    base, served, _ = mirror
    remote = next(r for r in DATASETS["fb15k-237"] if r.name == "relation2text.txt")
    tampered = served / remote.repo / remote.commit / remote.path
    tampered.write_text(tampered.read_text().replace("film", "flim", 1))
    root = tmp_path / "data"
    capsys.readouterr()
    assert main(["data", "download", "fb15k-237", "--to", str(root), "--base-url", base]) == 2
    error = capsys.readouterr().err
    assert f"relation2text.txt has sha256 {hashlib.sha256(tampered.read_bytes()).hexdigest()}" in error
    assert f"expected {remote.sha256}; the download was removed" in error
    assert not (root / "fb15k-237" / "relation2text.txt").exists()
    assert not list((root / "fb15k-237").glob("*.part"))


@needs_data("familytool/familykg-e.txt")
def test_without_hopgym_data_the_loaders_read_the_download_cache(mirror, tmp_path: Path, monkeypatch) -> None:
    base, _, _ = mirror
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("HOPGYM_DATA", raising=False)
    assert main(["data", "download", "familytool", "--base-url", base]) == 0
    assert (tmp_path / "cache" / "hopgym" / "familytool" / "familykg-e.txt").is_file()
    assert len(load_family_kg("e")) == 491


class EndlessMirror(BaseHTTPRequestHandler):
    """Answers every path with 400 MiB of bytes, declaring that length or none (then it runs until the
    client stops reading); records how many bytes each answer got out before the client hung up."""

    declare_length: bool
    sent: list[int]

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        body, chunk, total = 400 << 20, b"x" * (1 << 16), 0
        self.send_response(200)
        if self.declare_length:
            self.send_header("Content-Length", str(body))
        self.end_headers()
        try:
            while total < body:
                self.wfile.write(chunk)
                total += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.sent.append(total)


@needs_data("familytool/familytool-b.jsonl")
@pytest.mark.parametrize("declare_length", [True, False], ids=["content-length", "no-length"])
def test_a_mirror_sending_more_than_the_pinned_size_is_cut_and_nothing_is_kept(
    mirror, tmp_path: Path, capsys, declare_length: bool
) -> None:
    sent: list[int] = []
    handler = type("Endless", (EndlessMirror,), {"declare_length": declare_length, "sent": sent})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    root = tmp_path / "data"
    capsys.readouterr()
    try:
        args = ["data", "download", "familytool", "--to", str(root)]
        assert main([*args, "--base-url", f"http://127.0.0.1:{server.server_address[1]}"]) == 2
    finally:
        server.shutdown()
        server.server_close()
    first = DATASETS["familytool"][0]
    error = capsys.readouterr().err
    expected = "bytes long, expected" if declare_length else f"longer than the expected {first.size} bytes"
    assert expected in error, error
    assert list((root / "familytool").iterdir()) == []  # no file under its name, no partial file
    if not declare_length:  # read up to the pinned size, then cut (socket buffers hold a few MiB more)
        assert sent and sent[0] < first.size + (32 << 20), sent
    mirror_base, _, _ = mirror
    assert main([*args, "--base-url", mirror_base]) == 0  # a good mirror afterwards
    assert hashlib.sha256((root / "familytool" / first.name).read_bytes()).hexdigest() == first.sha256


def test_an_unreachable_source_is_one_line(tmp_path: Path, capsys) -> None:
    capsys.readouterr()
    args = ["data", "download", "familytool", "--to", str(tmp_path), "--base-url", "http://127.0.0.1:9"]
    assert main(args) == 2
    assert "could not download http://127.0.0.1:9/yxzwang/FamilyTool/" in capsys.readouterr().err


class HubHandler(SimpleHTTPRequestHandler):
    """Answers the hub's resolve URL of the pinned ToolHop file with the served file and the headers the
    hub client reads (ETag, X-Repo-Commit)."""

    served: Path

    def log_message(self, *args: object) -> None:
        pass

    def _headers(self) -> bytes:
        body = self.served.read_bytes()
        expected = f"/datasets/bytedance-research/ToolHop/resolve/{HUB_REVISION}/data/ToolHop.json"
        if self.path.split("?")[0] != expected:
            self.send_error(404)
            return b""
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
        self.send_header("X-Repo-Commit", HUB_REVISION)
        self.end_headers()
        return body

    def do_HEAD(self) -> None:
        self._headers()

    def do_GET(self) -> None:
        self.wfile.write(self._headers())


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_toolhop_comes_from_the_hub_pinned_and_checked(tmp_path: Path) -> None:
    """The real hub client against a local hub: a file with another digest than the pinned one (here the
    subset served as data/ToolHop.json) is removed and the command fails naming both digests."""
    handler = type("Hub", (HubHandler,), {"served": DATA / "toolhop" / "toolhop_subset100.jsonl"})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    endpoint = f"http://127.0.0.1:{server.server_address[1]}"
    environment = {**os.environ, "HF_ENDPOINT": endpoint, "HF_HUB_OFFLINE": "0"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "hopgym.cli", "data", "download", "toolhop", "--to", str(tmp_path)],
            capture_output=True, text=True, timeout=120, env=environment,
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    served_digest = hashlib.sha256(handler.served.read_bytes()).hexdigest()
    assert done.returncode == 2, done.stderr
    expected = f"data/ToolHop.json has sha256 {served_digest}, expected {HUB_SHA256}; the file was removed"
    assert expected in done.stderr
    assert not (tmp_path / "toolhop" / "data" / "ToolHop.json").exists()
