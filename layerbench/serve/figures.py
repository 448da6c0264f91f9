"""The browser's plots: matplotlib SVG, drawn on the server, served as images.

A trend's plot links its points: each is an SVG link to its experiment with a title (the
tooltip), and the page's script (static/plots.js) puts the SVG inline so that a point can be
pointed at and followed; without the script it is the same picture as an image. The pages'
policy allows no inline style (Content-Security-Policy), so a plot shown inline carries its
styles as presentation attributes (`fill="..."`), never `style`.

matplotlib's pyplot is not thread-safe and the server answers from a pool of threads: one
figure is drawn at a time.
"""

import threading
import xml.etree.ElementTree as ElementTree

from layerbench.analysis import trend as trends
from layerbench.reports import plots
from layerbench.reports.document import Figure

_DRAWING = threading.Lock()
SVG = "http://www.w3.org/2000/svg"
XLINK = "http://www.w3.org/1999/xlink"
ElementTree.register_namespace("", SVG)
ElementTree.register_namespace("xlink", XLINK)
POINTS = "linked-points"  # the group id of a plot's linked points


def _declarations(text: str) -> list[tuple[str, str]]:
    pairs = (part.split(":", 1) for part in text.split(";") if ":" in part)
    return [(name.strip(), value.strip()) for name, value in pairs]


def without_styles(root: ElementTree.Element) -> None:
    """Every style attribute as presentation attributes; a style element's rule for every
    element (`*{...}`, matplotlib's only one) as attributes of the root, which inherit."""
    for parent in list(root.iter()):
        for child in list(parent):
            if child.tag == f"{{{SVG}}}style":
                rule = (child.text or "").strip()
                if rule.startswith("*{") and rule.endswith("}"):
                    for name, value in _declarations(rule[2:-1]):
                        root.set(name, value)
                parent.remove(child)
    for element in root.iter():
        if "style" in element.attrib:
            for name, value in _declarations(element.attrib.pop("style")):
                element.set(name, value)


def linked(svg: str, titles: list[str]) -> str:
    """The plot with its linked points' titles (in their order) and no inline style."""
    root = ElementTree.fromstring(svg)
    without_styles(root)
    group = next(g for g in root.iter(f"{{{SVG}}}g") if g.get("id") == POINTS)
    # Each point's link wraps its marker, or sits inside the marker's clip group (one point).
    links = list(group.iter(f"{{{SVG}}}a"))
    if len(links) != len(titles):
        raise ValueError(f"{len(links)} linked points, {len(titles)} titles")
    for link, title in zip(links, titles, strict=True):
        link.attrib.pop("target", None)  # the experiment opens in the same tab
        link.set("href", link.get(f"{{{XLINK}}}href", ""))
        caption = ElementTree.Element(f"{{{SVG}}}title")
        caption.text = title
        link.insert(0, caption)
    return ElementTree.tostring(root, encoding="unicode")


def drawn(figure: Figure) -> str:
    """A figure of a report document, as SVG."""
    with _DRAWING:
        return figure.draw()


def series(one: trends.Series, steps: list[trends.Step]) -> str:
    """One series' ratio per experiment, a dashed line where each real step starts; each
    point links to its experiment, its title saying which and the ratio."""
    ids = [p.experiment for p in one.points]
    ratios = [p.ratio for p in one.points]
    with _DRAWING:
        plt = plots.pyplot()
        figure, axis = plt.subplots(figsize=(7.5, 2.6))
        axis.plot(ids, ratios, "-", color=plots.NEUTRAL, linewidth=1)
        points = axis.scatter(ids, ratios, s=18, color=plots.NEUTRAL, zorder=3)
        points.set_urls([f"/experiments/{ident}" for ident in ids])
        points.set_gid(POINTS)
        for step in steps:
            axis.axvline(step.after.experiment - 0.5, color=plots.SIGNIFICANT, linestyle="--", linewidth=1)
        axis.set_xlabel("experiment")
        axis.set_ylabel("wall time ratio to the baseline")
        axis.set_title(f"{one.stack} x {one.workload} on {one.host}", loc="left", fontsize=10)
        axis.grid(alpha=0.3)
        figure.tight_layout()
        drawn = plots.to_svg(figure)
    titles = [f"experiment {p.experiment} ({p.started[:16]}): x{p.ratio:.3f}" for p in one.points]
    return linked(drawn, titles)
