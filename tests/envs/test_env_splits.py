"""Every registered env declares how its tasks divide into ``train`` and ``heldout`` (``split_rules``), and
each rule holds on the real data: the two sides are disjoint, every task is where the rule puts it (the
rule recomputed here from its definition, docs/contracts.md "Splits"), a held-out KGTool-v0 question names
no entity a training question names, and under the relation rule it needs a relation no training episode
uses or is offered a tool of. The ``split`` / ``split_by`` options are checked like every other option."""

from __future__ import annotations

import hashlib
import json
import re

import gymnasium as gym
import pytest

from hopgym import ENV_IDS
from hopgym.envs.env_options import check_env_options, env_class
from hopgym.envs.tooltasks.env import EXAMPLE
from hopgym.errors import ConfigError, DataError
from hopgym.sandbox import make_sandbox
from hopgym.tasks.fol.sampler import sample_queries
from hopgym.tasks.kg2tool.assembly import load_kg_source, sample_tasks
from hopgym.tasks.kg2tool.task_file import write_tasks
from tests.shared_data import SUBSET, needs_data

KG = {"kg": "family-e", "patterns": "1p,2p,2i", "n": 12, "n_distractors": 10}
"""Small KGTool-v0 task sets over family-e, whose 66 relations hold 8 held-out ones."""


def heldout_key(key: str) -> bool:
    """The documented rule, written out again: the key's sha256, first 8 bytes, below 20% of 2**64."""
    return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") < 0.2 * 2**64


def anchors(tree: dict) -> set[str]:
    if tree["op"] == "e":
        return {tree["entity"]}
    return set().union(*(anchors(arg) for arg in ([tree["arg"]] if "arg" in tree else tree["args"])))


def relations(tree: dict) -> set[str]:
    own = {tree["relation"]} if tree["op"] == "p" else set()
    children = [tree["arg"]] if "arg" in tree else tree.get("args", [])
    return own.union(*(relations(arg) for arg in children))


@pytest.fixture(scope="module")
def sandbox():
    with make_sandbox("process") as shared:
        yield shared


def sides(env_id: str, **kwargs) -> dict[str, list]:
    """The tasks of each side (the envs made and closed)."""
    found = {}
    for split in ("train", "heldout"):
        env = gym.make(env_id, split=split, **kwargs)
        try:
            found[split] = list(env.unwrapped.tasks)
            assert env.unwrapped.split == split
        finally:
            env.close()
    assert not {t.id for t in found["train"]} & {t.id for t in found["heldout"]}
    return found


def test_every_registered_env_declares_its_split_rules():
    declared = {env_id: env_class(env_id).split_rules for env_id in ENV_IDS}
    assert declared == {
        "ToolHop-v0": ("task-id",),
        "FamilyTool-v0": ("task-id",),
        "KGTool-v0": ("entity", "relation"),
        "ToolTasks-v0": ("file",),
    }
    for env_id in ENV_IDS:  # the options are the env's own: the registry-wide option check takes them
        check_env_options(env_id, {"split": "train", "split_by": declared[env_id][0]})


RULES = [
    pytest.param(env_id, rule, id=f"{env_id}-{rule}")
    for env_id in ENV_IDS
    for rule in env_class(env_id).split_rules
]


@pytest.mark.parametrize(("env_id", "rule"), RULES)
def test_every_declared_rule_gives_two_disjoint_nonempty_sides(sandbox, env_id, rule):
    """Each rule an env declares, on its contract case's data (so a new env is checked without a new test):
    both sides hold tasks, no task is on both, and each task is where the env's own rule puts it."""
    kwargs = {**env_class(env_id).contract_cases[0], "split_by": rule, "sandbox": sandbox}
    found = sides(env_id, **kwargs)
    env = gym.make(env_id, **kwargs)
    try:
        for split, tasks in found.items():
            assert tasks and all(env.unwrapped.split_side(task, rule) == split for task in tasks)
    finally:
        env.close()


@needs_data("toolhop/toolhop_subset100.jsonl")
def test_toolhop_splits_every_task_by_its_hashed_id():
    found = sides("ToolHop-v0", data_path=SUBSET, scenario="direct")
    everything = gym.make("ToolHop-v0", data_path=SUBSET, scenario="direct")
    all_ids = [task.id for task in everything.unwrapped.tasks]
    everything.close()
    assert sorted(t.id for t in found["heldout"]) == sorted(i for i in all_ids if heldout_key(i))
    assert sorted(t.id for t in found["train"]) == sorted(i for i in all_ids if not heldout_key(i))
    assert 5 <= len(found["heldout"]) <= 40  # about a fifth of 100


@needs_data("familytool/familytool-e.jsonl")
def test_familytool_splits_every_row_by_its_hashed_id():
    found = sides("FamilyTool-v0", variant="e")
    assert all(heldout_key(t.id) for t in found["heldout"])
    assert not any(heldout_key(t.id) for t in found["train"])
    assert len(found["train"]) + len(found["heldout"]) == 455  # every row is on one side


