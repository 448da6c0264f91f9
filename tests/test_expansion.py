"""Sweeps and incremental stacks: how a plan's stacks expand, and the errors of bad ones."""

import json

import pytest

from layerbench.core.errors import UserError
from layerbench.plan import expansion, parse_plan
from layerbench.store.records import StoredPlan

HEAD = """
name = "expand"
reps = 3
baseline = "dir"
[stacks.dir]
layers = []
[workloads.w]
kind = "stream-write"
size = "8M"
"""


def plan(stacks: str, head: str = HEAD):  # type: ignore[no-untyped-def]
    return parse_plan(head + stacks, "p.toml")


def error(stacks: str, head: str = HEAD) -> str:
    with pytest.raises(UserError) as caught:
        plan(stacks, head)
    return str(caught.value)


def test_a_sweep_gives_one_stack_per_value_named_by_it() -> None:
    checked = plan(
        '[stacks.img]\nlayers = [{ kind = "image", size = "320M" }]\n'
        'sweep = { "layers.0.fs" = ["ext4", "xfs", "btrfs"] }\n'
    )
    assert list(checked.stacks) == ["dir", "img[fs=ext4]", "img[fs=xfs]", "img[fs=btrfs]"]
    assert [checked.stacks[f"img[fs={fs}]"][0].fs for fs in ("ext4", "xfs", "btrfs")] == [
        "ext4",
        "xfs",
        "btrfs",
    ]
    assert checked.sweeps["img[fs=xfs]"] == {
        "group": "img",
        "values": {"fs": "xfs"},
        "paths": {"fs": "layers.0.fs"},
    }
    assert checked.as_dict()["sweeps"] == checked.sweeps  # stored with the experiment


def test_two_paths_give_their_cross_product() -> None:
    checked = plan(
        '[stacks.f]\nlayers = [{ kind = "tmpfs" }, { kind = "fuse" }]\n'
        'sweep = { "layers.0.size" = ["64M", "128M"], '
        '"layers.1.options" = [["kernel_cache"], ["direct_io"]] }\n'
    )
    assert list(checked.stacks)[1:] == [
        "f[size=64M,options=kernel_cache]",
        "f[size=64M,options=direct_io]",
        "f[size=128M,options=kernel_cache]",
        "f[size=128M,options=direct_io]",
    ]
    assert checked.stacks["f[size=128M,options=direct_io]"][1].options == ["direct_io"]


def test_a_path_into_an_option_that_is_no_table_is_refused() -> None:
    message = error(
        '[stacks.f]\nlayers = [{ kind = "fuse", options = [] }]\nsweep = { "layers.0.options.x" = [1] }\n'
    )
    assert 'sweep."layers.0.options.x": options is not a table option' in message


def test_paths_with_one_last_key_are_labelled_whole() -> None:
    assert expansion._labels(["layers.0.size", "layers.1.size", "layers.1.fs"]) == {
        "layers.0.size": "layers.0.size",
        "layers.1.size": "layers.1.size",
        "layers.1.fs": "fs",
    }


def test_the_baseline_may_be_an_expanded_stack() -> None:
    head = HEAD.replace('baseline = "dir"', 'baseline = "t[size=64M]"')
    checked = plan(
        '[stacks.t]\nlayers = [{ kind = "tmpfs" }]\nsweep = { "layers.0.size" = ["64M", "128M"] }\n', head
    )
    assert checked.baseline == "t[size=64M]"


@pytest.mark.parametrize(
    ("sweep", "said"),
    [
        (
            '{ "layers.0.fss" = ["ext4"] }',
            'sweep."layers.0.fss": layer kind image has no option fss; its options: ',
        ),
        ('{ "layers.2.fs" = ["ext4"] }', 'sweep."layers.2.fs": the stack has 1 layer(s), numbered from 0'),
        ('{ "layers.0.fs" = [] }', 'sweep."layers.0.fs": a list of one or more values to sweep'),
        ('{ "layers.0.fs" = "xfs" }', 'sweep."layers.0.fs": a list of one or more values to sweep'),
        ('{ "layers.0.fs" = ["xfs", "xfs"] }', 'sweep."layers.0.fs": a value is given twice'),
        ('{ "fs" = ["xfs"] }', 'sweep."fs": an option path is layers.N.KEY'),
        ('{ "layers.0.kind" = ["tmpfs"] }', "a sweep sets a layer's options, not its kind"),
        ("[1, 2]", "sweep: a table of option paths to value lists"),
        ("{}", "sweep: a table of option paths to value lists"),
        (
            '{ "layers.0.fs" = ["zfs"] }',
            "stacks.img[fs=zfs].layers[0].fs: Input should be 'ext4', 'xfs' or 'btrfs'",
        ),
    ],
)
def test_a_bad_sweep_is_one_line_naming_the_stack_and_key(sweep: str, said: str) -> None:
    message = error(f'[stacks.img]\nlayers = [{{ kind = "image", size = "320M" }}]\nsweep = {sweep}\n')
    assert message.startswith("p.toml: stacks.img") and said in message, message
    assert "\n" not in message


def test_an_expansion_past_the_stack_limit_is_refused() -> None:
    values = ", ".join(f'"{n}M"' for n in range(64, 64 + 70))
    message = error(
        f'[stacks.t]\nlayers = [{{ kind = "tmpfs" }}]\nsweep = {{ "layers.0.size" = [{values}] }}\n'
    )
    assert "expand to 71 stacks; at most 64" in message


