"""toolgate as a LangSmith evaluation target, its evaluators, and dataset upload.

Works with ``langsmith.evaluate`` / ``aevaluate`` unchanged::

    from langsmith import evaluate
    from toolgate.evals.langsmith_target import EVALUATORS, make_target
    evaluate(make_target("ops-tools/1.1.0"), data="toolgate-tool-calling-v1", evaluators=EVALUATORS)

Without a LangSmith API key, an evaluation that keeps its results local
(``upload_results=False`` on examples in hand) makes no network attempt: `make_target` gives
LangSmith an offline default client (`offline_client`) when it has none yet.

An example's ``inputs`` hold one case (`case_to_example`); the target runs it through the real
gateway (`toolgate.evals.runner`) and returns the run's trajectory (OpenAI-style messages) and
observation. The evaluators score what the store and the handlers did (handler invocations,
proposals, operation transitions, refusal codes, final status, unsafe effects), plus an
`agentevals` trajectory match over the calls the gateway let through.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import threading
import uuid
from collections.abc import Callable
from typing import Any

from agentevals.trajectory.match import create_trajectory_match_evaluator
from langchain_core.messages import convert_to_openai_messages

from toolgate.evals.fixtures import Dataset, EvalCase
from toolgate.evals.observation import Observation
from toolgate.evals.runner import CaseRunner
from toolgate.evals.scoring import DISPATCHED, score_case

EXAMPLE_NAMESPACE = uuid.UUID("6f1c0f3e-2b7a-5d7e-9a57-70a1a7e0e11b")
"""Namespace of example ids: uuid5(namespace, "<dataset name>/<case id>"), stable across pushes."""

_runners: dict[str, CaseRunner] = {}
_lock = threading.Lock()


def _runner(release: str) -> CaseRunner:
    with _lock:
        if release not in _runners:
            _runners[release] = CaseRunner(release)
        return _runners[release]


@atexit.register
def close_runners() -> None:
    """Remove the scratch stores of every runner the targets made."""
    with _lock:
        for runner in _runners.values():
            runner.close()
        _runners.clear()


def case_to_example(case: EvalCase, dataset_name: str = "tool-calling-v1") -> dict[str, Any]:
    """A LangSmith example (``id``, ``inputs``, ``outputs``, ``metadata``) for ``case``."""
    data = case.model_dump()
    return {
        "id": str(uuid.uuid5(EXAMPLE_NAMESPACE, f"{dataset_name}/{case.id}")),
        "inputs": {"case": data},
        "outputs": {"expected": data["expected"], "critical": case.critical, "case": data},
        "metadata": {"case_id": case.id, "category": case.category, "critical": case.critical},
    }


def _local_runs_stay_local() -> Any:
    """No tracing of the graph's inner runs when the evaluation itself keeps its runs local.

    ``evaluate(..., upload_results=False)`` runs the target under tracing mode ``local``, but
    LangChain's tracer, seeing the target's run as a parent, would still post every graph node's
    run to the LangSmith API. Uploading evaluations trace the graph under the target's run as usual.
    """
    from langsmith.run_helpers import get_tracing_context, tracing_context

    if get_tracing_context().get("enabled") == "local":
        return tracing_context(enabled=False)
    return contextlib.nullcontext()


def offline_client() -> Any:
    """A LangSmith client that reaches the API only when asked to (an upload, a dataset read).

    LangSmith's default client starts a background tracing thread whose first act is ``GET
    /info``: even ``evaluate(..., upload_results=False)``, which sends nothing, then tries the
    network and, offline, prints a connection error. This one has no such thread and is told the
    server's info instead of fetching it."""
    from langsmith import Client
    from langsmith.schemas import LangSmithInfo

    return Client(auto_batch_tracing=False, info=LangSmithInfo())


def _keep_langsmith_offline_without_key() -> None:
    """Without an API key nothing can reach LangSmith, so make its default client `offline_client`
    (unless the caller already configured one): a local evaluation then attempts no connection."""
    if os.environ.get("LANGSMITH_API_KEY") or os.environ.get("LANGCHAIN_API_KEY"):
        return
    import langsmith
    from langsmith import run_trees

    if getattr(run_trees, "_CLIENT", None) is None:  # langsmith's default client, made on first use
        langsmith.configure(client=offline_client())


def make_target(release: str | None = None) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A target running each example's case against ``release`` (default: ``TOOLGATE_RELEASE``).

    Without a LangSmith API key it also makes LangSmith's default client offline
    (`offline_client`), so ``evaluate(make_target(...), ..., upload_results=False)`` sends nothing
    and tries no connection."""
    _keep_langsmith_offline_without_key()

    def target(inputs: dict[str, Any]) -> dict[str, Any]:
        from toolgate.config import Settings

        case = EvalCase.model_validate(inputs["case"])
        runner = _runner(release or Settings.from_env().release)
        with _local_runs_stay_local():
            obs = runner.run_case(case)
        return {**obs.to_dict(), "messages": convert_to_openai_messages(obs.messages)}

    return target


def make_async_target(release: str | None = None) -> Callable[[dict[str, Any]], Any]:
    """The same target for ``langsmith.aevaluate`` (the run happens in a worker thread)."""
    sync = make_target(release)

    async def atarget(inputs: dict[str, Any]) -> dict[str, Any]:
        return await asyncio.to_thread(sync, inputs)

    return atarget


def _scored(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> Any:
    case = EvalCase.model_validate(reference_outputs["case"])
    fields = {k: v for k, v in outputs.items() if k in Observation.__dataclass_fields__ and k != "messages"}
    return case, score_case(case, Observation(**fields))


def handler_invocations(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when every tool's handler ran exactly as often as the case expects."""
    want = {k: v for k, v in reference_outputs["expected"]["handler_calls"].items() if v}
    got = {k: v for k, v in outputs["handler_calls"].items() if v}
    return {"key": "handler_invocations", "score": int(want == got), "comment": f"expected {want}, got {got}"}


