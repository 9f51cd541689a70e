"""One MCP ``tools/call`` as a graph task: the same dispatch, proposal, approval and execute path.

Why a task per call: an MCP client is its own agent, so each call it makes is one task of the
gateway graph, run by the client's authenticated principal (`ClientCallModel` puts the call where
a model's call enters). Dispatch, proposal, approval and execute then judge it exactly as they
judge a graph call, with the same store records and audit trail; nothing here decides anything.

Why the thread id is derived: a retried call must find the task the first attempt started. The
thread id is a digest of the session principal (tenant, user) and the call's request key: the
client's own id (``_meta["toolgate/request_id"]``) when it sends one, else, for a write, the tool
and its canonical arguments (a client that re-sends the same write after a timeout collides with
it on purpose, as a model does in a graph thread). A read without a request id is a new task each
time (it has no effect to repeat). A call whose task exists is answered from it (its stored
result, or its proposal still waiting), never run again; even a run again could make no second
effect, since the operation key comes from the thread (the claim in execute refuses a second).

A write answers with its proposal (`proposal_answer`); the task then waits at the approval
interrupt. `McpGate.outcome` answers later by proposal id, for the requester only: once a reviewer
decided, it wakes the task (a resume is a wake-up; the approval records in the store are the
authority), which executes the approved call once and answers its result.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from toolgate import json_limits
from toolgate.canonical import digest
from toolgate.clock import parse_iso
from toolgate.errors import NotFoundError
from toolgate.graph.bootstrap import App
from toolgate.graph.context import Context
from toolgate.graph.mcp.relay import call_id_of, call_request
from toolgate.models.offline import direct_calls
from toolgate.policy.authorization import visible_tools
from toolgate.policy.principal import Principal
from toolgate.store.records import ProposalRecord
from toolgate.tools.spec import ToolSpec, is_retired

REQUEST_ID_META = "toolgate/request_id"
"""The ``_meta`` key of a ``tools/call`` that names the client's own request id (its retries
send the same one)."""
OUTCOME_TOOL = "toolgate_outcome"
"""The tool a client asks the outcome of one of its proposals with."""
REQUEST_ID_REUSED = "request_id_reused"
"""The refusal of a call whose request id names the task of another call (another tool or
other arguments): answering it from that task would report another call's outcome as its own."""
FINISHED_OK = frozenset({"completed", "succeeded"})
"""Statuses of a call result that are not an error for the client."""


@dataclass(frozen=True)
class CallAnswer:
    """What a ``tools/call`` answers: a JSON object, and whether it is an error result."""

    payload: dict[str, Any]
    """The result as structured content (its JSON text is the content too)."""
    is_error: bool = False
    """A refused or failed call (MCP ``isError``); a proposal waiting for review is not one."""
    proposal_id: str | None = None
    """The proposal still waiting for a reviewer, when the call is a write not yet decided."""


@dataclass(frozen=True, kw_only=True)
class ReviewPlaces:
    """Where a reviewer decides a proposal, shown with every proposal the client gets."""

    base_url: str | None = None
    """The approval API and console this server (or the operator's LangGraph server) serves,
    e.g. ``http://127.0.0.1:8765``; None: only the CLI."""

    def of(self, proposal_id: str) -> dict[str, str]:
        """The console, API route and CLI command that decide ``proposal_id``."""
        places = {"cli": f"toolgate approve {proposal_id} --as REVIEWER"}
        if self.base_url:
            base = self.base_url.rstrip("/")
            places["console"] = f"{base}/console"
            places["api"] = f"{base}/toolgate/proposals/{proposal_id}"
        return places


def thread_for(principal: Principal, tool: str, arguments: Mapping[str, Any], request_key: str | None) -> str:
    """The task (thread) id of a call (see the module doc): principal plus request key."""
    key: Any = {"request_id": request_key} if request_key is not None else {"tool": tool, "args": arguments}
    return "mcp-" + digest({"tenant": principal.tenant_id, "user": principal.user_id, "key": key})[:32]


