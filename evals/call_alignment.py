"""How a live model's tool calls are matched to the call ids a dataset case names.

A case states its expectations per scripted call id (``expected.calls``, ``approvals[].call_id``);
a live model names its calls itself (``call_3f9a...``, ``toolu_01...``). The rule is positional:
the k-th tool call the run's model makes is the case's k-th scripted call. Calls are counted
response by response, in the order the thread keeps the model's responses, and within a response
as LangChain lists them (its parsed calls, then those whose arguments could not be parsed or that
the gateway set aside); the scripted calls are counted the same way over the scripted turns.

So a model that makes the scripted calls in the scripted order is scored exactly like the script,
one that picks another tool is scored on that call under the scripted id, and:

* a scripted call the live model never made has no live call: it is ``not_run``;
* a live call beyond the script keeps its own id (prefixed ``unscripted:`` should it equal a
  scripted id) and is judged only by the case-wide expectations: handler invocations, proposals,
  operations, refusal, status and unsafe effects.

A scripted run needs none of this: its calls carry the scripted ids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage

from toolgate.evals.fixtures import EvalCase
from toolgate.evals.observation import Observation

UNSCRIPTED = "unscripted:"
"""Prefix of a live call id beyond the script that would otherwise collide with a scripted one."""


def listed_calls(message: AIMessage) -> list[Mapping[str, Any]]:
    """The calls of one model response, in the order the rule counts them."""
    return [*message.tool_calls, *message.invalid_tool_calls]


def model_responses(messages: Iterable[BaseMessage]) -> list[AIMessage]:
    """The model's own responses in a thread (not the final answers the gateway writes itself,
    which it names ``toolgate``)."""
    return [m for m in messages if isinstance(m, AIMessage) and m.name != "toolgate"]


def scripted_ids(case: EvalCase) -> list[str]:
    """The case's scripted call ids in counting order (each turn: parsed calls, then raw ones)."""
    out: list[str] = []
    for turn in case.turns:
        parsed = [c.id for c in turn if c.raw is None and isinstance(c.args, dict)]
        out += parsed + [c.id for c in turn if c.id not in parsed]
    return out


def alignment(case: EvalCase, messages: Iterable[BaseMessage]) -> dict[str, str]:
    """Live call id -> the id the case's expectations use for it (see the module doc)."""
    script = scripted_ids(case)
    taken = set(script)
    out: dict[str, str] = {}
    position = 0
    for response in model_responses(messages):
        for call in listed_calls(response):
            live = str(call.get("id") or "")
            if not live or live in out:
                continue
            if position < len(script):
                out[live] = script[position]
            else:
                out[live] = f"{UNSCRIPTED}{live}" if live in taken else live
            position += 1
    return out


def _renamed(values: Mapping[str, Any], ids: Mapping[str, str]) -> dict[str, Any]:
    return {ids.get(key, key): value for key, value in values.items()}


def align_observation(obs: Observation, case: EvalCase) -> None:
    """Re-key a live run's observed calls, outcomes, arguments, refusing rules, output sizes and
    proposals by the case's call
    ids (`alignment` over ``obs.messages``), keeping each live id beside them and the mapping in
    ``obs.call_ids``."""
    ids = obs.call_ids = alignment(case, obs.messages)
    obs.calls = [{**c, "id": ids.get(c["id"], c["id"]), "live_id": c["id"]} for c in obs.calls]
    obs.outcomes = _renamed(obs.outcomes, ids)
    obs.arguments = _renamed(obs.arguments, ids)
    obs.rules = _renamed(obs.rules, ids)
    obs.output_bytes = _renamed(obs.output_bytes, ids)
    obs.truncated = [ids.get(call_id, call_id) for call_id in obs.truncated]
    obs.proposals = [
        {**p, "call_id": ids.get(p["call_id"], p["call_id"]), "live_call_id": p["call_id"]}
        for p in obs.proposals
    ]


__all__ = [
    "UNSCRIPTED",
    "align_observation",
    "alignment",
    "listed_calls",
    "model_responses",
    "scripted_ids",
]
