"""The two kinds of failure the command line tells apart."""


class UserError(Exception):
    """Bad input or a missing prerequisite: one line for the user, exit status 2."""

    exit_status = 2


class SetupError(Exception):
    """A stack or workload could not be built on this host (a command failed).

    Raised inside a trial; the trial is recorded as failed with this text and the
    experiment goes on.
    """
