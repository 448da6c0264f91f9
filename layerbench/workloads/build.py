"""build: compile a real C code base inside the stack's jail (the seed's `make perl5` in a
chroot). The sources are unpacked (untimed) into the jail's writable work dir and
configured there; the timed run is `make -jN` in the chroot, every process it starts
counted by wait4. The compiler, headers and libraries come from the world, through the
layer under test."""

import contextlib
import os
import shlex
from functools import cached_property
from pathlib import Path
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from layerbench.content import sources
from layerbench.core.errors import SetupError
from layerbench.core.facts import Fact, declare
from layerbench.linux import system
from layerbench.stacks.base import BuildContext, BuiltStack
from layerbench.workloads.base import Prepared, Workload, WorkloadOptions, register

SOURCES = Fact("sources", "before", "the source tarballs the build used", dict[str, str])
SCRIPT = Fact("script", "before", "the build script that ran", str)
declare(SOURCES, SCRIPT)


class Project(BaseModel):
    """One code base: a Debian source package or a tarball, how to configure and build it."""

    model_config = ConfigDict(extra="forbid", strict=True)
    package: str | None = Field(default=None, pattern=r"^[a-z0-9][a-z0-9.+-]+$")
    archive: str | None = None  # a .tar(.gz/.xz/.bz2/.zst) with one top directory
    configure: str = ""  # untimed, in the project's directory inside the jail
    build: str = "make -j{jobs}"  # timed; {jobs} is the workload's jobs

    @model_validator(mode="after")
    def _one_source(self) -> "Project":
        if (self.package is None) == (self.archive is None):
            raise ValueError("a project names exactly one of package (a Debian source package) or archive")
        if self.archive is not None and not Path(self.archive).is_file():
            raise ValueError(f"no such archive file {self.archive!r}")
        return self

    @property
    def name(self) -> str:
        if self.package:
            return self.package
        base = Path(self.archive or "").name
        return base.split(".tar")[0].split(".tgz")[0] or "project"


# Built-in recipes for Debian source packages: the seed built perl; zlib and lua are small.
RECIPES: dict[str, Project] = {
    "zlib": Project(package="zlib", configure="./configure", build="make -j{jobs}"),
    "lua5.4": Project(package="lua5.4", build="make -j{jobs} linux"),
    "perl": Project(package="perl", configure="sh Configure -des -Dprefix=/usr/local", build="make -j{jobs}"),
}


def _default_projects() -> list[str | Project]:
    return ["zlib"]


class BuildOptions(WorkloadOptions):
    projects: list[str | Project] = Field(default_factory=_default_projects, min_length=1)
    jobs: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=256)
    # Warm: the world is in the page cache, as on a machine that builds all day; the
    # untimed warm-up compiles a small program in the jail. Cold: caches dropped first.
    caches: Literal["warm", "cold"] = "warm"
    suite: str = sources.DEFAULT_SUITE  # where Debian source packages come from
    mirror: str = sources.DEFAULT_MIRROR

    @field_validator("projects", mode="before")
    @classmethod
    def _tables(cls, projects: object) -> object:
        """Check tables here, so an error names the project's key, not the union's arms."""
        if not isinstance(projects, list):
            return projects
        checked: list[object] = []
        for index, project in enumerate(projects):
            if isinstance(project, dict):
                try:
                    project = Project.model_validate(project)
                except ValidationError as exc:
                    error = exc.errors()[0]
                    where = ".".join(str(part) for part in error["loc"])
                    message = error["msg"].removeprefix("Value error, ")
                    if error["type"] == "extra_forbidden":
                        message = "unknown key; valid keys: " + ", ".join(Project.model_fields)
                    raise ValueError(f"project {index}{' ' + where if where else ''}: {message}") from None
            elif not isinstance(project, str):
                raise ValueError(f"project {index}: a built-in name or a table {{ package = ... }}")
            checked.append(project)
        return checked

    @field_validator("projects")
    @classmethod
    def _known(cls, projects: list[str | Project]) -> list[str | Project]:
        for project in projects:
            if isinstance(project, str) and project not in RECIPES:
                valid = ", ".join(RECIPES)
                raise ValueError(
                    f"unknown project {project!r}; built-in: {valid}, or a table "
                    '{ package = "...", configure = "...", build = "make -j{jobs}" }'
                )
        names = [RECIPES[p].name if isinstance(p, str) else p.name for p in projects]
        if len(set(names)) != len(names):
            raise ValueError(f"two projects unpack into the same directory: {names}")
        return projects


