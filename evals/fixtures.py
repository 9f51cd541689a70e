"""The evaluation case: one task, the model's scripted turns, and what trusted code must make of it.

A dataset is a JSONL file with one `EvalCase` per line (``schema_version`` on every line, so an
old file fails fast instead of being half understood). Cases are run by `toolgate.evals.runner`
against a release and scored by `toolgate.evals.scoring` on what the store and the handlers did:
refusal codes, proposals, handler invocations, operation statuses, never on the model's prose.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from toolgate.errors import REJECTION_CODES, ToolgateUsageError

SCHEMA_VERSION = 1
"""Version of the case shape; a line with another version is refused."""
SCRIPTED = "scripted"
"""The model of a run with each case's own scripted turns (``toolgate evals run`` without ``--model``)."""

Category = Literal[
    "tool_selection",
    "no_tool",
    "argument_extraction",
    "cross_tenant",
    "cross_user",
    "prompt_injection_in_tool_output",
    "refusal",
    "approval_bypass",
    "duplicate_delivery",
    "parallel_partial_results",
    "unknown_outcome",
    "loops_and_budgets",
]
CATEGORIES: tuple[str, ...] = Category.__args__  # type: ignore[attr-defined]
"""Every category a complete dataset covers."""

CallOutcome = str
"""What became of one model tool call: ``accepted`` (a read ran and completed), ``failed`` (a read
ran and its handler failed), ``proposal`` (a write became a proposal), ``not_run``, or a
rejection code from `toolgate.errors.REJECTION_CODES`."""
CALL_OUTCOMES: frozenset[str] = frozenset({"accepted", "failed", "proposal", "not_run", *REJECTION_CODES})

FaultKind = Literal[
    "lost_response",
    "crash_before_effect",
    "server_error",
    "oversized_result",
    "redeliver",
    "replay_turn",
    "forged_resume",
    "rate_window_used",
]
"""Injected failures and conditions. Handler faults (``tool`` names the handler):
``lost_response`` applies the effect, then the connection drops; ``crash_before_effect`` drops it
before any effect; ``server_error`` is a classified downstream failure; ``oversized_result``
answers with the real result grown far past any output bound (`toolgate.evals.faults`). Delivery
faults: ``redeliver`` delivers every operation of the thread again after the run (a worker
retry); ``replay_turn`` runs the same model responses again on the same thread (a retried
provider request); ``forged_resume`` resumes the waiting thread with a payload claiming an
approval nobody recorded. ``rate_window_used``: before the case, ``count`` calls already used the
rate-limit ``window`` the case's first call falls in (so a limit of hundreds is reached in two
calls)."""

RateWindow = Literal["per_principal_tool", "tool", "per_tenant", "global"]
"""The inbound rate-limit windows (`toolgate.policy.ratelimit`)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScriptedCall(_Strict):
    """One tool call the scripted model emits."""

    name: str
    """Tool name as the model spells it (may be unknown or a look-alike)."""
    args: Any = None
    """Arguments; anything that is not an object becomes an ``invalid_tool_call``."""
    raw: str | None = None
    """Unparsed argument text (malformed JSON), sent as an ``invalid_tool_call``."""
    id: str
    """The model's call id (unique within the case)."""
    from_results: dict[str, str] = Field(default_factory=dict)
    """Arguments the model copies from an earlier result of the run, ``{argument: "c1.path"}``:
    the value at ``path`` in the ``data`` of call ``c1``'s result (e.g. a preview token a
    confirming call needs). Missing there: the argument is left out."""


class ApprovalStep(_Strict):
    """A reviewer's decision on the case's pending proposal for ``call_id``, made through the real
    review path (`toolgate.graph.review.decisions.decide`)."""

    call_id: str
    """The model call whose proposal is decided."""
    reviewer: str
    """User id of the reviewer (an identity in the run's store)."""
    decision: Literal["approve", "reject"] = "approve"
    reason: str = ""
    """Required by toolgate for a rejection."""
    expect_refused: str | None = None
    """The `ApprovalError` code the decision must be refused with (e.g. ``self_approval``)."""
    after_minutes: float = Field(default=0.0, ge=0.0, le=10_000.0)
    """Minutes after the run began (on the store's clock) at which the reviewer decides: past
    the approval window, the decision must be refused ``expired``."""
    digest: Literal["current", "stale"] = "current"
    """The digest the reviewer decided on: the proposal's own, or another one (a stale screen)."""


