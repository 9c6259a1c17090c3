"""Call statuses have one home, ``hopgym.envs.calls``: the typed ``CallStatus`` is the contract's list, every
status a call can get is one of them and each one is reachable, every table keyed by status covers exactly
them, a record with another status is refused, and generic code reads them from there, not from ToolHop's
metrics or the checker."""

from __future__ import annotations

import re
from typing import Any, get_args

import pytest

from hopgym.envs.calls import (
    CALL_STATUSES,
    FAILURE_STATUSES,
    INVOCATION_ERROR_TYPES,
    CallStatus,
    call_error_types,
    new_call_record,
)
from hopgym.envs.env_checker import check_call_record
from hopgym.envs.feedback import outcome_of
from hopgym.envs.validation import STATUS_ORDER, ToolValidator
from hopgym.errors import ConfigError, ContractError
from hopgym.sandbox.base import CallResult
from hopgym.sandbox.base import CallStatus as SandboxStatus
from hopgym.serving.mcp_tools import MCP_ERROR_TYPES, mcp_error_type
from hopgym.tasks.toolhop.loader import load_toolhop
from hopgym.train.rewards import DEFAULT_CALL_WEIGHTS, ShapedReward
from tests.package_imports import hopgym_imports, module_name, package_files
from tests.paths import FIXTURES, ROOT

FIXTURE = FIXTURES / "toolhop" / "official_sample.json"


def test_call_status_is_the_list_of_the_contract_in_its_order() -> None:
    contracts = (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")
    sentence = contracts.split("`CALL_STATUSES` lists it) is one of ", 1)[1].split("For a call refused", 1)[0]
    assert tuple(re.findall(r"`([a-z_]+)`", sentence)) == CALL_STATUSES == get_args(CallStatus)
    assert len(CALL_STATUSES) == 8
    assert tuple(status for status in CALL_STATUSES if status != "ok") == FAILURE_STATUSES
    assert set(INVOCATION_ERROR_TYPES) < set(FAILURE_STATUSES) and set(STATUS_ORDER) < set(FAILURE_STATUSES)


def produced_statuses() -> set[str]:
    """Every status and error the two producers give: validation on real ToolHop schemas (each way a call
    can be wrong) and the sandbox outcome of each way a run ends (an ok run returning an error value too)."""
    validator = ToolValidator(load_toolhop(FIXTURE)[0].tools)
    calls: list[tuple[Any, Any]] = [
        ("reverse_text", {"text": "abc"}),
        ("reverse_everything", "{oops"),
        (7, {}),
        ("reverse_text", {"text": "a", "lang": "en"}),
        ("reverse_text", {}),
        ("reverse_text", {"text": 5}),
    ]
    found: set[str] = set()
    for name, arguments in calls:
        check = validator.check(name, arguments)
        found |= {check.status, *check.errors}
    results = [CallResult(status=status, value="fine") for status in get_args(SandboxStatus)]
    results.append(CallResult(status="ok", value={"error": "no such city"}))
    found |= {outcome_of(result)[0] for result in results}
    return found


def test_every_status_a_call_gets_is_a_call_status_and_each_one_is_reachable() -> None:
    assert produced_statuses() == set(CALL_STATUSES)


def test_the_tables_keyed_by_status_cover_exactly_the_call_statuses() -> None:
    assert set(DEFAULT_CALL_WEIGHTS) == set(CALL_STATUSES)
    assert set(MCP_ERROR_TYPES) == set(CALL_STATUSES)
    assert {status for status in CALL_STATUSES if mcp_error_type(status) is None} == {"ok"}
    assert all(DEFAULT_CALL_WEIGHTS[status] < 0 for status in INVOCATION_ERROR_TYPES)


@pytest.mark.parametrize(
    ("status", "errors", "said"),
    [
        ("crashed", ["crashed"], "status 'crashed' is not one of ['ok', 'tool_hallucination'"),
        ("ok", ["ok"], "errors must list failure statuses"),
        ("tool_error", ["tool_error", "exploded"], "errors must list failure statuses"),
    ],
)
def test_the_checker_refuses_a_record_with_another_status_and_passes_a_good_one_after(
    status: str, errors: list[str], said: str
) -> None:
    record: Any = new_call_record("c1", "reverse_text", {}, "tool_error", ["tool_error"], "Error: x")
    record.update(status=status, errors=errors)
    with pytest.raises(ContractError, match=re.escape(said)):
        check_call_record(record, "step 1")
    good = new_call_record("c1", "reverse_text", {}, "parameter_missing", ["parameter_missing"], "Error: x")
    check_call_record(good, "step 1")
    assert call_error_types(good) == {"parameter_missing"}


def test_a_shaped_reward_refuses_weights_for_another_status_and_takes_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"unknown statuses \['crashed'\]; statuses: \['ok'"):
        ShapedReward(call_weights={"crashed": 1.0, "ok": 1.0})
    reward = ShapedReward(call_weights={"timeout": -1.0})
    assert reward.call_weights == {**DEFAULT_CALL_WEIGHTS, "timeout": -1.0}


HOMES = {
    "INVOCATION_ERROR_TYPES": "hopgym.envs.calls",
    "call_error_types": "hopgym.envs.calls",
    "CALL_STATUSES": "hopgym.envs.calls",
    "CallStatus": "hopgym.envs.calls",
}
"""Each status name and the one module generic code imports it from (ToolHop's own folder may import its
re-export; the sandbox's ``CallStatus``, a run's ending, is another thing and lives in the sandbox)."""


def test_generic_code_imports_the_statuses_from_their_home() -> None:
    wrong = []
    for path in package_files():
        module = module_name(path)
        for line, target in hopgym_imports(path.read_text(encoding="utf-8")):
            source, _, name = target.rpartition(".")
            home = HOMES.get(name)
            if home is None or source in (home, "hopgym.sandbox.base"):
                continue
            if source == "hopgym.envs.toolhop.metrics" and module.startswith("hopgym.envs.toolhop."):
                continue
            wrong.append(f"{module}:{line} imports {name} from {source}")
    assert wrong == []
    assert hopgym_imports("from hopgym.envs.toolhop.metrics import INVOCATION_ERROR_TYPES\n") == [
        (1, "hopgym.envs.toolhop.metrics.INVOCATION_ERROR_TYPES")
    ]
