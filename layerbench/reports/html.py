"""html: the document as one self-contained page, viewable offline: its figures drawn as
inline SVG, through one Jinja2 template (templates/report.html, its sections those of
templates/document.html, which the results browser shows too)."""

import re

from jinja2 import Environment, PackageLoader, select_autoescape

from layerbench.reports.document import Lines, Report, Table, register


def element_id(name: str) -> str:
    """A name as an element id: a sweep's stacks are named with [ = , ] and values."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


def install(environment: Environment) -> Environment:
    """What templates/document.html needs of the environment that renders it: the html
    report's and the results browser's."""
    environment.filters["element_id"] = element_id
    environment.tests["table"] = lambda block: isinstance(block, Table)
    environment.tests["lines"] = lambda block: isinstance(block, Lines)
    return environment


TEMPLATES = PackageLoader("layerbench.reports", "templates")
_ENVIRONMENT = install(
    Environment(
        loader=TEMPLATES, autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True
    )
)


@register("html")
def render(report: Report) -> str:
    return _ENVIRONMENT.get_template("report.html").render(document=report.document)
