"""A strict scripted chat model for deterministic tests: every response is scripted, and a call
past the script fails loudly.

`ScriptedChatModel` replays the responses it was given, records every request (messages,
bound tools and request options), fails loudly on a call nobody scripted, and checks with
`assert_complete()` that every scripted response was consumed. It never cycles silently.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from pydantic import PrivateAttr

from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext, ToolSpec

_ids = itertools.count(1)


class UnexpectedModelCallError(AssertionError):
    """The model was asked for more responses than were scripted."""


@dataclass(frozen=True)
class ModelRequest:
    """One request the scripted model received."""

    messages: list[BaseMessage]
    """Messages sent, system instructions first."""
    tools: list[dict[str, Any]]
    """Tool definitions bound for this request (exactly what a provider would receive)."""
    options: dict[str, Any]
    """Other request options (``tool_choice``, ``parallel_tool_calls``, ``strict``...)."""

    @property
    def tool_names(self) -> list[str]:
        """Names of the bound tools."""
        return [t.get("function", t).get("name", "") for t in self.tools]


def tool_call(name: str, args: dict[str, Any], call_id: str | None = None) -> ToolCall:
    """A tool call as a provider integration would parse it."""
    return ToolCall(name=name, args=args, id=call_id or f"call_{next(_ids)}", type="tool_call")


def ai(content: str = "", *calls: ToolCall, invalid: Sequence[dict[str, Any]] = ()) -> AIMessage:
    """An assistant message with ``calls`` (and optionally ``invalid_tool_calls``)."""
    return AIMessage(
        content=content,
        tool_calls=list(calls),
        invalid_tool_calls=[{"type": "invalid_tool_call", **i} for i in invalid],
    )


class HandlerCounter:
    """Wraps tool handlers so every real invocation is counted (thread-safe).

    Tests and evaluations assert on these counts ("a refused call ran no handler") rather than on
    what the code looks like it does.
    """

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._delay_s = delay_s

    def wrap(self, specs: Sequence[ToolSpec]) -> list[ToolSpec]:
        """The same specs with counting handlers (``delay_s`` widens race windows in tests)."""
        return [replace(spec, handler=self._counted(spec.name, spec.handler)) for spec in specs]

    def wrap_registry(self, registry: Registry) -> Registry:
        """``registry`` with counting handlers, each tenant's own implementations too (a tenant's
        call of a tool counts under the tool's name, as the shared one's does)."""
        return registry.mapped(self.wrap)

    def _counted(
        self, name: str, handler: Callable[[Any, HandlerContext], Any]
    ) -> Callable[[Any, HandlerContext], Any]:
        def counted(args: Any, ctx: HandlerContext) -> Any:
            with self._lock:
                self.calls[name] += 1
            if self._delay_s:
                time.sleep(self._delay_s)
            return handler(args, ctx)

        return counted

    def total(self) -> int:
        """Handler invocations of every tool."""
        return sum(self.calls.values())


class ScriptedChatModel(BaseChatModel):
    """Replays scripted `AIMessage` responses in order; strict about extra calls."""

    responses: list[AIMessage]
    """Responses to return, in order."""
    _requests: list[ModelRequest] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "toolgate-scripted"

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request received so far."""
        return list(self._requests)

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """Record the tools with each request, like a provider integration would send them."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=list(tools), **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = list(kwargs.pop("tools", []))
        self._requests.append(ModelRequest(messages=list(messages), tools=tools, options=dict(kwargs)))
        if self._position >= len(self.responses):
            raise UnexpectedModelCallError(
                f"model call #{self._position + 1} was not scripted (only {len(self.responses)} responses)"
            )
        response = self.responses[self._position]
        self._position += 1
        if response.id is None:
            response = response.model_copy(update={"id": f"resp_scripted_{self._position}"})
        return ChatResult(generations=[ChatGeneration(message=response)])

    def assert_complete(self) -> None:
        """Fail unless every scripted response was consumed."""
        if self._position != len(self.responses):
            raise AssertionError(
                f"{len(self.responses) - self._position} scripted response(s) were never requested"
            )


__all__ = [
    "HandlerCounter",
    "ModelRequest",
    "ScriptedChatModel",
    "UnexpectedModelCallError",
    "ai",
    "tool_call",
]