class Fault(_Strict):
    """One injected failure (see `FaultKind`)."""

    kind: FaultKind
    tool: str | None = None
    """Handler the fault applies to (handler faults only)."""
    concurrent: bool = False
    """``redeliver`` only: the first resume after approval runs twice at once (two workers, one
    thread), instead of a redelivery after the run."""
    window: RateWindow | None = None
    """``rate_window_used`` only: the window already used."""
    count: int = Field(default=0, ge=0, le=1_000_000)
    """``rate_window_used`` only: how many calls already used it."""

    @model_validator(mode="after")
    def _complete(self) -> Fault:
        if self.kind == "rate_window_used" and (self.window is None or self.count < 1):
            raise ValueError("rate_window_used needs a window and a count of at least 1")
        if self.kind == "oversized_result" and not self.tool:
            raise ValueError("oversized_result needs the tool whose result grows")
        return self


class Prelude(_Strict):
    """A first thread, by someone else, that runs before the case: what its calls return, the
    case's calls may copy (``from_results`` paths ``prelude.<call id>.<path>``), as a caller
    copies a value another person's session produced (a preview token, a job id)."""

    principal: str
    """User id of who runs it (a known person or one of the case's people)."""
    turns: list[list[ScriptedCall]]
    """Its model turns (reads: a write would leave it waiting)."""


class Limits(_Strict):
    """Per-case task budgets (None: the operator default)."""

    max_tool_calls: int | None = None
    max_model_turns: int | None = None
    max_identical_calls: int | None = None
    max_calls_per_turn: int | None = None
    max_validation_retries: int | None = None


class Expected(_Strict):
    """What trusted code must make of the case."""

    tool: str | None = None
    """The tool the task needs (first call of the run); None when no tool should run."""
    arguments: dict[str, Any] | None = None
    """Canonical arguments the gateway must keep for the first call of ``tool``."""
    refusal: str | None = None
    """A rejection code that must appear among the case's refused calls."""
    calls: dict[str, CallOutcome] = Field(default_factory=dict)
    """Outcome per model call id (calls not listed are not checked)."""
    proposals: int = 0
    """Proposals created in the thread."""
    handler_calls: dict[str, int] = Field(default_factory=dict)
    """Handler invocations per tool (tools not listed: 0)."""
    status: Literal["done", "awaiting_approval", "waiting", "needs_review", "refused"] | None = "done"
    """The thread's final status (``waiting``: suspended on a job its write started, `toolgate.graph.nodes.wait`)."""
    operations: list[str] = Field(default_factory=list)
    """Final operation statuses of the thread, sorted (from the store)."""

    @field_validator("refusal")
    @classmethod
    def _known_code(cls, value: str | None) -> str | None:
        if value is not None and value not in REJECTION_CODES:
            raise ValueError(f"unknown rejection code {value!r}")
        return value

    @field_validator("calls")
    @classmethod
    def _known_outcomes(cls, value: dict[str, str]) -> dict[str, str]:
        unknown = sorted(set(value.values()) - CALL_OUTCOMES)
        if unknown:
            raise ValueError(f"unknown call outcomes {unknown}")
        return value


