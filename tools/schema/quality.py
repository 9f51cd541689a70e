"""Schema quality: whether a tool's schema tells the model enough to choose and fill it well.

The chapter's §3.1 names four properties, in order of impact, and its Lab 1 measures them (a tool
written bare, typed with a one-line docstring, and fully specified with a description under every
field and enums for closed values): (1) the description says when to use the tool and when not to,
naming its nearest confusable neighbour; (2) every parameter has a description carrying its
constraint; (3) enums replace free strings where the value space is closed; (4) required and
optional follow real business need. The first two are checkable without a model, so they are
enforced: a parameter without a description, an empty tool description, and a write without a
"when not to use" line fail the check. The other two are judgement, so they are reported as
figures (enums, free strings, required) for the reviewer beside each check line.

Enforced where a release becomes live: ``toolgate registry lint`` (one check line per tool),
``toolgate verify`` (``schema_quality``) and release control (a candidate that fails is refused
``schema_quality`` before its shadow starts). Registration itself does not refuse: a team's
first draft of a tool must load to be audited and linted.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from toolgate.tools.schema.walk import field_paths, resolve_pointer
from toolgate.tools.spec import ToolSpec

NOT_TO_USE = re.compile(
    r"\b(do not|don't|does not|never|not for|not to|instead|only (after|when|if|for|once|with|to|from)"
    r"|use \w+ (for|when) that|rather than|unless)\b",
    re.IGNORECASE,
)
"""Words of a "when not to use" line: a negative or limiting clause (``do NOT use this for``,
``use get_forecast for that instead``, ``use only after get_service_status``, ``never refund
more than``)."""


@dataclass(frozen=True)
class ToolQuality:
    """The schema-quality figures and problems of one tool."""

    name: str
    is_write: bool
    params: int
    """Declared parameters at every depth."""
    described: int
    """Parameters with a non-empty description (on the property, its ``$ref`` target or a branch)."""
    when_not_to_use: bool
    """The description holds a negative or limiting clause (`NOT_TO_USE`)."""
    neighbour_named: bool
    """The description names another tool of the release (its nearest confusable neighbour)."""
    enums: int
    """Parameters whose values are a closed set (``enum``, ``const`` or ``Literal``)."""
    free_strings: int
    """String parameters with no enum, pattern, format or length bound (reviewer's judgement)."""
    required: int
    top_level: int
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when nothing enforced failed."""
        return not self.problems

    def facts(self) -> dict[str, str]:
        """The check line's facts, in order (``schema_quality=<tool> params_described=2/2 ...``)."""
        when = (
            ("PASS" if self.when_not_to_use else "FAIL")
            if self.is_write
            else ("yes" if self.when_not_to_use else "n/a")
        )
        return {
            "schema_quality": self.name,
            "description": "FAIL" if "description" in self._codes else "PASS",
            "params_described": f"{self.described}/{self.params}",
            "when_not_to_use": when,
            "neighbour_named": "yes" if self.neighbour_named else "no",
            "enums": str(self.enums),
            "free_strings": str(self.free_strings),
            "required": f"{self.required}/{self.top_level}",
            "result": "PASS" if self.passed else "FAIL",
        }

    def line(self) -> str:
        """The check line, ``key=value`` (a tool name with spaces is not escaped here: printers
        that show it to operators escape every value, `toolgate.cli.lines.kv_line`)."""
        return " ".join(f"{key}={value}" for key, value in self.facts().items())

    @property
    def _codes(self) -> set[str]:
        return {p.split(":", 1)[0] for p in self.problems}


def _described(root: Mapping[str, Any], node: Any, depth: int = 0) -> bool:
    """True when ``node`` (or what it refers to, or every branch it allows) carries a description."""
    if not isinstance(node, Mapping) or depth > 8:
        return False
    text = node.get("description")
    if isinstance(text, str) and text.strip():
        return True
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            return _described(root, resolve_pointer(root, ref), depth + 1)
        except KeyError:
            return False
    for keyword in ("allOf", "anyOf", "oneOf"):
        branches = [b for b in node.get(keyword, ()) if isinstance(b, Mapping) and b.get("type") != "null"]
        if branches and all(_described(root, b, depth + 1) for b in branches):
            return True
    return False


def _leaves(root: Mapping[str, Any], node: Any, depth: int = 0) -> list[Mapping[str, Any]]:
    """``node`` resolved through ``$ref`` and its non-null branches."""
    if not isinstance(node, Mapping) or depth > 8:
        return []
    ref = node.get("$ref")
    if isinstance(ref, str):
        try:
            return _leaves(root, resolve_pointer(root, ref), depth + 1)
        except KeyError:
            return []
    branches = [b for k in ("allOf", "anyOf", "oneOf") for b in node.get(k, ()) if isinstance(b, Mapping)]
    if branches:
        return [leaf for b in branches if b.get("type") != "null" for leaf in _leaves(root, b, depth + 1)]
    return [node]


def _closed(leaves: list[Mapping[str, Any]]) -> bool:
    return bool(leaves) and all("enum" in leaf or "const" in leaf for leaf in leaves)


def _free_string(leaves: list[Mapping[str, Any]]) -> bool:
    return any(
        leaf.get("type") == "string"
        and not any(k in leaf for k in ("enum", "const", "pattern", "format", "maxLength"))
        for leaf in leaves
    )


def tool_quality(spec: ToolSpec, neighbours: Iterable[str] = ()) -> ToolQuality:
    """The schema quality of ``spec``; ``neighbours``: the other tools' names in its release."""
    schema = spec.contract.json_schema()
    problems: list[str] = []
    params = described = enums = free = 0
    for path, _, node in field_paths(schema):
        params += 1
        if _described(schema, node):
            described += 1
        else:
            problems.append(f"parameter: {path} has no description (say what it is and its constraint)")
        leaves = _leaves(schema, node)
        enums += _closed(leaves)
        free += _free_string(leaves)
    text = spec.description
    if not text.strip():
        problems.append("description: the tool has no description")
    when_not = bool(NOT_TO_USE.search(text))
    if spec.is_write and not when_not:
        problems.append(
            "when_not_to_use: a write's description must say when not to use it "
            "(e.g. 'Do not use this to ...; use <neighbour> for that')"
        )
    others = [n for n in neighbours if n != spec.name]
    neighbour = any(re.search(rf"\b{re.escape(n)}\b", text) for n in others)
    properties = schema.get("properties")
    required = schema.get("required")
    top_level = len(properties) if isinstance(properties, Mapping) else 0
    required_count = len(required) if isinstance(required, list) else 0
    return ToolQuality(
        name=spec.name,
        is_write=spec.is_write,
        params=params,
        described=described,
        when_not_to_use=when_not,
        neighbour_named=neighbour,
        enums=enums,
        free_strings=free,
        required=required_count,
        top_level=top_level,
        problems=problems,
    )


def release_quality(specs: Iterable[ToolSpec]) -> list[ToolQuality]:
    """`tool_quality` of every tool of one release, by name."""
    listed = sorted(specs, key=lambda s: s.name)
    names = [s.name for s in listed]
    return [tool_quality(spec, names) for spec in listed]


__all__ = ["NOT_TO_USE", "ToolQuality", "release_quality", "tool_quality"]
