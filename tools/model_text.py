"""Text the model reads in a tool definition is plain text: reStructuredText inline markup rendered.

Argument models are documented in reStructuredText like any Python code, and Pydantic turns their
docstrings and field descriptions into schema descriptions, so without this the model would read
the markup: names between double backquotes, roles such as :class: and :func:. Every export (the
provider schemas of `toolgate.tools.schema.export`, the LangChain adapters) renders that inline
markup as the words it stands for, in the tool description and in every ``description`` and
``title`` of the parameters, for our tools and third-party ones alike; the exported text is what
the release manifest pins. Kept apart from the schema rules because it is about prose, never about
what a schema accepts: nothing here may change a schema's meaning.
"""

from __future__ import annotations

import copy
import re
from typing import Any

_INLINE_MARKUP = re.compile(
    r"(?<!`)``(?P<literal>[^`\s](?:[^`]*[^`\s])?)``(?!`)"
    r"|(?<![\w`:])(?::[A-Za-z][\w+.-]*)+:`(?P<role>[^`]+)`(?!`)"
    r"|(?<![\w`])`(?P<interpreted>[^`\s](?:[^`]*[^`\s])?)`(?:__?)?(?![\w`])"
)
"""reStructuredText inline markup with backquotes: an inline literal (a text between double
backquotes), a role (:class:, :py:meth: and the like before a text between single backquotes) and
interpreted text (a text between single backquotes, also as a link when an underscore follows).
One left-to-right pass, so a literal's content is never read as markup again; a run of three or
more backquotes (a Markdown fence) and a backquote inside a word are left as they are."""

_ROLE_TITLE = re.compile(r"(?s)(?P<title>.*?\S)\s*<[^<>]*>")
"""A role's explicit title, ``title <target>``: the reader sees the title."""

_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
"""Keywords whose value maps names to subschemas (a property may be called ``description``)."""
_SCHEMA_DATA = ("enum", "const", "default", "examples")
"""Keywords whose value is data, never text for the model to read as documentation."""


def plain_text(text: str) -> str:
    """``text`` with its reStructuredText inline markup rendered as plain text, as the model reads it.

    An inline literal and interpreted text become their content (``issue_refund`` between double
    backquotes reads issue_refund); a role becomes its target as Sphinx shows it (:class: of
    ``X`` reads X, of ``~a.b.C`` reads C, of ``title <target>`` reads title). Everything else
    (words, Markdown fences, patterns) is kept as written."""
    return _INLINE_MARKUP.sub(_rendered, text) if "`" in text else text


def _rendered(match: re.Match[str]) -> str:
    role = match.group("role")
    if role is None:
        return match.group("literal") or match.group("interpreted")
    role = role.strip().lstrip("!")
    titled = _ROLE_TITLE.fullmatch(role)
    if titled:
        return titled.group("title")
    return role[1:].rsplit(".", 1)[-1] if role.startswith("~") else role


def plain_text_schema(node: Any) -> Any:
    """A copy of the JSON Schema ``node`` whose ``description`` and ``title`` texts are `plain_text`.

    Nothing else changes: property names, data (``enum``, ``const``, ``default``, ``examples``)
    and every validation keyword are kept exactly, so the schema means what it meant."""
    if isinstance(node, list):
        return [plain_text_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("description", "title") and isinstance(value, str):
            out[key] = plain_text(value)
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: plain_text_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_DATA:
            out[key] = copy.deepcopy(value)
        else:
            out[key] = plain_text_schema(value)
    return out


__all__ = ["plain_text", "plain_text_schema"]
