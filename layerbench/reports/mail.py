"""mail: plain text for a mailing list, shaped like the FreeBSD nullfs report:
Hardware/OS, Config per stack, Test, Numbers in csh `time` format, then the ratios."""

from layerbench.reports.base import (
    ReportData,
    csh_time_line,
    details_table,
    fmt_p,
    fmt_ratio,
    host_lines,
    register,
)


@register("mail")
def render(data: ReportData) -> str:
    lines = ["Hardware/OS:", "------------", *host_lines(data.experiment["host"]), ""]
    lines += _config_lines(data) + _test_lines(data)
    for workload in data.workloads:
        lines += _workload_lines(data, workload)
    if note := data.design_note():
        lines += [note, ""]
    if data.warnings:
        lines += ["Warnings:", "---------", *data.warnings, ""]
    lines.append(
        "(csh time fields, of one run: user, system, elapsed, CPU % = (user + system) / elapsed, "
        "0+peak RSS k (Linux keeps no shared/unshared memory averages), block in+out io in "
        "512-byte units, major page faults.)"
    )
    return "\n".join(lines) + "\n"


def _config_lines(data: ReportData) -> list[str]:
    lines = []
    for stack in data.stacks:
        info = data.experiment["stacks"].get(stack, {})
        title = f"Config {stack}:"
        lines += [title, "-" * len(title), "layers: " + " -> ".join(info.get("layers", ["?"]))]
        if info.get("world"):
            lines.append(f"world: {info['world']}, chrooted into through the stack (jail/ro)")
        lines += info.get("mount_lines", []) or ["(no mounts: a plain directory)"]
        lines.append("")
    return lines


def _test_lines(data: ReportData) -> list[str]:
    plan = data.experiment["plan"]
    lines = ["Test:", "-----"]
    for name, workload in plan["workloads"].items():
        settings = ", ".join(
            f"{k}={v}" for k, v in workload.items() if k != "kind" and v not in (None, "", [])
        )
        lines.append(f"{name}: {workload['kind']} ({settings})")
    lines.append(
        f"{plan['reps']} measured runs per stack and workload after {plan['warmup']} warm-up, "
        f"{plan['order']} order, seed {data.experiment['seed']}; caches dropped before each run "
        '(a build with caches = "warm" starts warm: written back, not dropped).'
    )
    return [*lines, ""]


def _workload_lines(data: ReportData, workload: str) -> list[str]:
    width = max(len(s) for s in data.stacks) + 1
    title = f"Numbers, {workload} (the run with the median elapsed time of each stack):"
    lines = [title, "-" * len(title)]
    chosen = []
    for stack in data.stacks:
        run = data.median_run(stack, workload)
        lines.append(f"{stack + ':':<{width}} {csh_time_line(run) if run else 'no successful runs'}")
        if run:
            chosen.append(f"{stack} rep {run['rep'] + 1}")
    if chosen:
        lines.append(f"(the runs shown: {', '.join(chosen)})")
    lines.append("")
    if details := details_table(data, workload):
        header, table_rows = details
        for cells in table_rows:
            pairs = ", ".join(f"{name} {value}" for name, value in zip(header[1:], cells[1:], strict=True))
            lines.append(f"{cells[0] + ':':<{width}} {pairs}")
        lines.append("")
    rows = [data.summary(stack, workload, "wall_s") for stack in data.stacks]
    compared = [row for row in rows if row is not None and row.decision != "baseline"]
    how = "; repetitions paired" if compared and all(row.paired for row in compared) else ""
    lines.append(f"Elapsed time against {data.baseline} (ratio [interval, its level]{how}):")
    for row in compared:
        lines.append(
            f"{row.stack + ':':<{width}} {fmt_ratio(row)} {row.verdict}"
            + (f" (p adj. {fmt_p(row)}, {row.method})" if row.p_adjusted is not None else "")
        )
    if helpers := data.helper_cpu(workload):
        lines += ["", "CPU of helper processes (FUSE daemon), not in the numbers above:"]
        lines += [f"{stack + ':':<{width}} {seconds:.2f}s (median)" for stack, seconds in helpers.items()]
    if sweeps := data.sweep_lines(workload):
        lines += ["", "Sweeps (elapsed time against the baseline):", *sweeps]
    if steps := data.marginal_lines(workload):
        lines += ["", "What each layer adds (elapsed time, stack / the stack below it):", *steps]
    if why := data.why_lines(workload):
        lines += ["", "Why:", *why]
    if split := data.split_lines(workload):
        lines += ["", "Where the elapsed time went (medians; see docs/counters.md):", *split]
    return [*lines, ""]
