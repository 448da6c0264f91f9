"""html: one self-contained page with the plots (inline SVG), the tables, the host, each
stack's layers and mount lines, the plan and the warnings. Viewable offline."""

import dataclasses
import html
import math
import re
from typing import Any

import numpy as np

from layerbench.analysis import decompose
from layerbench.core.sizes import format_size
from layerbench.observe import tracing
from layerbench.reports import host_state, plots
from layerbench.reports.base import (
    ReportData,
    host_lines,
    latency_cdfs,
    marginal_table,
    register,
    stack_table,
)

STYLE = """
body { font-family: 'DejaVu Sans', sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.5em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 1.6em; }
table { border-collapse: collapse; margin: .5em 0 1em; font-size: .9em; }
th, td { border: 1px solid #ddd; padding: .25em .6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
tr.slower td { color: #c0392b; } tr.faster td { color: #1e8449; } tr.baseline td { color: #777; }
pre, code { background: #f6f6f6; font-size: .85em; } pre { padding: .6em; overflow-x: auto; }
.figure { margin: .5em 0 1em; } .figure svg { max-width: 100%; height: auto; }
.warnings li { color: #9a6700; } .note { color: #555; font-size: .9em; }
"""


def page(title: str, body: list[str]) -> str:
    """A whole HTML document around body parts (already escaped where needed)."""
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>\n"
        + "\n".join(body)
        + "\n</body></html>\n"
    )


def figure(svg: str, name: str) -> str:
    return f"<div class='figure' id='{figure_id(name)}'>{svg}</div>"


