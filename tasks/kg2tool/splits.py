"""The two train / held-out rules of KG2Tool tasks, pure functions of a task's FOL tree (so a sampled task
and the same task read from a file get one verdict; docs/contracts.md "Splits"):

- ``entity``: each KG entity is held out by its hashed id (tasks/splits.py); a task is ``train`` when every
  anchor entity of its query is a train entity, ``heldout`` when every one is held out, and in neither when
  they are mixed. No held-out question is about an entity a training question names.
- ``relation``: each relation (forward and inverse together) is held out by its hashed name; a task is
  ``heldout`` when it needs at least one held-out relation, else ``train``. A train episode is offered no
  held-out relation's tool, distractors included (:func:`train_side_tools`), so held-out questions need
  tools never offered in training.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, get_args

from hopgym.tasks.fol.queries import FolTree
from hopgym.tasks.kg2tool.generated_tools import GeneratedTool
from hopgym.tasks.splits import Split, key_side, keys_side

KGSplitRule = Literal["entity", "relation"]
KG_SPLIT_RULES: tuple[KGSplitRule, ...] = get_args(KGSplitRule)


def _nodes(tree: FolTree) -> Iterator[FolTree]:
    yield tree
    if "arg" in tree:
        yield from _nodes(tree["arg"])
    for arg in tree.get("args", ()):
        yield from _nodes(arg)


def anchor_entities(tree: FolTree) -> list[str]:
    """The entity ids a query names (its ``e`` leaves), in tree order."""
    return [node["entity"] for node in _nodes(tree) if node["op"] == "e"]


def query_relations(tree: FolTree) -> list[str]:
    """The relations a query projects along (its ``p`` nodes), in tree order."""
    return [node["relation"] for node in _nodes(tree) if node["op"] == "p"]


def fol_side(tree: FolTree, rule: KGSplitRule) -> Split | None:
    """The side of ``rule`` a query is on (see the module docstring); None: in neither split."""
    if rule == "entity":
        return keys_side(anchor_entities(tree))
    held_out = any(key_side(relation) == "heldout" for relation in query_relations(tree))
    return "heldout" if held_out else "train"


def train_side_tools(tools: Sequence[GeneratedTool]) -> list[GeneratedTool]:
    """The tools a train task of the ``relation`` rule may be offered: set and search tools, and the tools
    of train relations."""
    return [tool for tool in tools if tool.relation is None or key_side(tool.relation) == "train"]
