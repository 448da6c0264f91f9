"""html: the document as one self-contained page, viewable offline: its figures drawn as
inline SVG, through one Jinja2 template (templates/report.html)."""

import re

from jinja2 import Environment, PackageLoader, select_autoescape

from layerbench.reports.document import Lines, Report, Table, register


def element_id(name: str) -> str:
    """A name as an element id: a sweep's stacks are named with [ = , ] and values."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


_ENVIRONMENT = Environment(
    loader=PackageLoader("layerbench.reports", "templates"),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENVIRONMENT.filters["element_id"] = element_id
_ENVIRONMENT.tests["table"] = lambda block: isinstance(block, Table)
_ENVIRONMENT.tests["lines"] = lambda block: isinstance(block, Lines)


@register("html")
def render(report: Report) -> str:
    return _ENVIRONMENT.get_template("report.html").render(document=report.document)
