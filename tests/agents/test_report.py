"""``hopgym report RUN... --out DIR`` on real ablation runs (scripted model server, real sandbox): the
Markdown tables hold the hand-computed values, and the PNGs are valid images with labelled axes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_ablate_scripted import FRAMEWORK_CORRECT, POLICIES, SCENARIO_CORRECT, TASKS, run_ablation

from hopgym.agents.evaluation.stats import mean_interval
from hopgym.agents.report.markdown import run_names
from hopgym.agents.report.plots import grouped_bars
from hopgym.cli import main
from hopgym.errors import ConfigError

PNGS = (
    "accuracy_by_hops",
    "accuracy_by_scenario",
    "accuracy_by_framework",
    "invocation_errors",
    "feedback_flips",
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report-runs")
    for name in POLICIES:
        run_ablation(name, root / name)
    return root


def arms(root: Path, name: str) -> list[str]:
    return sorted(str(path) for path in (root / name).iterdir() if (path / "episodes.jsonl").exists())


def report(runs_: list[str], out: Path) -> str:
    assert main(["report", *runs_, "--out", str(out)]) == 0
    return (out / "report.md").read_text()


def assert_labelled_png(path: Path, xlabel: str, ylabel: str) -> None:
    """A PNG that decodes, carries its axis labels, and has ink where the labels are drawn."""
    with Image.open(path) as image:
        assert image.format == "PNG"
        image.verify()
    with Image.open(path) as image:
        assert image.text["Description"] == f"x: {xlabel}; y: {ylabel}"
        pixels = np.asarray(image.convert("L"))
    height, width = pixels.shape
    assert width >= 300 and height >= 200
    left_margin = pixels[height // 4 : 3 * height // 4, : width // 25]  # the rotated y label
    bottom_margin = pixels[-height // 20 :, width // 4 : 3 * width // 4]  # the x label
    assert (left_margin < 128).any() and (bottom_margin < 128).any()


def test_the_feedback_report_holds_table5_and_the_flip_plot(runs: Path, tmp_path: Path) -> None:
    text = report(arms(runs, "feedback"), tmp_path)
    assert "| w/ Feedback | 75.00 |" in text and "| w/o Feedback | 50.00 |" in text
    assert "| ΔC→I | 50.00 |" in text and "| ΔI→C | 25.00 |" in text
    assert "Not drawn: the runs do not differ in scenario." in text
    assert_labelled_png(tmp_path / "feedback_flips.png", "Table 5 column", "share of queries with errors (%)")
    assert "tool hallucination | 80.00 | 80.00 |" in text  # tasks 0-3 of 5 hallucinate a tool, in both modes
    assert "| Protocol |" not in text and "ToolHop-v0 · hopgym protocol · fc" in text


def test_the_error_set_option_changes_which_queries_count(runs: Path, tmp_path: Path) -> None:
    assert main(["report", *arms(runs, "feedback"), "--out", str(tmp_path), "--error-set", "failed"]) == 0
    text = (tmp_path / "report.md").read_text()
    assert "| w/ Feedback | 80.00 |" in text and "| ΔC→I | 60.00 |" in text and "| ΔI→C | 20.00 |" in text


def test_scenario_and_framework_reports_hold_the_hand_computed_accuracies(runs: Path, tmp_path: Path) -> None:
    text = report(arms(runs, "scenarios"), tmp_path / "scenarios")
    expected = {s: 100 * len(c) / 3 for s, c in SCENARIO_CORRECT.items()}
    for scenario, value in expected.items():
        assert f"| {scenario} | {value:.2f} |" in text
    assert_labelled_png(
        tmp_path / "scenarios" / "accuracy_by_scenario.png", "scenario", "answer correctness (%)"
    )
    # Accuracy by hop count: task i has TASKS[i].hops hops; columns are the arms sorted by name.
    for index in range(3):
        cells = " | ".join(
            "100.00" if index in SCENARIO_CORRECT[s] else "0.00" for s in ("direct", "free", "mandatory")
        )
        assert f"| {TASKS[index].hops} | {cells} |" in text
    text = report(arms(runs, "frameworks"), tmp_path / "frameworks")
    for agent, correct in FRAMEWORK_CORRECT.items():
        assert f"| {agent} | {100 * len(correct) / 3:.2f} |" in text
    assert_labelled_png(
        tmp_path / "frameworks" / "accuracy_by_framework.png", "framework (agent)", "answer correctness (%)"
    )


def test_a_report_over_every_run_draws_every_plot(runs: Path, tmp_path: Path) -> None:
    everything = [arm for name in POLICIES for arm in arms(runs, name)]
    text = report(everything, tmp_path)
    assert "Not drawn" not in text
    # Both fc·mandatory·detailed runs (the feedback and the scenario ablation's) pair with the minimal one.
    assert "| Table 5 column | detailed vs minimal | mandatory vs minimal |" in text
    assert "| w/ Feedback | 75.00 | – |" in text
    for name in PNGS:
        assert f"]({name}.png)" in text
        assert (tmp_path / f"{name}.png").stat().st_size > 1000
    assert_labelled_png(tmp_path / "accuracy_by_hops.png", "hops", "answer correctness (%)")
    assert_labelled_png(tmp_path / "invocation_errors.png", "error type", "queries with the error (%)")


def test_runs_with_one_folder_name_are_told_apart_by_their_parents(tmp_path: Path) -> None:
    folders = [tmp_path / "a" / "run", tmp_path / "b" / "run", tmp_path / "c" / "other"]
    assert run_names(folders) == ["a/run", "b/run", "c/other"]


def test_a_bar_chart_refuses_mismatched_series(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="2 values for 3 categories"):
        grouped_bars(tmp_path / "x.png", "t", "x", "y", ["a", "b", "c"], {"s": [1.0, 2.0]})


def test_figures_are_svg_and_300_dpi_png_with_error_bars_n_and_labels(runs: Path, tmp_path: Path) -> None:
    labels = [
        "Direct answers",
        "Free tool use",
        "Mandatory tools",
    ]  # the arms, sorted: direct, free, mandatory
    folders = arms(runs, "scenarios")
    assert main(["report", *folders, "--out", str(tmp_path), *(f"--label={label}" for label in labels)]) == 0
    text = (tmp_path / "report.md").read_text()
    with Image.open(tmp_path / "accuracy_by_hops.png") as image:
        assert image.info["dpi"] == pytest.approx((300, 300), abs=0.01)
    svg = (tmp_path / "accuracy_by_hops.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg
    for label in labels:
        assert f">{label}</text>" in svg  # the legend names the runs by their labels
        assert f"| {label} |" in text or f" {label} |" in text
    assert "n=" in svg and "](accuracy_by_hops.svg)" in text
    # The error-bar table: per run and hop count, the 95% interval over that run's tasks, by reference.
    scenarios = ("direct", "free", "mandatory")
    for hops in sorted({TASKS[i].hops for i in range(3)}):
        cells = []
        for scenario in scenarios:
            values = [float(i in SCENARIO_CORRECT[scenario]) for i in range(3) if TASKS[i].hops == hops]
            half = mean_interval(values)["half_width"]
            cells.append(("" if half is None else f"± {100 * half:.2f} ") + f"(n={len(values)})")
        assert f"| {hops} | {' | '.join(cells)} |" in text


def test_labels_must_match_the_run_folders(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folders = arms(runs, "scenarios")
    assert main(["report", *folders, "--label", "only one"]) == 2
    assert "--label needs one distinct label per run folder (3)" in capsys.readouterr().err


def test_a_direct_scenario_run_is_filed_under_no_feedback_mode(runs: Path, tmp_path: Path) -> None:
    # The scenario arms (feedback at the env's default, detailed) beside the minimal-feedback arm: feedback
    # varies, so it names the series of the scenario chart. A direct run offers no tool, so no call of it
    # gets feedback: it is in a series of its own, not under "detailed".
    folders = [*arms(runs, "scenarios"), str(runs / "feedback" / "minimal")]
    text = report(folders, tmp_path)
    chart = text.split("## Accuracy by scenario")[1].split("\n## ")[0]
    assert "| scenario | no feedback | detailed | minimal |" in chart
    direct = 100 * len(SCENARIO_CORRECT["direct"]) / 3
    assert f"| direct | {direct:.2f} | – | – |" in chart
    assert "| mandatory | – | 66.67 |" in chart and "| free | – | 100.00 | – |" in chart
    assert "- `direct`: ToolHop-v0 · hopgym protocol · fc · openai/scripted · direct (3 episodes)" in text
