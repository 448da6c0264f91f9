"""Figures for the HTML reports, drawn with matplotlib and returned as inline SVG text.

Every figure is self-contained SVG (text kept as text, no external fonts or images), so a
report that embeds them needs no network to be viewed.
"""

import io
from dataclasses import dataclass
from functools import cache
from types import ModuleType
from typing import Any

import numpy as np


@cache
def pyplot() -> ModuleType:
    """matplotlib, loaded on the first plot: every other command starts faster without it."""
    import matplotlib

    matplotlib.use("Agg")  # no display: render to files only
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "svg.fonttype": "none",
            "font.family": "DejaVu Sans",
            "font.size": 9,
            "axes.spines.top": False,
            "axes.spines.right": False,
        }
    )
    return plt


SIGNIFICANT = "#c0392b"
NEUTRAL = "#2c3e50"
BASELINE = "#7f8c8d"


@dataclass
class RatioPoint:
    """One stack's ratio in one panel; low/high is its interval, None when there is none or
    it is unbounded."""

    label: str
    ratio: float | None
    low: float | None
    high: float | None
    significant: bool
    is_baseline: bool = False


def to_svg(figure: Any) -> str:
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", bbox_inches="tight")
    pyplot().close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def ratio_figure(panels: dict[str, list[RatioPoint]], *, xlabel: str) -> str:
    """One panel per workload: each stack's ratio as a point with its CI whisker and a line
    at 1.0; significant differences in red and marked with a star."""
    height = sum(max(len(points), 1) * 0.38 + 0.8 for points in panels.values())
    figure, axes = pyplot().subplots(
        len(panels),
        1,
        figsize=(7.5, max(height, 1.8)),
        squeeze=False,
        gridspec_kw={"height_ratios": [max(len(p), 1) for p in panels.values()]},
    )
    for axis, (title, points) in zip(axes[:, 0], panels.items(), strict=True):
        labels = [p.label for p in points]
        positions = np.arange(len(points))[::-1]
        for y, point in zip(positions, points, strict=True):
            if point.ratio is None:
                continue
            colour = BASELINE if point.is_baseline else SIGNIFICANT if point.significant else NEUTRAL
            if point.low is not None and point.high is not None and not point.is_baseline:
                axis.errorbar(
                    point.ratio,
                    y,
                    xerr=[[point.ratio - point.low], [point.high - point.ratio]],
                    fmt="o",
                    color=colour,
                    capsize=4,
                    markersize=6,
                )
            else:
                axis.plot(point.ratio, y, "o", color=colour, markersize=6)
            text = (
                "baseline"
                if point.is_baseline
                else f"×{point.ratio:.2f}" + (" *" if point.significant else "")
            )
            axis.annotate(
                text,
                (point.high or point.ratio, y),
                xytext=(6, 0),
                textcoords="offset points",
                va="center",
                color=colour,
                fontsize=8,
            )
        axis.axvline(1.0, color=BASELINE, linestyle="--", linewidth=1)
        axis.set_yticks(positions, labels)
        axis.set_ylim(-0.7, len(points) - 0.3)
        axis.set_title(title, loc="left", fontsize=10, fontweight="bold")
        axis.grid(axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel(xlabel)
    figure.tight_layout()
    return to_svg(figure)


def sweep_figure(panels: dict[str, list[RatioPoint]], *, xlabel: str, ylabel: str) -> str:
    """One panel per workload: the ratio against the swept value, in the sweep's order,
    each point with its interval; significant ones in red and starred."""
    figure, axes = pyplot().subplots(1, len(panels), figsize=(max(3.6 * len(panels), 5), 3.2), squeeze=False)
    for axis, (title, points) in zip(axes[0], panels.items(), strict=True):
        positions = np.arange(len(points))
        shown = [(x, p, p.ratio) for x, p in zip(positions, points, strict=True) if p.ratio is not None]
        axis.plot([x for x, _, _ in shown], [r for _, _, r in shown], color=NEUTRAL, linewidth=1, alpha=0.5)
        for x, point, ratio in shown:
            colour = BASELINE if point.is_baseline else SIGNIFICANT if point.significant else NEUTRAL
            if point.low is not None and point.high is not None and not point.is_baseline:
                below, above = ratio - point.low, point.high - ratio
                axis.errorbar(x, ratio, yerr=[[below], [above]], fmt="o", color=colour, capsize=4)
            else:
                axis.plot(x, ratio, "o", color=colour)
            if point.significant:
                axis.annotate(
                    "*",
                    (x, point.high or ratio),
                    xytext=(0, 3),
                    textcoords="offset points",
                    ha="center",
                    color=colour,
                )
        axis.axhline(1.0, color=BASELINE, linestyle="--", linewidth=1)
        axis.set_xticks(positions, [p.label for p in points], rotation=20 if len(points) > 4 else 0)
        axis.set_title(title, loc="left", fontsize=10, fontweight="bold")
        axis.set_xlabel(xlabel)
        axis.grid(axis="y", alpha=0.3)
    axes[0, 0].set_ylabel(ylabel)
    figure.tight_layout()
    return to_svg(figure)


def runs_figure(panels: dict[str, dict[str, tuple[list[float], list[float]]]], *, ylabel: str) -> str:
    """One panel per workload: every run as a dot beside its stack (measured filled, warm-up
    hollow), the median as a bar, so outliers and noise show."""
    figure, axes = pyplot().subplots(1, len(panels), figsize=(max(3.2 * len(panels), 5), 3.4), squeeze=False)
    rng = np.random.default_rng(0)  # the same jitter every time the report is drawn
    for axis, (title, by_stack) in zip(axes[0], panels.items(), strict=True):
        for x, (measured, warmups) in enumerate(by_stack.values()):
            if measured:
                axis.scatter(
                    x + rng.uniform(-0.12, 0.12, len(measured)),
                    measured,
                    s=18,
                    color=NEUTRAL,
                    alpha=0.8,
                    zorder=3,
                    label="run" if x == 0 else None,
                )
                axis.hlines(
                    np.median(measured),
                    x - 0.28,
                    x + 0.28,
                    color=SIGNIFICANT,
                    linewidth=2,
                    zorder=4,
                    label="median" if x == 0 else None,
                )
            if warmups:
                axis.scatter(
                    x + rng.uniform(-0.12, 0.12, len(warmups)),
                    warmups,
                    s=18,
                    facecolors="none",
                    edgecolors=BASELINE,
                    zorder=2,
                    label="warm-up" if x == 0 else None,
                )
        axis.set_xticks(range(len(by_stack)), list(by_stack), rotation=30, ha="right")
        axis.set_xlim(-0.6, len(by_stack) - 0.4)
        axis.set_ylim(bottom=0)
        axis.set_title(title, loc="left", fontsize=10, fontweight="bold")
        axis.grid(axis="y", alpha=0.3)
    axes[0, 0].set_ylabel(ylabel)
    axes[0, 0].legend(fontsize=7, loc="lower left")
    figure.tight_layout()
    return to_svg(figure)


@dataclass
class Series:
    """One run's samples, ready to draw."""

    title: str
    t_s: list[float]
    read_mb_s: list[float]
    write_mb_s: list[float]
    cpu_busy_pct: list[float]
    cpu_iowait_pct: list[float]


def timeseries_figure(panels: list[Series]) -> str:
    """One column per workload: device throughput above, host CPU busy / iowait below."""
    figure, axes = pyplot().subplots(
        2, len(panels), figsize=(max(3.4 * len(panels), 5), 3.8), squeeze=False, sharex="col"
    )
    for column, series in enumerate(panels):
        top, bottom = axes[0, column], axes[1, column]
        if not series.t_s:
            top.text(0.5, 0.5, "no samples", ha="center", va="center", transform=top.transAxes)
        top.step(series.t_s, series.write_mb_s, where="post", color=SIGNIFICANT, label="write")
        top.step(series.t_s, series.read_mb_s, where="post", color="#2980b9", label="read")
        bottom.step(series.t_s, series.cpu_busy_pct, where="post", color=NEUTRAL, label="CPU busy")
        bottom.step(series.t_s, series.cpu_iowait_pct, where="post", color="#e67e22", label="iowait")
        top.set_title(series.title, loc="left", fontsize=9)
        top.set_ylim(bottom=0)
        bottom.set_ylim(0, 100)
        bottom.set_xlabel("seconds into the run")
        for axis in (top, bottom):
            axis.grid(alpha=0.3)
    axes[0, 0].set_ylabel("device MB/s")
    axes[1, 0].set_ylabel("host CPU %")
    axes[0, 0].legend(fontsize=7, loc="upper right")
    axes[1, 0].legend(fontsize=7, loc="upper right")
    figure.tight_layout()
    return to_svg(figure)


def sentinel_figure(series: dict[str, tuple[list[float], list[float]]], *, xlabel: str, ylabel: str) -> str:
    """Each sentinel part over time, as a share of a reference value (1 = unchanged): a
    host that drifts shows as a line leaving 1."""
    figure, axis = pyplot().subplots(figsize=(6.4, 2.8))
    for label, (where, values) in series.items():
        axis.plot(where, values, marker="o", markersize=3, label=label)
    axis.axhline(1.0, color=BASELINE, linestyle="--", linewidth=0.8)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    return to_svg(figure)


def settle_figure(trials: list[int], waited: list[float], busy: list[float]) -> str:
    """The settle wait before each trial's timed run, in trial order."""
    figure, axis = pyplot().subplots(figsize=(6.4, 2.4))
    axis.bar(trials, waited, color=BASELINE, label="waited")
    axis.bar(trials, busy, color=SIGNIFICANT, label="of which devices busy")
    axis.set_xlabel("trial")
    axis.set_ylabel("seconds")
    axis.set_ylim(bottom=0)
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, loc="upper right")
    figure.tight_layout()
    return to_svg(figure)


