"""The browser's plots: matplotlib SVG, drawn on the server, served as images (no script).

matplotlib's pyplot is not thread-safe and the server answers from a pool of threads: one
figure is drawn at a time.
"""

import threading

from layerbench.analysis import trend as trends
from layerbench.reports import plots
from layerbench.reports.document import Figure

_DRAWING = threading.Lock()


def drawn(figure: Figure) -> str:
    """A figure of a report document, as SVG."""
    with _DRAWING:
        return figure.draw()


def series(one: trends.Series, steps: list[trends.Step]) -> str:
    """One series' ratio per experiment, a dashed line where each real step starts."""
    with _DRAWING:
        plt = plots.pyplot()
        figure, axis = plt.subplots(figsize=(7.5, 2.6))
        ids = [p.experiment for p in one.points]
        axis.plot(ids, [p.ratio for p in one.points], "o-", color=plots.NEUTRAL, markersize=4)
        for step in steps:
            axis.axvline(step.after.experiment - 0.5, color=plots.SIGNIFICANT, linestyle="--", linewidth=1)
        axis.set_xlabel("experiment")
        axis.set_ylabel("wall time ratio to the baseline")
        axis.set_title(f"{one.stack} x {one.workload} on {one.host}", loc="left", fontsize=10)
        axis.grid(alpha=0.3)
        figure.tight_layout()
        return plots.to_svg(figure)