def figure_id(name: str) -> str:
    """A name as an element id: a sweep's stacks are named with [ = , ] and values."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in header)
    body = "".join(
        f"<tr class='{html.escape(classes[i]) if classes else ''}'>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in row)
        + "</tr>"
        for i, row in enumerate(rows)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def bullet_list(items: list[str], css: str = "") -> str:
    return f"<ul class='{css}'>" + "".join(f"<li>{html.escape(i)}</li>" for i in items) + "</ul>"


def ratio_points(data: ReportData, workload: str) -> list[plots.RatioPoint]:
    points = []
    for stack in data.stacks:
        row = data.summary(stack, workload, "wall_s")
        if row is None or row.ratio is None or not math.isfinite(row.ratio):
            points.append(plots.RatioPoint(stack, None, None, None, False))
            continue
        bounded = all(v is not None and math.isfinite(v) for v in (row.ratio_ci_low, row.ratio_ci_high))
        points.append(
            plots.RatioPoint(
                stack,
                row.ratio,
                row.ratio_ci_low if bounded else None,
                row.ratio_ci_high if bounded else None,
                significant=row.significant,
                is_baseline=row.decision == "baseline",
            )
        )
    return points


def _series(data: ReportData, stack: str, workload: str) -> plots.Series:
    """The measured run with the median wall time stands for its (stack, workload)."""
    group = sorted(data.measured.get((stack, workload), []), key=lambda r: r["wall_s"])
    if not group:
        return plots.Series(f"{workload}: no successful run", [], [], [], [], [])
    run = group[(len(group) - 1) // 2]
    samples = data.samples.get(run["id"], [])
    # Steps start at the beginning of each interval, so draw from t - dt.
    starts = [s["t_s"] - s["dt_s"] for s in samples]
    if samples:
        starts.append(samples[-1]["t_s"])

    def per_second(key: str, scale: float) -> list[float]:
        values = [s[key] / s["dt_s"] / scale if s["dt_s"] > 0 else 0.0 for s in samples]
        return values + values[-1:]

    def shares(key: str) -> list[float]:
        values = [s[key] for s in samples]
        return values + values[-1:]

    return plots.Series(
        f"{workload}: rep {run['rep'] + 1}, {run['wall_s']:.2f} s (median run)",
        starts,
        per_second("read_bytes", 1e6),
        per_second("write_bytes", 1e6),
        shares("cpu_busy_pct"),
        shares("cpu_iowait_pct"),
    )


def sampler_note(data: ReportData) -> str:
    costs = [r["facts"].get("sampler") for r in data.runs if r["facts"].get("sampler")]
    if not costs:
        return "No time series were recorded for this experiment."
    cpu = sum(c["cpu_s"] for c in costs)
    wall = sum(c["wall_s"] for c in costs)
    worst = max(c["cpu_pct"] for c in costs)
    count = sum(c["count"] for c in costs)
    return (
        f"Sampled every {costs[0]['interval_s'] * 1000:.0f} ms from /proc/diskstats (the stack's top "
        f"device) and /proc/stat (all CPUs of the host): {count} samples in {len(costs)} runs. "
        f"The sampler used {cpu * 1000:.1f} ms of CPU over {wall:.1f} s of runs "
        f"({100 * cpu / wall if wall else 0:.2f} % of one CPU; at most {worst:.2f} % in one run)."
    )


def plan_block(experiment: dict[str, Any]) -> str:
    return f"<pre>{html.escape(experiment['plan_text'])}</pre>"


@register("html")
def render(data: ReportData) -> str:
    experiment = data.experiment
    body = [
        f"<h1>layerbench experiment {experiment['id']}: {html.escape(experiment['name'])}</h1>",
        f"<p>Status {html.escape(experiment['status'])}, started {html.escape(experiment['started'])}, "
        f"seed {experiment['seed']}, baseline <code>{html.escape(data.baseline)}</code>.</p>",
        "<h2>Hardware/OS</h2>",
        bullet_list(host_lines(experiment["host"])),
        *_fleet_section(data),
        *_cost_section(data),
        *_sweep_section(data),
        *_tables_section(data),
        *_series_section(data),
        *_host_state_section(data),
        *_stacks_section(data),
    ]
    failed = data.failed_runs()
    if failed:
        body += [
            "<h2>Failed runs</h2>",
            table(
                ["stack", "workload", "rep", "error"],
                [[r["stack"], r["workload"], str(r["rep"] + 1), r["error"] or ""] for r in failed],
            ),
        ]
    body += ["<h2>Warnings</h2>", bullet_list(data.warnings, "warnings") if data.warnings else "<p>none</p>"]
    body += ["<h2>The plan</h2>", plan_block(experiment)]
    spread = [r["wall_s"] for r in data.runs if r["status"] == "ok"]
    if spread:
        body.append(
            f"<p class='note'>{len(data.runs)} runs, wall times from {min(spread):.3f} s to "
            f"{max(spread):.3f} s (median {float(np.median(spread)):.3f} s).</p>"
        )
    return page(f"layerbench experiment {experiment['id']}", body)


def _cost_section(data: ReportData) -> list[str]:
    """The ratio plot and every run as a dot."""

    def walls(stack: str, workload: str, warmup: bool) -> list[float]:
        return [
            r["wall_s"]
            for r in data.runs
            if (r["stack"], r["workload"]) == (stack, workload)
            and r["status"] == "ok"
            and bool(r["warmup"]) == warmup
        ]

    runs = {
        f"workload {w}": {s: (walls(s, w, False), walls(s, w, True)) for s in data.stacks}
        for w in data.workloads
    }
    return [
        "<h2>Cost of each stack against the baseline</h2>",
        "<p class='note'>Ratio of wall times, stack / baseline, with its interval at the level "
        "its verdict was decided at; red and starred: significant after the correction for many "
        "comparisons. Left of the dashed line is faster. " + html.escape(data.design_note() or "") + "</p>",
        figure(
            plots.ratio_figure(
                {f"workload {w}": ratio_points(data, w) for w in data.workloads},
                xlabel=f"wall time ratio to {data.baseline}",
            ),
            "ratio-plot",
        ),
        "<h2>Every run</h2>",
        figure(plots.runs_figure(runs, ylabel="wall time (s)"), "runs-plot"),
    ]


def _sweep_section(data: ReportData) -> list[str]:
    """A plot per sweep: each workload's ratio against the swept values."""
    body = []
    for group, stacks in data.sweeps.items():
        values = [data.sweep_values(stack) for stack in stacks]
        labels = [",".join(str(v) for v in point.values()) for point in values]
        swept = ", ".join(values[0]) if values else ""
        panels = {}
        for workload in data.workloads:
            by_stack = {p.label: p for p in ratio_points(data, workload)}
            panels[f"workload {workload}"] = [
                dataclasses.replace(by_stack[stack], label=label)
                for label, stack in zip(labels, stacks, strict=True)
            ]
        body += [
            f"<h2>Sweep <code>{html.escape(group)}</code> over {html.escape(swept)}</h2>",
            "<p class='note'>Each value's wall time ratio to the baseline, with its interval at the "
            "level its verdict was decided at; red and starred: significant.</p>",
            figure(
                plots.sweep_figure(panels, xlabel=swept, ylabel=f"wall time ratio to {data.baseline}"),
                f"sweep-{group}",
            ),
        ]
    return body


