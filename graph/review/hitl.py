"""Reviewers' decisions sent with a resume, in LangChain's human-in-the-loop shape.

Chat UIs and LangGraph Studio answer an approval interrupt by resuming the thread with
``{"decisions": [{"type": "approve"}, {"type": "reject", "message": "..."},
{"type": "edit", "edited_action": {"name": ..., "args": {...}}}]}``, one decision per action
request, in order (the older agent-inbox list ``[{"type": "accept"}]``, ``response`` and ``ignore``
is understood too). The resume payload still carries no authority of its own: each decision is
recorded as the *authenticated* person resuming (the server's auth handler, or the embedding
application's context), through the same `decide` and `edit_proposal` as every other door, with
every rule applied and every refusal audited. A resume without decisions is only a wake-up. An
edit typed into a chat UI's form has its text read back as the kind of value it replaced
(`typed_like`), then is judged like any other edit.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.errors import ApprovalError, NotFoundError, ToolgateUsageError
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.review.edits import edit_proposal
from toolgate.policy.principal import Principal

Kind = Literal["approve", "reject", "edit", "ignore"]
_ALIASES: dict[str, Kind] = {
    "approve": "approve",
    "accept": "approve",
    "reject": "reject",
    "response": "reject",
    "edit": "edit",
    "ignore": "ignore",
}


@dataclass(frozen=True)
class Decision:
    """One reviewer decision, as parsed from a resume payload."""

    kind: Kind
    message: str = ""
    """The rejection's reason (``reject``'s ``message``, agent-inbox ``response``'s ``args``)."""
    tool: str | None = None
    """The edited action's tool (``edit``)."""
    arguments: dict[str, Any] | None = None
    """The edited action's arguments (``edit``)."""
    digest: str | None = None
    """The proposal digest the reviewer saw, when the client sends it (a toolgate extension)."""


def parse_decisions(resume: Any) -> list[Decision] | None:
    """The decisions in a resume value; None for a plain wake-up (no decisions at all).

    Raises `ApprovalError` (``malformed_decision``) for a shape that cannot be read."""
    raw: Any = resume.get("decisions") if isinstance(resume, dict) else resume
    if raw is None or (isinstance(resume, dict) and "decisions" not in resume):
        return None
    if not isinstance(raw, list) or not raw:
        raise ApprovalError(
            "malformed_decision", "decisions must be a non-empty list, one per action request"
        )
    return [_parse_one(item) for item in raw]


def _parse_one(item: Any) -> Decision:
    if not isinstance(item, dict) or _ALIASES.get(str(item.get("type"))) is None:
        raise ApprovalError(
            "malformed_decision",
            "each decision needs a type: approve, reject or edit (or accept, response, ignore)",
        )
    kind = _ALIASES[str(item["type"])]
    digest = item.get("digest") if isinstance(item.get("digest"), str) else None
    if kind == "reject":
        message = item.get("message", item.get("args"))
        return Decision("reject", message=message if isinstance(message, str) else "", digest=digest)
    if kind == "edit":
        action = item.get("edited_action") or item.get("args") or {}
        name = action.get("name", action.get("action")) if isinstance(action, dict) else None
        args = action.get("args") if isinstance(action, dict) else None
        if not isinstance(args, dict):
            raise ApprovalError(
                "malformed_decision", "an edit needs edited_action with args as one JSON object"
            )
        return Decision("edit", tool=name if isinstance(name, str) else None, arguments=args)
    return Decision(kind, digest=digest)


@dataclass(frozen=True)
class Outcome:
    """What applying one decision did, for the run's output and the next interrupt."""

    proposal_id: str
    decision: str
    result: Literal["recorded", "refused", "ignored"]
    code: str = ""
    message: str = ""
    new_proposal_id: str = ""

    def as_dict(self) -> dict[str, str]:
        """Plain form for checkpointed state."""
        return {k: v for k, v in self.__dict__.items() if v}


