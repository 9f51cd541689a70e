"""A concurrent-redelivery case measures the release, not how the machine schedules its threads.

``dup-concurrent-*`` cases resume one thread from two workers at once. On a loaded machine the
OS may run one worker's whole resume before the other is scheduled at all; the gate once scored
such a run as a tool-selection and argument failure (``tool_selection_top1=98.5%``). Here the
worst schedules are forced with events, never waits for time to pass.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from langgraph.types import Command

import toolgate.evals.execution_steps as steps
import toolgate.evals.runner as runner
from toolgate.evals.execution_steps import WAKE, StartLine
from toolgate.evals.fixtures import DEFAULT_DATASET, EvalCase, load_dataset
from toolgate.evals.runner import CaseRunner
from toolgate.evals.scoring import score_case

CASE = "dup-concurrent-issue_refund"


@pytest.fixture(scope="module")
def case() -> EvalCase:
    return next(c for c in load_dataset(DEFAULT_DATASET).cases if c.id == CASE)


def test_a_worker_that_finds_the_thread_finished_leaves_the_models_calls_in_the_history(
    case: EvalCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second worker runs its whole resume before the first starts; the first then finds the
    thread done. The second worker's model continues the script, so its answer must not take the
    id of the model's tool-call message and replace it in the thread."""

    def second_then_first(first: Any, second: Any, config: Any, context: Any) -> dict[str, Any]:
        second.invoke(Command(resume=WAKE), config, context=context)
        return dict(first.invoke(Command(resume=WAKE), config, context=context))

    monkeypatch.setattr(runner, "concurrent_resume", second_then_first)
    with CaseRunner("ops-tools/1.1.0", cases=[case]) as cases:
        obs = cases.run_case(case)
    score = score_case(case, obs)
    assert [(c["id"], c["name"]) for c in obs.calls] == [("c1", "issue_refund")]
    assert score.selection_hit is True and score.argument_valid is True
    assert score.passed, score.reasons
    assert obs.handler_calls == {"issue_refund": 1} and obs.duplicate_effects == 0


def test_a_worker_scheduled_late_still_resumes_from_the_checkpoint_the_case_left(
    case: EvalCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first worker's thread starts only once the second has gone as far as it can alone:
    finished its resume, or waiting at the start line for the first to read the thread. Both
    must then deliver the decided refund (one runs it, the other gets the stored result) and
    answer, exactly as when the two start at the same instant."""
    late = threading.local()
    second_went_ahead = threading.Event()

    class WatchedLine(StartLine):
        def reached(self) -> None:
            if not getattr(late, "worker", False):
                second_went_ahead.set()
            super().reached()

    class LateWorker:
        def __init__(self, graph: Any) -> None:
            self.graph, self.checkpointer = graph, graph.checkpointer

        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            late.worker = True
            second_went_ahead.wait()
            return self.graph.invoke(*args, **kwargs)

    class EarlyWorker:
        def __init__(self, graph: Any) -> None:
            self.graph, self.checkpointer = graph, graph.checkpointer

        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return self.graph.invoke(*args, **kwargs)
            finally:
                second_went_ahead.set()

    real = steps.concurrent_resume

    def late_first(first: Any, second: Any, config: Any, context: Any) -> dict[str, Any]:
        return real(LateWorker(first), EarlyWorker(second), config, context)

    monkeypatch.setattr(steps, "StartLine", WatchedLine)
    monkeypatch.setattr(runner, "concurrent_resume", late_first)
    with CaseRunner("ops-tools/1.1.0", cases=[case]) as cases:
        obs = cases.run_case(case)
    score = score_case(case, obs)
    assert score.passed, score.reasons
    assert score.selection_hit is True and score.argument_valid is True
    assert obs.model_turns == 3  # both workers resumed the waiting thread and answered
    assert obs.handler_calls == {"issue_refund": 1} and obs.duplicate_effects == 0
    assert obs.operations[0]["transitions"].count("operation.claimed:acquired") == 1


def test_a_worker_that_fails_before_reading_the_thread_does_not_hold_up_the_other(
    case: EvalCase, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The case fails with the worker's own error (never a hang, never a broken start line)."""

    class Crashing:
        def __init__(self, graph: Any) -> None:
            self.checkpointer = graph.checkpointer

        def invoke(self, *args: Any, **kwargs: Any) -> Any:
            raise ConnectionResetError("worker lost before it read the thread")

    real = steps.concurrent_resume

    def first_crashes(first: Any, second: Any, config: Any, context: Any) -> dict[str, Any]:
        return real(Crashing(first), second, config, context)

    monkeypatch.setattr(runner, "concurrent_resume", first_crashes)
    with CaseRunner("ops-tools/1.1.0", cases=[case]) as cases:
        obs = cases.run_case(case)
    assert obs.errors == ["ConnectionResetError: worker lost before it read the thread"]
