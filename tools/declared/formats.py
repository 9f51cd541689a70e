"""The string formats a declared JSON Schema asserts: those the registry audit counts as a bound.

Draft 2020-12 makes ``format`` an annotation unless the validator asserts it. The registry audit
(`toolgate.tools.schema.shape.BOUNDED_FORMATS`) accepts ``format: date`` (and the other bounded
formats) as the bound of a string argument, so toolgate must enforce exactly those, or an argument
the audit calls bounded would take any text of any length. Every other format (``uri``,
``hostname``, ...) stays an annotation, as the draft says, and is shown to the model.

The checks use the standard library only (no optional ``jsonschema`` extras, whose absence would
silently turn a check off): RFC 3339 ``date``/``date-time``/``time``, ISO 8601 ``duration``, a
hyphenated ``uuid``, ``ipv4``/``ipv6`` and an ``email`` of at most 254 characters with one ``@``.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from collections.abc import Callable
from datetime import date, datetime, time

from jsonschema import FormatChecker

from toolgate.tools.schema.shape import BOUNDED_FORMATS

_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$", re.ASCII)
_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}(\.\d{1,9})?([Zz]|[+-]\d{2}:\d{2})$", re.ASCII)
_DURATION = re.compile(
    r"^P(?!$)(\d+Y)?(\d+M)?(\d+W)?(\d+D)?(T(?=\d)(\d+H)?(\d+M)?(\d+(\.\d+)?S)?)?$", re.ASCII
)
_UUID = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$", re.ASCII)
_EMAIL = re.compile(r"^[^@\s]{1,64}@[^@\s]{1,253}$")


def _date(text: str) -> bool:
    if not _DATE.match(text):
        return False
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def _time(text: str) -> bool:
    if not _TIME.match(text):
        return False
    try:
        time.fromisoformat(text.replace("z", "Z")[:8])
    except ValueError:
        return False
    offset = text[8:].lstrip(".0123456789")
    return offset in ("Z", "z") or (int(offset[1:3]) < 24 and int(offset[4:6]) < 60)


def _date_time(text: str) -> bool:
    if len(text) < 20 or text[10] not in "Tt":
        return False
    if not (_date(text[:10]) and _time(text[11:])):
        return False
    try:
        datetime.fromisoformat(text[:19])
    except ValueError:
        return False
    return True


def _uuid(text: str) -> bool:
    if not _UUID.match(text):
        return False
    uuid.UUID(text)
    return True


def _ip(version: int) -> Callable[[str], bool]:
    def check(text: str) -> bool:
        try:
            return ipaddress.ip_address(text).version == version
        except ValueError:
            return False

    return check


_CHECKS: dict[str, Callable[[str], bool]] = {
    "date": _date,
    "date-time": _date_time,
    "time": _time,
    "duration": lambda text: bool(_DURATION.match(text)),
    "uuid": _uuid,
    "email": lambda text: len(text) <= 254 and bool(_EMAIL.match(text)),
    "ipv4": _ip(4),
    "ipv6": _ip(6),
}


def _asserting() -> FormatChecker:
    checker = FormatChecker(formats=())
    for name in sorted(BOUNDED_FORMATS):
        check = _CHECKS[name]
        checker.checks(name)(lambda value, check=check: not isinstance(value, str) or check(value))
    return checker


ASSERTED_FORMATS = _asserting()
"""The `FormatChecker` of declared schemas: the bounded formats, asserted (see the module docstring)."""

__all__ = ["ASSERTED_FORMATS"]
