"""Every node runs behind the seal: check it first, seal what the node changed last.

A thread whose state was changed outside the gateway is refused once: one ``state.tampered``
audit event naming the changed keys, a `ToolMessage` for every call of the turn still waiting
for an answer, and ``status="refused"``, sealed, so later runs of the thread do nothing but say
so. Nothing in a refused thread runs again; the user starts a new thread.

A state whose seal verified (and that is not refused) is brought to the current schema version
before the node runs (`toolgate.graph.seals.versions`), and the migration is sealed with the
node's update; a version the seal does not vouch for is never sealed by a refusal. A state
newer than this code knows is not run: one ``state.refused`` audit event with the code
``state_version_unsupported`` per attempt, and `RunRefused`; nothing is written, so the code that
wrote it can still run it.

On the LangGraph server the guard also decides who is acting: the run context is rebuilt from the
server's auth handler and settings (`toolgate.graph.server.context`), never taken from the
client. A run refused for who is acting ends with `RunRefused`: a stable code and a readable
message the client sees (the server hides other errors as "internal").
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langgraph.runtime import Runtime

from toolgate.errors import IdentityError, RunRefused
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.messages import rejection_message
from toolgate.graph.nodes._common import context_of, thread_id
from toolgate.graph.nodes.response_audit import kept_response
from toolgate.graph.seals import versions as state_versions
from toolgate.graph.seals.seal import Sealer
from toolgate.graph.seals.updates import apply_update, chain_updates
from toolgate.graph.server.context import server_context
from toolgate.graph.state import GatewayState
from toolgate.policy.decisions import Rejection

Node = Callable[..., dict[str, Any]]

TAMPERED = Rejection(
    code="state_tampered",
    message="Not run: this task's saved state was changed outside the gateway. Nothing further runs in it.",
    retryable=False,
)


def unanswered_calls(state: GatewayState) -> list[tuple[str, str]]:
    """``(call_id, tool name)`` of the last model turn's calls that have no `ToolMessage` yet."""
    messages = state.get("messages", [])
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AIMessage):
            answered = {m.tool_call_id for m in messages[index + 1 :] if isinstance(m, ToolMessage)}
            calls = [*message.tool_calls, *message.invalid_tool_calls]
            return [
                (str(c.get("id")), str(c.get("name") or "unknown"))
                for c in calls
                if c.get("id") and c.get("id") not in answered
            ]
    return []


def _real_name(gw: Gateway, wire: str) -> str:
    """The tool's own name for the name a model used (its wire name), as people read it."""
    spec = gw.registry.get(wire)
    return spec.name if spec else wire


def refuse_tampered(
    gw: Gateway, state: GatewayState, ctx: Context, config: RunnableConfig, node: str, keys: list[str]
) -> dict[str, Any]:
    """Audit the tampering once and stop the thread. A model turn's event still waiting in this
    process, under a marker the seal vouches for, goes first in the same append (nothing else
    of the thread will link it; one that is not kept is not rebuilt from the changed state)."""
    principal = ctx.principal
    waiting = kept_response(state, config, trusted="unaudited_response" not in keys)
    waiting.record_all(
        gw.auditor,
        [
            gw.auditor.event(
                "state.tampered",
                "refused",
                user_id=principal.user_id if principal else None,
                tenant_id=principal.tenant_id if principal else None,
                code="state_tampered",
                thread_id=thread_id(config),
                request_id=ctx.request_id,
                trace_id=ctx.trace_id,
                detail={"keys": keys, "node": node},
            )
        ],
    )
    messages = [
        rejection_message(call_id, _real_name(gw, tool), TAMPERED)
        for call_id, tool in unanswered_calls(state)
    ]
    return {
        **waiting.update(),
        "messages": messages,
        "awaiting": [],
        "status": "refused",
        "status_reason": "state changed outside the gateway: " + ", ".join(keys),
    }


def refuse_unsupported(gw: Gateway, ctx: Context, task: str, node: str, version: int) -> RunRefused:
    """Audit a refusal to run a state newer than this code knows; the error to end the run with."""
    principal = ctx.principal
    latest = state_versions.latest_version()
    gw.auditor.record(
        "state.refused",
        "refused",
        user_id=principal.user_id if principal else None,
        tenant_id=principal.tenant_id if principal else None,
        code=state_versions.UNSUPPORTED,
        thread_id=task,
        request_id=ctx.request_id,
        trace_id=ctx.trace_id,
        detail={"version": version, "supported": latest, "node": node},
    )
    return RunRefused(
        state_versions.UNSUPPORTED,
        f"this task was saved by a newer toolgate (state version {version}; this one runs up to "
        f"{latest}). Nothing ran; run it where that version is deployed.",
    )


