"""The documentation keeps up with the code: every plan key is described, every link resolves."""

import re
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest

from layerbench.plan import StackSpec, _PlanFile
from layerbench.stacks.base import load_kinds as layer_kinds
from layerbench.workloads.base import load_kinds as workload_kinds

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
PACKAGE = REPO / "layerbench"
KEY_PAGES = ("plan.md", "layers.md", "workloads.md")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
README_MAX_BYTES = 20_000
# A table row whose first cell is one name in backticks: | `name` | rest |
NAMED_ROW = re.compile(r"^\| `([^`]+)` \|(.*)\|\s*$")


def _keys() -> list[tuple[str, str]]:
    """(where, key) for every key a plan may hold."""
    keys = [("plan", name) for name in _PlanFile.model_fields if name != "quick"]
    keys += [("stacks.NAME", name) for name in StackSpec.model_fields]
    for kind, layer in sorted(layer_kinds().items()):
        keys += [(f"layer {kind}", name) for name in layer.Options.model_fields if name != "kind"]
    for kind, workload in sorted(workload_kinds().items()):
        keys += [(f"workload {kind}", name) for name in workload.Options.model_fields if name != "kind"]
    return keys


def _documented(key: str, text: str) -> bool:
    """`key`, `key = ...`, `key` (default) in prose or tables, or `key =` in a TOML example."""
    name = re.escape(key)
    return bool(re.search(rf"`{name}(`| =)|(^|[\s{{,]){name} =", text, re.MULTILINE))


@pytest.mark.parametrize(("where", "key"), _keys(), ids=lambda value: value.replace(" ", "-"))
def test_every_plan_key_is_documented(where: str, key: str) -> None:
    text = "\n".join((DOCS / page).read_text() for page in KEY_PAGES)
    pages = ", ".join(f"docs/{page}" for page in KEY_PAGES)
    assert _documented(key, text), f"{where}: key {key} is described in none of {pages}"


def _anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in page.read_text().splitlines():
        if match := re.match(r"#+\s+(.*)", line):
            slug = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def _local_links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.DOTALL)
    return [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target)]


@pytest.mark.parametrize("page", [REPO / "README.md", *sorted(DOCS.glob("*.md"))], ids=lambda p: p.name)
def test_relative_links_resolve(page: Path) -> None:
    for target in _local_links(page):
        path, _, anchor = target.partition("#")
        destination = (page.parent / path).resolve() if path else page
        assert destination.is_file(), f"{page.name}: link {target} points at no file"
        if anchor and destination.suffix == ".md":
            assert anchor in _anchors(destination), f"{page.name}: link {target}: no such heading"


def test_readme_links_every_docs_page() -> None:
    linked = {(REPO / target.partition("#")[0]).resolve() for target in _local_links(REPO / "README.md")}
    assert sorted(DOCS.glob("*.md")), "docs/ holds no page"
    for page in sorted(DOCS.glob("*.md")):
        assert page.resolve() in linked, f"README.md does not link docs/{page.name}"


def test_readme_is_short() -> None:
    size = (REPO / "README.md").stat().st_size
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, more than {README_MAX_BYTES}: move what is not for the first "
        "five minutes to a page of docs/"
    )


def _section(page: Path, title: str) -> list[str]:
    """The lines under the level-2 heading `title`, up to the next level-2 heading."""
    lines = page.read_text().splitlines()
    heading = f"## {title}"
    assert heading in lines, f"docs/{page.name} has no heading {heading!r}"
    start = lines.index(heading) + 1
    end = next((i for i in range(start, len(lines)) if lines[i].startswith("## ")), len(lines))
    return lines[start:end]


def _named_rows(lines: list[str]) -> dict[str, str]:
    """{name: the rest of its row} for every table row whose first cell is `name`."""
    rows = {}
    for line in lines:
        if match := NAMED_ROW.match(line):
            rows[match.group(1)] = match.group(2).strip()
    return rows


@pytest.mark.parametrize(
    ("title", "kinds"),
    [("Layer kinds", layer_kinds), ("Workload kinds", workload_kinds)],
    ids=["layers", "workloads"],
)
def test_glossary_names_every_registered_kind(title: str, kinds: Callable[[], Mapping[str, object]]) -> None:
    rows = _named_rows(_section(DOCS / "glossary.md", title))
    registered = kinds()
    missing = sorted(set(registered) - set(rows))
    unknown = sorted(set(rows) - set(registered))
    assert not missing, f"docs/glossary.md, {title}: no row for {missing}"
    assert not unknown, f"docs/glossary.md, {title}: {unknown} are no registered kind"
    for kind, cls in registered.items():
        summary = getattr(cls, "summary", "")
        assert rows[kind] == summary, f"docs/glossary.md, {title}: `{kind}`: {rows[kind]!r}, not {summary!r}"


def _modules() -> set[str]:
    """Every module (a .py file but __init__.py) and package (a directory with __init__.py) of
    layerbench/, relative to it; a package as its directory with a trailing slash."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        relative = path.relative_to(PACKAGE)
        if path.name != "__init__.py":
            found.add(relative.as_posix())
        elif path.parent != PACKAGE:
            found.add(f"{relative.parent.as_posix()}/")
    return found


def test_layout_names_every_module() -> None:
    named = set(_named_rows(_section(DOCS / "layout.md", "The package")))
    missing = sorted(_modules() - named)
    assert not missing, f"docs/layout.md, The package: no row for {missing}"


@pytest.mark.parametrize(
    ("title", "root"), [("The package", PACKAGE), ("Around the package", REPO)], ids=["package", "around"]
)
def test_layout_names_only_what_exists(title: str, root: Path) -> None:
    for name in _named_rows(_section(DOCS / "layout.md", title)):
        path = root / name.rstrip("/")
        what = "directory" if name.endswith("/") else "file"
        exists = path.is_dir() if name.endswith("/") else path.is_file()
        assert exists, f"docs/layout.md, {title}: there is no {what} {root.relative_to(REPO) / name}"
