"""mail: plain text for a mailing list, shaped like the FreeBSD nullfs report:
Hardware/OS, Config per stack, Test, Numbers in csh `time` format, then the ratios."""

from layerbench.reports.base import ReportData, csh_time_line, details_table, fmt_ratio, host_lines, register


@register("mail")
def render(data: ReportData) -> str:
    experiment = data.experiment
    plan = experiment["plan"]
    lines = ["Hardware/OS:", "------------", *host_lines(experiment["host"]), ""]
    for stack in data.stacks:
        info = experiment["stacks"].get(stack, {})
        title = f"Config {stack}:"
        lines += [title, "-" * len(title), "layers: " + " -> ".join(info.get("layers", ["?"]))]
        if info.get("world"):
            lines.append(f"world: {info['world']}, chrooted into through the stack (jail/ro)")
        lines += info.get("mount_lines", []) or ["(no mounts: a plain directory)"]
        lines.append("")
    lines += ["Test:", "-----"]
    for name, workload in plan["workloads"].items():
        settings = ", ".join(
            f"{k}={v}" for k, v in workload.items() if k != "kind" and v not in (None, "", [])
        )
        lines.append(f"{name}: {workload['kind']} ({settings})")
    lines.append(
        f"{plan['reps']} measured runs per stack and workload after {plan['warmup']} warm-up, "
        f"{plan['order']} order, seed {experiment['seed']}; caches dropped before each run "
        '(a build with caches = "warm" starts warm: written back, not dropped).'
    )
    lines.append("")
    width = max(len(s) for s in data.stacks) + 1
    for workload in data.workloads:
        title = f"Numbers, {workload} (median of each counter):"
        lines += [title, "-" * len(title)]
        for stack in data.stacks:
            medians = data.medians_of_runs(stack, workload)
            line = csh_time_line(medians) if medians else "no successful runs"
            lines.append(f"{stack + ':':<{width}} {line}")
        lines.append("")
        details = details_table(data, workload)
        if details:
            header, rows = details
            for row in rows:
                pairs = ", ".join(f"{name} {value}" for name, value in zip(header[1:], row[1:], strict=True))
                lines.append(f"{row[0] + ':':<{width}} {pairs}")
            lines.append("")
        rows = [data.summary(stack, workload, "wall_s") for stack in data.stacks]
        compared = [row for row in rows if row is not None and row.verdict != "baseline"]
        how = "; repetitions paired" if compared and all(row.paired for row in compared) else ""
        lines.append(f"Elapsed time against {data.baseline} (ratio of medians, 95 % CI{how}):")
        for row in compared:
            lines.append(
                f"{row.stack + ':':<{width}} {fmt_ratio(row)} {row.verdict}"
                + (f" (p={row.p_value:.3f})" if row.p_value is not None else "")
            )
        helpers = data.helper_cpu(workload)
        if helpers:
            lines.append("")
            lines.append("CPU of helper processes (FUSE daemon), not in the numbers above:")
            lines += [f"{stack + ':':<{width}} {seconds:.2f}s (median)" for stack, seconds in helpers.items()]
        why = data.why_lines(workload)
        if why:
            lines += ["", "Why:", *why]
        lines.append("")
    if data.warnings:
        lines += ["Warnings:", "---------", *data.warnings, ""]
    lines.append(
        "(csh time fields: user, system, elapsed, CPU, 0+max RSS k, block in+out io, "
        "major page faults; Linux keeps no shared-memory sizes.)"
    )
    return "\n".join(lines) + "\n"