def test_tooltasks_rows_say_their_side_and_an_untagged_row_is_in_neither(tmp_path):
    rows = json.loads(EXAMPLE.read_text())
    tagged = [{**rows[0], "id": "a", "split": "train"}, {**rows[1], "id": "b", "split": "heldout"}]
    untagged = {**{key: value for key, value in rows[0].items() if key != "split"}, "id": "c"}
    path = tmp_path / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in [*tagged, untagged]))
    found = sides("ToolTasks-v0", data_path=path, scenario="direct")
    assert [t.id for t in found["train"]] == ["a"] and [t.id for t in found["heldout"]] == ["b"]
    everything = gym.make("ToolTasks-v0", data_path=path, scenario="direct")
    assert [t.id for t in everything.unwrapped.tasks] == ["a", "b", "c"]  # no split: every row
    everything.close()
    (tmp_path / "x.jsonl").write_text(json.dumps(untagged) + "\n" + json.dumps({**untagged, "id": "d"}))
    with pytest.raises(
        ConfigError, match=r"split='heldout' by file keeps none of the 2 task\(s\) of .*x.jsonl"
    ):
        gym.make("ToolTasks-v0", data_path=tmp_path / "x.jsonl", scenario="direct", split="heldout")
    (tmp_path / "bad.jsonl").write_text(json.dumps({**untagged, "split": "test"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: split: 'test' is not one of \['train', 'heldout'\]"):
        gym.make("ToolTasks-v0", data_path=tmp_path / "bad.jsonl", scenario="direct")


@needs_data("familytool/familykg-e.txt")
def test_kgtool_entity_split_holds_no_training_entity_out(sandbox):
    found = sides("KGTool-v0", split_by="entity", sandbox=sandbox, **KG)
    train_anchors = set().union(*(anchors(t.fol) for t in found["train"]))
    heldout_anchors = set().union(*(anchors(t.fol) for t in found["heldout"]))
    assert not train_anchors & heldout_anchors
    assert all(heldout_key(entity) for entity in heldout_anchors)
    assert not any(heldout_key(entity) for entity in train_anchors)
    for split in found.values():  # n per pattern on each side, sampled further than n to fill it
        assert sorted(t.pattern for t in split) == sorted(["1p", "2p", "2i"] * 12)


@needs_data("familytool/familykg-e.txt")
def test_kgtool_relation_split_offers_training_no_heldout_relation(sandbox):
    """Every held-out task needs a relation that no train task uses and no train episode offers a tool of
    (distractors included); episodes run against the real sandbox."""
    found = sides("KGTool-v0", split_by="relation", sandbox=sandbox, **KG)
    tools = load_kg_source("family-e").tools_by_name()
    env = gym.make("KGTool-v0", split="train", split_by="relation", sandbox=sandbox, **KG)
    seen = set()
    try:
        for task in found["train"]:
            observation, _ = env.reset(options={"task_id": task.id})
            offered = [tools[tool["function"]["name"]].relation for tool in observation["tools"]]
            assert len(observation["tools"]) == len(task.tool_names) + 10
            seen |= relations(task.fol) | {relation for relation in offered if relation}
    finally:
        env.close()
    assert not any(heldout_key(relation) for relation in seen)
    for task in found["heldout"]:
        assert relations(task.fol) - seen and any(heldout_key(r) for r in relations(task.fol))


@needs_data("familytool/familykg-e.txt")
def test_a_sampled_task_and_the_same_task_from_a_file_get_one_verdict(tmp_path):
    """The rule is a function of the task: sampled with the split, or sampled without it, written to a file
    and read back with the split, the held-out tasks are the same (ids and queries)."""
    source = load_kg_source("family-e")
    every = sample_tasks(source, ["1p", "2p"], 40, seed=3)
    path = tmp_path / "tasks.jsonl"
    write_tasks(every, path)
    for rule in ("entity", "relation"):
        from_file = gym.make("KGTool-v0", kg="family-e", data_path=path, split="heldout", split_by=rule)
        sampled = gym.make(
            "KGTool-v0", kg="family-e", patterns="1p,2p", n=1, seed=3, split="heldout", split_by=rule
        )
        try:
            kept = {t.id: t.query for t in from_file.unwrapped.tasks}
            assert 0 < len(kept) < len(every)
            for task in sampled.unwrapped.tasks:  # the first held-out task of each pattern's stream
                assert kept[task.id] == task.query
        finally:
            from_file.close()
            sampled.close()


@needs_data("familytool/familykg-e.txt")
def test_a_partial_draw_is_the_start_of_the_stream_a_split_draws_further_on():
    kg = load_kg_source("family-e").kg
    found = sample_queries(kg, "2p", 1000, seed=0, max_attempts=40, partial=True)
    assert 0 < len(found) < 1000
    assert found == sample_queries(kg, "2p", len(found), seed=0)
    with pytest.raises(DataError, match=rf"found {len(found)} of 1000 valid instances in 40 attempts"):
        sample_queries(kg, "2p", 1000, seed=0, max_attempts=40)


def test_a_split_the_kg_cannot_fill_is_named():
    with pytest.raises(DataError, match=r"pattern 1p: the split keeps 0 of 64 sampled tasks, fewer than n=1"):
        sample_tasks(load_kg_source("family-e"), ["1p"], 1, seed=0, keep=lambda fol: False)


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("ToolHop-v0", {"split": "test"}, "unknown split 'test'; valid: train, heldout"),
        (
            "ToolHop-v0",
            {"split": "Train"},
            "unknown split 'Train' (did you mean 'train'?); valid: train, heldout",
        ),
        ("ToolHop-v0", {"split_by": "entity"}, "unknown split_by 'entity'; valid: task-id"),
        (
            "FamilyTool-v0",
            {"split": "train", "split_by": "relation"},
            "unknown split_by 'relation'; valid: task-id",
        ),
        (
            "KGTool-v0",
            {"split": "train", "split_by": "relations"},
            "unknown split_by 'relations' (did you mean 'relation'?); valid: entity, relation",
        ),
        (
            "ToolTasks-v0",
            {"split": "heldout", "split_by": "task-id"},
            "unknown split_by 'task-id'; valid: file",
        ),
    ],
)
def test_a_bad_split_option_is_a_config_error_naming_the_valid_ones(sandbox, env_id, kwargs, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        gym.make(env_id, sandbox=sandbox, **kwargs)
