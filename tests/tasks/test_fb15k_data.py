"""FB15k-237 loader on the real data ($HOPGYM_DATA/fb15k-237): counts, names, relation paths, resolution."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hopgym.errors import DataError
from hopgym.tasks.kg.fb15k237 import freebase_wording, load_fb15k237, parse_relation


@pytest.fixture(scope="module")
def fb():
    return load_fb15k237()


def _raw_lines(name: str) -> list[str]:
    path = Path(os.environ["HOPGYM_DATA"]) / "fb15k-237" / name
    return path.read_text(encoding="utf-8").replace("\r\n", "\n").split("\n")


def test_counts_from_source(fb):
    assert len(fb.kg) == 272_115 + 17_535 + 20_466
    assert len(fb.kg.relations()) == 237
    assert len(fb.kg.entities()) == 14_541
    assert len(fb.names) == 14_541
    assert sum(1 for name in fb.names.values() if "," in name) == 172
    assert sum(1 for mids in fb.mids_by_name.values() if len(mids) > 1) == 223
    assert sum(parse_relation(r).is_composite for r in fb.kg.relations()) == 144


def test_raw_triples_of_every_split_are_loaded_with_names(fb):
    entities = [line.split("\t")[0] for line in _raw_lines("entity2id.txt")[1:] if line]
    relations = [line.split("\t")[0] for line in _raw_lines("relation2id.txt")[1:] if line]
    for split in ("train2id.txt", "valid2id.txt", "test2id.txt"):
        lines = [line for line in _raw_lines(split)[1:] if line]
        for line in (lines[0], lines[len(lines) // 2], lines[-1]):
            head, tail, relation = map(int, line.split())  # OpenKE order: head tail relation
            assert (entities[head], relations[relation], entities[tail]) in fb.kg
    assert fb.kg.tails("/m/027rn", "/location/country/form_of_government")[0] == "/m/06cx9"
    names = dict(line.split("\t", 1) for line in _raw_lines("entity2text.txt") if line)
    assert fb.name("/m/016ywr") == names["/m/016ywr"] == "Jeremy Irons"


def test_shared_names_map_to_every_mid(fb):
    shared = next(name for name, mids in fb.mids_by_name.items() if len(mids) > 1)
    assert all(fb.name(mid) == shared for mid in fb.mids_named(shared))
    assert fb.mids_named("no entity has this name") == ()
    with pytest.raises(DataError, match="not an FB15k-237 entity"):
        fb.name("/m/nothing")


def test_relation_texts_cover_every_relation(fb):
    assert set(fb.relation_texts) == set(fb.kg.relations())
    assert fb.relation_texts["/music/artist/origin"] == "music artist origin"


def test_relation_paths_parse_into_hops():
    composite = parse_relation("/film/film/distributors./film/film_film_distributor_relationship/region")
    assert composite.is_composite
    assert [h.subject_type for h in composite.hops] == ["film", "film_film_distributor_relationship"]
    assert (composite.domain, composite.subject_type, composite.object_label) == ("film", "film", "region")
    user_domain = parse_relation("/base/biblioness/bibs_location/country")
    assert (user_domain.domain, user_domain.subject_type, user_domain.object_label) == (
        "base/biblioness",
        "bibs_location",
        "country",
    )
    with pytest.raises(DataError, match="not a Freebase relation path"):
        parse_relation("film/language")
    assert freebase_wording("/film/film/language", False, "Titanic") == "the language of Titanic"
    assert freebase_wording("/film/film/language", True, "English") == "the film whose language is English"


def test_data_path_resolution(tmp_path, monkeypatch):
    explicit = load_fb15k237(Path(os.environ["HOPGYM_DATA"]) / "fb15k-237")
    assert len(explicit.kg) == 310_116
    with pytest.raises(DataError, match="does not exist"):
        load_fb15k237(tmp_path / "nowhere")
    (tmp_path / "entity2id.txt").write_text("2\n/m/a\t0\n")
    with pytest.raises(DataError, match="id 1 is missing"):
        load_fb15k237(tmp_path)
    monkeypatch.delenv("HOPGYM_DATA")
    with pytest.raises(DataError, match="HOPGYM_DATA is not set"):
        load_fb15k237()


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("²\n/m/a\t0\n", "the first line must be the number of entries"),  # "²".isdigit(), int("²") raises
        ("9" * 5000 + "\n/m/a\t0\n", "the first line must be the number of entries"),  # past int()'s digits
        ("1\n/m/a\t²\n", "expected 'name<TAB>id'"),
        ("1\n/m/a\t" + "0" * 5000 + "\n", "expected 'name<TAB>id'"),
    ],
)
def test_odd_digits_in_an_id_file_are_named_not_raised(tmp_path, text, problem):
    (tmp_path / "entity2id.txt").write_text(text, encoding="utf-8")
    with pytest.raises(DataError, match=problem):
        load_fb15k237(tmp_path)
