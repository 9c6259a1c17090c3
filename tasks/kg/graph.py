"""An in-memory knowledge graph that can change while it is used.

Entities and relations are interned to integer ids; triples live in an insertion-ordered dict and two
adjacency indexes (head -> relation -> tails, tail -> relation -> heads), so FB15k-237's 310k triples load in
about a second and lookups in either direction cost one dict access. Neighbour lists keep insertion order,
which is what "the first tail of a relation" means in the official FamilyTool search.
"""

from __future__ import annotations

import difflib
import gc
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from hopgym.errors import KGError
from hopgym.tasks.kg.triples import Triple, read_triples_file

Adjacency = dict[int, dict[int, list[int]]]


@dataclass(frozen=True)
class PathSearch:
    """The outcome of ``KG.search(start, path)``.

    ``triples`` are the edges of every walk that reached the furthest hop, level by level; ``ends`` are the
    entities where those walks stop; ``failed_hop`` is the index in ``path`` of the first relation that no
    current entity has (None when the whole path was walked).
    """

    start: str
    path: tuple[str, ...]
    triples: tuple[Triple, ...]
    ends: tuple[str, ...]
    failed_hop: int | None

    @property
    def complete(self) -> bool:
        return self.failed_hop is None


class KnowledgeGraph:
    """Triples (head, relation, tail) with indexes by (head, relation) and (tail, relation)."""

    def __init__(self, triples: Iterable[Triple] = ()) -> None:
        self._entity_names: list[str] = []
        self._entity_ids: dict[str, int] = {}
        self._relation_names: list[str] = []
        self._relation_ids: dict[str, int] = {}
        self._triples: dict[tuple[int, int, int], None] = {}
        self._out: Adjacency = {}
        self._in: Adjacency = {}
        self._relation_counts: dict[int, int] = {}
        self._version = 0
        self.add_all(triples)

    # construction -------------------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | Path) -> KnowledgeGraph:
        """A graph holding the triples of a KG file (one ``['h', 'r', 't']`` per line)."""
        return cls(read_triples_file(path))

    @classmethod
    def from_id_triples(
        cls,
        entity_names: Sequence[str],
        relation_names: Sequence[str],
        id_triples: Iterable[tuple[int, int, int]],
    ) -> KnowledgeGraph:
        """Bulk load from (head_id, relation_id, tail_id) triples indexing the two name lists.

        Used for large id-coded datasets such as FB15k-237: no string hashing per triple.
        """
        graph = cls()
        graph._entity_names = list(entity_names)
        graph._entity_ids = {name: i for i, name in enumerate(graph._entity_names)}
        graph._relation_names = list(relation_names)
        graph._relation_ids = {name: i for i, name in enumerate(graph._relation_names)}
        if len(graph._entity_ids) != len(graph._entity_names):
            raise KGError("entity names must be unique")
        if len(graph._relation_ids) != len(graph._relation_names):
            raise KGError("relation names must be unique")
        triples = list(dict.fromkeys(id_triples))
        n_entities, n_relations = len(graph._entity_names), len(graph._relation_names)
        bad = next(
            (
                (h, r, t)
                for h, r, t in triples
                if not (0 <= h < n_entities and 0 <= t < n_entities and 0 <= r < n_relations)
            ),
            None,
        )
        if bad is not None:
            raise KGError(f"triple ids {bad} out of range: {n_entities} entities, {n_relations} relations")
        gc_was_enabled = gc.isenabled()
        gc.disable()  # hundreds of thousands of new containers would trigger many useless collections
        try:
            graph._bulk_insert(triples)
        finally:
            if gc_was_enabled:
                gc.enable()
        return graph

    # mutation -----------------------------------------------------------------------------------

    def add(self, head: str, relation: str, tail: str) -> bool:
        """Add a triple; new entities and relations are created. Returns False if it was already there."""
        for label, value in (("head", head), ("relation", relation), ("tail", tail)):
            if not isinstance(value, str) or not value.strip():
                raise KGError(f"triple {label} must be a non-empty string, got {value!r}")
        return self._insert(
            self._intern(self._entity_ids, self._entity_names, head),
            self._intern(self._relation_ids, self._relation_names, relation),
            self._intern(self._entity_ids, self._entity_names, tail),
        )

    def add_all(self, triples: Iterable[Triple]) -> int:
        """Add many triples; returns how many were new."""
        return sum(self.add(*triple) for triple in triples)

    def load_file(self, path: str | Path) -> int:
        """Merge a KG file into this graph at run time; returns how many triples were new."""
        return self.add_all(read_triples_file(path))

    def remove(self, head: str, relation: str, tail: str) -> None:
        """Remove a triple; raises KGError when the graph does not hold it."""
        key = (
            self._entity_ids.get(head, -1),
            self._relation_ids.get(relation, -1),
            self._entity_ids.get(tail, -1),
        )
        if key not in self._triples:
            raise KGError(f"cannot remove [{head!r}, {relation!r}, {tail!r}]: the graph does not hold it")
        del self._triples[key]
        self._version += 1
        h, r, t = key
        self._unlink(self._out, h, r, t)
        self._unlink(self._in, t, r, h)
        self._relation_counts[r] -= 1
        if not self._relation_counts[r]:
            del self._relation_counts[r]

    @property
    def version(self) -> int:
        """A counter that changes on every mutation: lets holders of a copy notice changes in O(1)."""
        return self._version

    # listings -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._triples)

    def __contains__(self, triple: object) -> bool:
        if not (isinstance(triple, tuple) and len(triple) == 3):
            return False
        head, relation, tail = triple
        key = (
            self._entity_ids.get(head, -1),
            self._relation_ids.get(relation, -1),
            self._entity_ids.get(tail, -1),
        )
        return key in self._triples

    def __iter__(self) -> Iterator[Triple]:
        """Triples in insertion order."""
        names, relations = self._entity_names, self._relation_names
        for h, r, t in self._triples:
            yield names[h], relations[r], names[t]

    def relations(self) -> list[str]:
        """Relations held by at least one triple, sorted (what a relation-path prompt lists)."""
        return sorted(self._relation_names[r] for r in self._relation_counts)

    def entities(self) -> list[str]:
        """Entities in at least one triple, sorted."""
        return sorted(self._entity_names[e] for e in self._live_entity_ids())

    def has_entity(self, name: str) -> bool:
        entity = self._entity_ids.get(name)
        return entity is not None and (entity in self._out or entity in self._in)

    def has_relation(self, name: str) -> bool:
        relation = self._relation_ids.get(name)
        return relation is not None and relation in self._relation_counts

    # lookups by name ----------------------------------------------------------------------------

    def tails(self, head: str, relation: str) -> list[str]:
        """Tails of (head, relation) in insertion order; [] when the head lacks that relation."""
        return self._neighbours(self._out, head, relation)

    def heads(self, tail: str, relation: str) -> list[str]:
        """Heads of (relation, tail) in insertion order; [] when the tail lacks that relation."""
        return self._neighbours(self._in, tail, relation)

    def out_relations(self, entity: str) -> list[str]:
        """Relations leaving an entity, in insertion order."""
        return [self._relation_names[r] for r in self._out.get(self.entity_id(entity), {})]

    def in_relations(self, entity: str) -> list[str]:
        """Relations arriving at an entity, in insertion order."""
        return [self._relation_names[r] for r in self._in.get(self.entity_id(entity), {})]

    def out_edges(self, entity: str) -> list[Triple]:
        """All triples with this head, grouped by relation in insertion order."""
        h = self.entity_id(entity)
        names, relations = self._entity_names, self._relation_names
        return [(entity, relations[r], names[t]) for r, ts in self._out.get(h, {}).items() for t in ts]

    def in_edges(self, entity: str) -> list[Triple]:
        """All triples with this tail, grouped by relation in insertion order."""
        t = self.entity_id(entity)
        names, relations = self._entity_names, self._relation_names
        return [(names[h], relations[r], entity) for r, hs in self._in.get(t, {}).items() for h in hs]

    def search(self, start: str, path: Sequence[str], *, first_tail_only: bool = False) -> PathSearch:
        """Walk ``path`` from ``start`` (the paper's ``KG.search(start=..., path=[...])``).

        Every tail of each hop is followed, or only the first one with ``first_tail_only`` (the official
        FamilyTool walk). The walk stops at the first relation that no current entity has, a relation
        unknown to the graph included; ``failed_hop`` records where. An unknown start raises KGError.
        """
        if not self.has_entity(start):
            raise self._unknown("entity", start)
        frontier = [self._entity_ids[start]]
        levels: list[list[tuple[int, int, int]]] = []
        failed_hop = None
        for hop, relation in enumerate(path):
            r = self._relation_ids.get(relation)
            edges: list[tuple[int, int, int]] = []
            if r is not None:
                for h in frontier:
                    tails = self._out.get(h, {}).get(r, [])
                    edges.extend((h, r, t) for t in (tails[:1] if first_tail_only else tails))
            if not edges:
                failed_hop = hop
                break
            levels.append(edges)
            frontier = list(dict.fromkeys(t for _, _, t in edges))
        kept: list[list[tuple[int, int, int]]] = []
        alive = set(frontier)
        for edges in reversed(levels):
            surviving = [edge for edge in edges if edge[2] in alive]
            kept.append(surviving)
            alive = {h for h, _, _ in surviving}
        names, relations = self._entity_names, self._relation_names
        triples = tuple(
            dict.fromkeys((names[h], relations[r], names[t]) for edges in reversed(kept) for h, r, t in edges)
        )
        return PathSearch(
            start=start,
            path=tuple(path),
            triples=triples,
            ends=tuple(names[e] for e in frontier),
            failed_hop=failed_hop,
        )

    # integer-id access (for samplers and executors that run many queries) ----------------------

    def entity_id(self, name: str) -> int:
        """The id of an entity the graph holds; KGError (with close matches) otherwise."""
        if not self.has_entity(name):
            raise self._unknown("entity", name)
        return self._entity_ids[name]

    def relation_id(self, name: str) -> int:
        """The id of a relation the graph holds; KGError (with close matches) otherwise."""
        if not self.has_relation(name):
            raise self._unknown("relation", name)
        return self._relation_ids[name]

    def entity_name(self, entity_id: int) -> str:
        return self._entity_names[entity_id]

    def relation_name(self, relation_id: int) -> str:
        return self._relation_names[relation_id]

    def live_entity_ids(self) -> list[int]:
        """Ids of entities in at least one triple, ascending (a stable order for seeded sampling)."""
        return sorted(self._live_entity_ids())

    def neighbours(self, entity_id: int, *, inverse: bool) -> Mapping[int, list[int]]:
        """relation id -> tail ids of an entity (head ids with ``inverse``). Read-only by contract."""
        return (self._in if inverse else self._out).get(entity_id, {})

    def project_ids(self, entity_ids: Iterable[int], relation_id: int, *, inverse: bool) -> set[int]:
        """The relation projection P_r(A) (P_r^-1(A) with ``inverse``) of a set of entity ids."""
        index = self._in if inverse else self._out
        result: set[int] = set()
        for entity in entity_ids:
            targets = index.get(entity)
            if targets:
                result.update(targets.get(relation_id, ()))
        return result

    # internals ----------------------------------------------------------------------------------

    @staticmethod
    def _intern(ids: dict[str, int], names: list[str], name: str) -> int:
        index = ids.get(name)
        if index is None:
            index = ids[name] = len(names)
            names.append(name)
        return index

    def _insert(self, h: int, r: int, t: int) -> bool:
        if (h, r, t) in self._triples:
            return False
        self._bulk_insert([(h, r, t)])
        return True

    def _bulk_insert(self, triples: list[tuple[int, int, int]]) -> None:
        """Store and index triples the graph does not hold yet (the loop is kept tight for bulk loads)."""
        self._triples.update(dict.fromkeys(triples))
        self._version += 1
        out, into, counts = self._out, self._in, self._relation_counts
        for h, r, t in triples:
            by_relation = out.get(h)
            if by_relation is None:
                by_relation = out[h] = {}
            tails = by_relation.get(r)
            if tails is None:
                by_relation[r] = [t]
            else:
                tails.append(t)
            by_relation = into.get(t)
            if by_relation is None:
                by_relation = into[t] = {}
            heads = by_relation.get(r)
            if heads is None:
                by_relation[r] = [h]
            else:
                heads.append(h)
            counts[r] = counts.get(r, 0) + 1

    @staticmethod
    def _unlink(index: Adjacency, source: int, relation: int, target: int) -> None:
        by_relation = index[source]
        by_relation[relation].remove(target)
        if not by_relation[relation]:
            del by_relation[relation]
            if not by_relation:
                del index[source]

    def _live_entity_ids(self) -> set[int]:
        return self._out.keys() | self._in.keys()

    def _neighbours(self, index: Adjacency, entity: str, relation: str) -> list[str]:
        e = self.entity_id(entity)
        r = self.relation_id(relation)
        return [self._entity_names[n] for n in index.get(e, {}).get(r, ())]

    def _unknown(self, kind: str, name: str) -> KGError:
        live = self.entities() if kind == "entity" else self.relations()
        close = difflib.get_close_matches(str(name), live, n=3)
        hint = f"; close matches: {', '.join(map(repr, close))}" if close else ""
        return KGError(f"unknown {kind} {name!r}: the graph has no triple with it{hint}")
