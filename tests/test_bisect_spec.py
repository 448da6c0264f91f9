"""A bisect plan's [bisect] table and its variants: what is refused, in one line."""

import subprocess
import sys
from pathlib import Path

import pytest

from layerbench.bisect import variants
from layerbench.bisect.spec import BisectPlan
from layerbench.core.errors import UserError
from layerbench.plan import parse_plan

REPO = Path(__file__).resolve().parents[1]
MAKE_REPO = REPO / "examples" / "bisect-fuse" / "make_repo.py"

GIT_PLAN = """
name = "b"
[bisect]
repo = "repo"
build = "true"
[stacks.fs]
layers = [
  { kind = "tmpfs", size = "64M" },
  { kind = "fuse-daemon", command = ["python3", "{checkout}/passthrough.py", "{source}", "{target}"] },
]
[workloads.w]
kind = "stream-write"
size = "1M"
"""

NAMED_PLAN = """
name = "b"
[bisect]
variants = [
  { name = "one", set = { "layers.1.attr_timeout" = 0.0 } },
  { name = "two", set = { "layers.1.attr_timeout" = 1.0 } },
  { name = "three", set = { "layers.1.attr_timeout" = 5.0 } },
]
[stacks.fs]
layers = [{ kind = "tmpfs", size = "64M" }, { kind = "fuse" }]
[workloads.w]
kind = "metadata"
files = 100
"""


@pytest.fixture(scope="module")
def repo_plan(tmp_path_factory: pytest.TempPathFactory) -> BisectPlan:
    where = tmp_path_factory.mktemp("bisect")
    subprocess.run([sys.executable, str(MAKE_REPO), str(where / "repo")], check=True, capture_output=True)
    (where / "plan.toml").write_text(GIT_PLAN)
    return BisectPlan.load(str(where / "plan.toml"))


def _plan(tmp_path: Path, text: str) -> BisectPlan:
    (tmp_path / "plan.toml").write_text(text)
    return BisectPlan.load(str(tmp_path / "plan.toml"))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[bisect]", "[other]"), "no [bisect] table"),
        (('build = "true"', 'build = "true"\nvariants = [{ name = "a" }, { name = "b" }]'), "either repo"),
        (('build = "true"', 'build = "true"\nbudget = "off"'), "each comparison needs a time budget"),
        (('build = "true"', 'build = "true"\nstack = "nope"'), "bisect.stack: 'nope' is not one"),
        (('build = "true"', 'build = "true"\nmetric = "cpu_pct"'), "bisect.metric"),
        (('build = "true"', 'build = "true"\nmargin = 0'), "bisect.margin"),
        (("{checkout}/", "/opt/"), "no layer option holds {checkout}"),
        (('repo = "repo"', 'repo = "nowhere"'), "is not a directory"),
    ],
)
def test_a_bad_bisect_table_is_one_line_naming_its_key(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    (tmp_path / "repo").mkdir()
    with pytest.raises(UserError, match=message.replace("[", r"\[").replace("{", r"\{")) as caught:
        plan = _plan(tmp_path, GIT_PLAN.replace(*change))
        variants.resolve(plan, "a", "b")
    assert "\n" not in str(caught.value) and str(tmp_path / "plan.toml") in str(caught.value)


def test_run_refuses_a_bisect_plan_and_says_what_runs_it() -> None:
    with pytest.raises(UserError, match="runs with `layerbench bisect PLAN --good G --bad B`"):
        parse_plan(GIT_PLAN, "plan.toml")


def test_revisions_run_from_good_to_bad_with_their_subjects(repo_plan: BisectPlan) -> None:
    found = variants.resolve(repo_plan, "c03", "c07")
    assert [v.label.split("-")[0] for v in found] == ["r0", "r1", "r2", "r3", "r4"]
    assert found[0].title == "c03: notes, revision 3" and len(found[0].name) == 40


@pytest.mark.parametrize(
    ("good", "bad", "message"),
    [
        ("nope", "c15", "--good nope: not a revision of"),
        ("c00", "nope", "--bad nope: not a revision of"),
        ("c09", "c02", "--good c09 comes after --bad c02: swapped?"),
        ("c04", "c04", "are the same commit"),
    ],
)
def test_bad_ends_are_one_line(repo_plan: BisectPlan, good: str, bad: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        variants.resolve(repo_plan, good, bad)


def test_named_variants_set_their_values_and_are_checked_up_front(tmp_path: Path) -> None:
    plan = _plan(tmp_path, NAMED_PLAN)
    found = variants.resolve(plan, "one", "three")
    assert [v.name for v in found] == ["one", "two", "three"]
    checked = plan.check_comparison(
        plan.comparison(
            ("one", plan.stack_of("one", set_values={"layers.1.attr_timeout": 0.0})),
            ("two", plan.stack_of("two", set_values={"layers.1.attr_timeout": 1.0})),
        )
    )
    assert checked.stacks["two"][1].model_dump()["attr_timeout"] == 1.0
    assert checked.budget_s == 300 and checked.threshold == 0.05
    with pytest.raises(UserError, match="--good three comes after --bad one"):
        variants.resolve(plan, "three", "one")
    with pytest.raises(UserError, match="has no option nope"):
        _plan(tmp_path, NAMED_PLAN.replace('layers.1.attr_timeout" = 5.0', 'layers.1.nope" = 5.0'))
