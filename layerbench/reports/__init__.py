"""Reports: the data every report is built from (base.py), the document a human-facing
report shows (document.py, built by contents.py, comparison.py and history.py), and one
module per format, each registering itself in document.FORMATS."""

from layerbench.reports import contents, document
from layerbench.reports.base import ReportData, gather
from layerbench.reports.document import FORMATS, load_formats


def render(data: ReportData, format_name: str) -> str:
    """An experiment's report in one format."""
    report = document.Report("experiment", data, lambda: contents.document(data))
    return document.render(report, format_name)


__all__ = ["FORMATS", "ReportData", "gather", "load_formats", "render"]
