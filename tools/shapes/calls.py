"""How every tool shape calls the code it wraps and turns what it answered into a result.

Why: a team should bring the tool it already has, in the shape it already has (a typed function,
a LangChain tool, an OpenAI or Anthropic definition, an MCP server's tool), and get the same
dispatch, proposal, approval and exactly-once execution as a hand-written `ToolSpec`. The shapes
differ only in where the schema comes from (`toolgate.tools.shapes.functions`,
`toolgate.tools.shapes.langchain`, `toolgate.tools.shapes.definitions`,
`toolgate.tools.shapes.mcp`) and all take an `toolgate.tools.shapes.operator_policy.OperatorPolicy`;
how a call runs and what its output becomes is decided here, once, so no shape can answer
differently from another. Names are passed through exactly as the source spells them.

Results: a handler's output becomes the tool's result model like this: a Pydantic model or a
mapping is taken as is; an MCP tool's structured content is preferred over its text; text
(a string, or text content blocks joined) becomes ``{"result": text}``, unless the result model
has no ``result`` field and the text is a JSON object, which is then taken as is; any other value
becomes ``{"result": value}``. Without a result model a tool answers `TextResult`. A tool's own
error (`ToolException`, an MCP ``isError`` result) is a failed call, never a success-looking text.

Async handlers: the executor calls every handler synchronously in its own worker thread (one per
call), so a coroutine runs there under `asyncio.run`, cancelled at the call's deadline; called
where an event loop already runs, it runs in a helper thread instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TypeVar

from pydantic import BaseModel

from toolgate.errors import ToolExecutionError
from toolgate.tools.spec import HandlerContext, ToolResult

T = TypeVar("T")


class TextResult(ToolResult):
    """The result of a tool that answers text (or whose source declares no result contract)."""

    result: str
    """What the tool answered."""


def run_awaitable(make: Callable[[], Awaitable[T]], deadline: datetime | None) -> T:
    """Run the awaitable ``make()`` to completion from synchronous code, cancelled at ``deadline``.

    The executor's worker thread has no event loop, so this is `asyncio.run` there (a fresh loop
    per call: nothing is shared with another call). Where a loop already runs in this thread,
    it runs in a helper thread instead of failing. Cancellation raises `TimeoutError`, which the
    executor treats exactly like its own timeout (a write's outcome is then unknown).
    """

    async def bounded() -> T:
        if deadline is None:
            return await make()
        async with asyncio.timeout(max((deadline - datetime.now(UTC)).total_seconds(), 0.0)):
            return await make()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(bounded())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="toolgate-async") as pool:
        return pool.submit(asyncio.run, bounded()).result()


def type_hints(function: Callable[..., Any]) -> dict[str, Any]:
    """Resolved annotations of a function, method, `functools.partial` or callable instance."""
    for candidate in (function, getattr(function, "func", None), type(function).__call__):
        try:
            return typing.get_type_hints(candidate, include_extras=True)
        except TypeError:
            continue
    return {}


def ctx_parameter(function: Callable[..., Any]) -> str | None:
    """The parameter that receives the `HandlerContext`: named ``ctx`` or annotated with it."""
    hints = type_hints(function)
    return next(
        (p for p in inspect.signature(function).parameters if p == "ctx" or hints.get(p) is HandlerContext),
        None,
    )


def invoke(
    function: Callable[..., Any], values: dict[str, Any], ctx: HandlerContext, ctx_name: str | None
) -> Any:
    """``function(**values)`` (plus the context when it asks), awaited when it is asynchronous."""
    arguments = {**values, ctx_name: ctx} if ctx_name else values
    if inspect.iscoroutinefunction(function):
        return run_awaitable(lambda: function(**arguments), ctx.deadline)
    output = function(**arguments)
    return run_awaitable(lambda: output, ctx.deadline) if inspect.isawaitable(output) else output


def result_data(output: Any, result_model: type[BaseModel]) -> Any:
    """A handler's output in the shape of ``result_model`` (rules in the module docstring)."""
    if isinstance(output, BaseModel | Mapping):
        return output
    if isinstance(output, list) and all(isinstance(b, Mapping) and "type" in b for b in output):
        if any(block["type"] != "text" for block in output):
            raise ToolExecutionError(
                "server_error", "the tool answered non-text content, which toolgate does not relay"
            )
        output = "\n".join(str(block["text"]) for block in output)
    if isinstance(output, str) and "result" not in result_model.model_fields:
        try:
            parsed = json.loads(output)
        except ValueError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    return {"result": output}


__all__ = ["TextResult", "ctx_parameter", "invoke", "result_data", "run_awaitable", "type_hints"]
