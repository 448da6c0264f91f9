"""`python3 -m layerbench` and the `layerbench` script: the busy-process window opens before
the CLI's imports, which then fill most of it (observe/busy.py)."""

from layerbench.observe.busy import BusyWindow


def run() -> int:
    opened = BusyWindow()
    from layerbench.cli import main

    return main(busy_window=opened)


if __name__ == "__main__":
    raise SystemExit(run())
