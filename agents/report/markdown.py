"""The Markdown report of ``hopgym report RUN... --out DIR``: tables and PNG plots over run folders.

Sections: the Table 4 columns of every run; accuracy by hop count; accuracy by scenario and by framework
(agent) where the runs differ in it; invocation-error types; and correctness flips (Table 5) for every
pair of runs that differ only in feedback mode. A section that does not apply says why instead of
plotting. Each number in a plot is also in a table of the report.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hopgym.agents.evaluation.feedback_flips import feedback_flips
from hopgym.agents.evaluation.provenance import comparison_warnings, incomplete_note
from hopgym.agents.evaluation.records import EPISODES_FILE, RUN_FILE, EpisodeRecord, read_episode_file
from hopgym.agents.evaluation.stats import mean_interval, per_task_means
from hopgym.agents.evaluation.summary import feedback_applies, markdown_table, run_title, summarize, table4
from hopgym.agents.report.paired_table import paired_markdown
from hopgym.agents.report.plots import grouped_bars
from hopgym.envs.calls import INVOCATION_ERROR_TYPES
from hopgym.envs.env_options import env_creator
from hopgym.errors import ConfigError, DataError
from hopgym.run_folder import exists, read_json

REPORT_FILE = "report.md"
Series = dict[str, list[float | None]]
BarData = tuple[list[str], Series, Series, dict[str, list[int | None]]]
"""(categories, values, 95% half-widths, n) of a chart with error bars."""


@dataclass(frozen=True)
class Run:
    """One run folder: its name, settings (env defaults filled in), episode records and summary."""

    name: str
    settings: dict[str, Any]
    records: list[EpisodeRecord]
    summary: dict[str, Any]
    skipped: list[str]
    """``file:line: why`` of each malformed record left out of ``records``."""

    @property
    def provenance(self) -> dict[str, Any]:
        """What ``run.json`` records of the run's origin ({} for folders made before it did)."""
        return (self.summary.get("run") or {}).get("provenance") or {}


def _episodes_note(run: Run) -> str:
    provenance = run.provenance
    if provenance and not provenance.get("complete"):
        return f"{len(run.records)} episodes, **incomplete**: {incomplete_note(provenance)}"
    return f"{len(run.records)} episodes"


def _env_defaults(env_id: str) -> dict[str, Any]:
    """The keyword defaults an env is made with (its registration's, then its constructor's)."""
    import gymnasium as gym

    import hopgym  # noqa: F401 - registers the envs

    try:
        spec = gym.spec(env_id)
    except gym.error.Error as exc:
        raise DataError(f"run folder names env {env_id!r}, which is not registered: {exc}") from exc
    parameters = inspect.signature(env_creator(spec)).parameters.values()
    defaults = {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}
    return {**defaults, **spec.kwargs}