def apply_decisions(
    gw: Gateway, reviewer: Principal | None, proposals: Sequence[dict[str, Any]], resume: Any
) -> list[Outcome] | None:
    """Record each decision as ``reviewer``; None when the resume carried no decisions."""
    try:
        decisions = parse_decisions(resume)
    except ApprovalError as exc:
        return [_refused(p["proposal_id"], "malformed", exc) for p in proposals] or [
            Outcome("", "malformed", "refused", exc.code, str(exc))
        ]
    if decisions is None:
        return None
    if reviewer is None:
        refusal = ApprovalError("missing_reviewer", "decisions need an authenticated reviewer")
        return [
            _refused(p["proposal_id"], d.kind, refusal) for p, d in zip(proposals, decisions, strict=False)
        ]
    if len(decisions) != len(proposals):
        refusal = ApprovalError(
            "decision_count",
            f"{len(decisions)} decision(s) for {len(proposals)} action request(s); nothing recorded",
        )
        return [
            Outcome(p["proposal_id"], "mismatch", "refused", refusal.code, str(refusal)) for p in proposals
        ]
    return [
        _apply(gw, reviewer, proposal, decision)
        for proposal, decision in zip(proposals, decisions, strict=True)
    ]


def _apply(gw: Gateway, reviewer: Principal, proposal: dict[str, Any], decision: Decision) -> Outcome:
    pid = str(proposal["proposal_id"])
    try:
        if decision.kind == "ignore":
            return Outcome(pid, "ignore", "ignored")
        if decision.kind == "edit":
            assert decision.arguments is not None
            stored = gw.store.proposals.get(pid)
            arguments = typed_like(decision.arguments, stored.arguments if stored else {})
            edited = edit_proposal(
                gw, pid, reviewer, tool=decision.tool or str(proposal["tool"]), arguments=arguments
            )
            return Outcome(pid, "edit", "recorded", new_proposal_id=edited.proposal_id)
        if decision.kind == "approve" and decision.digest is None and _is_edit(gw, pid):
            # a resume names no interrupt: a bare approve lands on whatever the thread is paused
            # on now, and another reviewer's edit replaces what a stale chat UI still shows
            raise ApprovalError(
                "digest_required",
                "this is a reviewer's edit: approve it with the digest you reviewed (the console, the "
                "API or `toolgate approve` show it), so an approval sent from an older view never "
                "approves arguments it did not show",
            )
        decide(
            gw,
            pid,
            reviewer,
            decision.kind,
            reason=decision.message,
            seen_digest=decision.digest or str(proposal["digest"]),
        )
        return Outcome(pid, decision.kind, "recorded")
    except (ToolgateUsageError, NotFoundError) as exc:
        return _refused(pid, decision.kind, exc)


def _is_edit(gw: Gateway, proposal_id: str) -> bool:
    """True when the stored proposal replaces another (a reviewer's edit)."""
    stored = gw.executor.proposal(proposal_id)  # immutable: read once per process
    return stored is not None and bool(stored.supersedes)


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return "string" if isinstance(value, str) else "other"


def typed_like(edited: dict[str, Any], original: Mapping[str, Any]) -> dict[str, Any]:
    """Edited arguments with a chat form's text read back as the kind of value it replaced.

    agent-chat-ui's edit form is text fields: a number, flag, list or object the reviewer changed
    comes back as text (``"700"``). Where the original argument was not text and the text is JSON
    of the same kind, the edit is that value; anything else stays as sent, for the tool's schema
    to judge (and refuse with its reason). Only the form's top-level fields are read back."""
    typed = dict(edited)
    for name, value in edited.items():
        before = original.get(name)
        if not isinstance(value, str) or _json_kind(before) in ("string", "other"):
            continue
        try:
            parsed = json.loads(value)
        except ValueError:
            continue
        if _json_kind(parsed) == _json_kind(before):
            typed[name] = parsed
    return typed


def _refused(proposal_id: str, decision: str, exc: Exception) -> Outcome:
    return Outcome(proposal_id, decision, "refused", str(getattr(exc, "code", "refused")), str(exc)[:300])


__all__ = ["Decision", "Outcome", "apply_decisions", "parse_decisions", "typed_like"]