@dataclass
class McpGate:
    """The gateway as one MCP server process serves it: one `App`, its graph, one task per call."""

    app: App
    graph: Any
    """The compiled graph (with a checkpointer) around ``app``'s gateways, relaying the client."""
    review: ReviewPlaces = field(default_factory=ReviewPlaces)
    _locks: dict[str, threading.Lock] = field(default_factory=dict, repr=False)
    _guard: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def authenticate(self, token: str | None, source: str | None = None) -> Principal:
        """The session's principal from its bearer token (missing, unknown, rotated and revoked
        tokens refused `IdentityError`, audited ``identity.refused`` by the directory; failures
        throttled per ``source``, an HTTP client's address: `SignInThrottled`)."""
        return self.app.gateway.directory.authenticate_bearer(token, source=source)

    def tools(self, principal: Principal) -> list[ToolSpec]:
        """The tools ``principal`` may see and still call, as a model acting for them is offered."""
        now = self.app.store.now()
        return [s for s in visible_tools(self.app.registry, principal) if not is_retired(s, now)]

    def call(
        self, principal: Principal, tool: str, arguments: dict[str, Any], request_key: str | None
    ) -> CallAnswer:
        """Run (or find) the task of one call and answer it: a read's result, a write's proposal,
        or the refusal dispatch made, all from the task's records."""
        spec = self.app.registry.get(tool)
        if request_key is None and (spec is None or not spec.is_write):
            request_key = f"once:{uuid.uuid4().hex}"  # a read: nothing to repeat
        thread = thread_for(principal, tool, arguments, request_key)
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        with self._task(thread):
            snapshot = self.graph.get_state(config)
            if not snapshot.values.get("calls"):
                message = HumanMessage(call_request(tool, arguments), id=f"req-{thread}")
                self.graph.invoke({"messages": [message]}, config, context=Context(principal=principal))
            elif _asked(snapshot.values, thread) != _request_identity(call_request(tool, arguments)):
                said = "this request id names another call; send a new one"
                return self._refused(principal, tool, thread, REQUEST_ID_REUSED, said)
            elif snapshot.next and not snapshot.interrupts:  # a run that stopped half way: go on
                self.graph.invoke(None, config, context=Context(principal=principal))
            return self._answer(thread)

    def _refused(self, principal: Principal, tool: str, thread: str, code: str, message: str) -> CallAnswer:
        """A call refused before any task ran for it, audited ``mcp.request_refused``."""
        self.app.gateway.auditor.record(
            "mcp.request_refused",
            "refused",
            user_id=principal.user_id,
            tenant_id=principal.tenant_id,
            code=code,
            tool=tool,
            thread_id=thread,
        )
        return CallAnswer({"status": "refused", "error": code, "message": message}, is_error=True)

    def outcome(self, principal: Principal, proposal_id: str) -> CallAnswer:
        """The outcome of one of ``principal``'s own proposals: waiting, or (once a reviewer
        decided) its task woken to execute or record the refusal, and its result. Anyone else's
        proposal, or an unknown id, is `NotFoundError` alike."""
        proposal = self.own_proposal(principal, proposal_id)
        if self.decided(proposal_id):
            self.wake(proposal)
        return self._answer(proposal.thread_id)

    def own_proposal(self, principal: Principal, proposal_id: str) -> ProposalRecord:
        """``proposal_id`` when ``principal`` requested it through this door, else `NotFoundError`."""
        proposal = self.app.store.proposals.get(proposal_id)
        if (
            proposal is None
            or proposal.tenant_id != principal.tenant_id
            or proposal.requester_id != principal.user_id
            or not proposal.thread_id.startswith("mcp-")
        ):
            raise NotFoundError(f"no proposal {proposal_id}")
        return proposal

    def decided(self, proposal_id: str) -> bool:
        """Whether ``proposal_id`` left ``pending_approval`` (a reviewer decided, or it expired)."""
        proposal = self.app.store.proposals.get(proposal_id)
        if proposal is None:
            return True
        operation = self.app.store.operations.get(proposal.operation_key)
        if operation is None or operation.status != "pending_approval":
            return True
        return self.app.store.now() >= parse_iso(proposal.expires_at)

    def wake(self, proposal: ProposalRecord) -> None:
        """Resume the task waiting on ``proposal``: it re-reads the store's approval records."""
        self.wake_task(proposal.thread_id)

    def wake_task(self, thread: str) -> bool:
        """Resume the task ``thread`` when it is one of this door's and waits; True when it ran."""
        if not thread.startswith("mcp-"):
            return False
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        with self._task(thread):
            snapshot = self.graph.get_state(config)
            if not snapshot.next:
                return False
            self.graph.invoke(Command(resume={"wake": True}), config, context=Context())
            return True

    def _answer(self, thread: str) -> CallAnswer:
        """The answer of a task, from its checkpointed records and the store."""
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        snapshot = self.graph.get_state(config)
        values = snapshot.values
        call_id = call_id_of(f"req-{thread}")
        record = (values.get("calls") or {}).get(call_id)
        for message in values.get("messages") or []:
            if isinstance(message, ToolMessage) and message.tool_call_id == call_id:
                payload = _payload(message)
                payload.setdefault("tool", record.get("tool") if record else None)
                if record and record.get("proposal_id"):
                    payload["proposal_id"] = record["proposal_id"]
                return CallAnswer(payload, is_error=payload.get("status") not in FINISHED_OK)
        if record is not None and record.get("proposal_id"):
            proposal = self.app.store.proposals.get(record["proposal_id"])
            if proposal is not None:
                return CallAnswer(self.proposal_answer(proposal), proposal_id=proposal.proposal_id)
        reason = values.get("status_reason") or "the call was not run"
        return CallAnswer({"status": values.get("status") or "refused", "error": reason}, is_error=True)

    def proposal_answer(self, proposal: ProposalRecord) -> dict[str, Any]:
        """A write waiting for review, as the client is told: what exactly was proposed, until when,
        and where a reviewer decides it."""
        operation = self.app.store.operations.get(proposal.operation_key)
        return {
            "status": operation.status if operation is not None else "pending_approval",
            "tool": proposal.tool,
            "proposal_id": proposal.proposal_id,
            "digest": proposal.digest,
            "arguments": proposal.arguments,
            "risk": proposal.risk,
            "effect": proposal.effect,
            "approval": proposal.approval_class,
            "expires_at": proposal.expires_at,
            "review": self.review.of(proposal.proposal_id),
            "outcome": {"tool": OUTCOME_TOOL, "arguments": {"proposal_id": proposal.proposal_id}},
        }

    @contextmanager
    def _task(self, thread: str) -> Iterator[None]:
        """One run of a task at a time in this process (a retry waits for the first attempt)."""
        with self._guard:
            lock = self._locks.setdefault(thread, threading.Lock())
        with lock:
            yield


