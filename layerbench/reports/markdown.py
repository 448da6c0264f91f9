"""markdown: the same tables as GitHub-flavoured Markdown, for an issue or a wiki."""

from layerbench.reports.base import (
    ReportData,
    details_table,
    host_lines,
    marginal_table,
    register,
    stack_table,
)


def _row(cells: list[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


@register("markdown")
def render(data: ReportData) -> str:
    experiment = data.experiment
    lines = [
        f"## layerbench experiment {experiment['id']}: {experiment['name']}",
        "",
        f"Status {experiment['status']}, started {experiment['started']}, seed "
        f"{experiment['seed']}, baseline `{data.baseline}`.",
        "",
        *(f"- {line}" for line in host_lines(experiment["host"])),
        *(f"- {line}" for line in data.host_state_lines()),
        "",
        "### Stacks",
        "",
    ]
    for stack in data.stacks:
        info = experiment["stacks"].get(stack, {})
        lines.append(f"- `{stack}`: {' → '.join(info.get('layers', []))}")
        lines += [f"  - `{m}`" for m in info.get("mount_lines", [])]
    for workload in data.workloads:
        header, rows = stack_table(data, workload)
        lines += ["", f"### Workload `{workload}`", "", _row(header), _row(["---"] * len(header))]
        lines += [_row(r) for r in rows]
        why = data.why_lines(workload)
        if why:
            lines += ["", "Why:", ""] + [f"- {line}" for line in why]
        if split := data.split_lines(workload):
            lines += ["", "Where the elapsed time went (medians):", ""] + [f"- {line}" for line in split]
        if flow := data.flow_lines(workload):
            lines += ["", "Bytes written, down the stack (median run):", ""] + [f"- {line}" for line in flow]
        if sweeps := data.sweep_lines(workload):
            lines += ["", "Sweeps (elapsed time against the baseline):", ""] + [
                f"- {line}" for line in sweeps
            ]
        if steps := marginal_table(data, workload):
            lines += ["", "What each layer adds (elapsed time, stack / the stack below it):", ""]
            lines += [_row(steps[0]), _row(["---"] * len(steps[0]))] + [_row(r) for r in steps[1]]
        details = details_table(data, workload)
        if details:
            lines += ["", _row(details[0]), _row(["---"] * len(details[0]))] + [_row(r) for r in details[1]]
    failed = data.failed_runs()
    if failed:
        lines += ["", "### Failed runs", "", _row(["stack", "workload", "rep", "error"]), _row(["---"] * 4)]
        lines += [_row([r["stack"], r["workload"], str(r["rep"] + 1), r["error"] or ""]) for r in failed]
    if note := data.design_note():
        lines += ["", note]
    if data.warnings:
        lines += ["", "### Warnings", ""] + [f"- {w}" for w in data.warnings]
    return "\n".join(lines) + "\n"
