"""The regressions page as an Atom feed (RFC 4287): one entry per step the trends confirmed,
newest first, each linking the comparison of the experiments around it; a feed reader
polling it sees a new regression as a new entry. Built with ElementTree, so every text from
the store is escaped."""

from datetime import UTC, datetime
from urllib.parse import urlencode
from xml.etree import ElementTree

from layerbench.analysis import trend as trends

ATOM = "http://www.w3.org/2005/Atom"


def _stamp(text: str | None) -> str:
    """An experiment's start as RFC 3339 (stored as ISO 8601; a missing one is the epoch)."""
    if not text:
        return "1970-01-01T00:00:00Z"
    moment = datetime.fromisoformat(text)
    return (
        (moment if moment.tzinfo else moment.replace(tzinfo=UTC))
        .astimezone(UTC)
        .strftime("%Y-%m-%dT%H:%M:%SZ")
    )


def atom(steps: list[trends.Step], opened: list[trends.Step], base: str, location: str) -> str:
    """The feed document; base is the server's own URL (http://127.0.0.1:8000)."""
    ElementTree.register_namespace("", ATOM)
    feed = ElementTree.Element(f"{{{ATOM}}}feed")
    newest = sorted(steps, key=lambda s: s.after.started or "", reverse=True)

    def sub(parent: ElementTree.Element, tag: str, text: str | None = None, **attributes: str) -> None:
        element = ElementTree.SubElement(parent, f"{{{ATOM}}}{tag}", attributes)
        element.text = text

    sub(feed, "title", f"layerbench regressions ({location})")
    sub(feed, "id", f"{base}/regressions")
    sub(feed, "link", href=f"{base}/regressions.atom", rel="self")
    sub(feed, "link", href=f"{base}/regressions")
    sub(feed, "updated", _stamp(newest[0].after.started) if newest else _stamp(None))
    author = ElementTree.SubElement(feed, f"{{{ATOM}}}author")
    sub(author, "name", "layerbench serve")
    for step in newest:
        row = step.row
        compare = f"{base}/compare?" + urlencode({"a": step.before.experiment, "b": step.after.experiment})
        ratio = f"x{row.ratio:.2f} [{row.ratio_ci_low:.2f}-{row.ratio_ci_high:.2f}]" if row.ratio else "-"
        state = "open regression" if any(step is o for o in opened) else row.decision
        series = step.series
        entry = ElementTree.SubElement(feed, f"{{{ATOM}}}entry")
        what = f"{series.plan}: {series.stack} x {series.workload} on {series.host}"
        sub(entry, "title", f"{what} {ratio} ({state})")
        which = {"stack": series.stack, "workload": series.workload, "host": series.host}
        sub(entry, "id", f"{compare}&{urlencode(which)}")
        sub(entry, "link", href=compare)
        sub(entry, "updated", _stamp(step.after.started))
        changed = "; ".join(f"{k}: {a} -> {b}" for k, a, b in step.changed) or "nothing recorded"
        sub(
            entry,
            "summary",
            f"experiment {step.before.experiment} -> {step.after.experiment}: {ratio}, {row.decision}; "
            f"what changed: {changed}",
        )
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ElementTree.tostring(feed, encoding="unicode") + "\n"
