"""The guest's side of a trial, as the host asks for it and as the guest answers: the
request in SHARE/request.json, the answer in SHARE/result.json, both validated on read."""

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from layerbench.content.archives import Archive
from layerbench.observe.run_result import RunResult


class GuestRequest(BaseModel):
    """The rest of a trial: the layers above the vm layer and the workload, as the plan gave
    their options, and what the host fetched for the workload."""

    model_config = ConfigDict(extra="forbid")

    layers: list[dict[str, Any]]  # each layer's options, bottom to top
    first_index: int  # the first of them is the stack's layer number first_index
    workload_name: str
    workload: dict[str, Any]  # its options
    packed: Archive | None = None  # a tree the workload unpacks, packed on the host
    reference_fs_size: int | None = None
    timeout: float | None = None
    # The kernel modules its layers and workload need, loaded by the guest's init
    kernel_modules: list[str] = []
    # The Python modules that hold its layer and workload kinds: the agent imports these and
    # no other kind's (each import costs some 35 times its host time under tcg); a workload
    # always has one
    kind_modules: list[str] = Field(min_length=1)
    # Set by the vm layer: where the guest's scratch root is, and its file system's size.
    scratch: str = ""
    fs_size: int | None = None


class GuestAnswer(BaseModel):
    """The run's result, or the one line that says why there is none."""

    model_config = ConfigDict(extra="forbid")

    result: RunResult | None = None
    error: str | None = None
    phases: dict[str, float] = {}  # guest uptime at each step, to see where boot time goes
    mount_lines: list[str] = []
    devices: list[str] = []
