"""A simulated host: the request is answered in the Ray worker by a FakeExecutor, with no
root, mounts or child process. It exercises everything of a fleet but the measurement: the
resources, the scheduling, the store (bench/fleet.py runs 200 of them)."""

import time
import zlib
from typing import Any

from layerbench.executors.base import Setting
from layerbench.executors.fake import FakeExecutor
from layerbench.experiment import make_workloads
from layerbench.fleet.requests import HOST_FINISHED, HOST_STARTED, Answer, Request
from layerbench.plan.schedule import Trial


def _script(trial: Trial) -> dict[str, Any]:
    spread = zlib.crc32(f"{trial.stack}/{trial.workload}/{trial.rep}".encode()) % 1000 / 1e5
    return {"wall_s": 1.0 + 0.1 * (zlib.crc32(trial.stack.encode()) % 5) + spread}


def serve(request: Request) -> Answer:
    if request.operation == "describe":
        return Answer(True, {"hostname": f"simulated-{request.host}", "cpus": 1, "kernel": "simulated"})
    if request.operation in ("check", "sentinel"):
        return Answer(True, None)
    assert request.plan is not None and request.trial is not None
    plan = request.plan.load()
    started = time.time()
    result = FakeExecutor(_script).run(
        request.trial, Setting(plan, make_workloads(plan), request.experiment_id)
    )
    result.facts.update({HOST_STARTED.key: started, HOST_FINISHED.key: time.time()})
    return Answer(True, result)