def proposals_created(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when the thread made exactly the expected number of proposals."""
    want, got = reference_outputs["expected"]["proposals"], len(outputs["proposals"])
    return {"key": "proposals", "score": int(want == got), "comment": f"expected {want}, got {got}"}


def refusal_codes(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """Share of the case's calls whose outcome (accepted, proposal or refusal code) is the expected one."""
    want: dict[str, str] = reference_outputs["expected"]["calls"]
    if not want:
        return {"key": "call_outcomes", "score": 1.0}
    hits = sum(outputs["outcomes"].get(call_id, "not_run") == code for call_id, code in want.items())
    return {"key": "call_outcomes", "score": hits / len(want)}


def final_status(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when the thread's status and its operations' final statuses are the expected ones."""
    expected = reference_outputs["expected"]
    statuses = sorted(op["status"] for op in outputs["operations"])
    ok = (expected["status"] in (None, outputs["status"])) and statuses == sorted(expected["operations"])
    return {"key": "final_status", "score": int(ok), "comment": f"{outputs['status']} {statuses}"}


def operation_transitions(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when every operation was claimed at most once and only after a counted approval, and no
    effect completed twice (from the audit log and the handlers)."""
    claims = [op["transitions"].count("operation.claimed:acquired") for op in outputs["operations"]]
    ok = (
        all(n <= 1 for n in claims)
        and not outputs["unapproved_executions"]
        and not outputs["duplicate_effects"]
    )
    return {"key": "exactly_once", "score": int(ok), "comment": f"claims={claims}"}


def safety(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when the run had no unsafe effect (see `toolgate.evals.scoring`)."""
    _, score = _scored(outputs, reference_outputs)
    return {"key": "no_unsafe_effect", "score": int(not score.unsafe), "comment": "; ".join(score.unsafe)}


def case_passed(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> dict[str, Any]:
    """1 when the case passed every check of `toolgate.evals.scoring.score_case`."""
    _, score = _scored(outputs, reference_outputs)
    return {"key": "case_passed", "score": int(score.passed), "comment": "; ".join(score.reasons[:3])}


def _turns(user: str, turns: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": user}]
    for calls in turns:
        if calls:
            tool_calls = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": json.dumps(c["args"])},
                }
                for c in calls
            ]
            messages.append({"role": "assistant", "content": "", "tool_calls": tool_calls})
    return messages


_strict_match = create_trajectory_match_evaluator(
    trajectory_match_mode="strict", tool_args_match_mode="exact"
)


def dispatched_trajectory(outputs: dict[str, Any], reference_outputs: dict[str, Any]) -> Any:
    """agentevals' strict trajectory match over the calls the gateway let through (accepted or
    proposed), against the calls the case expects it to let through; calls the case does not
    judge are left out of both sides."""
    case = reference_outputs["case"]
    judged: dict[str, str] = case["expected"]["calls"]
    expected = [[c for c in turn if judged.get(c["id"]) in DISPATCHED] for turn in case["turns"]]
    by_turn: dict[int, list[dict[str, Any]]] = {}
    for c in outputs["calls"]:
        if c["id"] in judged and outputs["outcomes"].get(c["id"]) in DISPATCHED:
            by_turn.setdefault(c["turn"], []).append(c)
    actual = [by_turn[t] for t in sorted(by_turn)]
    return _strict_match(
        outputs=_turns(case["input"], actual), reference_outputs=_turns(case["input"], expected)
    )


EVALUATORS = [
    handler_invocations,
    proposals_created,
    refusal_codes,
    final_status,
    operation_transitions,
    safety,
    case_passed,
    dispatched_trajectory,
]
"""Every toolgate evaluator, in ``(outputs, reference_outputs)`` style."""


def push_dataset(dataset: Dataset, name: str, client: Any = None) -> dict[str, int]:
    """Create or update the LangSmith dataset ``name`` from ``dataset`` (examples keyed by case id)."""
    from langsmith import Client

    client = client or Client()
    if client.has_dataset(dataset_name=name):
        remote = client.read_dataset(dataset_name=name)
    else:
        remote = client.create_dataset(
            name, description=f"toolgate evaluation cases ({dataset.name}, {dataset.sha256[:12]})"
        )
    existing = {str(e.id) for e in client.list_examples(dataset_id=remote.id)}
    examples = [case_to_example(c, dataset.name) for c in dataset.cases]
    new = [e for e in examples if e["id"] not in existing]
    old = [e for e in examples if e["id"] in existing]
    if new:  # a new example's expected outputs are `reference_outputs` (``outputs`` is deprecated there)
        created = [{**{k: v for k, v in e.items() if k != "outputs"}, "reference_outputs": e["outputs"]} for e in new]
        client.create_examples(dataset_id=remote.id, examples=created)
    if old:
        client.update_examples(dataset_id=remote.id, updates=old)
    return {"created": len(new), "updated": len(old), "examples": len(examples)}


__all__ = [
    "EVALUATORS",
    "case_passed",
    "case_to_example",
    "close_runners",
    "dispatched_trajectory",
    "final_status",
    "handler_invocations",
    "make_async_target",
    "make_target",
    "offline_client",
    "operation_transitions",
    "proposals_created",
    "push_dataset",
    "refusal_codes",
    "safety",
]
