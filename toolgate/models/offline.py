"""The offline demo model: a small deterministic chat model for ``make demo`` and the server.

It reads the conversation the way a tool-calling model would (latest user request, then the
tool results since) and proposes the next call; it can only call tools it was bound with. It is
not a language model and makes no network request; it lets the whole gateway run end to end
with no API key.

Besides the demo story it understands one explicit form, for any release: a request whose lines
each read ``call <tool> <JSON object>`` proposes exactly those calls in one turn, then reports
their statuses (``toolgate run --as ada 'call get_ticket {"ticket_id": "T-100"}'``).

It honours the ``tool_choice`` it is bound with like a provider (`toolgate.models.offline_choice`):
``none`` answers in text, ``required`` calls some bound tool, a named tool calls only that tool
(or answers in text when it cannot fill the arguments), ``auto`` lets it decide.

Token use: it has no tokenizer and bills nothing, so each response carries an **estimate**, not a
count: input is the UTF-8 bytes of every message and tool definition it was given divided by four,
output the same over its answer, reasoning 0 (it does not reason). The estimate is marked
(``response_metadata["toolgate_token_usage"] == "estimated"``), so the audit and the trace show
``source=estimated`` and the token metric, which counts what providers report, leaves it out.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable

from toolgate import json_limits
from toolgate.models.offline_choice import context_text, honour_choice, normalise_choice
from toolgate.telemetry.tokens import ESTIMATE_KEY, estimated_usage

_ORDER = re.compile(r"\bO-[0-9]{3,8}\b")
_DIRECT = re.compile(r"^\s*call\s+(\S+)\s+(\{.*\})\s*$")


def direct_calls(text: str) -> list[tuple[str, Any]] | None:
    """The ``call <tool> <JSON>`` lines of a request (None unless every non-empty line is one)."""
    lines = [line for line in text.splitlines() if line.strip()]
    calls: list[tuple[str, Any]] = []
    for line in lines:
        match = _DIRECT.match(line)
        if match is None:
            return None
        try:
            calls.append((match.group(1), json_limits.loads(match.group(2))))
        except ValueError:
            return None
    return calls or None


_ALIASES = ("web", "worker", "scheduler")


def _results_since_request(messages: Sequence[BaseMessage]) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, ToolMessage):
            try:
                payload = json_limits.loads(str(message.content))
            except ValueError:
                payload = {"status": "unparseable"}
            out.append((str(message.name or ""), payload))
    return list(reversed(out))


class OfflineDemoModel(BaseChatModel):
    """Deterministic, keyword-driven stand-in for a chat model (offline demo and smoke tests)."""

    @property
    def _llm_type(self) -> str:
        return "toolgate-offline-demo"

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """Remember which tools may be called, their definitions (for the token estimate and to
        fill the arguments of a forced call) and the ``tool_choice``, which the model honours
        (`toolgate.models.offline_choice`); other request options are accepted and ignored. A named
        choice that is not among ``tools`` raises ValueError, as a provider refuses it."""
        names = [
            t.get("function", t).get("name") if isinstance(t, dict) else getattr(t, "name", None)
            for t in tools
        ]
        bound = [n for n in names if n]
        definitions = [t if isinstance(t, dict) else {"name": getattr(t, "name", "")} for t in tools]
        choice = normalise_choice(tool_choice, bound)
        return self.bind(bound_tools=bound, tool_definitions=definitions, tool_choice=choice)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        bound = list(kwargs.get("bound_tools") or [])
        message = self._decide(messages, set(bound))
        request = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        results = _results_since_request(messages)
        message = honour_choice(
            normalise_choice(kwargs.get("tool_choice"), bound),
            message,
            bound=bound,
            definitions=kwargs.get("tool_definitions") or [],
            context=context_text(str(request.content) if request else "", results),
            results_summary="; ".join(f"{name}: {payload.get('status')}" for name, payload in results),
            turn=len([m for m in messages if isinstance(m, AIMessage)]),
        )
        message.usage_metadata = estimated_usage(messages, kwargs.get("tool_definitions") or [], message)
        message.response_metadata = {ESTIMATE_KEY: "estimated", "model_name": self._llm_type}
        return ChatResult(generations=[ChatGeneration(message=message)])

    def _decide(self, messages: list[BaseMessage], allowed: set[str]) -> AIMessage:
        request = next((m for m in reversed(messages) if isinstance(m, HumanMessage)), None)
        text = str(request.content) if request else ""
        results = _results_since_request(messages)
        turn = len([m for m in messages if isinstance(m, AIMessage)])

        def call(name: str, args: dict[str, Any]) -> AIMessage:
            if name not in allowed:
                return AIMessage(content=f"I am not able to use {name} for you.")
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": name,
                        "args": args,
                        "id": f"call_{name}_{turn}_{uuid.uuid4().hex[:8]}",
                        "type": "tool_call",
                    }
                ],
            )

        direct = direct_calls(text)
        if direct is not None:
            if results:
                return AIMessage(
                    content="; ".join(f"{name}: {payload.get('status')}" for name, payload in results)
                )
            unknown = [name for name, _ in direct if name not in allowed]
            if unknown:
                return AIMessage(content=f"I am not able to use {unknown[0]} for you.")
            return AIMessage(
                content="",
                tool_calls=[
                    {
                        "name": name,
                        "args": args,
                        "id": f"call_{name}_{turn}_{i}_{uuid.uuid4().hex[:8]}",
                        "type": "tool_call",
                    }
                    for i, (name, args) in enumerate(direct)
                ],
            )
        order = _ORDER.search(text)
        if "refund" in text.lower() and order:
            done = {name: payload for name, payload in results}
            if "issue_refund" in done:
                status = done["issue_refund"].get("status")
                return AIMessage(content=f"The refund request for {order.group(0)} is {status}.")
            lookup = done.get("lookup_order")
            if lookup is None:
                return call("lookup_order", {"order_id": order.group(0)})
            if lookup.get("status") != "completed":
                return AIMessage(content=f"I could not find order {order.group(0)} on your account.")
            data = lookup.get("data", {})
            remaining = int(data.get("amount_cents", 0)) - int(data.get("refunded_cents", 0))
            if remaining <= 0:
                return AIMessage(content=f"Order {order.group(0)} is already fully refunded.")
            return call(
                "issue_refund", {"order_id": order.group(0), "amount_cents": remaining, "reason": "damaged"}
            )
        alias = next((a for a in _ALIASES if re.search(rf"\b{a}\b", text.lower())), None)
        if alias and ("restart" in text.lower() or "status" in text.lower()):
            done = {name: payload for name, payload in results}
            if "restart_service" in done:
                return AIMessage(
                    content=f"The restart of {alias} is {done['restart_service'].get('status')}."
                )
            if "get_service_status" not in done:
                return call("get_service_status", {"service_alias": alias})
            if "restart" in text.lower():
                return call("restart_service", {"service_alias": alias, "reason": "requested by the user"})
            state = done["get_service_status"].get("data", {}).get("state", "unknown")
            return AIMessage(content=f"Service {alias} is {state}.")
        return AIMessage(content="I can look up orders, request refunds and check or restart services.")


__all__ = ["OfflineDemoModel", "direct_calls"]
