"""The command blocks of the README and docs/, each with the marker that says how it is tested.

Every fenced ``bash`` or ``python`` block carries a marker on the line before it:
``<!-- doc-test: NAME -->`` (a test reads the block with ``doc_block(NAME)`` and runs it as written),
``<!-- doc-test: ci -->`` (``.ci/run`` runs its commands), ``<!-- doc-test: excerpt of PATH -->`` (its lines
are in that file) or ``<!-- doc-test: not here: REASON -->``.
``tests/test_docs.py`` holds every block to one of these."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tests.paths import ROOT

DOCUMENTS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
_BLOCK = re.compile(
    r"^(?:<!-- doc-test: (?P<marker>.+?) -->\n)?```(?P<lang>\w*)\n(?P<text>.*?)^```$", re.M | re.S
)
NOT_HERE = "not here: "
EXCERPT = "excerpt of "


@dataclass(frozen=True)
class DocBlock:
    path: Path
    line: int
    lang: str
    text: str
    marker: str | None

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[list[str]]:
        """A shell block's commands: continuation lines joined, comments dropped, empty lines skipped."""
        lines = self.text.replace("\\\n", " ").splitlines()
        return [words for words in (shlex.split(line, comments=True) for line in lines) if words]


def doc_blocks() -> list[DocBlock]:
    """Every fenced block of the README and docs/, in document order."""
    blocks = []
    for path in DOCUMENTS:
        text = path.read_text()
        for match in _BLOCK.finditer(text):
            line = text.count("\n", 0, match.start("lang")) + 1
            blocks.append(DocBlock(path, line, match["lang"], match["text"], match["marker"]))
    return blocks


def doc_block(name: str) -> DocBlock:
    """The one block whose marker is ``name``."""
    found = [block for block in doc_blocks() if block.marker == name]
    assert len(found) == 1, f"{len(found)} doc blocks are marked {name!r}"
    return found[0]
