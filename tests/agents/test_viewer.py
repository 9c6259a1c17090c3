"""``hopgym view`` over real run folders (ToolHop tasks, scripted model, real sandbox), started as the
real command: its JSON API, its refusals (paths outside the run folders, a foreign Host, other addresses
than 127.0.0.1), and the page in a real headless Chromium driven by Selenium (filters, one episode's
turns and calls, two runs side by side, hostile model output shown as text, a screenshot checked).

The browser tests run when CI=true and fail there if Chromium, its driver or Selenium is missing;
elsewhere they skip naming what is missing.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from hopgym.agents.model.scripted_server import ScriptedModelServer, ScriptedReply, tool_call
from hopgym.agents.report.viewer import open_viewer
from hopgym.cli import main
from tests.extras import require_extra, require_program
from tests.scripted_runs import TASK_BY_QUESTION, TASKS, question_of, read_records
from tests.servers import get, get_json

HOSTILE = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
"""Model output that would run if the page put it into the DOM as markup."""
CORRECT, HALLUCINATED, FAILING = TASKS[0], TASKS[1], TASKS[2]


def viewer_policy(baseline: bool):
    """The baseline run: the first tool called with placeholder arguments, then the gold answer. The
    other: the same for the first task; on the second a call to a tool that does not exist carrying hostile
    markup, then a wrong answer that is hostile markup; HTTP 500 on the third (an errored episode)."""

    def policy(request: dict[str, Any]) -> ScriptedReply:
        task = TASK_BY_QUESTION[question_of(request)]
        if not baseline and task is FAILING:
            return ScriptedReply(status=500)
        if any(message["role"] == "tool" for message in request["messages"]):
            hostile = not baseline and task is HALLUCINATED
            return ScriptedReply(content=f"Final answer: {HOSTILE if hostile else task.answer}")
        if not baseline and task is HALLUCINATED:
            return ScriptedReply(tool_calls=(tool_call("no_such_tool", {"query": HOSTILE}),))
        function = task.tools[0]["function"]
        arguments = {name: "x" for name in function["parameters"].get("required", [])}
        return ScriptedReply(tool_calls=(tool_call(function["name"], arguments),))

    return policy


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("view")
    for name, baseline in (("tried", False), ("baseline", True)):
        with ScriptedModelServer(viewer_policy(baseline)) as server:
            args = ["eval", "--model", server.model, "--api-base", server.api_base, "--api-key", "sk",
                    "--limit", "3", "--max-retries", "0", "--no-progress"]  # fmt: skip
            assert main([*args, "--out", str(root / name)]) == 0
    (root / "tried" / "escape").symlink_to(root / "baseline" / "run.json")
    return root


@pytest.fixture(scope="module")
def viewer(runs: Path) -> Iterator[str]:
    """The URL printed by a real ``hopgym view tried baseline`` process, token included (stopped by SIGTERM
    afterwards)."""
    command = [sys.executable, "-m", "hopgym.cli", "view", str(runs / "tried"), str(runs / "baseline")]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        found = re.search(r"http://127\.0\.0\.1:\d+/\?token=[\w-]+", line)
        assert found, f"no URL printed: {line!r}, stderr: {process.stderr.read() if process.stderr else ''}"
        yield found.group(0)
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0


def by_task(folder: Path) -> dict[str, dict[str, Any]]:
    return {record["task_id"]: record for record in read_records(folder)}


def test_the_api_outlines_every_episode_and_returns_whole_records(viewer: str, runs: Path) -> None:
    tried, baseline = get_json(viewer, "/api/runs")
    assert (tried["name"], baseline["name"]) == ("tried", "baseline")
    assert tried["episodes"] == 3 and tried["errors"] == 1 and baseline["answer_correctness"] == 1.0
    outlines = {outline["task_id"]: outline for outline in tried["outlines"]}
    assert outlines[CORRECT.id]["outcome"] == "correct"
    assert outlines[CORRECT.id]["error_types"] == ["tool_error"]  # its tool found no data for "x"
    assert outlines[HALLUCINATED.id]["outcome"] == "wrong"
    assert outlines[HALLUCINATED.id]["error_types"] == ["tool_hallucination"]
    assert outlines[FAILING.id]["outcome"] == "errored"
    assert outlines[FAILING.id]["error_types"] == ["ModelError"]
    records = by_task(runs / "tried")
    assert {o["task_id"]: o["hops"] for o in tried["outlines"]} == {t: r["hops"] for t, r in records.items()}
    query = urlencode({"run": 0, "task": HALLUCINATED.id, "sample": 0})
    assert get_json(viewer, f"/api/episode?{query}") == {**records[HALLUCINATED.id], "outcome": "wrong"}
    assert get(viewer, "/api/episode?" + urlencode({"run": 0, "task": "nope"}))[0] == 404


def test_only_files_inside_the_given_run_folders_are_served(viewer: str, runs: Path) -> None:
    status, body, headers = get(viewer, "/runs/1/run.json")
    assert status == 200 and body == (runs / "baseline" / "run.json").read_bytes()
    assert "sandbox" in headers["Content-Security-Policy"]
    attempts = [
        "/runs/0/../../../../../../etc/passwd",
        "/runs/0/..%2f..%2f..%2f..%2f..%2f..%2fetc%2fpasswd",
        "/runs/0/%2e%2e/baseline/run.json",  # a sibling folder is not one of the given run folders
        "/runs/0//etc/passwd",
        "/runs/0/escape",  # a symlink inside a run folder that points out of it
        "/runs/0/",
        "/runs/9/run.json",
        "/viewer.js/../../agents/report/viewer.py",
        "/../../../etc/passwd",
    ]
    for path in attempts:
        status, body, _ = get(viewer, path)
        assert status == 404 and b"root:" not in body and b'"env"' not in body, path


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/episode?run=0&task=t&sample=%C2%B2", "sample"),  # '²': str.isdigit() passes it, int() refuses
        ("/api/episode?run=0&task=t&sample=%D9%A1", "sample"),  # Arabic-Indic one: int() would read it
        ("/api/episode?run=0&task=t&sample=" + "1" * 5000, "sample"),  # over int()'s 4,300-digit limit
        ("/api/episode?run=" + "0" * 5000 + "&task=t", "run"),
        ("/api/episode?run=-1&task=t", "run"),
        ("/api/episode?task=t", "run"),
        ("/api/episode?run=0&task=a%00b", "task"),
        ("/api/episode?run=0&task=" + "t" * 5000, "task"),
        ("/runs/%C2%B2/run.json", "run"),
        ("/runs/" + "1" * 5000 + "/run.json", "run"),
        ("/runs/0/run.json%00", "file"),
        ("/runs/0/" + "a/" * 3000 + "run.json", "file"),
    ],
    ids=lambda value: value if len(value) < 50 else value[:30] + f"...({len(value)} chars)",
)
def test_a_bad_query_or_path_value_is_a_400_naming_its_parameter(
    viewer: str, path: str, parameter: str
) -> None:
    """Odd values sent with the token get a 400 whose error names the parameter (not a dropped connection
    with a traceback), and the server goes on serving."""
    status, body, headers = get(viewer, path)
    assert status == 400 and headers["Content-Type"] == "application/json", (path, body[:200])
    assert json.loads(body)["error"].startswith(f"{parameter} must be "), body[:200]
    assert get(viewer, "/runs/1/run.json")[0] == 200
    assert len(get_json(viewer, "/api/runs")) == 2


def test_only_127_0_0_1_is_served_and_only_under_its_own_host_name(viewer: str) -> None:
    assert get(viewer, "/", host="attacker.example")[0] == 403  # a DNS-rebinding page's request
    status, body, headers = get(viewer, "/")
    assert status == 200 and b"/viewer.js" in body
    assert "script-src 'self'" in headers["Content-Security-Policy"]
    port = urlsplit(viewer).port
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.2", port), timeout=5):
        pass


def test_a_run_is_read_again_when_its_episodes_change(runs: Path, tmp_path: Path) -> None:
    folder = shutil.copytree(runs / "baseline", tmp_path / "growing")
    with open_viewer([folder]) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            assert len(get_json(server.url, "/api/runs")[0]["outlines"]) == 3
            record = read_records(folder)[0]
            with (folder / "episodes.jsonl").open("a") as episodes:
                episodes.write(json.dumps({**record, "sample": 1}) + "\n" + '{"task_id": "half-writ')
            (run,) = get_json(server.url, "/api/runs")  # the partial last line is not read yet
            assert [(o["task_id"], o["sample"]) for o in run["outlines"]][-1] == (record["task_id"], 1)
            assert run["episodes"] == 4
            with (folder / "episodes.jsonl").open("a") as episodes:
                episodes.write("ten\n")  # the half-written line ends damaged: named and skipped
            (run,) = get_json(server.url, "/api/runs")
            assert run["episodes"] == 4
            (skipped,) = run["skipped"]
            assert skipped.startswith(f"{folder / 'episodes.jsonl'}:5: not a JSON record")
        finally:
            server.shutdown()


def test_a_port_in_use_is_refused_in_one_line(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", str(runs / "baseline"), "--port", str(port)]) == 2
    assert f"cannot serve on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_folder_without_episodes_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["view", str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_a_stop_signal_while_a_connection_thread_starts_stops_the_server(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The finding: SIGTERM landing inside ``Thread.start`` turned into a "Semaphore released too many
    times" error, which serve_forever logged and went on serving; ``hopgym view`` never exited."""
    start = threading.Thread.start

    def start_then_interrupted(thread: threading.Thread) -> None:
        start(thread)
        thread.join(timeout=30)  # the thread serves the request and gives its slot back; then the signal
        raise KeyboardInterrupt  # lands in the main thread, still inside start()

    with open_viewer([runs / "baseline"], max_connections=2) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as client:
            client.sendall(b"GET /viewer.js HTTP/1.0\r\nHost: 127.0.0.1:%d\r\n\r\n" % server.port)
            monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)
            with pytest.raises(KeyboardInterrupt):
                server.handle_request()
            monkeypatch.undo()
            assert client.makefile("rb").readline().startswith(b"HTTP/1.1 200")
        assert [server._slots.acquire(blocking=False) for _ in range(3)] == [True, True, False]