def _tables_section(data: ReportData) -> list[str]:
    body = []
    for workload in data.workloads:
        header, rows = stack_table(data, workload)
        body += [
            f"<h3>workload {html.escape(workload)}</h3>",
            table(header, rows, [r[3].split()[0] for r in rows]),
        ]
        why = data.why_lines(workload)  # the read-out of analysis/explain.py
        if why:
            body += ["<p><b>Why</b></p>", bullet_list(why, "why")]
        if steps := marginal_table(data, workload):
            body += [
                "<p><b>What each layer adds</b> (wall time, stack / the stack one layer shorter; "
                "its own family of comparisons)</p>",
                table(*steps, [r[4].split()[0] for r in steps[1]]),
            ]
        body += _split_section(data, workload)
        if traced := tracing.stack_lines(data.measured, data.stacks, workload):
            title = "block-request latency, issue to completion (bpftrace)"
            body.append(figure(plots.latency_cdf_figure(traced, title=title), f"block-latency-{workload}"))
        body += [
            figure(plots.latency_cdf_figure(cdf.lines, title=cdf.title), cdf.name)
            for cdf in latency_cdfs(data, workload)
        ]
    return body


def _split_section(data: ReportData, workload: str) -> list[str]:
    """Where each stack's elapsed time went (a stacked bar each), and its bytes down the
    stack's devices (a small table)."""
    body = []
    if splits := data.splits(workload):
        body += [
            "<p><b>Where the elapsed time went</b> (medians; the parts can overlap:"
            " see docs/counters.md)</p>",
            figure(plots.split_figure([(s.stack, s.bars()) for s in splits]), f"split-{workload}"),
            bullet_list([f"{s.stack}: {s.text()}" for s in splits], "split"),
        ]
    rows = []
    for stack in data.stacks:
        written, hops = decompose.flow(data.measured.get((stack, workload), []))
        if hops:
            rows.append(
                [
                    stack,
                    format_size(int(written)) if written else "-",
                    " → ".join(f"{device} {format_size(int(value))}" for device, value in hops),
                    f"x{hops[-1][1] / written:.2f}" if written else "-",
                ]
            )
    if rows:
        body += [
            "<p><b>Bytes written, down the stack</b> (median run)</p>",
            table(["stack", "by the workload", "to each device, top first", "amplification"], rows),
        ]
    return body


def _series_section(data: ReportData) -> list[str]:
    body = ["<h2>During the runs</h2>", f"<p class='note'>{html.escape(sampler_note(data))}</p>"]
    for stack in data.stacks:
        body.append(f"<h3>stack {html.escape(stack)}</h3>")
        body.append(
            figure(
                plots.timeseries_figure([_series(data, stack, w) for w in data.workloads]), f"series-{stack}"
            )
        )
    return body


def _stacks_section(data: ReportData) -> list[str]:
    body = ["<h2>Stacks</h2>"]
    for stack in data.stacks:
        info = data.experiment["stacks"].get(stack, {})
        body.append(
            f"<p><b>{html.escape(stack)}</b>: {html.escape(' → '.join(info.get('layers', ['?'])))}</p>"
        )
        mounts = info.get("mount_lines", [])
        body.append(
            f"<pre>{html.escape(chr(10).join(mounts))}</pre>" if mounts else "<p class='note'>no mounts</p>"
        )
    return body


def _fleet_section(data: ReportData) -> list[str]:
    """A fleet's experiment: each stack's ratio on every host of the fleet, side by side."""
    if not data.fleet_ratios:
        return []
    header, rows = data.fleet_table()
    return [
        f"<h2>The fleet {html.escape(data.experiment['fleet'])}: "
        "elapsed time against the baseline, per host</h2>",
        table(header, rows),
    ]


def _host_state_section(data: ReportData) -> list[str]:
    """The drift sentinel over the experiment and the settle wait before every trial."""
    body = ["<h2>The host during the experiment</h2>"]
    body += [f"<p class='note'>{html.escape(line)}</p>" for line in data.host_state_lines()]
    if data.sentinels:
        series = host_state.sentinel_series({"": data.sentinels}, data.sentinels)
        chart = plots.sentinel_figure(
            series, xlabel="minutes into the experiment", ylabel="time / the part's median"
        )
        body.append(figure(chart, "sentinel-plot"))
    rows = host_state.settle_rows(data.runs)
    if rows:
        body.append(
            figure(
                plots.settle_figure(
                    [int(r[0]) for r in rows], [float(r[3]) for r in rows], [float(r[4]) for r in rows]
                ),
                "settle-plot",
            )
        )
        body.append("<details><summary>settle wait per trial</summary>")
        body.append(table(host_state.SETTLE_HEADER, rows))
        body.append("</details>")
    return body
