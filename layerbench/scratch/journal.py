"""The journal: every resource is written down before it is created and marked done after
it is removed, so that a run killed with SIGKILL can be cleaned up by the next start."""

import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Resource:
    ident: int
    kind: str  # a key of scratch.resources.KINDS: "mount", "process", "group", "path", "cgroup"
    target: str
    info: dict[str, object]


class Journal:
    """Append-only JSON lines: {"add": {...}} before creating, {"done": id} after removing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._next = 1 + max((r.ident for r in self.pending()), default=0)

    def use_ids_from(self, first: int) -> None:
        """A second writer of the same journal (a churn child) takes ids of its own."""
        self._next = first

    def _append(self, record: dict[str, object]) -> None:
        # A write(2) survives SIGKILL of this process, which is what the journal is for;
        # an fsync would cost milliseconds, and the journal is written around timed runs.
        # One write of one line with O_APPEND: two writers never interleave within a line.
        line = (json.dumps(record) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)

    def add(self, kind: str, target: str | os.PathLike[str], **info: object) -> int:
        ident = self._next
        self._next += 1
        self._append({"add": {"id": ident, "kind": kind, "target": str(target), **info}})
        return ident

    def update(self, ident: int, **info: object) -> None:
        """Add facts learned after creation (a daemon's pid)."""
        self._append({"update": {"id": ident, **info}})

    def done(self, ident: int) -> None:
        self._append({"done": ident})

    def pending(self) -> list[Resource]:
        """Resources added and not yet marked done, oldest first."""
        if not self.path.exists():
            return []
        open_entries: dict[int, Resource] = {}
        for line in self.path.read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line torn by SIGKILL mid-write: the resource was not created yet
            if "add" in record:
                fields = dict(record["add"])
                ident = int(fields.pop("id"))
                kind = str(fields.pop("kind"))
                target = str(fields.pop("target"))
                open_entries[ident] = Resource(ident, kind, target, fields)
            elif "update" in record:
                fields = dict(record["update"])
                resource = open_entries.get(int(fields.pop("id")))
                if resource:
                    resource.info.update(fields)
            elif "done" in record:
                open_entries.pop(int(record["done"]), None)
        return sorted(open_entries.values(), key=lambda r: r.ident)

    def reset_if_clean(self) -> None:
        if not self.pending() and self.path.exists():
            self.path.unlink()
