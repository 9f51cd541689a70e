"""Wire names: the name a provider is told for a tool whose real name it would refuse.

Providers accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``; public tool sets use names like
``math.factorial`` or ``weather/current``. A name that already fits is its own wire name
(``getWeather`` stays ``getWeather``). Any other name becomes its safe characters (runs of others
as ``_``, at most 55) plus ``_`` and 8 hex digits of the SHA-256 of the real name:
``math.factorial`` -> ``math_factorial_<8 hex>``. The suffix keeps two names that sanitize alike
(``a.b`` and ``a b``) apart without knowing the rest of the release, so a tool's wire name never
changes when other tools are added; the registry still refuses a release in which two tools share
a wire name. Only the model sees wire names: proposals, audit events, reviewers and
`ToolMessage` names keep the real name, and `Registry.get` accepts either.
"""

from __future__ import annotations

import hashlib
import re

WIRE_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What OpenAI and Anthropic accept as a tool (function) name."""

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]+")


def wire_name(name: str) -> str:
    """The provider-safe name of the tool called ``name`` (deterministic; see the module docstring)."""
    if WIRE_NAME.match(name):
        return name
    safe = _UNSAFE.sub("_", name).strip("_")[:55] or "tool"
    return f"{safe}_{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"


__all__ = ["WIRE_NAME", "wire_name"]
