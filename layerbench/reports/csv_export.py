"""csv: one row per run, every counter, for a spreadsheet or pandas."""

import csv
import io

from layerbench.reports.base import ReportData, register
from layerbench.store import RUN_COLUMNS


@register("csv")
def render(data: ReportData) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["experiment", *RUN_COLUMNS])
    for run in data.runs:
        writer.writerow([data.experiment["id"], *(run[key] for key in RUN_COLUMNS)])
    return buffer.getvalue()
