"""Wire names: the names a provider is told for tools and property keys it would refuse.

Tool names.

Providers accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``; public tool sets use names like
``math.factorial`` or ``weather/current``. A name that already fits is its own wire name
(``getWeather`` stays ``getWeather``). Any other name becomes its safe characters (runs of others
as ``_``, at most 55) plus ``_`` and 8 hex digits of the SHA-256 of the real name:
``math.factorial`` -> ``math_factorial_<8 hex>``. The suffix keeps two names that sanitize alike
(``a.b`` and ``a b``) apart without knowing the rest of the release, so a tool's wire name never
changes when other tools are added; the registry still refuses a release in which two tools share
a wire name. Only the model sees wire names: proposals, audit events, reviewers and
`ToolMessage` names keep the real name, and `Registry.get` accepts either.

Property keys. Anthropic (and Bedrock Converse) refuse a whole request when any tool's ``input_schema`` has a
property key outside ``^[a-zA-Z0-9_.-]{1,64}$`` (``"sort by"``, ``"größe"``, a 70-character key).
`wire_schema` renames every such key, at every depth (nested objects, array items, combinators,
``$defs``), to its safe characters (runs of others as ``_``, at most 55) plus ``_`` and 8 hex
digits of the SHA-256 of the declared name, and says the declared name in that property's
description; ``required`` is renamed alike. Keys that already fit are sent as they are. The suffix
is lengthened only if the result would equal another key of the same object, so a key's wire name
depends on that object's keys alone and is the same in every process (no ``hash()``).

`declared_args` maps what the model sends back (wire keys) to the declared names before
validation, following the declared schema at the same depths. A key that is neither a wire name
nor a declared name is left as it is, so validation still refuses it as unknown; a wire key whose
declared name is also present is left too (and refused). `wire_args` is the reverse, for tool
calls sent back to the provider in a later turn's history. Only the provider sees wire keys.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import unicodedata
from collections.abc import Mapping
from typing import Any

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI and Anthropic accept as a tool (function) name."""

_UNSAFE_IN_NAME = re.compile(r"[^a-zA-Z0-9_-]+")


def wire_name(name: str) -> str:
    """The provider-safe name of the tool called ``name`` (deterministic; see the module docstring)."""
    if WIRE_NAME.match(name):
        return name
    safe = _UNSAFE_IN_NAME.sub("_", name).strip("_")[:55] or "tool"
    return f"{safe}_{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


PROPERTY_KEY = re.compile(r"^[a-zA-Z0-9_.-]{1,64}$")
"""What Anthropic accepts as a property key of a tool's ``input_schema``."""

_UNSAFE_IN_KEY = re.compile(r"[^a-zA-Z0-9_.-]+")
_BRANCHES = ("anyOf", "oneOf", "allOf", "not", "if", "then", "else")
"""Schemas the same value must (or may) also match: they inherit their object's renames."""
_SCHEMA_LISTS = ("prefixItems",)
_SCHEMA_ONE = ("items", "additionalProperties", "contains")
_SCHEMA_MAPS = ("$defs", "definitions")


def _digest(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def key_map(names: Any) -> dict[str, str]:
    """Declared name -> wire key for the property names of one object that need one (only those)."""
    names = [n for n in names if isinstance(n, str)]
    taken = {n for n in names if PROPERTY_KEY.match(n)}
    out: dict[str, str] = {}
    for name in sorted(n for n in names if not PROPERTY_KEY.match(n)):
        stem = _UNSAFE_IN_KEY.sub("_", name).strip("_") or "p"
        for width in range(8, 65, 4):  # lengthen the suffix only on a clash within this object
            wire = f"{stem[: 63 - width]}_{_digest(name)[:width]}"
            if wire not in taken:
                break
        taken.add(wire)
        out[name] = wire
    return out


def _described(sub: Any, name: str) -> Any:
    note = f"Declared name: {json.dumps(name, ensure_ascii=False)}."
    if sub is True or sub == {}:
        return {"description": note}
    if not isinstance(sub, dict):
        return sub
    text = sub.get("description")
    return {**sub, "description": f"{text} ({note})" if isinstance(text, str) and text else note}


def wire_schema(schema: Any, inherited: Mapping[str, str] | None = None) -> Any:
    """A copy of ``schema`` whose property keys all match `PROPERTY_KEY` (see the module docstring).

    ``inherited``: the renames of the object a combinator branch (``anyOf``, ``if``, ...) belongs
    to, so a branch's ``required`` names the same keys as its object's ``properties``."""
    if isinstance(schema, list):
        return [wire_schema(item, inherited) for item in schema]
    if not isinstance(schema, dict):
        return copy.deepcopy(schema)
    out: dict[str, Any] = {}
    props = schema.get("properties")
    renames = {**(inherited or {}), **(key_map(props) if isinstance(props, dict) else {})}

    def renamed(name: Any) -> Any:
        return renames.get(name, name) if isinstance(name, str) else name

    for key, value in schema.items():
        if key == "properties" and isinstance(value, dict):
            out[key] = {
                renamed(name): _described(wire_schema(sub), name) if name in renames else wire_schema(sub)
                for name, sub in value.items()
            }
        elif key == "required" and isinstance(value, list):
            out[key] = [renamed(name) for name in value]
        elif key == "dependentRequired" and isinstance(value, dict):
            out[key] = {
                renamed(n): [renamed(m) for m in v] if isinstance(v, list) else v for n, v in value.items()
            }
        elif key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: wire_schema(sub) for name, sub in value.items()}
        elif key in _BRANCHES:
            out[key] = wire_schema(value, renames)
        elif key in (*_SCHEMA_LISTS, *_SCHEMA_ONE):
            out[key] = wire_schema(value)
        else:  # values (enum, const, default, examples) and text: as declared
            out[key] = copy.deepcopy(value)
    return out


