"""KGETool path extraction throughput over every FamilyTool row, with scripted model output.

For each row the scripted "model" writes the row's gold relation paths as ``KG.search`` lines (one per
chain of the golden sub-KG), and a second time with the last relation of each path made up
(``favourite_<relation>``), which exercises greedy expansion and relation retrieval. Prints family KG load
time, paths per second per extraction mode, and how many gold-path rows extract exactly the golden sub-KG.
Run from the repo root:

    HOPGYM_DATA=/work/shared/data .venv/bin/python benchmarks/bench_kgetool.py [--embedding] [--out F]

``--embedding`` uses the real all-MiniLM-L6-v2 retriever (the ``retrieval`` extra); the default retriever
is a fixed string-similarity table, so the figure is the extraction's own cost.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time

from hopgym.tasks.familytool.dataset import FamilyToolTask, load_family_kg, load_familytool
from hopgym.tasks.familytool.extraction import EXTRACTION_MODES, extract
from hopgym.tasks.familytool.retrieval import DEFAULT_EMBEDDING_MODEL, make_retriever
from hopgym.tasks.kg.triples import Triple


def chains(triples: tuple[Triple, ...]) -> list[tuple[str, list[str]]]:
    """(start, relations) per chain of a sub-KG: a chain goes on while a head is the previous tail."""
    result: list[tuple[str, list[str]]] = []
    for head, relation, tail in triples:
        if result and result[-1][2] == head:
            result[-1][1].append(relation)
            result[-1] = (result[-1][0], result[-1][1], tail)
        else:
            result.append((head, [relation], tail))
    return [(start, relations) for start, relations, _ in result]


def scripted_reply(task: FamilyToolTask, made_up: bool) -> tuple[str, int]:
    """The KG.search lines for a row, and how many paths they hold."""
    lines = []
    for start, relations in chains(task.gold_subkg):
        path = [*relations[:-1], f"favourite_{relations[-1]}"] if made_up else relations
        lines.append(f'KG.search(start="{start}", path={json.dumps(path)})')
    return "<api_call>\n" + "\n".join(lines) + "\n</api_call>", len(lines)


def string_similarity(relation: str, relations: list[str], k: int) -> list[str]:
    return sorted(relations, key=lambda r: -difflib.SequenceMatcher(None, relation, r).ratio())[:k]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--embedding", action="store_true", help=f"retrieve with {DEFAULT_EMBEDDING_MODEL}")
    parser.add_argument("--out", default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    retriever = make_retriever(DEFAULT_EMBEDDING_MODEL) if args.embedding else string_similarity
    figures: dict[str, dict[str, float]] = {}
    for variant in ("b", "e"):
        start = time.perf_counter()
        kg = load_family_kg(variant)
        load_ms = (time.perf_counter() - start) * 1000
        tasks = load_familytool(variant)
        print(f"familykg-{variant}: {len(kg)} triples, loaded in {load_ms:.1f} ms; {len(tasks)} rows")
        figures[variant] = {"kg_load_ms": round(load_ms, 2)}
        for made_up in (False, True):
            replies = [scripted_reply(task, made_up) for task in tasks]
            paths = sum(count for _, count in replies)
            for mode in EXTRACTION_MODES:
                start = time.perf_counter()
                results = [extract(text, kg, mode, retriever=retriever) for text, _ in replies]
                seconds = time.perf_counter() - start
                exact = sum(set(r.triples) == set(t.gold_subkg) for r, t in zip(results, tasks, strict=True))
                label = f"{mode}{' (made-up last hop)' if made_up else ''}"
                print(
                    f"  {label:<32}{paths / seconds:>10.0f} paths/s"
                    f"   golden sub-KG reproduced: {exact}/{len(tasks)}"
                )
                figures[variant][f"{mode}{'_made_up' if made_up else ''}_paths_per_s"] = round(
                    paths / seconds
                )
                figures[variant][f"{mode}{'_made_up' if made_up else ''}_exact_rows"] = exact
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            json.dump(figures, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
