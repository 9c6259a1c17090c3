"""Figures for the report, each saved as SVG and as a 300-dpi PNG. Every figure is a grouped bar chart
with a title and labelled axes; bars may carry an error bar (a 95% interval's half-width) and their n.

matplotlib comes with the ``report`` extra and is imported only here, with the file-only Agg backend.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from hopgym.errors import ConfigError


def _pyplot():
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("plots need matplotlib: pip install 'hopgym[report]'") from exc
    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # SVG text stays text: editable, searchable
    import matplotlib.pyplot as plt

    return plt


def _error_bars(values: Sequence[float], halves: Sequence[float | None]) -> list[list[float]]:
    """Lower and upper error-bar lengths: the half-width, clipped to the 0-100 scale of a percentage;
    NaN (no bar drawn) where there is no interval (a single task)."""
    nan = float("nan")
    lower = [nan if h is None else min(h, v) for v, h in zip(values, halves, strict=True)]
    upper = [nan if h is None else min(h, 100 - v) for v, h in zip(values, halves, strict=True)]
    return [lower, upper]


def grouped_bars(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
    errors: Mapping[str, Sequence[float | None]] | None = None,
    counts: Mapping[str, Sequence[int | None]] | None = None,
) -> Path:
    """One group of bars per category, one bar per series (``None`` values are left out); ``errors``
    (half-widths, same shape) draw error bars and ``counts`` print each bar's n under its value. Saves
    ``path`` (PNG, 300 dpi) and the same figure as SVG beside it."""
    if not categories or not series:
        raise ConfigError(f"{title}: a bar chart needs at least one category and one series")
    plt = _pyplot()
    width = 0.8 / len(series)
    plot_width = min(12.0, max(5.0, 1.6 * len(categories) * max(1.0, len(series) / 3)))
    figure, axes = plt.subplots(figsize=(plot_width + 2.5, 4.5))  # 2.5 inches for the legend
    try:
        for offset, (label, values) in enumerate(series.items()):
            if len(values) != len(categories):
                raise ConfigError(
                    f"{title}: series {label!r} has {len(values)} values for {len(categories)} categories"
                )
            shown = [(i, v) for i, v in enumerate(values) if v is not None]
            positions = [i - 0.4 + width * (offset + 0.5) for i, _ in shown]
            heights = [v for _, v in shown]
            halves = (errors or {}).get(label)
            yerr = _error_bars(heights, [halves[i] for i, _ in shown]) if halves else None
            bars = axes.bar(
                positions, heights, width=width, label=label, color=f"C{offset % 10}",
                yerr=yerr, capsize=3 if yerr else 0, error_kw={"elinewidth": 0.8},
            )  # fmt: skip
            n = (counts or {}).get(label)
            texts = [f"{v:.1f}" + (f"\nn={n[i]}" if n and n[i] is not None else "") for i, v in shown]
            axes.bar_label(bars, labels=texts, fontsize=6, label_type="center" if yerr else "edge")
        axes.set_xticks(range(len(categories)), [str(c) for c in categories])
        axes.set_title(title)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.set_xlim(-0.5, len(categories) - 0.5)
        axes.set_ylim(0, 105)
        axes.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="run")
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        # The labels also go into the PNG text chunks, so readers (and tests) can check them.
        metadata = {"Title": title, "Description": f"x: {xlabel}; y: {ylabel}"}
        figure.savefig(path, dpi=300, metadata=metadata)
        figure.savefig(
            path.with_suffix(".svg"), metadata={"Title": title, "Description": metadata["Description"]}
        )
    finally:
        plt.close(figure)
    return path


def line_plot(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    xs: Sequence[float],
    series: Mapping[str, Sequence[float]],
) -> Path:
    """One line per series over ``xs`` (a training run's reward per step). Saves ``path`` (PNG, 150 dpi,
    title and axis labels in its text chunks like :func:`grouped_bars`) and the same figure as SVG."""
    if not xs or not series:
        raise ConfigError(f"{title}: a line plot needs at least one point and one series")
    plt = _pyplot()
    figure, axes = plt.subplots(figsize=(8.0, 4.5))
    try:
        for offset, (label, values) in enumerate(series.items()):
            if len(values) != len(xs):
                raise ConfigError(f"{title}: series {label!r} has {len(values)} values for {len(xs)} points")
            axes.plot(list(xs), list(values), label=label, color=f"C{offset % 10}", linewidth=1.2)
        axes.set_title(title)
        axes.set_xlabel(xlabel)
        axes.set_ylabel(ylabel)
        axes.grid(alpha=0.3)
        axes.legend(fontsize=7)
        figure.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        metadata = {"Title": title, "Description": f"x: {xlabel}; y: {ylabel}"}
        figure.savefig(path, dpi=150, metadata=metadata)
        figure.savefig(path.with_suffix(".svg"), metadata=metadata)
    finally:
        plt.close(figure)
    return path
