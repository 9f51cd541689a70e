"""Tool-call arguments that are not one JSON object, screened before the provider's client parses them.

A model may send ``[1,2,3]``, ``"x"``, ``3`` or ``null`` as a function call's arguments.
``langchain-openai`` parses a non-streamed reply's arguments itself and builds an ``AIMessage``
whose ``tool_calls[].args`` must be a dict: anything else fails that validation inside the client,
so the whole reply is lost and the run crashes before the gateway ever sees the call (the
streamed path already files such a call under ``invalid_tool_calls``). This transport sits
between the client and the network, on both OpenAI wire formats: in a JSON reply, a Chat
Completions ``choices[].message.tool_calls[].function.arguments`` or a Responses
``output[].arguments`` of a ``function_call`` that parses to anything but an object, or nests
deeper than the client's parser can follow (`toolgate.json_limits`: it would raise
``RecursionError``), is rewritten
to text that is not JSON at all (the original kept after a marker), so the client files it under
``invalid_tool_calls`` and dispatch refuses it ``malformed_arguments``, like any unparseable call.
Nothing else in the reply changes; a reply that is not JSON passes untouched (the client reports
it). An empty arguments string stays as it is: the clients read it as ``{}``, a call without
arguments.

The Messages API sends a ``tool_use`` block's ``input`` as parsed JSON, which
``langchain-anthropic`` takes as the call's arguments: one that is not an object failed the
``AIMessage``'s own validation the same way. Its client (`toolgate.models.anthropic_property_keys`)
sets such an input aside before the message is built (`tool_uses_set_aside`) and files that call
under ``invalid_tool_calls`` after (`filed_invalid`), so dispatch refuses it ``malformed_arguments``.

A Chat Completions call entry of another shape than the client expects (arguments sent as JSON
itself, an id that is a number, no ``function``) is given that shape first (`_chat_call_shaped`).

An object that repeats a key, at any depth (``{"amount_cents": 1, ..., "amount_cents": 4999}``),
is marked the same way (`REPEATED_KEY`): JSON leaves its meaning open (RFC 8259 section 4) and
parsers differ, Python's keeping the last value while the provider's copy of the call (a
Responses item is kept verbatim in the thread) shows both, so no one meaning could be judged,
proposed and shown to a reviewer.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import json
from typing import Any

from langchain_core.messages import AIMessage
from langchain_core.messages.tool import invalid_tool_call
from langchain_core.outputs import ChatResult

from toolgate import json_limits

NOT_AN_OBJECT = "<arguments are not a JSON object> "
"""What a screened arguments text starts with (so it no longer parses as JSON)."""
REPEATED_KEY = "<arguments repeat a key> "
"""What a screened arguments text whose object repeats a key starts with."""


class _RepeatedKey(Exception):
    """An object of the arguments names one key twice (not a `ValueError`: the text is JSON)."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    if len({key for key, _ in pairs}) != len(pairs):
        raise _RepeatedKey
    return dict(pairs)


def screened_arguments(text: Any) -> Any:
    """``text`` unchanged when it is a JSON object that names each key once (or empty, or not
    JSON at all: the client files that as invalid itself), else marked so it no longer parses."""
    if not isinstance(text, str) or not text.strip():
        return text
    try:
        value = json_limits.loads(text, strict=False, object_pairs_hook=_unique_keys)
    except json_limits.JSONTooDeep:
        return NOT_AN_OBJECT + text  # the client's own parser would crash on it (RecursionError)
    except _RepeatedKey:
        return REPEATED_KEY + text
    except ValueError:
        return text
    return text if isinstance(value, dict) else NOT_AN_OBJECT + text


def tool_uses_set_aside(response: Any) -> tuple[Any, dict[str, Any]]:
    """A Messages API response (the SDK's ``Message``) whose ``tool_use`` inputs that are not
    objects are ``{}``, and those inputs by block id (empty, and the same response, when none).
    A block's id or name that is not text (a number, a null name: a compatible server's) becomes
    text too, which the message's own validation needs as much."""
    content = getattr(response, "content", None)
    aside: dict[str, Any] = {}
    blocks: list[Any] = []
    changed = False
    for block in content if isinstance(content, list) else ():
        if getattr(block, "type", None) == "tool_use":
            update: dict[str, Any] = {}
            if block.id is not None and not isinstance(block.id, str):
                update["id"] = json.dumps(block.id)
            if not isinstance(block.name, str):
                update["name"] = "" if block.name is None else json.dumps(block.name)
            if not isinstance(block.input, dict):
                aside[str(update.get("id", block.id))] = block.input
                update["input"] = {}
            if update:
                block, changed = block.model_copy(update=update), True
        blocks.append(block)
    return (response.model_copy(update={"content": blocks}) if changed else response), aside


def filed_invalid(result: ChatResult, aside: dict[str, Any]) -> ChatResult:
    """``result`` with the calls whose inputs `tool_uses_set_aside` set aside moved from
    ``tool_calls`` to ``invalid_tool_calls``, each with its input as the JSON text it was."""
    for generation in result.generations if aside else ():
        message = generation.message
        if not isinstance(message, AIMessage):
            continue
        moved = [c for c in message.tool_calls if str(c.get("id")) in aside]
        invalid = [
            invalid_tool_call(
                name=c["name"], args=json.dumps(aside[str(c.get("id"))]), id=c.get("id"),
                error="arguments are not a JSON object",
            )
            for c in moved
        ]  # fmt: skip
        generation.message = message.model_copy(
            update={
                "tool_calls": [c for c in message.tool_calls if c not in moved],
                "invalid_tool_calls": [*message.invalid_tool_calls, *invalid],
            }
        )
    return result


