"""PNG figures for the report. Every figure is a grouped bar chart with a title and labelled axes.

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
    import matplotlib.pyplot as plt

    return plt


def grouped_bars(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    categories: Sequence[str],
    series: Mapping[str, Sequence[float | None]],
) -> Path:
    """One group of bars per category, one bar per series (``None`` values are left out); saves a PNG."""
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
            bars = axes.bar(
                positions, [v for _, v in shown], width=width, label=label, color=f"C{offset % 10}"
            )
            axes.bar_label(bars, fmt="%.1f", fontsize=7)
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
        figure.savefig(path, dpi=100, metadata={"Title": title, "Description": f"x: {xlabel}; y: {ylabel}"})
    finally:
        plt.close(figure)
    return path
