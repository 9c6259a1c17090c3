"""FB15k-237 (OpenKE ids, kg-bert names) loaded into the KG store, with Freebase relation paths parsed.

Entities in the graph are Freebase mids (answers are mids); names come from entity2text, where one name can
belong to several mids and may contain commas. train, valid and test are loaded together.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from hopgym.errors import DataError
from hopgym.tasks.data_files import resolve_data_file
from hopgym.tasks.kg.graph import KnowledgeGraph
from hopgym.tasks.user_files import read_user_text

DATA_FOLDER = "fb15k-237"
SPLIT_FILES = ("train2id.txt", "valid2id.txt", "test2id.txt")


@dataclass(frozen=True)
class RelationHop:
    """One basic Freebase relation ``/domain/subject_type/property`` (a user domain may have two parts)."""

    domain: str
    subject_type: str
    property: str


@dataclass(frozen=True)
class FreebaseRelation:
    """A relation path; composite ones join basic relations with '.' and omit the entity in between."""

    path: str
    hops: tuple[RelationHop, ...]

    @property
    def is_composite(self) -> bool:
        return len(self.hops) > 1

    @property
    def domain(self) -> str:
        return self.hops[0].domain

    @property
    def subject_type(self) -> str:
        """What the head is (``film`` in /film/film/language)."""
        return self.hops[0].subject_type

    @property
    def object_label(self) -> str:
        """What the tail is to the head (``language`` in /film/film/language)."""
        return self.hops[-1].property

    def describe(self, subject: str, *, inverse: bool) -> str:
        """'the language of X'; inverse: 'the film whose language is X'."""
        label = self.object_label.replace("_", " ")
        if inverse:
            return f"the {self.subject_type.replace('_', ' ')} whose {label} is {subject}"
        return f"the {label} of {subject}"


def freebase_wording(relation: str, inverse: bool, subject: str) -> str:
    """A ``RelationWording`` (tasks/fol/text.py) for FB15k-237's Freebase relation paths."""
    return parse_relation(relation).describe(subject, inverse=inverse)


@functools.lru_cache(maxsize=4096)
def parse_relation(path: str) -> FreebaseRelation:
    """Split a path such as ``/film/film/distributors./film/film_film_distributor_relationship/region``."""
    hops = []
    for part in re.split(r"\.(?=/)", path):
        segments = part.strip("/").split("/")
        if not part.startswith("/") or len(segments) < 3 or not all(segments):
            raise DataError(f"not a Freebase relation path: {path!r} (expected /domain/type/property[./...])")
        hops.append(
            RelationHop(domain="/".join(segments[:-2]), subject_type=segments[-2], property=segments[-1])
        )
    return FreebaseRelation(path=path, hops=tuple(hops))


@dataclass(frozen=True)
class FB15k237:
    """The graph (mids and relation paths) plus the readable names the dataset ships."""

    kg: KnowledgeGraph
    names: Mapping[str, str]
    relation_texts: Mapping[str, str]
    mids_by_name: Mapping[str, tuple[str, ...]]

    def name(self, mid: str) -> str:
        """The readable name of a mid (several mids can share one)."""
        try:
            return self.names[mid]
        except KeyError:
            raise DataError(f"{mid!r} is not an FB15k-237 entity mid") from None

    def mids_named(self, name: str) -> tuple[str, ...]:
        """Every mid carrying this exact name (empty when none)."""
        return self.mids_by_name.get(name, ())


def load_fb15k237(data_dir: str | Path | None = None) -> FB15k237:
    """Load all 310,116 triples; ``data_dir`` defaults to ``$HOPGYM_DATA/fb15k-237/``."""
    folder = resolve_data_file(data_dir, DATA_FOLDER, "")
    entities = _read_id_map(folder / "entity2id.txt")
    relations = _read_id_map(folder / "relation2id.txt")
    all_names = _read_tab_map(folder / "entity2text.txt")
    missing = [mid for mid in entities if mid not in all_names]
    if missing:
        raise DataError(
            f"{folder / 'entity2text.txt'} has no name for {len(missing)} mids, e.g. {missing[:3]}"
        )
    names = {mid: all_names[mid] for mid in entities}
    by_name: dict[str, list[str]] = {}
    for mid, name in names.items():
        by_name.setdefault(name, []).append(mid)
    relation_texts = _read_tab_map(folder / "relation2text.txt")
    unnamed = [path for path in relations if path not in relation_texts]
    if unnamed:
        raise DataError(
            f"{folder / 'relation2text.txt'} has no text for {len(unnamed)} relations: {unnamed[:3]}"
        )
    kg = KnowledgeGraph.from_id_triples(
        entities, relations, (t for split in SPLIT_FILES for t in _read_id_triples(folder / split))
    )
    return FB15k237(
        kg=kg,
        names=names,
        relation_texts={path: relation_texts[path] for path in relations},
        mids_by_name={name: tuple(mids) for name, mids in by_name.items()},
    )


def _read_lines(path: Path) -> list[str]:
    text = read_user_text(path, "FB15k-237 file")
    # Only newlines end lines: names may hold other characters that str.splitlines() would split on.
    return [line.rstrip("\r") for line in text.split("\n")]


def _read_id_map(path: Path) -> list[str]:
    """``name TAB id`` lines after a count line; returns names indexed by id."""
    lines = _read_lines(path)
    count = _count_line(path, lines)
    names: list[str | None] = [None] * count
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        name, _, index = line.rpartition("\t")
        if not name or not _is_count(index) or int(index) >= count or names[int(index)] is not None:
            raise DataError(
                f"{path}:{number}: expected 'name<TAB>id' with a new id below {count}, got {line!r}"
            )
        names[int(index)] = name
    if None in names:
        raise DataError(f"{path}: announces {count} ids but id {names.index(None)} is missing")
    return names  # type: ignore[return-value]


def _read_tab_map(path: Path) -> dict[str, str]:
    mapping = {}
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            continue
        key, tab, value = line.partition("\t")
        if not tab:
            raise DataError(f"{path}:{number}: expected 'key<TAB>text', got {line!r}")
        mapping[key] = value
    return mapping


def _read_id_triples(path: Path) -> list[tuple[int, int, int]]:
    """``head tail relation`` id lines (OpenKE order) as (head, relation, tail)."""
    lines = _read_lines(path)
    count = _count_line(path, lines)
    try:
        triples = [(int(h), int(r), int(t)) for h, t, r in (line.split() for line in lines[1:] if line)]
    except ValueError as exc:
        raise DataError(f"{path}: expected 'head_id tail_id relation_id' lines: {exc}") from exc
    if len(triples) != count:
        raise DataError(f"{path}: announces {count} triples but holds {len(triples)}")
    return triples


def _is_count(text: str) -> bool:
    """Whether ``text`` is a count int() reads: ASCII digits ("²".isdigit() holds), at most 18 of them."""
    text = text.strip()
    return text.isascii() and text.isdigit() and len(text) <= 18


def _count_line(path: Path, lines: list[str]) -> int:
    if not lines or not _is_count(lines[0]):
        raise DataError(f"{path}: the first line must be the number of entries")
    return int(lines[0])
