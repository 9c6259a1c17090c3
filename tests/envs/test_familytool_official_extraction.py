"""FamilyTool-v0's extraction metrics equal the official KGETool code's, on generated KGETool outputs.

How the expected values (``OFFICIAL``) were produced: the official scripts ``pipeline/utils.py`` and
``pipeline/KG_extraction_post_process_make_intermediate_json.py`` of github.com/yxzwang/FamilyTool at commit
c3c5fc7e2496df3db4ffa045f0dbf34114c27802 were fetched into /tmp (never into this repository) and imported
unchanged under Python 3.12 (they need it) with numpy and tqdm installed and stub modules for the imports
the metric never uses (vllm, faiss, torch, transformers, sentence_transformers, openai, ipdb). Two names of
the post-processing module were replaced: ``generate_fakerelationdict(fakes, relations, handler, k)`` by
``{fake: TABLE[fake][:k]}`` (the fixed similarity table below stands in for jina-embeddings-v3 + faiss, and
this test gives FamilyTool-v0 the same table as its retriever) and ``EmbModelHandlerV2`` by a no-op. Then,
for each family and official mode (``exact``, which hopgym names ``greedy``, and ``relation_retrieval``):

    metric_KG_extraction([{"response": "\\n".join(calls)} for each case], [the rows named by the cases, as
                         read from $HOPGYM_DATA/familytool/familytool-{b,e}.jsonl], mode,
                         "$HOPGYM_DATA/familytool/familykg-{b,e}.txt")

gave the dataset ratios (its ``outputratio``) and the extracted texts (kept here as sha256 prefixes). The
per-case counts (EM, F1, No-Hallucination, Coverage, Format Error) come from the same call on the one case
alone; a lone format-error case divides by zero in the official ratios, so its counts are the difference of
the counts over the first i+1 cases and the first i.

The cases cover made-up relations (first, middle and last hop), hops missing at the call's original start
entity, several calls in one output (the official lookup table changed by one call and seen by the next:
b rows 5 and 6, e row 3), the ``全部`` item, unknown starts (also ``Mr. Smith``, whose space the official
parser deletes), a leaf start, a malformed call, and calls inside think text.
"""

from __future__ import annotations

import hashlib
import json

import gymnasium as gym
import pytest

import hopgym  # noqa: F401 - registers the envs
from hopgym.envs.familytool.metrics import KG_KEYS, aggregate_metrics
from hopgym.tasks.familytool.extraction import extract
from tests.shared_data import needs_data

pytestmark = needs_data("familytool/familykg-e.txt")

