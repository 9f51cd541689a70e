"""The chat model of an MCP session: it relays the one call the MCP client asked for.

Why a model at all: an MCP client is an agent whose own model already chose the call, so toolgate
must not choose it again, yet the call has to enter the graph where a model's call enters it (the
``model`` node), so that dispatch, proposal, approval and execute judge it exactly as they judge a
graph call. `ClientCallModel` is that door: the task's request message names the call (``call
<tool> <JSON object>``, the explicit form the offline model also reads), the model proposes
exactly it, whatever tools it was offered (dispatch refuses a tool the principal may not use, with
its stable code), and once results follow the request it answers with their statuses, which ends
the task turn. It is untrusted input like any model output; nothing it says is authority.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from toolgate.models.offline import direct_calls

_SPACE = re.compile(r"\s")
"""Whitespace, every line break the request's reader splits on included (no tool name holds any)."""


def call_request(tool: str, arguments: dict[str, Any]) -> str:
    """The request message of a task that makes one call (read back by `ClientCallModel`).

    The client's name stays one name: its whitespace becomes U+FFFD, so a name holding a line
    break and a ``call`` line of its own is the unknown tool it is (dispatch refuses it), never
    a second call the reader would take for the one asked."""
    name = _SPACE.sub("\N{REPLACEMENT CHARACTER}", tool) or "\N{REPLACEMENT CHARACTER}"
    return f"call {name} {json.dumps(arguments, sort_keys=True, separators=(',', ':'))}"


def call_id_of(request_id: str) -> str:
    """The tool call id of the one call the request message ``request_id`` asks for."""
    return f"call_{request_id}"


class ClientCallModel(BaseChatModel):
    """Proposes the call the task's request names, then reports the results' statuses."""

    @property
    def _llm_type(self) -> str:
        return "toolgate-mcp-client"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """The offer is the gate's business, not the client's: the call is relayed as asked."""
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        index = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
        request = messages[index] if index >= 0 else None
        results = [m for m in messages[index + 1 :] if isinstance(m, ToolMessage)]
        calls = direct_calls(str(request.content)) if request is not None else None
        if results or not calls or request is None:
            message = AIMessage(content=f"{len(results)} result(s) returned to the MCP client.")
        else:
            message = AIMessage(
                content="",
                tool_calls=[
                    {"name": name, "args": args, "id": call_id_of(str(request.id)), "type": "tool_call"}
                    for name, args in calls[:1]
                ],
            )
        return ChatResult(generations=[ChatGeneration(message=message)])


__all__ = ["ClientCallModel", "call_id_of", "call_request"]
