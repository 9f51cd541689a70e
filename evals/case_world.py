"""The world one evaluation case runs in: its store and clock, its people, what it finds used.

Every case runs on its own copy of the runner's template store (`toolgate.evals.runner`). This
module is what makes that copy the case's own world:

- **The clock.** `CaseStore` is an SQLite store whose clock stands still at the moment the case
  began (or at the case's ``starts_at``: a rule of opening hours is probed at chosen times of
  day) and moves only when the case says so (a reviewer deciding ``after_minutes`` later). Every
  time the store judges by (approval expiry, leases, rate-limit windows, recorded times) is then
  the case's, never the machine's: a case that pre-fills a one-minute rate window cannot see the
  minute roll over, and an expiry case needs no waiting. Time the process measures (handler
  deadlines, the systems of record's own clocks) stays real.
- **The people.** `EvalCase.people` are applied to the copy only: a known person with other roles
  or scopes (a customer who is also a finance requester, in this case alone), or someone new
  (the reviewers a generated case needs). Ownership is by user id, so a person keeps owning their
  orders whatever roles the case gives them.
- **What is already used.** A ``rate_window_used`` fault fills the window the case's first call
  counts in, as if other calls had come before it.
- **What the model copies.** `CaseScriptModel` is the scripted model of the case; a call whose
  ``from_results`` names an earlier call's result gets those values from the result the model
  was really sent (a preview token is only known once the preview ran), or from the result of
  the case's prelude, a thread someone else ran first (`prelude_results`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from langchain_core.outputs import ChatResult
from pydantic import Field

from toolgate.clock import iso, utcnow
from toolgate.evals.fixtures import EvalCase, Fault
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.policy.ratelimit import bucket_of
from toolgate.policy.rules import RateLimits
from toolgate.store.base import Tx
from toolgate.store.sqlite import SQLiteStore
from toolgate.testing import ScriptedChatModel
from toolgate.tools.registry import Registry


class CaseStore(SQLiteStore):
    """An SQLite store whose clock is the case's: it starts when the store is opened and moves
    only forward, and only when `advance_to` is called."""

    def __init__(self, path: str | Path, *, key: bytes, started: datetime | None = None) -> None:
        super().__init__(path, key=key)
        self.started = started or utcnow()
        self._offset = timedelta(0)
        self._clock_lock = threading.Lock()

    def now(self) -> datetime:
        """The case's time: when it began, plus what the case has advanced."""
        with self._clock_lock:
            return self.started + self._offset

    def _tx_now(self, tx: Tx) -> str:
        return iso(self.now())

    def _chain_head(self, tx: Tx) -> tuple[str, str]:
        _, head = super()._chain_head(tx)
        return iso(self.now()), head

    def advance_to(self, minutes: float) -> None:
        """Move the clock to ``minutes`` after the case began (never backwards)."""
        with self._clock_lock:
            self._offset = max(self._offset, timedelta(minutes=minutes))


def apply_people(store: CaseStore, case: EvalCase) -> dict[str, Principal]:
    """Put the case's people into its store (a known user id gets the case's roles and scopes);
    returns them by user id."""
    directory = IdentityDirectory(store)
    people: dict[str, Principal] = {}
    for raw in case.people:
        person = Principal.from_dict(raw)
        if directory.add(person, by=None, token=f"eval-token-{person.user_id}") is None:
            record = store.identities.get(person.user_id)
            if record is None or record.tenant_id != person.tenant_id:
                raise ValueError(f"case person {person.user_id!r} exists in another tenant")
            directory.change_roles(person.user_id, roles=person.roles, scopes=person.scopes, by=None)
        people[person.user_id] = person
    return people


def use_rate_windows(
    store: CaseStore,
    faults: Sequence[Fault],
    limits: RateLimits,
    principal: Principal,
    registry: Registry,
    case: EvalCase,
) -> None:
    """Count each ``rate_window_used`` fault's calls into the window the case's first call falls
    in (the principal's, the first call's tool's, the tenant's or the global window)."""
    first = next((call for turn in case.turns for call in turn), None)
    tool = registry.get(first.name) if first is not None else None
    for fault in faults:
        if fault.kind != "rate_window_used":
            continue
        bucket, window = _window(fault, limits, principal, tool.name if tool else "", tool)
        if window is None:
            continue  # the release declares no such window: nothing to fill
        for _ in range(fault.count):
            store.counters.increment(bucket, window)


def _window(
    fault: Fault, limits: RateLimits, principal: Principal, tool_name: str, tool: Any
) -> tuple[str, int | None]:
    """The bucket and window length `toolgate.policy.ratelimit.InboundRateLimiter` counts in."""
    if fault.window == "per_principal_tool":
        found = limits.per_principal_tool
        return bucket_of("per_principal_tool", principal, tool_name), found.window_s if found else None
    if fault.window == "tool":
        own = tool.rate_limit if tool is not None else None
        return bucket_of("tool", principal, tool_name), own.window_s if own else None
    if fault.window == "per_tenant":
        found = limits.per_tenant
        return bucket_of("per_tenant", principal, tool_name), found.window_s if found else None
    found = limits.global_
    return bucket_of("global", principal, tool_name), found.window_s if found else None


class CaseScriptModel(ScriptedChatModel):
    """The case's scripted model: each response as scripted, except the arguments a call copies
    from earlier results (``ScriptedCall.from_results``), filled from what the model was sent."""

    references: dict[str, dict[str, str]] = Field(default_factory=dict)
    """Per call id, ``{argument: "call_id.path"}``."""
    earlier: dict[str, str] = Field(default_factory=dict)
    """Results of the case's prelude thread, ``{"prelude.<call id>": tool message text}``."""

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        result = super()._generate(messages, stop, run_manager, **kwargs)
        message = result.generations[0].message
        if not self.references or not isinstance(message, AIMessage) or not message.tool_calls:
            return result
        results = {m.tool_call_id: str(m.content) for m in messages if isinstance(m, ToolMessage)}
        results.update(self.earlier)
        calls = []
        for call in message.tool_calls:
            wanted = self.references.get(str(call.get("id")), {})
            args = dict(call["args"])
            for argument, path in wanted.items():
                found = _copied(results, path)
                if found is None:
                    args.pop(argument, None)
                else:
                    args[argument] = found
            calls.append({**call, "args": args})
        result.generations[0].message = message.model_copy(update={"tool_calls": calls})
        return result


def _copied(results: Mapping[str, str], path: str) -> Any:
    """The value at ``call_id.a.b`` (or ``prelude.call_id.a.b``) in the ``data`` of that call's
    result, or None."""
    call_id, _, rest = path.partition(".")
    if call_id == "prelude":
        inner, _, rest = rest.partition(".")
        call_id = f"prelude.{inner}"
    text = results.get(call_id)
    if text is None:
        return None
    try:
        value: Any = json.loads(text).get("data")
    except (ValueError, AttributeError):
        return None
    for part in rest.split(".") if rest else ():
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def prelude_results(messages: Sequence[BaseMessage]) -> dict[str, str]:
    """The tool results of a prelude thread, as `CaseScriptModel.earlier` holds them."""
    return {f"prelude.{m.tool_call_id}": str(m.content) for m in messages if isinstance(m, ToolMessage)}


def references_of(case: EvalCase) -> dict[str, dict[str, str]]:
    """``from_results`` of the case's calls, by call id."""
    return {call.id: dict(call.from_results) for turn in case.turns for call in turn if call.from_results}


__all__ = [
    "CaseScriptModel",
    "CaseStore",
    "apply_people",
    "prelude_results",
    "references_of",
    "use_rate_windows",
]