def _simple(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


def load_run(folder: Path, name: str | None = None) -> Run:
    """Read a run folder written by ``hopgym eval``; the summary is recomputed from its episodes (a
    malformed one is skipped and named in ``skipped``)."""
    episodes = folder / EPISODES_FILE
    if not exists(episodes):
        raise DataError(f"{folder} is not a run folder: it has no {EPISODES_FILE}")
    identity = read_json(folder / RUN_FILE) or {}
    env_kwargs = {
        **(_env_defaults(identity["env"]) if identity.get("env") else {}),
        **identity.get("env_kwargs", {}),
    }
    settings = {key: identity.get(key) for key in ("env", "model", "agent")}
    settings.update({key: value for key, value in env_kwargs.items() if _simple(value)})
    if not feedback_applies(settings):
        settings.pop("feedback", None)  # not the env's default: the run is filed under no feedback mode
    read = read_episode_file(episodes)
    summary = summarize(read.records, run=identity)
    return Run(name or folder.name, settings, read.records, summary, read.skipped)


def run_names(folders: Sequence[Path]) -> list[str]:
    """Short distinct names: each folder's last path part, or as many trailing parts as tell them apart."""
    parts = [Path(folder).resolve().parts for folder in folders]
    for depth in range(1, max(len(p) for p in parts) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    raise DataError(f"the same run folder is given twice: {[str(f) for f in folders]}")


def _accuracy(records: Sequence[EpisodeRecord]) -> float | None:
    return 100 * sum(r.correct for r in records) / len(records) if records else None


def _accuracy_bars(
    cells: Sequence[Sequence[EpisodeRecord]],
) -> tuple[list[float | None], list[float | None], list[int | None]]:
    """Accuracy (%), the 95% interval's half-width (%, over tasks) and n (tasks) of each cell's records."""
    values, errors, counts = [], [], []
    for records in cells:
        interval = mean_interval(per_task_means((r.task_id, r.correct) for r in records))
        values.append(_accuracy(records))
        errors.append(None if interval["half_width"] is None else 100 * interval["half_width"])
        counts.append(interval["n"] or None)
    return values, errors, counts


def _bar_data(categories: list[str], cells: Mapping[str, Sequence[Sequence[EpisodeRecord]]]) -> BarData:
    series: Series = {}
    errors: Series = {}
    counts: dict[str, list[int | None]] = {}
    for name, per_category in cells.items():
        series[name], errors[name], counts[name] = _accuracy_bars(per_category)
    return categories, series, errors, counts


def _varying(runs: Sequence[Run], exclude: str) -> list[str]:
    """The settings that differ among the runs they apply to (a run lacks those that do not)."""
    keys = sorted({key for run in runs for key in run.settings} - {exclude})
    return [
        key for key in keys if len({json.dumps(run.settings[key]) for run in runs if key in run.settings}) > 1
    ]


def _label(run: Run, keys: Sequence[str]) -> str:
    """The values of ``keys`` for this run; a setting that does not apply to it reads "no KEY"."""
    values = [str(run.settings[key]) if key in run.settings else f"no {key}" for key in keys]
    return " · ".join(values) or "all runs"


def accuracy_by_setting(runs: Sequence[Run], key: str) -> BarData | None:
    """Categories = the values of ``key`` among the runs; one series per combination of the other
    settings that vary; runs falling in one cell are pooled. None when fewer than two values occur."""
    values = list(dict.fromkeys(str(run.settings.get(key)) for run in runs))
    if len(values) < 2:
        return None
    varying = _varying(runs, key)
    cells: dict[tuple[str, str], list[EpisodeRecord]] = {}
    for run in runs:
        cells.setdefault((_label(run, varying), str(run.settings.get(key))), []).extend(run.records)
    labels = list(dict.fromkeys(label for label, _ in cells))
    return _bar_data(values, {label: [cells.get((label, value), []) for value in values] for label in labels})


def accuracy_by_hops(runs: Sequence[Run]) -> BarData:
    hops = sorted({r.hops for run in runs for r in run.records if r.hops is not None})
    cells = {run.name: [[r for r in run.records if r.hops == h] for h in hops] for run in runs}
    return _bar_data([str(h) for h in hops], cells)


def invocation_error_rates(runs: Sequence[Run]) -> tuple[list[str], Series]:
    """Per-query rate (%) of each invocation error type, per run."""
    categories = [kind.replace("_", " ") for kind in INVOCATION_ERROR_TYPES]
    series = {}
    for run in runs:
        metrics = table4(run.records)
        series[run.name] = [
            None if metrics[f"{kind}_query"] is None else 100 * metrics[f"{kind}_query"]
            for kind in INVOCATION_ERROR_TYPES
        ]
    return categories, series


def feedback_pairs(runs: Sequence[Run]) -> list[tuple[str, Run, Run]]:
    """("detailed-run vs minimal-run", detailed run, minimal run) for every two runs whose settings
    differ only in feedback mode."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        rest = {key: value for key, value in run.settings.items() if key != "feedback"}
        groups.setdefault(json.dumps(rest, sort_keys=True), []).append(run)
    return [
        (f"{detailed.name} vs {minimal.name}", detailed, minimal)
        for group in groups.values()
        for detailed in group
        if detailed.settings.get("feedback") == "detailed"
        for minimal in group
        if minimal.settings.get("feedback") == "minimal"
    ]


FLIP_COLUMNS = ("w/ Feedback", "w/o Feedback", "ΔC→I", "ΔI→C")


def flip_rates(
    pairs: Sequence[tuple[str, Run, Run]], error_set: str
) -> tuple[list[str], Series, dict[str, int]]:
    """Table 5 (percentages) per feedback pair, and the number of queries each is computed over."""
    series: Series = {}
    queries = {}
    for label, detailed, minimal in pairs:
        flips = feedback_flips(detailed.records, minimal.records, error_set)
        queries[label] = flips.queries
        series[label] = [None if v is None else 100 * v for v in flips.table5().values()]
    return list(FLIP_COLUMNS), series, queries


def series_table(first: str, categories: Sequence[str], series: Mapping[str, Sequence[float | None]]) -> str:
    """Rows = categories, columns = series, values in percent with two decimals."""
    names = list(series)
    lines = [f"| {first} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for index, category in enumerate(categories):
        cells = ["–" if series[n][index] is None else f"{series[n][index]:.2f}" for n in names]
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def interval_table(
    first: str, categories: Sequence[str], errors: Series, counts: Mapping[str, Sequence[int | None]]
) -> str:
    """The error bars of a chart: ``± half-width (n=...)`` per bar, laid out as :func:`series_table`."""
    names = list(errors)
    lines = [f"| {first} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for index, category in enumerate(categories):
        cells = []
        for name in names:
            half, n = errors[name][index], counts[name][index]
            cells.append("–" if n is None else ("" if half is None else f"± {half:.2f} ") + f"(n={n})")
        lines.append(f"| {category} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _section(
    out: Path,
    heading: str,
    png: str,
    axis: tuple[str, str],
    data: tuple[list[str], Series] | BarData | None,
    why_not: str,
) -> list[str]:
    lines = [f"## {heading}", ""]
    if data is None:
        return [*lines, f"Not drawn: {why_not}.", ""]
    categories, series = data[0], data[1]
    note: list[str] = []
    if len(data) == 4:
        errors, counts = data[2], data[3]
        grouped_bars(out / png, heading, axis[0], axis[1], categories, series, errors, counts)
        caption = "Error bars (95% interval over tasks, ± half-width) and n (tasks per bar):"
        note = [caption, "", interval_table(axis[0], categories, errors, counts), ""]
    else:
        grouped_bars(out / png, heading, axis[0], axis[1], categories, series)
    figure = f"![{heading}]({png}) ([SVG]({Path(png).with_suffix('.svg')}))"
    return [*lines, series_table(axis[0], categories, series), "", *note, figure, ""]


def run_labels(folders: Sequence[Path], labels: Sequence[str] | None) -> list[str]:
    """The runs' names in tables and legends: ``labels`` (one per folder, distinct), else folder names."""
    if not labels:
        return run_names(folders)
    if len(labels) != len(folders) or len(set(labels)) != len(labels):
        raise ConfigError(
            f"--label needs one distinct label per run folder ({len(folders)}), got {list(labels)}"
        )
    return list(labels)


def write_report(
    folders: Sequence[Path],
    out: Path,
    error_set: str = "invocation",
    labels: Sequence[str] | None = None,
    paired: Mapping[str, Any] | None = None,
) -> Path:
    """Write ``out/report.md`` and its figures (SVG and PNG) for the given run folders, named by ``labels``
    when given, with the ``paired`` comparison of two of them
    (:func:`hopgym.agents.evaluation.pairing.compare_runs`) when given; return the Markdown path."""
    if not folders:
        raise DataError("the report needs at least one run folder")
    names = run_labels(folders, labels)
    runs = [load_run(Path(folder), name) for folder, name in zip(folders, names, strict=True)]
    out.mkdir(parents=True, exist_ok=True)
    lines = ["# hopgym report", ""]
    lines += [f"- `{run.name}`: {run_title(run.summary)} ({_episodes_note(run)})" for run in runs]
    warnings = comparison_warnings({run.name: run.provenance for run in runs})
    lines += ["", *(f"> **Warning:** {warning}." for warning in warnings)] if warnings else []
    lines += ["", "## Table 4 columns", "", markdown_table({run.name: run.summary for run in runs}), ""]
    if paired:
        lines += ["## Paired comparison", "", paired_markdown(paired, paired["a"], paired["b"]), ""]
    pct = "answer correctness (%)"
    by_hops = accuracy_by_hops(runs)
    sections = [
        ("Accuracy by hop count", "accuracy_by_hops.png", ("hops", pct), by_hops if by_hops[0] else None,
         "no episode records its hop count"),
        ("Accuracy by scenario", "accuracy_by_scenario.png", ("scenario", pct),
         accuracy_by_setting(runs, "scenario"), "the runs do not differ in scenario"),
        ("Accuracy by framework", "accuracy_by_framework.png", ("framework (agent)", pct),
         accuracy_by_setting(runs, "agent"), "the runs do not differ in agent"),
        ("Invocation error types", "invocation_errors.png", ("error type", "queries with the error (%)"),
         invocation_error_rates(runs), ""),
    ]  # fmt: skip
    for heading, png, axis, data, why_not in sections:
        lines += _section(out, heading, png, axis, data, why_not)
    pairs = feedback_pairs(runs)
    flips = flip_rates(pairs, error_set) if pairs else None
    lines += _section(
        out,
        "Correctness flips between feedback modes",
        "feedback_flips.png",
        ("Table 5 column", "share of queries with errors (%)"),
        flips[:2] if flips else None,
        "no two runs differ only in feedback (detailed vs minimal)",
    )
    if flips:
        counts = ", ".join(f"{label}: {n}" for label, n in flips[2].items())
        lines += [f"Queries with an erroneous call ({error_set}) under detailed feedback — {counts}.", ""]
    path = out / REPORT_FILE
    path.write_text("\n".join(lines))
    return path
