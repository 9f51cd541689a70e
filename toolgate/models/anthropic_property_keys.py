"""``ChatAnthropic`` that sends property wire keys and hands toolgate back the declared names.

Anthropic refuses a whole request when a tool's ``input_schema`` has a property key outside
``^[a-zA-Z0-9_.-]{1,64}$`` (`toolgate.tools.wire`). The gateway binds the declared
definitions (`Gateway.model_for`); this client renames the keys only where the request leaves the
process and maps them back where the response enters it, so checkpoints, digests, proposals, audit
events and reviewers only ever see the declared names:

* the request (``_get_request_payload``): every tool's ``input_schema`` as `wire_schema`, and every
  ``tool_use`` of the history (a tool call of an earlier turn) with its ``input`` as `wire_args`
  when its tool is in the request or was bound by this client before (after a restart, a call of
  a tool not offered again keeps its declared keys);
* the response (``_generate`` / ``_agenerate``): each tool call's ``args`` and each ``tool_use``
  block's ``input`` as `declared_args`, before toolgate validates them. An unknown key stays as
  sent and is refused by validation.

A ``tool_use`` whose ``input`` is not an object becomes an invalid call instead of failing the
message (`toolgate.models.argument_screen.tool_uses_set_aside`).

Streaming is disabled (``disable_streaming``): ``stream`` falls back to ``invoke``, so no path
returns a tool call that skipped the mapping (the gateway never streams model output anyway).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage
from langchain_core.outputs import ChatResult
from pydantic import PrivateAttr

from toolgate.models.argument_screen import filed_invalid, tool_uses_set_aside
from toolgate.tools.wire import declared_args, wire_args, wire_schema

KNOWN_TOOLS = 1024
"""Declared tool schemas a client remembers for calls in the history (`wire_payload`)."""


def _schemas(tools: Any) -> dict[str, Mapping[str, Any]]:
    """Tool name -> declared ``input_schema`` for the client tools of a request."""
    found: dict[str, Mapping[str, Any]] = {}
    for tool in tools or ():
        if (
            isinstance(tool, dict)
            and isinstance(tool.get("name"), str)
            and isinstance(tool.get("input_schema"), dict)
        ):
            found[tool["name"]] = tool["input_schema"]
    return found


def wire_payload(
    payload: dict[str, Any], known: dict[str, Mapping[str, Any]] | None = None
) -> dict[str, Any]:
    """``payload`` (a Messages API request body) with property wire keys in its tools and in the
    ``tool_use`` inputs of its history. ``known``: declared schemas of tools bound earlier by the
    same client, for a call in the history whose tool this request no longer offers (updated with
    this request's tools, up to `KNOWN_TOOLS`)."""
    schemas = _schemas(payload.get("tools"))
    if known is not None:
        for name, schema in schemas.items():
            if name in known or len(known) < KNOWN_TOOLS:
                known[name] = schema
        schemas = {**known, **schemas}
    if not schemas:
        return payload
    if isinstance(payload.get("tools"), list):
        payload["tools"] = [
            {**t, "input_schema": wire_schema(t["input_schema"])}
            if isinstance(t, dict) and t.get("name") in schemas and isinstance(t.get("input_schema"), dict)
            else t
            for t in payload["tools"]
        ]
    for message in payload.get("messages") or ():
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, list):
            message["content"] = [
                {**b, "input": wire_args(schemas[b["name"]], b.get("input"))}
                if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in schemas
                else b
                for b in content
            ]
    return payload


def declared_message(message: AIMessage, tools: Any) -> AIMessage:
    """``message`` with its tool calls' arguments (and ``tool_use`` inputs) in declared names."""
    schemas = _schemas(tools)
    if not schemas:
        return message
    calls = [
        {**c, "args": declared_args(schemas[c["name"]], c["args"])} if c.get("name") in schemas else c
        for c in message.tool_calls
    ]
    content: Any = message.content
    if isinstance(content, list):
        content = [
            {**b, "input": declared_args(schemas[b["name"]], b.get("input"))}
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") in schemas
            else b
            for b in content
        ]
    return message.model_copy(update={"tool_calls": calls, "content": content})


def _declared(result: ChatResult, tools: Any) -> ChatResult:
    for generation in result.generations:
        if isinstance(generation.message, AIMessage):
            generation.message = declared_message(generation.message, tools)
    return result


@functools.cache
def key_mapping_chat_anthropic() -> type[BaseChatModel]:
    """The ``ChatAnthropic`` subclass with property wire keys (see the module docstring). Built on
    first use, so this module imports without the ``anthropic`` extra installed."""
    from langchain_anthropic import ChatAnthropic

    class KeyMappingChatAnthropic(ChatAnthropic):
        """``ChatAnthropic`` with property wire keys (see the module docstring)."""

        disable_streaming: bool = True
        _known: dict[str, Mapping[str, Any]] = PrivateAttr(default_factory=dict)

        def _format_output(self, data: Any, **kwargs: Any) -> ChatResult:
            # a tool_use input that is not an object would fail the message's own validation
            data, aside = tool_uses_set_aside(data)
            return filed_invalid(super()._format_output(data, **kwargs), aside)

        def _get_request_payload(
            self, input_: Any, *, stop: list[str] | None = None, **kwargs: Any
        ) -> dict[str, Any]:
            return wire_payload(super()._get_request_payload(input_, stop=stop, **kwargs), self._known)

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return _declared(super()._generate(messages, stop, run_manager, **kwargs), kwargs.get("tools"))

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            result = await super()._agenerate(messages, stop, run_manager, **kwargs)
            return _declared(result, kwargs.get("tools"))

    return KeyMappingChatAnthropic


__all__ = ["KNOWN_TOOLS", "declared_message", "key_mapping_chat_anthropic", "wire_payload"]
