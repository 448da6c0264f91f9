"""The documentation keeps up with the code: every plan key is described, every link resolves."""

import re
from pathlib import Path

import pytest

from layerbench.plan import StackSpec, _PlanFile
from layerbench.stacks.base import load_kinds as layer_kinds
from layerbench.workloads.base import load_kinds as workload_kinds

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"
KEY_PAGES = ("plan.md", "layers.md", "workloads.md")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _keys() -> list[tuple[str, str]]:
    """(where, key) for every key a plan may hold."""
    keys = [("plan", name) for name in _PlanFile.model_fields if name != "quick"]
    keys += [("stacks.NAME", name) for name in StackSpec.model_fields]
    for kind, cls in sorted(layer_kinds().items()):
        keys += [(f"layer {kind}", name) for name in cls.Options.model_fields if name != "kind"]
    for kind, cls in sorted(workload_kinds().items()):
        keys += [(f"workload {kind}", name) for name in cls.Options.model_fields if name != "kind"]
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