def latency_cdf_figure(lines: dict[str, tuple[list[float], list[float]]], *, title: str) -> str:
    """One line per stack: the share of requests completed within each latency (log x)."""
    figure, axis = pyplot().subplots(figsize=(6.4, 3.0))
    for label, (latencies_us, shares) in lines.items():
        axis.step(latencies_us, shares, where="post", label=label)
    axis.set_xscale("log")
    axis.set_ylim(0, 1.01)
    axis.set_xlabel("completion latency (µs, log scale)")
    axis.set_ylabel("share of requests")
    axis.set_title(title, loc="left", fontsize=9)
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=7, loc="lower right")
    figure.tight_layout()
    return to_svg(figure)


SPLIT_COLOURS = ("#2c3e50", "#8e44ad", "#c0392b", "#e67e22", "#bdc3c7")


def split_figure(bars: list[tuple[str, list[tuple[str, float]]]]) -> str:
    """One horizontal stacked bar per stack: its median elapsed time, part by part (the
    same parts, in the same order and colours, in every bar; a negative rest is left out)."""
    height = 0.5 + 0.45 * len(bars)
    figure, axis = pyplot().subplots(figsize=(6.4, max(1.6, height)))
    labels = [label for label, _ in bars]
    names = [name for name, _ in bars[0][1]] if bars else []
    for index, name in enumerate(names):
        left = [sum(max(0.0, v) for _, v in parts[:index]) for _, parts in bars]
        widths = [max(0.0, parts[index][1]) for _, parts in bars]
        axis.barh(labels, widths, left=left, color=SPLIT_COLOURS[index % len(SPLIT_COLOURS)], label=name)
    axis.invert_yaxis()
    axis.set_xlabel("seconds (median run)")
    axis.grid(alpha=0.3, axis="x")
    axis.legend(fontsize=7, loc="lower right", ncols=min(3, max(1, len(names))))
    figure.tight_layout()
    return to_svg(figure)
