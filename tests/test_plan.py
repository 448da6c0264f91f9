import pytest

from layerbench.core.errors import UserError
from layerbench.plan import load_plan, parse_plan

GOOD = """
name = "tiny"
reps = 5
warmup = 1
baseline = "disk"
order = "interleaved"
seed = 42
[stacks.disk]
layers = []
[stacks.bind]
layers = [{ kind = "bind", readonly = false }]
[stacks.image]
layers = [{ kind = "image", fs = "ext4", size = "2G" }]
[stacks.ram]
layers = [{ kind = "tmpfs", size = "2G" }]
[stacks.union]
layers = [{ kind = "overlay" }]
[workloads.write]
kind = "stream-write"
size = "1G"
fill = 0.5
[workloads.untar]
kind = "extract"
archive = "builtin:source-tree"
[workloads.files]
kind = "metadata"
files = 20000
size = "4K"
[workloads.cmd]
kind = "command"
run = "sh -c 'cp -a /usr/include . && sync'"
prepare = ""
"""


def test_the_issue_plan_parses() -> None:
    plan = parse_plan(GOOD, "tiny.toml")
    assert list(plan.stacks) == ["disk", "bind", "image", "ram", "union"]
    assert [layer.kind for layer in plan.stacks["image"]] == ["image"]
    assert plan.workloads["write"].fill == 0.5  # type: ignore[attr-defined]
    assert plan.baseline == "disk" and plan.seed == 42 and plan.reps == 5


def test_default_plan_and_quick_overrides() -> None:
    full = load_plan(None)
    quick = load_plan(None, quick=True)
    assert full.baseline == "disk" and set(full.stacks) == {"disk", "bind", "image", "tmpfs"}
    assert set(full.workloads) == {"extract", "stream-write", "metadata"}
    assert quick.workloads["stream-write"].size == "128M"  # type: ignore[attr-defined]
    assert full.workloads["stream-write"].size == "1G"  # type: ignore[attr-defined]


def test_auto_reps_start_with_five_rounds_and_keep_their_limits() -> None:
    plan = parse_plan(GOOD.replace("reps = 5", 'reps = "auto"\nmax_reps = 12\ntarget_ci = 0.05'), "p")
    assert plan.auto_reps and plan.reps == 5 and plan.max_reps == 12 and plan.target_ci == 0.05
    assert plan.as_dict()["auto_reps"] is True
    fixed = parse_plan(GOOD.replace("reps = 5", 'reps = "auto"'), "p", reps=7)
    assert not fixed.auto_reps and fixed.reps == 7  # --reps N overrides "auto"


def test_cpus_pin_the_runs() -> None:
    assert parse_plan(GOOD.replace("reps = 5", "reps = 5\ncpus = [0]"), "p").cpus == [0]


