"""What one model request offers: the relevant tools (`toolgate.policy.tool_selection`) and the
tool choice for this step.

The release's ``tool_choice`` (`toolgate.releases.bundle.Release.tool_choice`) applies per step:

- on the last model turn the task's budget allows, ``none``: the model must answer in text, since
  no call it proposed could run and be reported;
- ``required`` or a named tool applies to the model turn that answers a new user request (later
  turns of the task are ``auto``, so the model can report what ran); a named tool is forced only
  when it is among the tools offered (so the principal may see it), else the step is ``auto`` and
  a ``model.tool_choice`` event (``named_tool_not_offered``) is audited;
- ``auto`` and ``none`` apply to every turn;
- a model that cannot be forced (Anthropic with extended thinking refuses ``required`` and named
  choices) gets ``auto`` instead, audited (``forced_choice_unsupported``);
- a request that offers no tool at all (the principal sees none) is recorded as ``none``;
- a tool past its deprecation window on the store's clock is never offered (every call of it is
  refused ``tool_deprecated``); the ``model.response`` event names it in ``tools_retired``. A
  retired tool named as the tool choice falls back to ``auto`` like any tool not offered.

The conversation the selector reads comes from checkpointed state, which is untrusted: it only
changes which of the principal's visible tools are offered, never what is visible.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from toolgate.graph.state import GatewayState
from toolgate.policy.principal import Principal
from toolgate.policy.tool_selection import Conversation, select_tools
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec, is_retired

FALLBACK_CODE = "named_tool_not_offered"
"""Audited when a named tool choice falls back to ``auto``."""
UNFORCEABLE_CODE = "forced_choice_unsupported"
"""Audited when the model cannot be forced (Anthropic with extended thinking) and a forced step
is sent as ``auto``."""


@dataclass(frozen=True)
class Offer:
    """The tools and the tool choice of one model request."""

    visible: list[ToolSpec]
    offered: list[ToolSpec]
    tool_choice: str
    """``auto``, ``required``, ``none`` or the real name of a tool in ``offered``."""
    fallback_from: str | None = None
    fallback_code: str = FALLBACK_CODE
    """The named tool the release set when it could not be forced (the step is ``auto``)."""
    retired: tuple[str, ...] = ()
    """Visible tools withheld because their deprecation window has ended."""


def _keys(value: Any, out: set[str], depth: int = 0) -> None:
    if depth > 4:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            out.add(str(key))
            _keys(item, out, depth + 1)
    elif isinstance(value, list):
        for item in value[:50]:
            _keys(item, out, depth + 1)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else []
    return " ".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in parts)


def conversation_of(state: GatewayState) -> Conversation:
    """The latest request and this task's tool use, read from ``state``'s messages and calls."""
    messages = state.get("messages", [])
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    request = _text(messages[start].content) if start >= 0 else ""
    called: set[str] = set()
    keys: set[str] = set()
    for message in messages[start + 1 :]:
        if isinstance(message, AIMessage):
            called.update(str(c.get("name") or "") for c in message.tool_calls)
        elif isinstance(message, ToolMessage):
            try:
                _keys(json.loads(str(message.content)), keys)
            except ValueError:
                continue
    pending = {
        str(c.get("tool") or "") for c in (state.get("calls") or {}).values() if c.get("phase") == "proposed"
    }
    return Conversation(
        request=request, called=frozenset(called), result_keys=frozenset(keys), pending=frozenset(pending)
    )


def step_choice(
    setting: str, offered: Iterable[ToolSpec], *, new_turn: bool, last_turn: bool
) -> tuple[str, str | None]:
    """``(choice, fallback_from)`` for one step (see the module doc)."""
    if last_turn or setting == "none":
        return "none", None
    if setting == "auto" or not new_turn:
        return "auto", None
    if setting == "required":
        return "required", None
    if any(s.name == setting for s in offered):
        return setting, None
    return "auto", setting


def offer_for(
    registry: Registry,
    principal: Principal,
    state: GatewayState,
    *,
    limit: int,
    setting: str,
    new_turn: bool,
    last_turn: bool,
    now: datetime,
    can_force: bool = True,
) -> Offer:
    """The tools and tool choice of this model request (``now``: the store's clock, which judges
    deprecation windows; ``can_force`` False: the model refuses ``required`` and named choices,
    which are then sent as ``auto`` and audited)."""
    visible, offered = select_tools(registry, principal, conversation_of(state), limit, now=now)
    choice, fallback = step_choice(setting, offered, new_turn=new_turn, last_turn=last_turn)
    code = FALLBACK_CODE
    if not offered:  # no tool is bound at all: the request can only be answered
        choice = "none"
    elif not can_force and choice not in ("auto", "none"):
        choice, fallback, code = "auto", choice, UNFORCEABLE_CODE
    return Offer(
        visible=visible,
        offered=offered,
        tool_choice=choice,
        fallback_from=fallback,
        fallback_code=code,
        retired=tuple(s.name for s in visible if is_retired(s, now)),
    )


def offer_detail(offer: Offer) -> dict[str, Any]:
    """The offer as the ``model.response`` audit detail records it (names only): a trace shows
    what the model was offered and with which choice; a named tool that could not be forced is
    recorded with ``tool_choice_fallback``."""
    detail: dict[str, Any] = {
        "tools_offered": sorted(s.name for s in offer.offered),
        "tool_choice": offer.tool_choice,
    }
    if offer.fallback_from is not None:
        detail["tool_choice_fallback"] = {"configured": offer.fallback_from, "code": offer.fallback_code}
    if offer.retired:
        detail["tools_retired"] = list(offer.retired)
    return detail


__all__ = [
    "FALLBACK_CODE",
    "UNFORCEABLE_CODE",
    "Offer",
    "conversation_of",
    "offer_detail",
    "offer_for",
    "step_choice",
]
