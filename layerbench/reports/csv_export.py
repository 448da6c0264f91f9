"""csv: one row per run, every counter, for a spreadsheet or pandas; or (`--what samples`)
one row per time-series sample, keyed by the run's trial."""

import csv
import io

from layerbench.reports.base import ReportData
from layerbench.reports.document import Report, register
from layerbench.store import SAMPLE_COLUMNS, run_columns

SAMPLE_KEYS = ("trial", "stack", "workload", "rep", "warmup")  # each sample's run, as written below


@register("csv", kinds=("experiment",))
def render(report: Report) -> str:
    data: ReportData = report.data
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["experiment", *run_columns()])
    for run in data.runs:
        writer.writerow([data.experiment.id, *run.row().values()])
    return buffer.getvalue()


def render_samples(data: ReportData) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["experiment", *SAMPLE_KEYS, *SAMPLE_COLUMNS])
    for run in data.runs:
        for sample in data.samples.get(run.id or 0, []):
            writer.writerow(
                [
                    data.experiment.id,
                    run.trial,
                    run.stack,
                    run.workload,
                    run.rep,
                    int(run.warmup),
                    *sample.as_dict().values(),
                ]
            )
    return buffer.getvalue()