def test_reps_override() -> None:
    assert parse_plan(GOOD, "p", reps=9).reps == 9


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (("reps = 5", "reps = -1"), 'p.toml: reps: a number of repetitions 1-1000, or "auto"'),
        (("reps = 5", 'reps = "often"'), 'p.toml: reps: a number of repetitions 1-1000, or "auto"'),
        (("reps = 5", 'reps = "auto"\ntarget_ci = 0'), "p.toml: target_ci: Input should be greater than 0"),
        (("reps = 5", "reps = 5\ncpus = [4095]"), "p.toml: cpus: [4095] names a CPU this host lacks"),
        (("reps = 5", "reps = 5\ncpus = []"), "p.toml: cpus: List should have at least 1 item"),
        (("reps = 5", 'reps = "five"'), "p.toml: reps:"),
        (("reps = 5", 'reps = "1"'), 'p.toml: reps: a number of repetitions 1-1000, or "auto"'),
        (("files = 20000", 'files = "20000"'), "workloads.files.files: Input should be a valid integer"),
        (
            ("readonly = false", 'readonly = "no"'),
            "stacks.bind.layers[0].readonly: Input should be a valid boolean",
        ),
        (("warmup = 1", "warmup = 1.0"), "warmup: Input should be a valid integer"),
        (('baseline = "disk"', 'baseline = "nope"'), "baseline: 'nope' names no stack"),
        (
            ('kind = "bind"', 'kind = "nullfs"'),
            "layers[0].kind: layer kind 'nullfs'; valid kinds:",
        ),
        (('fs = "ext4"', 'fs = "zfs"'), "stacks.image.layers[0].fs:"),
        (('size = "2G" }]\n[stacks.ram]', 'size = "2Q" }]\n[stacks.ram]'), "is not a size"),
        (
            ('kind = "metadata"', 'kind = "metadata"\nbogus = 1'),
            "workloads.files.bogus: unknown key; valid",
        ),
        (('order = "interleaved"', 'order = "random"'), "order:"),
        (('archive = "builtin:source-tree"', 'archive = "/nonexistent.tar"'), "no such archive file"),
        (("fill = 0.5", "fill = 3.0"), "between 0 and 0.95"),
        (('name = "tiny"', 'name = "tiny"\nsurprise = true'), "surprise: unknown key"),
        (("[stacks.disk]", '[stacks."../etc"]'), "a name must be"),
        (("run = \"sh -c 'cp -a /usr/include . && sync'\"", 'run = "\'unclosed"'), "cannot split"),
        (
            ("fill = 0.5", 'fill = 0.5\nkeep_stack = "yes"'),
            "workloads.write.keep_stack: Input should be a valid boolean",
        ),
        (
            ("fill = 0.5", 'fill = 0.5\nkeep_stack = true\n[stacks.guest]\nlayers = [{ kind = "vm" }]'),
            "workloads.write.keep_stack: stack guest's vm layer is built for each trial",
        ),
    ],
)
def test_bad_plans_get_one_clear_line(change: tuple[str, str], expected: str) -> None:
    text = GOOD.replace(*change, 1)
    assert text != GOOD
    with pytest.raises(UserError) as caught:
        parse_plan(text, "p.toml")
    message = str(caught.value)
    assert expected in message
    assert "\n" not in message and message.startswith("p.toml: ")


def test_toml_syntax_error_names_the_line() -> None:
    with pytest.raises(UserError, match=r"p.toml: not valid TOML: .*line 2"):
        parse_plan('name = "x"\nreps = = 3\n', "p.toml")


def test_missing_stacks_and_workloads() -> None:
    with pytest.raises(UserError, match="stacks: required key is missing"):
        parse_plan('name = "x"\n[workloads.a]\nkind = "metadata"\n', "p.toml")
    with pytest.raises(UserError, match="workloads: Dictionary should have at least 1 item"):
        parse_plan('name = "x"\n[stacks.a]\nlayers = []\n[workloads]\n', "p.toml")


def test_missing_plan_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(UserError, match="no such plan file"):
        load_plan(str(tmp_path / "absent.toml"))


def test_vm_and_churn_options_are_validated() -> None:
    from layerbench.core.errors import UserError
    from layerbench.plan import parse_plan

    base = 'name = "x"\n[workloads.w]\nkind = "churn"\n[stacks.v]\nlayers = [{ kind = "vm", %s }]\n'
    for bad, key in (
        ("readonly = true", "read-only"),
        ('memory = "64M"', "256M"),
        ('accel = "hvf"', "accel"),
        ('bus = "ide"', "bus"),
        ("cpus = 0", "cpus"),
    ):
        with pytest.raises(UserError) as caught:
            parse_plan(base % bad, "p.toml")
        assert key in str(caught.value) and "p.toml" in str(caught.value)
    plan = parse_plan(base % 'memory = "512M"', "p.toml")
    assert plan.workloads["w"].duration == 10.0  # type: ignore[attr-defined]


def test_quick_table_reps_are_not_capped() -> None:
    text = GOOD.replace("reps = 5", "reps = 20") + "[quick]\nreps = 7\n"
    assert parse_plan(text, "p", quick=True).reps == 7
    assert parse_plan(GOOD.replace("reps = 5", "reps = 20"), "p", quick=True).reps == 5


def test_keep_stack_is_refused_for_a_workload_that_changes_the_stack() -> None:
    churn = GOOD + '[workloads.cycles]\nkind = "churn"\ncycles = 10\nkeep_stack = true\n'
    with pytest.raises(UserError, match=r"workloads\.cycles\.keep_stack: a churn workload needs a stack"):
        parse_plan(churn, "p.toml")
    kept = parse_plan(GOOD.replace("fill = 0.5", "fill = 0.5\nkeep_stack = true"), "p.toml")
    assert kept.workloads["write"].keep_stack and not kept.workloads["untar"].keep_stack
