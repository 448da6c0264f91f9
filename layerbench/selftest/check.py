"""One selftest check: its name, the figure it measured, and whether it held."""

from dataclasses import dataclass


@dataclass
class Check:
    name: str
    figure: str
    passed: bool

    def line(self) -> str:
        return f"{'PASS' if self.passed else 'FAIL'}  {self.name}: {self.figure}"
