"""The scratch root: the only place layerbench creates, mounts and deletes things.

policy.py says which directory may be one; journal.py writes every resource down before
it is created; resources.py removes each kind of resource, in teardown order, after a
crash; root.py is the opened root with its lock and the context managers that make
resources."""

from layerbench.scratch.journal import Journal, Resource
from layerbench.scratch.policy import DEFAULT_ROOT, MARKER, check_root, inside
from layerbench.scratch.resources import (
    Recovery,
    remove_path,
    stop_process,
    stop_process_group,
    unmount_path,
)
from layerbench.scratch.root import Scratch

__all__ = [
    "DEFAULT_ROOT",
    "MARKER",
    "Journal",
    "Recovery",
    "Resource",
    "Scratch",
    "check_root",
    "inside",
    "remove_path",
    "stop_process",
    "stop_process_group",
    "unmount_path",
]
