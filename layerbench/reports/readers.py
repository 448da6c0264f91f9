"""The readers of the stored runs whose lines join every report's warnings, in the order the
reports show them. A new one is one entry here."""

from layerbench.analysis import covariates
from layerbench.executors import kept
from layerbench.guest import notes
from layerbench.observe import durability, noise, tracing
from layerbench.observe.observer import Reader

READERS: tuple[Reader, ...] = (
    noise.warnings,  # runs other work disturbed, and their re-runs
    durability.warnings,  # runs whose data did not reach the disk
    tracing.warnings,  # block traces asked for and not recorded
    notes.notes,  # what a guest's figures count
    kept.notes,  # runs on stacks kept across repetitions (keep_stack)
    covariates.notes,  # what a noisy cell's times followed
)
