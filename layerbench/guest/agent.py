"""The agent inside the guest: `python3 -m layerbench.guest.agent SHARE`, run by the guest's
init from the host's root (read-only over 9p). It runs the rest of the trial with the trial
procedure the host uses (executors/procedure.py): build the layers above the vm layer, then
prepare, drop caches, and, once the host has taken its counters, the timed run. It reads its
request from SHARE/request.json and answers in SHARE/result.json as soon as the run is
measured, before its layers come down: the host stops the guest once it has the answer (the
guest is thrown away whole, its arrays, mappings and servers with it; under tcg their
teardown took 10-17 s a guest)."""

import contextlib
import importlib
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path

from layerbench.core.errors import SetupError, UserError
from layerbench.executors import procedure
from layerbench.guest.protocol import GuestAnswer, GuestRequest
from layerbench.observe import measure
from layerbench.scratch import Scratch
from layerbench.stacks.base import LAYER_KINDS, BuildContext, Layer, LayerOptions, build_stack
from layerbench.workloads.base import WORKLOAD_KINDS, Prepared, Workload, WorkloadOptions


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def _kinds(
    modules: list[str],
) -> tuple[dict[str, type[Layer[LayerOptions]]], dict[str, type[Workload[WorkloadOptions]]]]:
    """The layer and workload kinds the request's modules register (and no other module's)."""
    for name in modules:
        if not name.startswith("layerbench."):
            raise UserError(f"guest request: {name} is not a module of layerbench")
        importlib.import_module(name)
    return LAYER_KINDS, WORKLOAD_KINDS


def run(request: GuestRequest, share: Path, deliver: Callable[[GuestAnswer], None]) -> None:
    """Build, prepare, run, and deliver the answer while the layers are still up."""
    phases = {"agent_started_s": _uptime()}
    layer_kinds, workload_kinds = _kinds(request.kind_modules)
    layers = [
        layer_kinds[o["kind"]](layer_kinds[o["kind"]].Options(**o), index)
        for index, o in enumerate(request.layers, start=request.first_index)
    ]
    kind = workload_kinds[request.workload["kind"]]
    workload = kind(kind.Options(**request.workload), request.workload_name)
    if request.packed is not None:
        workload.use_packed(request.packed)  # read-only here: it must not be packed again
    workload.reference_fs_size = request.reference_fs_size
    scratch = Scratch(Path(request.scratch))
    scratch.lock("layerbench guest agent")
    with scratch.directory("trial") as workdir, contextlib.ExitStack() as resources:
        ctx = BuildContext(scratch=scratch, workdir=workdir)
        built = resources.enter_context(build_stack(ctx, layers))
        if built.layers[0].fs_size is None:
            built.layers[0].fs_size = request.fs_size  # the guest disk is this stack's fs
        devices = built.devices()

        def ready_then_go() -> None:
            """The child waits at its gate, its counters read: the host takes its own, then
            says go, and both clocks start together."""
            (share / "ready").write_text("ready\n")
            while not (share / "go").exists():
                time.sleep(0.005)

        def timed(prepared: Prepared) -> measure.RunCounters:
            return measure.run_timed(
                prepared.argv,
                cwd=prepared.cwd,
                env=prepared.env,
                timeout=request.timeout,
                devices=devices,
                helper_pids=built.helper_pids,
                helper_group=built.helper_group,
                stderr_path=workdir / "stderr",
                at_gate=ready_then_go,
            )

        def lap(phase: str) -> None:
            phases[f"{phase}d_s" if phase == "prepare" else f"{phase}_s"] = _uptime()

        result = procedure.run_on_top(workload, ctx, built, resources, timed, lap)
        deliver(GuestAnswer(result=result, phases=phases, mount_lines=built.mount_lines, devices=devices))


def main(share: Path) -> int:
    delivered: list[GuestAnswer] = []

    def deliver(answer: GuestAnswer) -> None:
        part = share / "result.json.part"
        part.write_text(answer.model_dump_json())
        os.replace(part, share / "result.json")
        delivered.append(answer)

    try:
        run(GuestRequest.model_validate_json((share / "request.json").read_text()), share, deliver)
    except (SetupError, UserError) as exc:
        if not delivered:  # a teardown's error after the answer changes nothing the host has
            deliver(GuestAnswer(error=str(exc)))
    except BaseException as exc:
        if not delivered:
            last = traceback.format_exception(exc)[-1].strip()
            deliver(GuestAnswer(error=f"agent failed: {last}"))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
