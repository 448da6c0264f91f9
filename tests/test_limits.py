"""The limits layer's options and the stack key that puts it on top (no control groups)."""

import os

import pytest
from pydantic import ValidationError

from layerbench.core.errors import UserError
from layerbench.plan import parse_plan
from layerbench.stacks.limits import LimitsLayer, LimitsOptions, parse_cpu_list

PLAN = """
name = "x"
[stacks.bare]
layers = []
limits = {{ {limits} }}
[stacks.box]
layers = [{{ kind = "image", size = "1G" }}, {{ kind = "overlay" }}]
limits = {{ {limits} }}
incremental = true
[workloads.w]
kind = "command"
run = "true"
"""


def test_a_stacks_limits_are_a_limits_layer_on_top_of_every_step() -> None:
    plan = parse_plan(PLAN.format(limits='cpus = 1, memory = "512M"'), "plan.toml")
    assert [[layer.kind for layer in plan.stacks[name]] for name in ("bare", "image", "box")] == [
        ["limits"],
        ["image", "limits"],
        ["image", "overlay", "limits"],
    ]
    top = plan.stacks["box"][-1]
    assert isinstance(top, LimitsOptions) and (top.cpus, top.memory) == (1, "512M")
    # The first layer adds to the stack of no layers with the same limits.
    assert plan.increments["image"]["previous"] == "bare", plan.increments


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ("cpus = 0", "stacks.bare.limits.cpus: Input should be greater than or equal to 1"),
        ('memory = "1M"', "stacks.bare.limits.memory: memory '1M': at least 64M"),
        ("gpus = 1", "stacks.bare.limits.gpus: unknown key"),
        ('cpus = 1, cpu_list = "0"', "give cpus (how many) or cpu_list (which), not both"),
        ('cpu_list = "3-1"', "cpu_list '3-1': CPU numbers and ranges"),
        ("", "give at least one of cpus, cpu_list, memory"),
    ],
)
def test_bad_limits_name_the_stack_and_key(limits: str, said: str) -> None:
    with pytest.raises(UserError) as raised:
        parse_plan(PLAN.format(limits=limits), "plan.toml")
    assert said in str(raised.value) and str(raised.value).startswith("plan.toml: stacks.bare")


def test_cpu_lists_and_the_cpus_chosen() -> None:
    assert parse_cpu_list("0-2,5") == [0, 1, 2, 5] and parse_cpu_list("1") == [1]
    online = sorted(os.sched_getaffinity(0))
    assert LimitsOptions(kind="limits", cpus=1).chosen_cpus() == online[:1]
    assert LimitsOptions(kind="limits", memory="1G").chosen_cpus() == online
    with pytest.raises(ValidationError):
        LimitsOptions(kind="limits", cpu_list="a")


def test_more_cpus_than_the_host_gives_is_what_it_lacks() -> None:
    many = len(os.sched_getaffinity(0)) + 1
    lacks = LimitsLayer.missing(LimitsOptions(kind="limits", cpus=many))
    assert any(f"{many} CPUs (this host gives layerbench" in line for line in lacks), lacks