def _request_identity(request: str) -> str:
    """The call a request message asks for, as its identity: its tool and canonical arguments
    (``30`` and ``30.0`` are one), read as the relay reads it; the text itself when it reads as
    no call or has no canonical form."""
    calls = direct_calls(request)
    if not calls:
        return request
    name, arguments = calls[0]
    try:
        return digest({"tool": name, "args": arguments})
    except (TypeError, ValueError):
        return request


def _asked(values: Mapping[str, Any], thread: str) -> str | None:
    """`_request_identity` of the call the task ``thread`` was started with."""
    for message in values.get("messages") or []:
        if isinstance(message, HumanMessage) and message.id == f"req-{thread}":
            return _request_identity(str(message.content))
    return None


def _payload(message: ToolMessage) -> dict[str, Any]:
    try:
        loaded = json_limits.loads(str(message.content))
    except ValueError:
        return {"status": "failed", "error": "unreadable_result"}
    return dict(loaded) if isinstance(loaded, dict) else {"status": "completed", "data": loaded}


__all__ = [
    "FINISHED_OK",
    "OUTCOME_TOOL",
    "REQUEST_ID_META",
    "REQUEST_ID_REUSED",
    "CallAnswer",
    "McpGate",
    "ReviewPlaces",
    "thread_for",
]
