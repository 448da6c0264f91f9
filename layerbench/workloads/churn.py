"""churn: mount and unmount the stack's top layer again and again (the automounter case of
the seed: an hour of rapid mounts and unmounts to prove a kernel fix). Each cycle goes
through the layer's own expose(), so every layer kind churns the way it is built."""

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Literal, NotRequired

from pydantic import Field, model_validator
from typing_extensions import TypedDict  # pydantic validates it before Python 3.12

from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.core.runs import RunRecord
from layerbench.core.sizes import SizeText, parse_size
from layerbench.scratch.resources import stop_processes_under, unmount_all_under
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register


class KernelLog(TypedDict):
    checked: bool
    new_lines: int
    alarms: int
    lines: list[str]


class ChurnResult(TypedDict):
    """What the churn child reports (workloads/_churn_child.py): the `churn` fact."""

    cycles: int
    cycles_per_s: float
    mount_s: dict[str, float | None]  # p50, p90, p99, max (None: no cycle)
    unmount_s: dict[str, float | None]
    failures: int
    errors: list[str]
    leaked_mounts: int
    leaked_loops: int
    kernel_log: KernelLog
    through: NotRequired[str]  # "expose" or "automount" (runs before it: expose)
    slab_kib_growth: NotRequired[int]  # unreclaimable slab (SUnreclaim) after minus before, KiB
    slab_kib_per_1000_cycles: NotRequired[float | None]


CHURN = Fact("churn", "during", "the churn's cycles, failures, mounts left and kernel messages", ChurnResult)
CHURNED_LAYER = Fact("churned_layer", "before", "the layer the churn mounted and unmounted", str)
declare(CHURN, CHURNED_LAYER)

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent.parent


class ChurnOptions(WorkloadOptions):
    duration: float | None = Field(default=None, gt=0, description="seconds of churn")
    cycles: int | None = Field(default=None, ge=1, description="mount/unmount cycles")
    files: int = Field(default=0, ge=0, description="files written and read back in each cycle")
    file_size: SizeText = "4K"
    # expose: the top layer built and torn down by layerbench each cycle; automount: the
    # stack's top mounted again and again by a trial's own automount daemon (autofs), from a
    # map of `entries` keys, each round touching every key and then expiring them all
    through: Literal["expose", "automount"] = "expose"
    entries: int = Field(default=4, ge=1, le=256, description="the automounter map's keys")

    @model_validator(mode="after")
    def _bounded(self) -> "ChurnOptions":
        if self.duration is None and self.cycles is None:
            self.duration = 10.0
        return self


