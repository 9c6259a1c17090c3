"""KG2Tool answer scoring: parsing named answers, shared names, precision/recall/F1 on hand-computed cases."""

from __future__ import annotations

import pytest

from hopgym.envs.kgtool.scoring import parse_answer_names, score_answer

# Two entities share the name "Paris" (the city and the Texas town), as 223 FB15k-237 names are shared.
NAMES = {"/m/1": "Paris", "/m/2": "Paris", "/m/3": "Lyon", "/m/4": "Nice", "/m/5": "Lille"}


def label(entity):
    return NAMES[entity]


def resolve(item):
    return NAMES.get(item, item)


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("Paris\nLyon\n", ["Paris", "Lyon"]),
        ('["Paris", "Lyon"]', ["Paris", "Lyon"]),
        ('```json\n["Paris", "Lyon"]\n```', ["Paris", "Lyon"]),
        ("- Paris\n* Lyon\n\n  Paris  ", ["Paris", "Lyon"]),
        ("Washington, D.C.\n[Nice]", ["Washington, D.C.", "[Nice]"]),
        ("", []),
        (None, []),
    ],
)
def test_answers_parse_as_json_lists_or_lines(text, names):
    assert parse_answer_names(text) == names


def test_exact_name_set_is_correct_and_a_shared_name_covers_every_entity_with_it():
    score = score_answer("Paris\nLyon", ["/m/1", "/m/2", "/m/3"], label)
    assert score.correct and (score.precision, score.recall, score.f1, score.hits_at_1) == (1, 1, 1, 1)
    # gold holds only one of the two Paris entities: the name still counts for it
    assert score_answer("Lyon\nParis", ["/m/2", "/m/3"], label).correct


def test_partial_answers_get_precision_recall_and_f1():
    score = score_answer("Lyon\nNice\nMarseille", ["/m/1", "/m/2", "/m/3", "/m/5"], label)
    assert not score.correct
    assert score.precision == pytest.approx(1 / 3)  # Lyon of Lyon, Nice, Marseille
    assert score.recall == pytest.approx(1 / 4)  # /m/3 of four gold entities
    assert score.f1 == pytest.approx(2 * (1 / 3) * (1 / 4) / (1 / 3 + 1 / 4))
    assert score.hits_at_1 == 1.0
    assert score_answer("Nice\nLyon", ["/m/3"], label).hits_at_1 == 0.0


def test_a_superset_or_an_empty_answer_is_wrong():
    superset = score_answer("Lyon\nNice", ["/m/3"], label)
    assert not superset.correct and superset.recall == 1.0 and superset.precision == 0.5
    empty = score_answer("", ["/m/3"], label)
    assert not empty.correct and (empty.precision, empty.recall, empty.f1) == (0.0, 0.0, 0.0)


def test_ids_count_when_a_resolver_names_them():
    assert score_answer("/m/3\n/m/1", ["/m/1", "/m/3"], label, resolve).correct
    assert not score_answer("/m/3\n/m/1", ["/m/1", "/m/3"], label).correct
    mixed = score_answer('["/m/3", "Paris", "/m/2"]', ["/m/1", "/m/3"], label, resolve)
    assert mixed.correct and mixed.predicted == ("Lyon", "Paris")
