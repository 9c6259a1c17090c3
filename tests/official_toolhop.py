"""Runs the official ToolHop evaluation code unchanged on scripted model replies, in its own process.

Usage: ``python tests/official_toolhop.py CASES.json RESULTS.json``. CASES is a list of
``{"row": <data row>, "scenario": "Direct"|"Mandatory"|"Free", "replies": [assistant messages]}``.
The official ``sample_process`` runs each case; only the network request (``req_closed``) is replaced by the
scripted reply, and what the official client would have sent is recorded. The script is imported from
``$HOPGYM_DATA/toolhop/official/evaluation_closed.py`` (tests only, never shipped) and renamed ``__main__``,
as when it runs as a program (the name shows in some of its error texts). It execs tool code in this
process, which is why it runs apart from the test process.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib.util
import json
import os
import sys
from pathlib import Path


def load_official():
    path = Path(os.environ["HOPGYM_DATA"]) / "toolhop" / "official" / "evaluation_closed.py"
    spec = importlib.util.spec_from_file_location("evaluation_closed", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.__dict__["__name__"] = "__main__"
    return module


def run_case(official, case: dict) -> dict:
    replies = list(case["replies"])
    requests: list[dict] = []

    def scripted_request(messages, model, temperature, base_url, api_key, max_tokens, **kwargs):
        requests.append(
            {
                "messages": copy.deepcopy(messages),
                "temperature": temperature,
                "max_tokens": max_tokens,
                "extra": copy.deepcopy(kwargs),
            }
        )
        return {"choices": [{"message": copy.deepcopy(replies.pop(0))}]}

    official.req_closed = scripted_request
    args = argparse.Namespace(
        scenario=case["scenario"], max_turns=9, model="scripted", base_url=None, api_key=None
    )
    try:
        sample = official.sample_process(copy.deepcopy(case["row"]), args)
    except BaseException as exc:  # the official script itself stops here (e.g. FunctionTimedOut)
        return {"stopped": type(exc).__name__, "requests": requests}
    return {
        "stopped": None,
        "messages": sample["messages"],
        "answer_correct": sample.get("answer_correct"),
        "turn": sample.get("turn"),
        "requests": requests,
    }


def main(cases_path: str, results_path: str) -> None:
    official = load_official()
    cases = json.loads(Path(cases_path).read_text())
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        results = [run_case(official, case) for case in cases]  # the tools' example code prints
    Path(results_path).write_text(json.dumps(results, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
