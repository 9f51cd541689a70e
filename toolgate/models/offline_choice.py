"""How the offline demo model (`toolgate.models.offline`) honours ``tool_choice``, as a provider does.

The gateway binds the choice with the tools (``bind_tools(tools, tool_choice=...)``,
`toolgate.graph.gateway.Gateway.model_for`); the offline model reads the same input:

- ``auto`` (or none given): the model decides, as before;
- ``none``: it answers in text and proposes no tool call;
- ``required``: it calls some bound tool: its own next call if it has one, else the first bound
  tool whose arguments it can fill from the conversation, else the first bound tool with ``{}``
  (a provider forced to call always calls; the gateway's argument check then refuses it);
- a named tool: it calls that tool only, with its own arguments when it meant to call it anyway,
  else with arguments filled from the conversation; when it cannot fill them it answers in text
  and never calls a different tool.

Arguments are filled from the request text and the tool results since it: a required property
with an ``enum`` takes the first value named in the text, one with a pattern (``pattern`` or the
``Constraints: pattern ...`` the wire description carries) takes the first match, a ``reason``
takes a fixed phrase; anything else (an amount, a date) cannot be filled.

Accepted forms: ``auto``/``none``/``required``/``any``, a tool name, ``True``, and the providers'
dicts (``{"type": "none"}``, ``{"type": "tool", "name": ...}``, ``{"type": "function",
"function": {"name": ...}}``). A named tool that is not bound is refused at bind time, as the
providers refuse the request.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage

_DESCRIBED_PATTERN = re.compile(r"\bpattern (\S+)")
REASON = "requested by the user"


def normalise_choice(tool_choice: Any, bound: Sequence[str]) -> str:
    """``tool_choice`` as ``auto``, ``none``, ``required`` or a bound tool's name."""
    if tool_choice is None or tool_choice is False:
        return "auto"
    if tool_choice is True:
        return "required"
    name: Any = tool_choice
    if isinstance(tool_choice, dict):
        kind = tool_choice.get("type")
        function = tool_choice.get("function")
        name = tool_choice.get("name") or (function.get("name") if isinstance(function, dict) else None)
        if kind in ("tool", "function") and isinstance(name, str):
            pass
        elif kind in ("auto", "none", "any", "required"):
            name = kind
        else:
            raise ValueError(f"tool_choice {tool_choice!r} is not a form the offline model understands")
    if not isinstance(name, str):
        raise ValueError(f"tool_choice {tool_choice!r} is not a form the offline model understands")
    if name in ("auto", "none", "required"):
        return name
    if name == "any":
        return "required"
    if name not in bound:
        raise ValueError(f"tool_choice names {name!r}, which is not among the bound tools")
    return name


def _parameters(definitions: Sequence[Any], name: str) -> dict[str, Any] | None:
    for definition in definitions:
        if not isinstance(definition, dict):
            continue
        body = definition.get("function", definition)
        if isinstance(body, dict) and body.get("name") == name:
            params = body.get("parameters") or body.get("input_schema") or {}
            return params if isinstance(params, dict) else {}
    return None


def _pattern_of(prop: dict[str, Any]) -> str | None:
    pattern = prop.get("pattern")
    if not isinstance(pattern, str):
        found = _DESCRIBED_PATTERN.search(str(prop.get("description") or ""))
        pattern = found.group(1).rstrip(".") if found else None
    if not pattern:
        return None
    return pattern.removeprefix("^").removesuffix("$")


def fill_args(name: str, definitions: Sequence[Any], context: str) -> dict[str, Any] | None:
    """Arguments for tool ``name`` filled from ``context`` (None when a required one cannot be)."""
    params = _parameters(definitions, name)
    if params is None:
        return None
    properties = params.get("properties") or {}
    args: dict[str, Any] = {}
    for key in params.get("required") or []:
        found_prop = properties.get(key)
        prop: dict[str, Any] = found_prop if isinstance(found_prop, dict) else {}
        enum = prop.get("enum")
        pattern = _pattern_of(prop)
        if isinstance(enum, list):
            value = next((v for v in enum if re.search(rf"\b{re.escape(str(v))}\b", context)), None)
        elif pattern is not None:
            try:
                found = re.search(rf"(?<![\w-])(?:{pattern})(?![\w-])", context)
            except re.error:
                found = None
            value = found.group(0) if found else None
        elif key == "reason" and prop.get("type", "string") == "string":
            value = REASON
        else:
            value = None
        if value is None:
            return None
        args[key] = value
    return args


def _call(name: str, args: dict[str, Any], turn: int) -> dict[str, Any]:
    return {
        "name": name,
        "args": args,
        "id": f"call_{name}_{turn}_{uuid.uuid4().hex[:8]}",
        "type": "tool_call",
    }


def honour_choice(
    choice: str,
    decided: AIMessage,
    *,
    bound: Sequence[str],
    definitions: Sequence[Any],
    context: str,
    results_summary: str,
    turn: int,
) -> AIMessage:
    """``decided`` (what the model would answer under ``auto``) made to obey ``choice``."""
    calls = list(decided.tool_calls)
    if choice == "auto" or not bound:  # with nothing bound it could not have proposed a call
        return decided
    if choice == "none":
        if not calls:
            return decided
        wanted = ", ".join(dict.fromkeys(str(c["name"]) for c in calls))
        prefix = f"{results_summary}. " if results_summary else ""
        return AIMessage(
            content=f"{prefix}I would use {wanted} next, but no tool may be called on this turn."
        )
    if choice == "required":
        if calls:
            return decided
        for name in bound:
            args = fill_args(name, definitions, context)
            if args is not None:
                return AIMessage(content="", tool_calls=[_call(name, args, turn)])
        return AIMessage(content="", tool_calls=[_call(bound[0], {}, turn)])
    mine = [c for c in calls if c["name"] == choice]
    if mine:
        return AIMessage(content="", tool_calls=mine[:1])
    args = fill_args(choice, definitions, context)
    if args is None:
        return AIMessage(content=f"I cannot fill the arguments of {choice} from this request.")
    return AIMessage(content="", tool_calls=[_call(choice, args, turn)])


def context_text(request: str, results: Sequence[tuple[str, dict[str, Any]]]) -> str:
    """The request and the tool results since it, as one text to fill arguments from."""
    return "\n".join([request, *(json.dumps(payload, sort_keys=True) for _, payload in results)])


__all__ = ["REASON", "context_text", "fill_args", "honour_choice", "normalise_choice"]
