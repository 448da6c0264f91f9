"""The report document: what a human-facing report shows, built once (from an experiment,
a comparison, or the history) and rendered by every format. A format is a thin renderer of
a Document (text, markdown, mail, html) or an export of the data behind it (json, csv); all
are in one registry, each saying which kinds of report it renders.

A document is sections of blocks: tables (cells that keep their value, their text and their
style), lines (a titled list, or preformatted text), and figures (drawn only where a format
can show them: html; the others say where to find them)."""

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

Kind = Literal["experiment", "comparison", "history", "bisect"]
KINDS: tuple[Kind, ...] = ("experiment", "comparison", "history", "bisect")


@dataclass(frozen=True)
class Cell:
    text: str
    value: float | None = None  # the number behind the text, where there is one
    style: str = ""  # a decision ("slower", "faster", "equivalent", ...) that colours its row


@dataclass
class Table:
    header: list[str]
    rows: list[list[Cell]]
    title: str = ""
    notes: list[str] = field(default_factory=list)  # under the table: what its short cells stand for
    left: tuple[int, ...] = (0,)  # the columns aligned left (words); the others are numbers
    folded: bool = False  # long and secondary: html folds it away

    def row_style(self, row: list[Cell]) -> str:
        return next((cell.style for cell in row if cell.style), "")

    def texts(self) -> list[list[str]]:
        return [[cell.text for cell in row] for row in self.rows]


@dataclass
class Lines:
    lines: list[str]
    title: str = ""
    preformatted: bool = False  # kept as it is: mount lines, csh `time` lines, the plan


@dataclass
class Figure:
    name: str  # unique in the document: html's element id
    title: str
    draw: Callable[[], str]  # the SVG, drawn only by a format that shows figures


Block = Table | Lines | Figure


@dataclass
class Section:
    title: str
    blocks: list[Block] = field(default_factory=list)
    level: int = 2  # 2: a part of the report; 3: inside the part before it


@dataclass
class Document:
    title: str
    lead: list[str]  # what it is, in a line or two, under the title
    sections: list[Section]
    wide: bool = False  # its tables need more than 100 columns on a terminal (the history)


class Report:
    """What a format renders: the data, and the document built from it (once, when a
    format first asks for it: an export of the data needs none)."""

    def __init__(self, kind: Kind, data: Any, build: Callable[[], Document]) -> None:
        self.kind = kind
        self.data = data
        self._build = build

    @cached_property
    def document(self) -> Document:
        return self._build()


@dataclass(frozen=True)
class Format:
    name: str
    render: Callable[[Report], str]
    kinds: tuple[Kind, ...]


FORMATS: dict[str, Format] = {}


def register(
    name: str, kinds: tuple[Kind, ...] = KINDS
) -> Callable[[Callable[[Report], str]], Callable[[Report], str]]:
    def add(function: Callable[[Report], str]) -> Callable[[Report], str]:
        FORMATS[name] = Format(name, function, kinds)
        return function

    return add


def load_formats(kind: Kind = "experiment") -> list[str]:
    """The names of the formats that render this kind of report."""
    package = importlib.import_module("layerbench.reports")
    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"layerbench.reports.{info.name}")
    return sorted(name for name, entry in FORMATS.items() if kind in entry.kinds)


def render(report: Report, format_name: str) -> str:
    load_formats(report.kind)
    return FORMATS[format_name].render(report)