def test_a_swept_name_clashing_with_a_written_stack_is_refused() -> None:
    message = error(
        '[stacks."t[size=64M]"]\nlayers = []\n[stacks.t]\nlayers = [{ kind = "tmpfs" }]\n'
        'sweep = { "layers.0.size" = ["64M"] }\n'
    )
    assert "stacks" in message  # a written name with brackets is refused before, or the clash is


def test_an_incremental_stack_adds_each_prefix_named_by_its_kinds() -> None:
    checked = plan(
        '[stacks.box]\nlayers = [{ kind = "image", size = "64M" }, { kind = "overlay" }, { kind = "fuse" }]\n'
        "incremental = true\n"
    )
    assert list(checked.stacks) == ["dir", "image", "image+overlay", "box"]
    assert [layer.kind for layer in checked.stacks["image+overlay"]] == ["image", "overlay"]
    assert checked.increments == {
        "image": {"previous": "dir", "layer": "image"},  # the plan's empty stack is below the first layer
        "image+overlay": {"previous": "image", "layer": "overlay"},
        "box": {"previous": "image+overlay", "layer": "fuse"},
    }
    lines = expansion.describe(checked.sweeps, checked.increments)
    assert lines == [
        "incremental box: dir -> image -> image+overlay -> box "
        "(image adds image, image+overlay adds overlay, box adds fuse)"
    ]


def test_a_prefix_the_plan_already_has_is_that_stack_and_a_taken_name_is_qualified() -> None:
    checked = plan(
        '[stacks.img]\nlayers = [{ kind = "image", size = "64M" }]\n'
        '[stacks.image]\nlayers = [{ kind = "tmpfs" }]\n'
        '[stacks.box]\nlayers = [{ kind = "image", size = "64M" }, { kind = "overlay" }, { kind = "fuse" }]\n'
        "incremental = true\n"
    )
    assert list(checked.stacks) == ["dir", "img", "image", "image+overlay", "box"]
    assert checked.increments["image+overlay"] == {"previous": "img", "layer": "overlay"}
    assert checked.increments["img"] == {"previous": "dir", "layer": "image"}  # the user's own is a step
    qualified = plan(
        '[stacks.image]\nlayers = [{ kind = "tmpfs" }]\n'
        '[stacks.box]\nlayers = [{ kind = "image", size = "64M" }, { kind = "overlay" }]\n'
        "incremental = true\n"
    )
    assert list(qualified.stacks) == ["dir", "image", "box:image", "box"]
    assert qualified.increments["box"] == {"previous": "box:image", "layer": "overlay"}


def test_a_swept_incremental_stack_shares_its_unswept_prefixes() -> None:
    checked = plan(
        '[stacks.u]\nlayers = [{ kind = "image", size = "64M" }, { kind = "overlay", upper = "disk" }]\n'
        'incremental = true\nsweep = { "layers.1.upper" = ["disk", "tmpfs"] }\n'
    )
    assert list(checked.stacks) == ["dir", "image", "u[upper=disk]", "u[upper=tmpfs]"]
    assert checked.increments["u[upper=tmpfs]"] == {"previous": "image", "layer": "overlay"}
    assert expansion.describe(checked.sweeps, checked.increments)[0] == (
        "sweep u over layers.1.upper: u[upper=disk], u[upper=tmpfs]"
    )


def test_a_stack_of_one_layer_is_not_expanded_by_incremental() -> None:
    checked = plan('[stacks.t]\nlayers = [{ kind = "tmpfs" }]\nincremental = true\n')
    assert list(checked.stacks) == ["dir", "t"]
    assert checked.increments == {"t": {"previous": "dir", "layer": "tmpfs"}}


def test_too_small_an_image_for_its_file_system_is_refused() -> None:
    message = error('[stacks.x]\nlayers = [{ kind = "image", fs = "xfs", size = "64M" }]\n')
    assert "stacks.x.layers[0]: size: 64M is smaller than mkfs.xfs accepts" in message
    assert "btrfs accepts; at least 109M" in error(
        '[stacks.x]\nlayers = [{ kind = "image", fs = "btrfs", size = "100M" }]\n'
    )


def test_a_stored_plan_reads_its_sweeps_and_increments_back_typed() -> None:
    checked = plan(
        '[stacks.img]\nlayers = [{ kind = "image", size = "320M" }]\n'
        'sweep = { "layers.0.fs" = ["ext4", "xfs"] }\n'
        '[stacks.box]\nlayers = [{ kind = "image", size = "64M" }, { kind = "overlay" }]\n'
        "incremental = true\n"
    )
    stored = StoredPlan.model_validate(json.loads(json.dumps(checked.as_dict())))
    assert stored.sweeps["img[fs=xfs]"] == expansion.SweepPoint("img", {"fs": "xfs"}, {"fs": "layers.0.fs"})
    assert stored.sweep_values("img[fs=ext4]") == {"fs": "ext4"} and stored.sweep_values("dir") == {}
    assert stored.increments == {
        "image": expansion.Increment("dir", "image"),
        "box": expansion.Increment("image", "overlay"),
    }
    exported = stored.model_dump(exclude_unset=True)  # as the json report writes it
    assert exported["increments"]["box"] == {"previous": "image", "layer": "overlay"}
