"""Every id and filter a request carries, checked before the store is asked anything.

Ids in a path are digits of a size SQLite and PostgreSQL can hold, or the page does not exist
(404). A filter is a query parameter the view knows, given once, whose value is one of the
values the store holds (a plan's name, a host, a status), a date, or one of a fixed list;
anything else is a bad request (400). No value from a request is ever put into SQL text: the
store's own queries take ids as bound parameters, and filters are applied to rows read.
"""

import re
from collections.abc import Iterable
from datetime import date

from starlette.datastructures import QueryParams

LONGEST_VALUE = 200  # a filter longer than any name the store holds is refused unread
_ID = re.compile(r"[1-9][0-9]{0,17}")  # below 2**63: every back end's integer column holds it
EXPORTS = ("html", "csv", "json")  # what a view answers in: its page, or its rows as CSV or JSON
_FLEET = re.compile(r"[0-9a-f]{1,32}")  # a fleet's id: hex, as `run --fleet` makes them


class NotFound(Exception):
    """A page that does not exist: an id that is not one, or names nothing stored."""


class BadRequest(Exception):
    """A filter or parameter the view does not take; the message says which and why."""


def ident(text: str | None, what: str = "experiment") -> int:
    if text is None or not _ID.fullmatch(text):
        shown = repr(text) if text is None or len(text) <= 40 else repr(text[:40]) + "..."
        raise NotFound(f"no {what} {shown}")  # never a page that echoes a request's 10 KB
    return int(text)


def fleet_ident(text: str | None) -> str:
    if text is None or not _FLEET.fullmatch(text):
        shown = repr(text) if text is None or len(text) <= 40 else repr(text[:40]) + "..."
        raise NotFound(f"no fleet {shown}")
    return text


def query_ident(text: str, name: str) -> int:
    """An id given as a filter (compare's a and b): a malformed one is a bad request."""
    if not _ID.fullmatch(text):
        raise BadRequest(f"{name}: not an experiment id")
    return int(text)


def split_format(text: str) -> tuple[str, str]:
    """ "12.csv" -> ("12", "csv"); "12" -> ("12", "html")."""
    stem, dot, suffix = text.rpartition(".")
    if dot and suffix in EXPORTS:
        return stem, suffix
    return text, "html"


def fmt(text: str) -> str:
    if text not in EXPORTS:
        raise NotFound(f"no export as {text!r}")
    return text


def filters(query: QueryParams, allowed: Iterable[str]) -> dict[str, str]:
    """The view's parameters that are set (an empty one is unset, as a form sends "any")."""
    known = set(allowed)
    found: dict[str, str] = {}
    for key, value in query.multi_items():
        if key not in known:
            raise BadRequest(f"{key[:40]!r}: not a filter of this view (it takes {', '.join(sorted(known))})")
        if key in found:
            raise BadRequest(f"{key}: given more than once")
        if len(value) > LONGEST_VALUE:
            raise BadRequest(f"{key}: longer than {LONGEST_VALUE} characters")
        if value:
            found[key] = value
    return found


def one_of(found: dict[str, str], key: str, choices: Iterable[str]) -> str | None:
    """A filter whose value must be one the store (or the view) has."""
    value = found.get(key)
    if value is not None and value not in set(choices):
        raise BadRequest(f"{key}: no such {key} in this store")
    return value


def day(found: dict[str, str], key: str) -> date | None:
    value = found.get(key)
    if value is None:
        return None
    try:
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", value):
            raise ValueError(value)
        return date.fromisoformat(value)
    except ValueError:
        raise BadRequest(f"{key}: a date as YYYY-MM-DD") from None