TABLE = {
    "mom": ["mother", "husband", "wife"],
    "dad": ["father", "mother", "son"],
    "dinner_time": ["prefer_dinnertime", "prefer_alarm_time", "birthday"],
    "mother全部": ["mother", "prefer_dinnertime", "father"],
    "全部": ["son", "mother", "father"],
    "favourite_pickup": ["prefer_pickup_location", "prefer_dining_location", "home"],
    "tutor": ["teacher", "father", "mother"],
    "son全部": ["son", "husband", "prefer_pickup_location"],
}
CASES = {
    "b": [
        (
            "KGMTUbench_0",
            ('KG.search(start="Bob", path=["<relationship>mother","<relationship>prefer_dinnertime"])',),
        ),
        ("KGMTUbench_0", ('KG.search(start="Bob", path=["mom","prefer_dinnertime"])',)),
        ("KGMTUbench_0", ("KG.search(start=Bob, path=[mother, dinner_time])",)),
        ("KGMTUbench_0", ("KG.search(start=Bob, path=[dad, dinner_time])",)),
        ("KGMTUbench_0", ("KG.search(start=Bob, path=[father, wife, prefer_dinnertime])",)),
        (
            "KGMTUbench_22",
            (
                "KG.search(start=Jack, path=[wife, prefer_departure])",
                "KG.search(start=Alice, path=[son, prefer_departure])",
            ),
        ),
        (
            "KGMTUbench_22",
            (
                "KG.search(start=Alice, path=[son, prefer_departure])",
                "KG.search(start=Jack, path=[wife, prefer_departure])",
            ),
        ),
        ("KGMTUbench_0", ("KG.search(start=Bob, path=[mother, 全部])",)),
        ("KGMTUbench_0", ("KG.search(start=Bob, path=[mother, 全部, prefer_dinnertime])",)),
        (
            "KGMTUbench_0",
            (
                "KG.search(start=Bob, path=[全部])",
                "KG.search(start=Bob, path=[全部, prefer_dinnertime])",
            ),
        ),
        ("KGMTUbench_0", ("KG.search(start=Bobby, path=[mother, prefer_dinnertime])",)),
        (
            "KGMTUbench_0",
            (
                "KG.search(start=Bobby, path=[mother])",
                "KG.search(start=Bob, path=[mother, prefer_dinnertime])",
            ),
        ),
        ("KGMTUbench_0", ("KG.search(start=dinnertime_0002, path=[mother])",)),
        (
            "KGMTUbench_0",
            (
                'KG.search("Bob", ["mother"])',
                "KG.search(start=Bob, path=[mother, prefer_dinnertime])",
            ),
        ),
        (
            "KGMTUbench_3",
            (
                "<think>KG.search(start=Alice, path=[son, prefer_appointment_time])</think>",
                "KG.search(start=Alice, path=[husband, son, prefer_appointment_time])",
            ),
        ),
    ],
    "e": [
        ("KGMTUbench_0", ("KG.search(start=Jack, path=[father, prefer_pickup_location])",)),
        ("KGMTUbench_0", ("KG.search(start=Jack, path=[dad, favourite_pickup])",)),
        ("KGMTUbench_1", ("KG.search(start=Alice, path=[son, teacher, prefer_pickup_location])",)),
        (
            "KGMTUbench_1",
            (
                "KG.search(start=Bob, path=[mother, teacher])",
                "KG.search(start=Alice, path=[son, teacher, prefer_pickup_location])",
            ),
        ),
        ("KGMTUbench_1", ("KG.search(start=Alice, path=[son, tutor, favourite_pickup])",)),
        ("KGMTUbench_1", ('KG.search(start="Mr. Smith", path=[prefer_pickup_location])',)),
        (
            "KGMTUbench_1",
            (
                "KG.search(start=Alice, path=[son, 全部])",
                "KG.search(start=Bob, path=[teacher, prefer_pickup_location])",
            ),
        ),
        (
            "KGMTUbench_2",
            (
                "KG.search(start=Alice, path=[husband, father, prefer_dining_location])",
                "KG.search(start=Alice, path=[husband, mom, prefer_dining_location])",
            ),
        ),
        (
            "KGMTUbench_2",
            (
                "KG.search(start=Jack, path=[wife, father])",
                "KG.search(start=Alice, path=[husband, father, prefer_dining_location])",
            ),
        ),
        ("KGMTUbench_4", ("KG.search(start=Bob, path=[father, mother, prefer_travel_city])",)),
        ("KGMTUbench_4", ("KG.search(start=Nobody, path=[father])",)),
        (
            "KGMTUbench_4",
            (
                "KG.search(start=Bob, path=[father, mom, prefer_travel_city])",
                "KG.search(start=Bob, path=[dad, mother, prefer_travel_city])",
            ),
        ),
    ],
}
# (family, official mode) -> per case (EM, F1, No-Hallucination count, Coverage, Format Error, the first 16
# hex digits of the sha256 of the official KG_search text), then the official ratios (EM, F1,
# No-Hallucination, Coverage, Format Error).
OFFICIAL = {
    ("b", "exact"): (
        [
            (1, 1.0, 1, 1, 0, "b6cd71efe18083f8"),
            (0, 0.6666666666666666, 0, 1, 0, "ed8f426f86e6f9de"),
            (0, 0.08333333333333333, 0, 1, 0, "c81af87a33619c8b"),
            (0, 0.03448275862068965, 0, 0, 0, "58c5fbd1ff0e9331"),
            (0, 0.4, 1, 1, 0, "2725ed0c8455a40f"),
            (0, 0.08163265306122448, 0, 1, 0, "6c4f2e6da5cadc68"),
            (0, 0.08163265306122448, 0, 1, 0, "308025d49c22fced"),
            (0, 0.03448275862068965, 0, 0, 0, "58c5fbd1ff0e9331"),
            (0, 0.6666666666666666, 0, 1, 0, "ed8f426f86e6f9de"),
            (0, 0.06666666666666667, 0, 1, 0, "d48856ade3e81f97"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (1, 1.0, 1, 1, 0, "b6cd71efe18083f8"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (1, 1.0, 0, 1, 0, "70b3601747b81d97"),
            (0, 0.6666666666666666, 1, 1, 0, "4c639ec497629beb"),
        ],
        (0.2, 0.38548205489092185, 0.3076923076923077, 0.7333333333333333, 0.13333333333333333),
    ),
    ("b", "relation_retrieval"): (
        [
            (1, 1.0, 1, 1, 0, "b6cd71efe18083f8"),
            (1, 1.0, 1, 1, 0, "b6cd71efe18083f8"),
            (0, 0.6666666666666666, 1, 1, 0, "bb68294f7238470a"),
            (0, 0.4444444444444445, 1, 1, 0, "a297e63f33fd93a7"),
            (0, 0, 1, 0, 0, "0c0c8f2d60056432"),
            (0, 0.8, 1, 1, 0, "0660b9a80fd804cd"),
            (0, 0.5, 1, 0, 0, "577bd56c8a9f08d7"),
            (0, 0.4, 1, 0, 0, "9b6b683a25ca66b7"),
            (0, 0.6666666666666666, 1, 1, 0, "8a8e50cd35a30612"),
            (0, 0.6666666666666666, 1, 1, 0, "31a7a4745e457b2e"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (1, 1.0, 1, 1, 0, "b6cd71efe18083f8"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (1, 1.0, 0, 1, 0, "70b3601747b81d97"),
            (0, 0.6666666666666666, 1, 1, 0, "4c639ec497629beb"),
        ],
        (
            0.26666666666666666,
            0.5874074074074075,
            0.9230769230769231,
            0.6666666666666666,
            0.13333333333333333,
        ),
    ),
    ("e", "exact"): (
        [
            (1, 1.0, 1, 1, 0, "4f105cae9a9b9b1f"),
            (0, 0.030303030303030304, 0, 0, 0, "70f74a435c70e4ea"),
            (1, 1.0, 1, 1, 0, "946e8523f92cd41c"),
            (0, 0.08571428571428572, 0, 1, 0, "c24e207897d445c0"),
            (0, 0.05970149253731343, 0, 0, 0, "334b790c6087e27f"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (0, 0.08695652173913045, 0, 1, 0, "d682cfad6ffeb2fe"),
            (0, 0.08695652173913045, 0, 1, 0, "fa40e27afdc3744d"),
            (0, 0.7499999999999999, 1, 1, 0, "3b5bcbb1d0466db8"),
            (1, 1.0, 1, 1, 0, "43d09de9aa7538e7"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (0, 0.08333333333333333, 0, 1, 0, "2bb4a0bea392892e"),
        ],
        (0.25, 0.348580432113852, 0.4, 0.6666666666666666, 0.16666666666666666),
    ),
    ("e", "relation_retrieval"): (
        [
            (1, 1.0, 1, 1, 0, "4f105cae9a9b9b1f"),
            (0, 0.2857142857142857, 1, 1, 0, "d337dff5785e1108"),
            (0, 0.4, 1, 0, 0, "04123d119c80d3e9"),
            (0, 0.8571428571428571, 1, 1, 0, "a5e1b7d04330a702"),
            (0, 0.16666666666666666, 1, 0, 0, "39111c8efda96f56"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (0, 0.7499999999999999, 1, 1, 0, "22fbae98993bf80d"),
            (0, 0.7499999999999999, 1, 1, 0, "1e9539278313887b"),
            (0, 0.7499999999999999, 1, 1, 0, "3b5bcbb1d0466db8"),
            (1, 1.0, 1, 1, 0, "43d09de9aa7538e7"),
            (0, 0.0, 0, 0, 1, "e3b0c44298fc1c14"),
            (0, 0.6666666666666666, 1, 1, 0, "da76f3b457c1cb4c"),
        ],
        (0.16666666666666666, 0.5521825396825396, 1.0, 0.6666666666666666, 0.16666666666666666),
    ),
}

MODES = {"exact": "greedy", "relation_retrieval": "retrieval"}


def table_retriever(relation: str, relations: list[str], k: int) -> list[str]:
    return TABLE[relation][:k]


def episode_metrics(env, row: str, text: str) -> dict:
    """FamilyTool-v0's metrics for one kg="extract" episode: ``text`` is extracted, the gold call ends it."""
    env.reset(options={"task_id": row})
    gold = next(task for task in env.unwrapped.tasks if task.id == row).gold_call
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": gold.name, "arguments": json.dumps(gold.arguments)},
    }
    env.step({"role": "assistant", "content": text})  # the extraction turn
    return env.step({"role": "assistant", "content": None, "tool_calls": [call]})[4]["metrics"]


@pytest.mark.parametrize(("family", "official_mode"), list(OFFICIAL))
def test_every_extraction_metric_equals_the_official_value(family, official_mode):
    mode = MODES[official_mode]
    retriever = table_retriever if mode == "retrieval" else None
    env = gym.make("FamilyTool-v0", variant=family, kg="extract", extraction=mode, retriever=retriever)
    per_case, ratios = OFFICIAL[family, official_mode]
    records = []
    for (row, calls), (em, f1, clean, coverage, format_error, text_sha) in zip(
        CASES[family], per_case, strict=True
    ):
        text = "\n".join(calls)
        rendered = extract(text, env.unwrapped.kg, mode, retriever=retriever).text
        assert hashlib.sha256(rendered.encode()).hexdigest()[:16] == text_sha, (row, text, rendered)
        metrics = episode_metrics(env, row, text)
        expected = (em, f1, None if format_error else clean, coverage, format_error)
        assert tuple(metrics[key] for key in KG_KEYS) == pytest.approx(expected, abs=1e-12), (row, text)
        records.append({"metrics": metrics})
    summary = aggregate_metrics(records)
    assert tuple(summary[key] for key in KG_KEYS) == pytest.approx(ratios, abs=1e-12)
    env.close()
