"""Shadowing a candidate release: its decisions on the control's traffic, recorded, never run.

During a rollout's ``shadow`` phase every model turn of a control thread is shown to the
candidate too: its model gets the same messages with the candidate's tools for the same
principal, and each call it proposes is judged by the candidate's authority in peek mode
(`Authority.at_dispatch`, no rate limit is counted). The control's calls of the same turn are
judged the same way, so both sides are compared on equal terms. Only the comparison is written
(`RolloutStore.record_shadow`): the shadow calls no handler, makes no proposal or operation,
writes to no system of record and adds nothing to the thread's state. A failing candidate never
fails the control's turn; its record says why. That includes loading it: the candidate is code
this process may be unable to load (its package raises, its bundle drifted on this host), so it is
loaded inside the shadow and such a turn is recorded with the error, never raised into the control.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from langchain_core.messages import AIMessage, SystemMessage

from toolgate.canonical import digest
from toolgate.graph.context import Context
from toolgate.graph.gateway import Gateway
from toolgate.graph.nodes._bounds import screen_response
from toolgate.graph.nodes.dispatch import proposed_calls
from toolgate.graph.nodes.model import invoke_unobserved
from toolgate.graph.nodes.tool_offer import conversation_of
from toolgate.policy.output import redact_text
from toolgate.policy.principal import Principal
from toolgate.policy.tool_selection import select_tools
from toolgate.store.rollout import RolloutStore
from toolgate.store.rollout_records import Rollout, ShadowRecord

DEFAULT_MAX_IDENTICAL = 2


def judge_turn(
    gw: Gateway,
    principal: Principal,
    response: AIMessage,
    screened: Mapping[str, str],
    counts: Mapping[str, int],
    max_identical: int,
) -> list[dict[str, Any]]:
    """What ``gw``'s dispatch would decide about each call of ``response``, counting nothing."""
    now = gw.store.now()
    seen = dict(counts)
    decisions: list[dict[str, Any]] = []
    for call in proposed_calls(response):
        code = screened.get(call.call_id)
        if code is not None:
            spec = gw.registry.get(call.name)
            decisions.append(
                {
                    "tool": spec.name if spec else "unknown",
                    "requested": None,
                    "arguments_sha256": None,
                    "decision": code,
                }
            )
            continue
        verdict = gw.authority.at_dispatch(
            principal, call, counts=seen, max_identical_calls=max_identical, now=now, peek=True
        )
        if verdict.fingerprint:
            seen[verdict.fingerprint] = seen.get(verdict.fingerprint, 0) + 1
        spec = verdict.spec
        decision: str
        if verdict.rejection is not None:
            decision = verdict.rejection.code
        else:
            assert spec is not None
            decision = "proposal_required" if spec.is_write else "allowed"
        decisions.append(
            {
                "tool": spec.name if spec else "unknown",
                "requested": None if spec else redact_text(call.name)[:64],
                "arguments_sha256": digest(verdict.arguments) if verdict.arguments else None,
                "decision": decision,
            }
        )
    return decisions


def ask_candidate(
    candidate: Gateway, principal: Principal, history: list[Any], ctx: Context
) -> tuple[AIMessage, dict[str, str]]:
    """The candidate model's response to the control's messages, with the candidate's tools and
    instructions, screened as its model node would screen it (unobserved, untraced)."""
    # the tools the candidate's own model node would offer for this conversation (at most N)
    conversation = conversation_of({"messages": history})
    offered = select_tools(
        candidate.registry, principal, conversation, ctx.max_tools_per_request, now=candidate.store.now()
    )[1]
    runnable = candidate.model_for(offered)
    response = invoke_unobserved(runnable, [SystemMessage(candidate.instructions), *history])
    if not isinstance(response, AIMessage):
        response = AIMessage(content=str(getattr(response, "content", response)))
    screened_response, screened = screen_response(
        response, candidate.registry, max_calls=ctx.max_calls_per_turn
    )
    return screened_response, screened


def _key(decisions: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return sorted((d["tool"], d.get("arguments_sha256") or "", d["decision"]) for d in decisions)


def shadow_turn(
    *,
    control: Gateway,
    candidate: Callable[[], Gateway],
    rollout: Rollout,
    thread_id: str,
    state: Mapping[str, Any],
    update: Mapping[str, Any],
    ctx: Context,
) -> ShadowRecord | None:
    """Shadow one control model turn (``update`` is what the control's model node returned for
    ``state``; ``candidate`` loads the candidate's gateway); the record written, or None when the
    turn had no new response to compare."""
    messages = update.get("messages") or []
    response = messages[0] if messages else None  # the model's response (a final answer follows it)
    recorded = update.get("principal") or state.get("principal")  # unchanged keys are not written
    if (
        update.get("status") in ("needs_review", "refused")
        or not isinstance(response, AIMessage)
        or not recorded
    ):
        return None
    principal = Principal.from_dict(recorded)
    budget = update.get("budget") or state.get("budget") or {}
    max_identical = int(budget.get("max_identical_calls", DEFAULT_MAX_IDENTICAL))
    counts = state.get("call_counts") or {}
    control_decisions = judge_turn(
        control, principal, response, update.get("screened") or {}, counts, max_identical
    )
    error: str | None = None
    shadowing: Gateway | None = None
    try:
        shadowing = candidate()
        shadow_response, screened = ask_candidate(shadowing, principal, list(state.get("messages", [])), ctx)
        candidate_decisions = judge_turn(
            shadowing, principal, shadow_response, screened, counts, max_identical
        )
    except Exception as exc:  # the candidate's failure is evidence, never the control's failure
        candidate_decisions, error = [], type(exc).__name__
    record = ShadowRecord(
        rollout_id=rollout.rollout_id,
        thread_id=thread_id,
        turn=int(budget.get("model_turns", 0)),
        control_release=control.registry.release,
        candidate_release=shadowing.registry.release if shadowing is not None else rollout.candidate,
        control=control_decisions,
        candidate=candidate_decisions,
        matched=error is None and _key(control_decisions) == _key(candidate_decisions),
        error=error,
    )
    RolloutStore(control.store).record_shadow(record)
    return record


__all__ = ["ask_candidate", "judge_turn", "shadow_turn"]
