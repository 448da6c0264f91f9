"""Report formats: one module per format, each registering itself in base.FORMATS."""

from layerbench.reports.base import FORMATS, ReportData, load_formats, render

__all__ = ["FORMATS", "ReportData", "load_formats", "render"]
