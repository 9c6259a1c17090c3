"""The KG store that generated KG tools query inside the sandbox worker.

This file is sent to the worker as source text (the worker never imports hopgym), so it uses the standard
library only and defines names without a leading underscore (RestrictedPython refuses those). The host
runtime (envs/kg_tool_runtime.py) sends it, then one ``KG.load(...)`` statement carrying the graph as JSON,
then the generated tool functions, which call the ``KG`` methods below. Neighbour lists keep the order the
triples were given in, so "the first tail of a relation" means the same here as in ``KnowledgeGraph``.
"""

import json


class KGStore:
    """Triples indexed by head and by tail; answers the generated tools' queries."""

    def __init__(self):
        self.clear()

    def clear(self):
        self.out = {}
        self.into = {}
        self.relations = set()

    def load(self, payload_json):
        """Hold exactly the triples of ``{"entities": [...], "relations": [...], "triples": [h, r, t, ...]}``
        (ids into the two lists), replacing what the store held."""
        self.clear()
        payload = json.loads(payload_json)
        entities, relations, flat = payload["entities"], payload["relations"], payload["triples"]
        for index in range(0, len(flat), 3):
            head, relation, tail = (
                entities[flat[index]],
                relations[flat[index + 1]],
                entities[flat[index + 2]],
            )
            self.out.setdefault(head, {}).setdefault(relation, []).append(tail)
            self.into.setdefault(tail, {}).setdefault(relation, []).append(head)
            self.relations.add(relation)

    def check_entity(self, entity):
        if not isinstance(entity, str):
            raise TypeError("an entity must be a string, got " + repr(entity))
        if entity not in self.out and entity not in self.into:
            raise ValueError("unknown entity " + repr(entity) + ": the knowledge graph has no triple with it")

    def entity_list(self, entities):
        """One entity or a list of them, as a list (each checked)."""
        items = [entities] if isinstance(entities, str) else entities
        if not isinstance(items, list):
            raise TypeError("expected an entity or a list of entities, got " + repr(entities))
        for entity in items:
            self.check_entity(entity)
        return items

    def tails(self, head, relation):
        """Tails of (head, relation) in insertion order; [] when the head lacks the relation."""
        self.check_entity(head)
        return list(self.out.get(head, {}).get(relation, []))

    def project(self, entities, relation, inverse, sort):
        """Entities reached from one entity or a list along ``relation`` (tail to head with ``inverse``),
        first-seen order without repeats, or sorted with ``sort``."""
        index = self.into if inverse else self.out
        reached = {}
        for entity in self.entity_list(entities):
            for target in index.get(entity, {}).get(relation, []):
                reached[target] = None
        return sorted(reached) if sort else list(reached)

    def search(self, start, path):
        """The official FamilyTool walk (the paper's Greedy Search): each hop follows the first tail of its
        relation; at the first hop that cannot be taken, every edge leaving the current node is added and
        the walk stops, ``complete`` is then false and ``failed_relation`` names the hop."""
        self.check_entity(start)
        if not isinstance(path, list) or not all(isinstance(relation, str) for relation in path):
            raise TypeError("path must be a list of relation names")
        triples, node = [], start
        for relation in path:
            tails = self.out.get(node, {}).get(relation, [])
            if not tails:
                for other, others in self.out.get(node, {}).items():
                    triples.extend([node, other, tail] for tail in others)
                return {"triples": triples, "complete": False, "failed_relation": relation}
            triples.append([node, relation, tails[0]])
            node = tails[0]
        return {"triples": triples, "complete": True, "failed_relation": None}

    def sets(self, sets):
        """A list of entity lists, each checked."""
        if not isinstance(sets, list) or len(sets) < 2:
            raise ValueError("sets must be a list of at least two entity lists")
        return [set(self.entity_list(items)) for items in sets]

    def intersection(self, sets):
        groups = self.sets(sets)
        return sorted(groups[0].intersection(*groups[1:]))

    def union(self, sets):
        return sorted(set().union(*self.sets(sets)))

    def negation(self, entities, within):
        """The entities of ``within`` that are not in ``entities`` (a complement inside a finite set)."""
        return sorted(set(self.entity_list(within)) - set(self.entity_list(entities)))


KG = KGStore()