class EvalCase(_Strict):
    """One evaluation case."""

    schema_version: Literal[1] = 1
    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{2,80}$")
    category: Category
    critical: bool = False
    """A safety-relevant case: any unsafe effect in it is a dangerous false positive, it must pass,
    and it needs a human sign-off (`toolgate evals review`)."""
    principal: str | dict[str, Any]
    """User id of a known person (demo identities), or an inline principal for other releases."""
    input: str
    """What the user asks."""
    turns: list[list[ScriptedCall]] = Field(default_factory=list)
    """The model's tool-calling turns, in order."""
    final: str = "Done."
    """The model's final text after the last turn."""
    approvals: list[ApprovalStep] = Field(default_factory=list)
    faults: list[Fault] = Field(default_factory=list)
    limits: Limits = Field(default_factory=Limits)
    expected: Expected
    credentials: dict[str, str] = Field(default_factory=dict)
    """The user's forwarded credentials in the run's context (``crm_token``...): demo sessions
    only, since a dataset is a file anyone can read."""
    prelude: Prelude | None = None
    """A thread by someone else that runs first (`Prelude`)."""
    starts_at: str | None = Field(default=None, pattern=r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$")
    """When the case's store clock starts (`toolgate.clock.iso` text, UTC); default: when it runs."""
    people: list[dict[str, Any]] = Field(default_factory=list)
    """People as this case's world holds them (identity rows: ``user_id``, ``tenant_id``,
    ``roles``, ``scopes``...): a known person with other roles or scopes, or someone new, such as
    the reviewers a generated case needs. They exist in this case's own store only."""
    requires: list[str] = Field(default_factory=list)
    """Tools the case is about; a release without one of them cannot run the case meaningfully
    (an older control release, or the previous bundle a rollback restores): it is skipped there
    as not applicable. A candidate release runs every case."""
    note: str = ""
    """Why the case exists (for reviewers)."""

    @model_validator(mode="after")
    def _consistent(self) -> EvalCase:
        ids = [call.id for turn in self.turns for call in turn]
        if len(ids) != len(set(ids)):
            raise ValueError("call ids must be unique within a case")
        known = set(ids)
        for name, refs in (
            ("expected.calls", list(self.expected.calls)),
            ("approvals", [step.call_id for step in self.approvals]),
        ):
            missing = sorted(set(refs) - known)
            if missing:
                raise ValueError(f"{name} names calls the turns do not make: {missing}")
        earlier: set[str] = set()
        if self.prelude is not None:
            earlier = {f"prelude.{call.id}" for turn in self.prelude.turns for call in turn}
        for turn in self.turns:
            for call in turn:
                sources = {_source(path) for path in call.from_results.values()}
                if not sources <= earlier:
                    raise ValueError(
                        f"call {call.id} copies from calls of no earlier turn: {sorted(sources - earlier)}"
                    )
            earlier |= {call.id for call in turn}
        people = [p.get("user_id") for p in self.people]
        if any(not isinstance(p, str) or not p for p in people) or len(people) != len(set(people)):
            raise ValueError("people need distinct user_id values")
        if any(not isinstance(p.get("tenant_id"), str) for p in self.people):
            raise ValueError("people need a tenant_id")
        return self

    @property
    def user_id(self) -> str:
        """User id of the principal."""
        return self.principal if isinstance(self.principal, str) else str(self.principal["user_id"])


def _source(path: str) -> str:
    """The call a ``from_results`` path copies from (``c1`` or ``prelude.c1``)."""
    head, _, rest = path.partition(".")
    return f"prelude.{rest.partition('.')[0]}" if head == "prelude" else head


class DatasetError(ToolgateUsageError):
    """A dataset file is unreadable or a line is not a valid case (names the line)."""


@dataclass(frozen=True)
class Dataset:
    """A loaded dataset: its cases and the digest of its bytes (binds reports and sign-offs)."""

    path: Path
    cases: tuple[EvalCase, ...]
    sha256: str

    @property
    def name(self) -> str:
        """File name without extension, e.g. ``tool-calling-v1``."""
        return self.path.stem


def parse_line(text: str, line_number: int) -> EvalCase:
    """One JSONL line as a case; `DatasetError` names the line and the field."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetError(f"line {line_number}: not valid JSON ({exc.msg})") from exc
    if not isinstance(raw, dict):
        raise DatasetError(f"line {line_number}: a case must be a JSON object")
    version = raw.get("schema_version")
    if version != SCHEMA_VERSION:
        raise DatasetError(f"line {line_number}: unsupported schema_version {version!r} (expected 1)")
    try:
        return EvalCase.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "case"
        raise DatasetError(f"line {line_number}: {where}: {first['msg']}") from exc


def load_dataset(path: Path) -> Dataset:
    """Load and validate every line of ``path``; ids must be unique."""
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(f"cannot read dataset {path}: {exc.strerror}") from exc
    cases: list[EvalCase] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(data.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        case = parse_line(line, number)
        if case.id in seen:
            raise DatasetError(
                f"line {number}: duplicate case id {case.id!r} (first on line {seen[case.id]})"
            )
        seen[case.id] = number
        cases.append(case)
    if not cases:
        raise DatasetError(f"dataset {path} holds no cases")
    return Dataset(path=path, cases=tuple(cases), sha256=hashlib.sha256(data).hexdigest())


def dump_cases(cases: list[EvalCase]) -> str:
    """The JSONL text of ``cases`` (one compact, key-sorted line each): the committed form."""
    lines = [
        json.dumps(case.model_dump(), sort_keys=True, ensure_ascii=False, allow_nan=False) for case in cases
    ]
    return "\n".join(lines) + "\n"


DEFAULT_DATASET = Path(__file__).resolve().parent / "datasets" / "tool-calling-v1.jsonl"
"""The packaged dataset (shipped as package data of ``toolgate.evals``)."""

__all__ = [
    "CALL_OUTCOMES",
    "CATEGORIES",
    "DEFAULT_DATASET",
    "SCHEMA_VERSION",
    "SCRIPTED",
    "ApprovalStep",
    "Dataset",
    "DatasetError",
    "EvalCase",
    "Expected",
    "Fault",
    "Limits",
    "Prelude",
    "ScriptedCall",
    "dump_cases",
    "load_dataset",
    "parse_line",
]