@register
class Churn(Workload[ChurnOptions]):
    kind = "churn"
    Options = ChurnOptions
    summary = "mount and unmount the stack's top layer in rapid succession; latencies, leaks, kernel log"
    tools = ("mount", "umount")

    @classmethod
    def extra_tools(cls, options: WorkloadOptions | None) -> tuple[str, ...]:
        automount = getattr(options, "through", None) == "automount"
        return ("automount", "unshare", "nsenter") if automount else ()

    @classmethod
    def kernel_modules_for(cls, options: WorkloadOptions | None) -> tuple[str, ...]:
        return ("autofs4",) if getattr(options, "through", None) == "automount" else ()

    def data_bytes(self, capacity: int | None, reference: int | None) -> int:
        options = self.options
        return options.files * max(parse_size(options.file_size), 4096)

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        options = self.options
        if not stack.parts:
            raise SetupError("churn: the stack has no layer to mount and unmount; give it at least one")
        top = stack.parts[-1]
        below = stack.layers[-2]
        churn_dir = ctx.subdir("churn")
        # Whatever a killed or timed-out child left mounted goes before the trial's own teardown,
        # and an automount daemon it started (a session of its own, naming churn_dir) with it.
        resources.callback(_unmount_all_under, churn_dir)
        resources.callback(stop_processes_under, churn_dir)
        result_path = ctx.workdir / "churn-result.json"
        spec = {
            "scratch": str(ctx.scratch.root),
            "layer": top.options.model_dump(warnings=False),
            "first_index": 1000 + top.index,
            "below": {"path": str(below.path), "fs_size": below.fs_size, "standalone": below.standalone},
            "workdir": str(churn_dir),
            "duration": options.duration,
            "cycles": options.cycles,
            "files": options.files,
            "file_size": parse_size(options.file_size),
            "result": str(result_path),
            "through": options.through,
            "entries": options.entries,
            "top": str(stack.top),
            "entry": stack.layers[-1].automount_entry,
        }
        spec_path = ctx.workdir / "churn-spec.json"
        spec_path.write_text(json.dumps(spec))

        def collect(prepared: Prepared) -> None:
            if not result_path.exists():
                return
            result = json.loads(result_path.read_text())
            prepared.units = result["cycles"]
            prepared.facts[CHURN.key] = result

        argv = [sys.executable, "-m", "layerbench.workloads._churn_child", str(spec_path)]
        if options.through == "automount":
            # A mount namespace of the child's own: the autofs mount and every mount the daemon
            # makes go with it; a server in a network namespace of its own is reached there.
            argv = ["unshare", "--mount", "--propagation", "private", "--", *argv]
            if netns := stack.layers[-1].netns:
                argv = ["nsenter", f"--net={netns}", "--", *argv]
        return Prepared(
            argv=argv,
            cwd=churn_dir,
            env={"PYTHONPATH": str(_PACKAGE_ROOT)},
            units=None,
            unit="cycles",
            facts={CHURNED_LAYER.key: top.describe()},
            after_run=collect,
        )

    @classmethod
    def details(cls, runs: dict[str, list[RunRecord]]) -> tuple[list[str], list[list[str]]] | None:
        import numpy as np  # only the reports need it; the guest agent imports this module too

        header = [
            "stack",
            "cycles",
            "cycles/s",
            "mount p50/p90/p99",
            "unmount p50/p90/p99",
            "failures",
            "leaked mounts+loops",
            "kernel log",
        ]
        rows = []
        for stack, group in runs.items():
            results = [churn for r in group if (churn := r.fact(CHURN))]
            if not results:
                rows.append([stack, "0", "-", "-", "-", "-", "-", "-"])
                continue

            def lat(key: Literal["mount_s", "unmount_s"], results: list[ChurnResult] = results) -> str:
                def median(part: str) -> float:
                    return float(
                        np.median([v for r in results if (v := r[key].get(part)) is not None] or [0])
                    )

                return "/".join(f"{median(part) * 1000:.1f}" for part in ("p50", "p90", "p99")) + " ms"

            checked = all(r["kernel_log"]["checked"] for r in results)
            alarms = sum(r["kernel_log"]["alarms"] for r in results)
            rows.append(
                [
                    stack,
                    f"{sum(r['cycles'] for r in results):,}",
                    f"{np.median([r['cycles_per_s'] for r in results]):,.1f}",
                    lat("mount_s"),
                    lat("unmount_s"),
                    str(sum(r["failures"] for r in results)),
                    f"{sum(r['leaked_mounts'] for r in results)}+{sum(r['leaked_loops'] for r in results)}",
                    (f"{alarms} oops/BUG/WARNING/hung" if checked else "not readable"),
                ]
            )
        return header, rows

    @classmethod
    def notes(cls, runs: dict[str, list[RunRecord]]) -> list[str]:
        notes: list[str] = []
        for stack, group in runs.items():
            if slab := _slab([churn for r in group if (churn := r.fact(CHURN))]):
                notes.append(f"churn {stack}: the kernel's unreclaimable slab {slab}")
            for run in group:
                churn = run.fact(CHURN)
                if not churn:
                    continue
                notes += [f"churn {stack}: {e}" for e in churn["errors"][:3]]
                notes += [f"churn {stack}: kernel log: {line}" for line in churn["kernel_log"]["lines"][:3]]
        return list(dict.fromkeys(notes))


def _slab(results: list[ChurnResult]) -> str | None:
    """Unreclaimable slab growth per 1,000 cycles; under 1,000 cycles the growth itself (a
    few pages of noise over a few cycles would read as a leak of megabytes)."""
    grown = [r["slab_kib_growth"] for r in results if "slab_kib_growth" in r]
    cycles = sum(r["cycles"] for r in results if "slab_kib_growth" in r)
    if not grown or not cycles:
        return None
    if cycles < 1000:
        return f"{sum(grown):+,} KiB over {cycles:,} cycles"
    return f"{sum(grown) * 1000 / cycles:+,.0f} KiB per 1,000 cycles ({cycles:,} cycles)"


def _unmount_all_under(directory: Path) -> None:
    """Unmount what a killed child left. It runs after every process that pointed into the
    directory was killed and seen gone (stop_processes_under), so a mount(2) one of them was
    in has landed: with nothing mounted there (a run that ended by itself) there is nothing to
    wait for. Where something was, a mount(8) of a killed child may still land after it (the
    syscall finishes first), so keep looking until it stays quiet."""
    if not unmount_all_under(directory, hurry=True):
        return
    deadline = time.monotonic() + 10
    quiet_since = time.monotonic()
    while time.monotonic() < deadline and time.monotonic() - quiet_since < 0.5:
        if unmount_all_under(directory, hurry=True):
            quiet_since = time.monotonic()
        time.sleep(0.05)