def _chat_call_shaped(call: dict[str, Any]) -> bool:
    """Give a Chat Completions ``tool_calls`` entry the shape the client builds a message from, in
    place; True when it changed. OpenAI-compatible servers send arguments as JSON itself (an
    object, not its text: kept as its text, then screened like any), an id that is a number (its
    text), an entry with no ``function`` (an invalid call with no name). Each made the client's
    message building raise, and the run crash."""
    changed = False
    if call.get("id") is not None and not isinstance(call["id"], str):
        call["id"], changed = json.dumps(call["id"]), True
    function = call.get("function")
    if not isinstance(function, dict):
        call["function"] = {"name": "", "arguments": NOT_AN_OBJECT}
        return True
    if function.get("name") is not None and not isinstance(function["name"], str):
        function["name"], changed = json.dumps(function["name"]), True
    arguments = function.get("arguments")
    if arguments is not None and not isinstance(arguments, str):
        function["arguments"], changed = json.dumps(arguments), True
    return changed


def screen_reply(body: Any) -> bool:
    """Screen every function call's arguments in one decoded reply, in place; True when any changed."""
    changed = False
    if not isinstance(body, dict):
        return False
    choices = body.get("choices")
    for choice in choices if isinstance(choices, list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
            changed |= isinstance(call, dict) and _chat_call_shaped(call)
            function = call.get("function") if isinstance(call, dict) else None
            if isinstance(function, dict) and "arguments" in function:
                screened = screened_arguments(function["arguments"])
                changed |= screened is not function["arguments"]
                function["arguments"] = screened
    output = body.get("output")
    for item in output if isinstance(output, list) else ():
        if isinstance(item, dict) and item.get("type") == "function_call" and "arguments" in item:
            screened = screened_arguments(item["arguments"])
            changed |= screened is not item["arguments"]
            item["arguments"] = screened
    return changed


def screened_content(content: bytes) -> bytes:
    """A reply body (decoded bytes) with its function calls' arguments screened; the same bytes
    when nothing changed or when it is not JSON."""
    try:
        body = json.loads(content)
    except (ValueError, RecursionError):  # the client reports a reply it cannot read
        return content
    return json.dumps(body).encode() if screen_reply(body) else content


def _library_of(client_class: type) -> Any:
    """The HTTP library (``httpx`` or its successor ``httpx2``) a client class is built on: a
    transport must come from the same one."""
    for base in client_class.__mro__:
        package = base.__module__.split(".")[0]
        if package in ("httpx", "httpx2"):
            return importlib.import_module(package)
    raise TypeError(f"{client_class.__name__} is built on no known HTTP library")


def _rebuilt(http: Any, request: Any, response: Any, content: bytes) -> Any:
    """A response to ``request`` holding ``content`` (decoded already: the encoding header goes)."""
    headers = http.Headers(response.headers)
    headers.pop("content-encoding", None)
    headers["content-length"] = str(len(content))
    return http.Response(
        response.status_code,
        headers=headers,
        content=screened_content(content),
        request=request,
        extensions=response.extensions,
    )


def _is_json(response: Any) -> bool:
    return str(response.headers.get("content-type", "")).split(";")[0].strip() == "application/json"


@functools.cache
def _transports(http: Any) -> tuple[type, type]:
    """The screening transports (sync, async) for the HTTP library ``http``."""

    class ScreeningTransport(http.BaseTransport):
        def __init__(self) -> None:
            self._inner = http.HTTPTransport()

        def handle_request(self, request: Any) -> Any:
            response = self._inner.handle_request(request)
            if not _is_json(response):
                return response  # a stream (the client files such arguments itself) or an error page
            content = response.read()
            response.close()
            return _rebuilt(http, request, response, content)

        def close(self) -> None:
            self._inner.close()

    class AsyncScreeningTransport(http.AsyncBaseTransport):
        def __init__(self) -> None:
            self._inner = http.AsyncHTTPTransport()

        async def handle_async_request(self, request: Any) -> Any:
            response = await self._inner.handle_async_request(request)
            if not _is_json(response):
                return response
            content = await response.aread()
            await response.aclose()
            return _rebuilt(http, request, response, content)

        async def aclose(self) -> None:
            await self._inner.aclose()

    return ScreeningTransport, AsyncScreeningTransport


@functools.cache
def screening_openai_clients() -> tuple[Any, Any]:
    """The OpenAI SDK's default (sync, async) HTTP clients, their transports screening replies:
    one pair per process, shared by every model built (as ``langchain-openai`` shares its own
    default clients), so connections are pooled and none is left open per model."""
    from openai import DefaultAsyncHttpxClient, DefaultHttpxClient

    sync, asynchronous = _transports(_library_of(DefaultHttpxClient))
    client = DefaultHttpxClient(transport=sync())
    atexit.register(client.close)  # its pooled connections end with the process, not after it
    return client, DefaultAsyncHttpxClient(transport=asynchronous())


__all__ = [
    "NOT_AN_OBJECT",
    "REPEATED_KEY",
    "filed_invalid",
    "screen_reply",
    "screened_arguments",
    "screened_content",
    "screening_openai_clients",
    "tool_uses_set_aside",
]