class GuardedNode:
    """One node behind the seal: ``fn`` (which takes the state and, if it names them, runtime and
    config) runs only on state the seal vouches for, and its update is sealed.

    A small callable object rather than a closure, for what compiling costs: each time a graph is
    compiled (every App open, every evaluation case) LangGraph looks for subgraphs inside each node
    by disassembling the bytecode of a function node and of what it reaches
    (``find_subgraph_pregel``), and a callable that is not a function is not inspected. No node
    of ours runs a subgraph (tests/test_graph_compile.py holds LangGraph's own search to that for
    every node function), so nothing is lost. LangGraph still reads the signature of `__call__`:
    ``runtime`` and ``config`` are injected as before."""

    def __init__(self, gw: Gateway, name: str, fn: Node) -> None:
        self.gateway = gw
        """The release's gateway the node runs with."""
        self.name = name
        """The node's name in the graph (audit events name it)."""
        self.fn = fn
        """The node itself, run on sealed and migrated state."""
        self.wants = frozenset(inspect.signature(fn).parameters) & {"runtime", "config"}
        """Which of runtime and config ``fn`` names (it gets only those)."""
        self.__name__ = name
        self.__doc__ = fn.__doc__

    def __repr__(self) -> str:
        return f"GuardedNode({self.name!r})"

    def __call__(
        self, state: GatewayState, runtime: Runtime[Context], config: RunnableConfig
    ) -> dict[str, Any]:
        gw, name, fn = self.gateway, self.name, self.fn
        task = thread_id(config)
        if gw.server_mode:
            user = runtime.server_info.user if runtime.server_info is not None else None
            trusted = server_context(context_of(runtime), user, gw.directory, gw.store.keys)
            runtime = runtime.override(context=trusted)
        sealer = Sealer(gw.store.keys, task)
        version = sealer.sealed_version(state)
        if version is not None and version > state_versions.latest_version():
            raise refuse_unsupported(gw, context_of(runtime), task, name, version)
        changed = sealer.tampered_keys(state)
        if changed:  # refused as it is: nothing, migrations included, runs on tampered state
            update = refuse_tampered(gw, state, context_of(runtime), config, name, changed)
            claimed = state.get("state_version")
            if claimed is not None and (type(claimed) is not int or claimed != version):
                update["state_version"] = None  # a version the seal does not vouch for is not sealed
            if name == "respond":  # the final answer still comes, saying the thread was refused
                final = fn(apply_update(state, update), **self._args(runtime, config))
                update = {**update, **final, "messages": [*update["messages"], *final.get("messages", [])]}
            return sealer.seal_update(state, update)
        refused = state.get("status") == "refused"
        if refused and name != "respond":  # nothing runs in a refused thread, not even a migration
            return {}
        migration = {} if refused else state_versions.pending_update(state)
        current = apply_update(state, migration) if migration else state
        try:
            update = fn(current, **self._args(runtime, config))
        except IdentityError as exc:  # a run by someone who is not this thread's principal
            who = context_of(runtime).principal
            gw.auditor.record(
                "identity.refused",
                "refused",
                user_id=who.user_id if who else None,
                code=exc.code,
                thread_id=task,
                detail={"node": name},
            )
            raise RunRefused(exc.code, str(exc)) from exc
        if migration:
            update = chain_updates(state, migration, update)
        return sealer.seal_update(state, update)

    def _args(self, runtime: Runtime[Context], config: RunnableConfig) -> dict[str, Any]:
        given = {"runtime": runtime, "config": config}
        return {k: v for k, v in given.items() if k in self.wants}


def guarded(gw: Gateway, name: str, fn: Node) -> Node:
    """``fn`` behind the seal (``fn`` takes the state and, if it names them, runtime and config):
    a `GuardedNode`."""
    return GuardedNode(gw, name, fn)


__all__ = ["TAMPERED", "GuardedNode", "guarded", "refuse_tampered", "refuse_unsupported", "unanswered_calls"]
