"""The agent inside the guest: `python3 -m layerbench.guest.agent SHARE`, run by the guest's
init from the host's root (read-only over 9p). It does the rest of the trial with the same
code the host uses: build the layers above the vm layer, prepare the workload, drop caches,
then, once the host has taken its counters, the timed run. It answers in SHARE/result.json."""

import contextlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from layerbench.content.archives import Archive
from layerbench.core.errors import SetupError, UserError
from layerbench.observe import measure
from layerbench.scratch import Scratch
from layerbench.stacks.base import BuildContext, build_stack, load_kinds
from layerbench.workloads.base import load_kinds as load_workload_kinds


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def run(request: dict[str, Any], share: Path) -> dict[str, Any]:
    phases = {"agent_started_s": _uptime()}
    layer_kinds = load_kinds()
    workload_kinds = load_workload_kinds()
    layers = [
        layer_kinds[o["kind"]](layer_kinds[o["kind"]].Options(**o), index)
        for index, o in enumerate(request["layers"], start=request["first_index"])
    ]
    spec = request["workload"]
    kind = workload_kinds[spec["options"]["kind"]]
    workload = kind(kind.Options(**spec["options"]), spec["name"])
    if request.get("archive"):
        # Packed by the host; the guest sees it read-only, so it must not pack it again.
        workload.__dict__["archive"] = Archive(
            **{**request["archive"], "path": Path(request["archive"]["path"])}
        )
    workload.reference_fs_size = request.get("reference_fs_size")
    scratch = Scratch(Path(request["scratch"]))
    scratch.lock("layerbench guest agent")
    with scratch.directory("trial") as workdir, contextlib.ExitStack() as resources:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        built = resources.enter_context(build_stack(ctx, layers))
        if built.layers[0].fs_size is None:
            built.layers[0].fs_size = request["fs_size"]  # the guest disk is this stack's fs
        devices = built.devices()
        prepared = workload.prepare(ctx, built, resources)
        phases["prepared_s"] = _uptime()
        measure.drop_caches()

        def ready_then_go() -> None:
            """The child waits at its gate, its counters read: the host takes its own, then
            says go, and both clocks start together."""
            (share / "ready").write_text("ready\n")
            while not (share / "go").exists():
                time.sleep(0.005)

        counters = measure.run_timed(
            prepared.argv,
            cwd=prepared.cwd,
            env=prepared.env,
            timeout=request.get("timeout"),
            devices=devices,
            helper_pids=built.helper_pids,
            helper_group=built.helper_group,
            stderr_path=workdir / "stderr",
            at_gate=ready_then_go,
        )
        prepared.collect()
        return {
            "counters": counters.as_row(),
            "units": prepared.units,
            "unit": prepared.unit,
            "facts": prepared.facts,
            "phases": phases,  # guest uptime at each step, to see where boot time goes
            "mount_lines": built.mount_lines,
            "devices": devices,
        }


def main(share: Path) -> int:
    try:
        request = json.loads((share / "request.json").read_text())
        result = run(request, share)
    except (SetupError, UserError) as exc:
        result = {"error": str(exc)}
    except BaseException as exc:
        last = traceback.format_exception(exc)[-1].strip()
        result = {"error": f"agent failed: {last}"}
    part = share / "result.json.part"
    part.write_text(json.dumps(result))
    os.replace(part, share / "result.json")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