# Loads the compiler driver, cc1, the assembler, the linker, libc and common headers.
_WARM_UP = (
    "cd /tmp && printf '#include <stdio.h>\\n#include <stdlib.h>\\n#include <string.h>\\n"
    'int main(void){puts("warm");return 0;}\\n\' > warm.c && cc -O2 -o warm warm.c && ./warm >/dev/null'
    " && rm -f warm warm.c"
)
_TAR_FLAG = {".gz": "-z", ".tgz": "-z", ".xz": "-J", ".bz2": "-j", ".zst": "--zstd"}


@register
class Build(Workload[BuildOptions]):
    kind = "build"
    Options = BuildOptions
    summary = "compile real C code (zlib, lua, perl from Debian sources) with make -jN in the stack's chroot"
    tools = ("chroot", "tar", "apt-get")
    needs_world: ClassVar[bool] = True

    @property
    def projects(self) -> list[Project]:
        options = self.options
        return [RECIPES[p] if isinstance(p, str) else p for p in options.projects]

    @cached_property
    def tarballs(self) -> dict[str, Path]:
        """Each project's source tarball; Debian's are downloaded once into the cache."""
        options = self.options
        return {
            p.name: Path(p.archive)
            if p.archive
            else sources.fetch(p.package or "", suite=options.suite, mirror=options.mirror)
            for p in self.projects
        }

    def fetch(self) -> None:
        self.tarballs  # noqa: B018 - downloads once, before the experiment starts

    def script(self) -> str:
        options = self.options
        steps = [
            f"cd /usr/src/{shlex.quote(p.name)} && {p.build.replace('{jobs}', str(options.jobs))}"
            for p in self.projects
        ]
        return " && ".join(f"( {step} )" for step in steps)

    def prepare(self, ctx: BuildContext, stack: BuiltStack, resources: contextlib.ExitStack) -> Prepared:
        if stack.jail is None:
            raise SetupError("the build workload runs in a chroot: give the stack a world")
        jail = stack.jail
        for project in self.projects:
            tarball = self.tarballs[project.name]
            tree = jail.work / project.name
            tree.mkdir()
            flag = _TAR_FLAG.get(tarball.suffix)
            system.run(
                [
                    "tar",
                    "-x",
                    *([flag] if flag else []),
                    "-f",
                    str(tarball),
                    "-C",
                    str(tree),
                    "--strip-components=1",
                ],
                timeout=1800,
            )
            if project.configure.strip():
                inside = jail.inside(tree)
                system.run(jail.command(f"cd {shlex.quote(inside)} && {project.configure}"), timeout=3600)
        options = self.options
        if options.caches == "warm":
            system.run(jail.command(_WARM_UP), timeout=600)
        # The objects the build writes are made durable inside the timed run, as every
        # workload's data is: syncfs of the jail's writable tree and the stack's file systems.
        durable = [str(jail.work), *map(str, stack.durable_paths())]
        timed = f"{shlex.join(jail.command(self.script()))} && exec sync -f {shlex.join(durable)}"
        return Prepared(
            argv=["sh", "-c", timed],
            cwd=jail.root,
            drop_caches=options.caches == "cold",
            facts={
                SOURCES.key: {name: path.name for name, path in self.tarballs.items()},
                SCRIPT.key: self.script(),
            },
        )