def test_a_connection_thread_that_cannot_start_gives_its_slot_back(
    runs: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def cannot_start(thread: threading.Thread) -> None:
        raise RuntimeError("can't start new thread")

    with open_viewer([runs / "baseline"], max_connections=2) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30):
            monkeypatch.setattr(threading.Thread, "start", cannot_start)
            server.handle_request()  # logged by socketserver, and the server goes on
            monkeypatch.undo()
        assert [server._slots.acquire(blocking=False) for _ in range(3)] == [True, True, False]


# -- the page in a real browser -------------------------------------------------------------------------

WIDTH, HEIGHT = 1280, 900


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    require_program("chromium", "chromium")
    require_program("chromedriver", "chromium-driver")
    for module in ("selenium", "PIL"):
        require_extra(module, "dev")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(shutil.which("chromium"))
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={WIDTH},{HEIGHT}", "--force-device-scale-factor=1"):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def rendered(driver: Any) -> str | None:
    """How many times the page has rendered its state (None while it loads)."""
    return driver.execute_script("return document.body && document.body.dataset.rendered")


def open_page(driver: Any, url: str, state: dict[str, Any]) -> None:
    """Load the page at ``state`` (its hash) and wait until it has rendered it."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get("about:blank")
    driver.get(url + "#" + urlencode(state))
    WebDriverWait(driver, 20).until(rendered)


def choose(driver: Any, select_id: str, value: str) -> None:
    """Pick ``value`` in a select and wait until the page has rendered the result."""
    from selenium.webdriver.support.ui import Select, WebDriverWait

    before = rendered(driver)
    Select(driver.find_element("id", select_id)).select_by_value(value)
    WebDriverWait(driver, 20).until(lambda d: rendered(d) != before)


def shown_rows(driver: Any) -> list[tuple[str, str]]:
    rows = driver.find_elements("css selector", "tr.episode-row")
    return [(row.get_attribute("data-task"), row.get_attribute("data-outcome")) for row in rows]


def test_the_page_lists_and_filters_episodes(browser: Any, viewer: str, runs: Path) -> None:
    open_page(browser, viewer, {"run": 0})
    assert sorted(shown_rows(browser)) == sorted(
        [(CORRECT.id, "correct"), (HALLUCINATED.id, "wrong"), (FAILING.id, "errored")]
    )
    info = browser.find_element("id", "run-info").text
    assert info.endswith(
        "33.3% correct · 3 episodes · 1 errored · run.json summary.json summary.md episodes.jsonl"
    )
    choose(browser, "outcome", "errored")
    assert shown_rows(browser) == [(FAILING.id, "errored")]
    assert browser.find_element("id", "count").text == "1 of 3 episodes"
    choose(browser, "outcome", "")
    choose(browser, "error", "tool_hallucination")
    assert shown_rows(browser) == [(HALLUCINATED.id, "wrong")]
    choose(browser, "error", "")
    hops = by_task(runs / "tried")[CORRECT.id]["hops"]
    choose(browser, "hops", str(hops))
    expected = {task for task, record in by_task(runs / "tried").items() if record["hops"] == hops}
    assert {task for task, _ in shown_rows(browser)} == expected
    choose(browser, "compare", "1")
    header = [cell.text for cell in browser.find_elements("css selector", "#episodes th")]
    assert header[-1] == "outcome in baseline"


def test_an_episode_shows_every_turn_and_call_and_hostile_output_as_text(
    browser: Any, viewer: str, runs: Path, tmp_path: Path
) -> None:
    from PIL import Image

    record = by_task(runs / "tried")[HALLUCINATED.id]
    open_page(browser, viewer, {"run": 0, "task": HALLUCINATED.id, "sample": 0})
    assert not browser.find_element("id", "filters").is_displayed()
    episode = browser.find_element("css selector", ".episode")
    turns = episode.find_elements("css selector", ".turn")
    assert len(turns) == record["turns"] == 2
    (call,) = record["calls"]
    card = turns[0].find_element("css selector", ".call")
    assert card.find_element("css selector", ".call-name").text == "no_such_tool" == call["name"]
    assert card.find_element("css selector", ".call-status").text == call["status"] == "tool_hallucination"
    shown_arguments = json.loads(card.find_element("css selector", ".arguments").text)
    assert shown_arguments == call["arguments"] == {"query": HOSTILE}
    assert card.find_element("css selector", ".feedback").text == call["feedback"].strip()
    final = episode.find_element("css selector", "dd.final")
    assert final.text == record["final_answer"] and HOSTILE in final.text
    assert HOSTILE in turns[1].find_element("css selector", ".content").text
    # The markup stayed text: no element was made from it and none of its code ran.
    assert browser.execute_script("return window.pwned") is None
    assert browser.execute_script("return document.querySelectorAll('img, script:not([src])').length") == 0

    shot = tmp_path / "episode.png"
    assert browser.save_screenshot(str(shot))
    image = Image.open(shot).convert("L")
    assert image.size == tuple(browser.execute_script("return [window.innerWidth, window.innerHeight]"))
    assert image.size == (WIDTH, image.size[1]) and image.size[1] > HEIGHT / 2
    # The answer's box is drawn: dark text pixels on the light page where the DOM says the answer is.
    rect = final.rect
    box = image.crop((rect["x"], rect["y"], rect["x"] + rect["width"], rect["y"] + rect["height"]))
    assert rect["y"] + rect["height"] <= image.size[1], "the final answer is not in the first screen"
    darkest, lightest = box.getextrema()
    assert darkest < 100 < 200 < lightest
    assert len(Image.open(shot).convert("RGB").getcolors(WIDTH * HEIGHT) or ()) > 20  # not a blank page


def test_two_runs_side_by_side_on_the_same_task(browser: Any, viewer: str, runs: Path) -> None:
    open_page(browser, viewer, {"run": 0, "compare": 1, "task": HALLUCINATED.id, "sample": 0})
    left, right = browser.find_elements("css selector", ".episode")
    assert left.get_attribute("data-run") == "0" and right.get_attribute("data-run") == "1"
    assert left.find_element("css selector", "h2").text == "tried wrong"
    assert right.find_element("css selector", "h2").text == "baseline correct"
    assert right.find_element("css selector", "dd.final").text == f"Final answer: {HALLUCINATED.answer}"
    (call,) = by_task(runs / "baseline")[HALLUCINATED.id]["calls"]
    assert right.find_element("css selector", ".call-name").text == call["name"] != "no_such_tool"
    assert left.rect["y"] == right.rect["y"] and right.rect["x"] >= left.rect["x"] + left.rect["width"]
    open_page(browser, viewer, {"run": 1, "compare": 0, "task": FAILING.id, "sample": 0})
    left, right = browser.find_elements("css selector", ".episode")
    assert right.find_element("css selector", "dd.error").text.startswith("ModelError:")