def _resolve(node: Any, root: Any, seen: int = 0) -> Any:
    ref = node.get("$ref") if isinstance(node, dict) else None
    if not isinstance(ref, str) or seen > 32 or not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return node
        target = target[part]
    return _resolve(target, root, seen + 1)


def _branches(node: Any, root: Any) -> list[Any]:
    """``node`` and the schemas its value must (or may) also match: combinators and ``$ref``."""
    node = _resolve(node, root)
    if not isinstance(node, dict):
        return []
    found = [node]
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(node.get(key), list):
            for sub in node[key]:
                found += _branches(sub, root)
    return found


def _convert(value: Any, node: Any, root: Any, to_wire: bool, depth: int = 0) -> Any:
    if depth > 64:
        return value
    nodes = _branches(node, root)
    if isinstance(value, dict):
        names: dict[str, str] = {}  # key as received -> key as returned
        subs: dict[str, list[Any]] = {}  # declared name -> its schemas
        extra: list[Any] = []
        for n in nodes:
            props = n.get("properties")
            if isinstance(props, dict):
                for declared, wire in key_map(props).items():
                    names.setdefault(declared if to_wire else wire, wire if to_wire else declared)
                for name, sub in props.items():
                    subs.setdefault(name, []).append(sub)
            if isinstance(n.get("additionalProperties"), dict):
                extra.append(n["additionalProperties"])
        out: dict[str, Any] = {}
        for raw, item in value.items():
            key = str(raw)  # JSON object keys are text
            target = names.get(key, key)
            if target != key and target in value:  # both spellings sent: leave it for validation
                target = key
            out[target] = _convert_any(
                item, subs.get(key if to_wire else target, extra), root, to_wire, depth
            )
        return out
    if isinstance(value, list):
        items: list[Any] = []
        for i, item in enumerate(value):
            schemas: list[Any] = []
            for n in nodes:
                prefix = n.get("prefixItems")
                if isinstance(prefix, list) and i < len(prefix):
                    schemas.append(prefix[i])
                elif isinstance(n.get("items"), dict):
                    schemas.append(n["items"])
            items.append(_convert_any(item, schemas, root, to_wire, depth))
        return items
    return value


def _convert_any(value: Any, schemas: list[Any], root: Any, to_wire: bool, depth: int) -> Any:
    if not schemas:
        return value
    return _convert(value, {"allOf": schemas}, root, to_wire, depth + 1)


def declared_args(schema: Mapping[str, Any], args: Any) -> Any:
    """``args`` as the model sent them for ``schema`` (the declared one), with wire keys renamed to
    the declared names at every depth (see the module docstring)."""
    return _convert(args, schema, schema, to_wire=False)


def wire_args(schema: Mapping[str, Any], args: Any) -> Any:
    """``args`` with declared names renamed to their wire keys (the inverse of `declared_args`)."""
    return _convert(args, schema, schema, to_wire=True)


_LOOKALIKES = str.maketrans(
    {
        # Cyrillic letters drawn like Latin ones (after case folding)
        "\u0430": "a",
        "\u0432": "b",
        "\u0435": "e",
        "\u0451": "e",
        "\u0437": "3",
        "\u0456": "i",
        "\u0457": "i",
        "\u0458": "j",
        "\u043a": "k",
        "\u043c": "m",
        "\u043d": "h",
        "\u043e": "o",
        "\u0440": "p",
        "\u0441": "c",
        "\u0442": "t",
        "\u0443": "y",
        "\u0445": "x",
        "\u0455": "s",
        "\u0501": "d",
        "\u051b": "q",
        "\u051d": "w",
        "\u04bb": "h",
        "\u04cf": "l",
        # Greek
        "\u03b1": "a",
        "\u03b2": "b",
        "\u03b5": "e",
        "\u03b7": "n",
        "\u03b9": "i",
        "\u03ba": "k",
        "\u03bc": "u",
        "\u03bd": "v",
        "\u03bf": "o",
        "\u03c1": "p",
        "\u03c4": "t",
        "\u03c5": "u",
        "\u03c7": "x",
        "\u03c9": "w",
        # Latin letters of another shape, and dotless ones
        "\u0261": "g",
        "\u0131": "i",
        "\u0237": "j",
    }
)


def lookalike_key(name: str) -> str:
    """What ``name`` looks like to a person or a model reading it: compatibility-normalized (NFKC:
    a fullwidth c, U+FF43, is ``c``), case-folded, without invisible format characters (a
    zero-width space), and with letters of other scripts drawn like Latin ones folded onto them
    (Cyrillic i, U+0456, is ``i``; Greek omicron is ``o``). Two tools of one release may not share
    it: a model choosing between ``close_ticket`` and the same name with a Cyrillic i chooses
    blind, and so does the reviewer reading a proposal. A deliberately coarse fold: a false alarm is a rename at load
    time, a miss is a confused call."""
    text = unicodedata.normalize("NFKC", name).casefold()
    text = "".join(c for c in text if unicodedata.category(c) != "Cf")
    return text.translate(_LOOKALIKES)


__all__ = [
    "PROPERTY_KEY",
    "WIRE_NAME",
    "declared_args",
    "key_map",
    "lookalike_key",
    "wire_args",
    "wire_name",
    "wire_schema",
]
