"""Runs the adversarial dispatch cases through the real graph and counts what executed.

Every case runs on a fresh thread of a real store with counting handlers. A case passes when
the call under test reaches the expected outcome; across all cases, rejected calls must have
executed no handler and created no proposal, and no write handler may run at all (writes only
become proposals).
"""

from __future__ import annotations

import json
import secrets
import tempfile
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

from toolgate.evals.adversarial.case import ACCEPTED, PROPOSAL_CREATED, AdversarialCase, Call
from toolgate.evals.adversarial.cases import CASES, EXTRA_IDENTITIES
from toolgate.evals.adversarial.files import RunbookTree
from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy.principal import Principal
from toolgate.policy.rules import RateLimit, RateLimits
from toolgate.store.base import Store
from toolgate.store.sqlite import SQLiteStore
from toolgate.testing import HandlerCounter, ScriptedChatModel, open_test_app
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import DEMO_IDENTITIES
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.registry import Registry
from toolgate.tools.spec import Deprecation

SEED_TAGS = (
    "known_read",
    "unknown_tool",
    "malformed_json",
    "unknown_alias",
    "cross_tenant",
    "unauthorized_write",
    "authorized_write",
)


@dataclass
class CaseResult:
    """What happened to one case."""

    case: AdversarialCase
    outcome: str
    handler_calls: int
    completed_reads: int
    proposals: int

    @property
    def passed(self) -> bool:
        """The call under test reached the expected outcome."""
        return self.outcome == self.case.expected


@dataclass
class RunReport:
    """All results and the summary figures printed from them."""

    results: list[CaseResult] = field(default_factory=list)
    write_handler_calls: int = 0

    @property
    def handlers_executed_for_rejected(self) -> int:
        """Handler calls beyond the reads that completed (must be 0)."""
        return sum(r.handler_calls - r.completed_reads for r in self.results)

    @property
    def proposals_for_rejected(self) -> int:
        """Proposals created by cases whose call under test must not make one."""
        return sum(r.proposals for r in self.results if r.case.expected != PROPOSAL_CREATED)

    @property
    def failures(self) -> list[CaseResult]:
        """Cases that missed their expected outcome."""
        return [r for r in self.results if not r.passed]

    @property
    def passed(self) -> bool:
        """Every case passed and nothing executed that must not."""
        return (
            not self.failures
            and self.handlers_executed_for_rejected == 0
            and self.proposals_for_rejected == 0
            and self.write_handler_calls == 0
        )

    def lines(self) -> list[str]:
        """The summary line, the counts line and one line per failure."""
        by_tag = {r.case.seed_tag: r for r in self.results if r.case.seed_tag}

        def word(tag: str) -> str:
            result = by_tag.get(tag)
            if result is None:
                return "MISSING"
            if result.outcome in (ACCEPTED, PROPOSAL_CREATED):
                return result.outcome
            return "REJECTED" if result.passed else f"UNEXPECTED_{result.outcome}"

        seeds = " ".join(f"{tag}={word(tag)}" for tag in SEED_TAGS)
        out = [f"{seeds} handlers_executed_for_write={self.write_handler_calls}"]
        categories = Counter(r.case.category for r in self.results)
        out.append("categories=" + ",".join(f"{k}:{v}" for k, v in sorted(categories.items())))
        out += [
            f"failed_case={r.case.name} expected={r.case.expected} got={r.outcome}" for r in self.failures
        ]
        out.append(
            f"cases={len(self.results)} passed={len(self.results) - len(self.failures)} "
            f"handlers_executed_for_rejected={self.handlers_executed_for_rejected} "
            f"proposals_for_rejected={self.proposals_for_rejected}"
        )
        out.append(f"adversarial={'PASS' if self.passed else 'FAIL'}")
        return out


def _message(calls: Iterable[Call], turn: int) -> AIMessage:
    tool_calls, invalid = [], []
    for i, call in enumerate(calls):
        call_id = call.call_id or f"call_t{turn}_{i}"
        if call.raw is not None or not isinstance(call.args, dict):
            raw = call.raw if call.raw is not None else json.dumps(call.args)
            invalid.append(
                {
                    "type": "invalid_tool_call",
                    "name": call.name,
                    "args": raw,
                    "id": call_id,
                    "error": "arguments did not parse to an object",
                }
            )
        else:
            tool_calls.append({"type": "tool_call", "name": call.name, "args": call.args, "id": call_id})
    return AIMessage(content="", tool_calls=tool_calls, invalid_tool_calls=invalid)


def retired_in(registry: Registry, name: str, now: datetime) -> Registry:
    """``registry`` with tool ``name`` deprecated two days before ``now`` for one day: retired."""
    gone = Deprecation(since=now - timedelta(days=2), window=timedelta(days=1))
    return registry.mapped(
        lambda specs: [replace(s, deprecation=gone) if s.name == name else s for s in specs]
    )


class DispatchRunner:
    """A demo release on one store, with handlers counted, for adversarial runs."""

    def __init__(self, store: Store) -> None:
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        self.store = store
        self.counter = HandlerCounter()
        self.counts = self.counter.calls
        specs = self.counter.wrap(demo_specs(DemoSystem(store)))
        self.registry = Registry.of(REFUND_RELEASE, specs, DemoSystem(store))
        self.writes = {s.name for s in specs if s.is_write}
        self.base_policy = DEMO_RELEASES[REFUND_RELEASE].policy
        raw = [*DEMO_IDENTITIES["identities"], *EXTRA_IDENTITIES]
        self.principals = {p["user_id"]: Principal.from_dict(p) for p in raw}
        self.runbooks: RunbookTree | None = None
        """The file tool's root, made for the first case that needs it."""

    def with_file_tool(self, registry: Registry) -> Registry:
        """``registry`` with ``read_runbook`` (counted like every handler) confined to this runner's tree."""
        if self.runbooks is None:
            self.runbooks = RunbookTree()
        [spec] = self.counter.wrap([self.runbooks.spec()])
        return Registry.of(registry.release, [*registry.tools.values(), spec], registry.resolver)

    def run_case(self, case: AdversarialCase, index: int = 0) -> CaseResult:
        """Run one case on a fresh thread."""
        limits = (
            RateLimits(per_principal_tool=RateLimit(limit=case.rate_limit, window_s=3600))
            if case.rate_limit
            else RateLimits()
        )
        policy = replace(self.base_policy, rate_limits=limits)
        registry = (
            retired_in(self.registry, case.retired_tool, self.store.now())
            if case.retired_tool
            else self.registry
        )
        if case.file_tool:
            registry = self.with_file_tool(registry)
        turns = [*case.before, case.calls]
        model = ScriptedChatModel(
            responses=[*(_message(c, t) for t, c in enumerate(turns)), AIMessage("done")]
        )
        graph = open_test_app(
            release=DEMO_RELEASES[REFUND_RELEASE],
            tools=registry,
            policy=policy,
            model=model,
            store=self.store,
            start=False,
        ).compiled()
        thread = f"adv-{index}-{case.name}"[:120]
        context = Context(principal=self.principals[case.user])
        if case.max_tool_calls is not None:
            context.max_tool_calls = case.max_tool_calls
        before = sum(self.counts.values())
        state = graph.invoke(
            {"messages": [HumanMessage("adversarial case")]},
            {"configurable": {"thread_id": thread}},
            context=context,
        )
        messages = [m for m in state["messages"] if isinstance(m, ToolMessage)]
        statuses = {m.tool_call_id: json.loads(str(m.content)) for m in messages}
        target = case.calls[-1].call_id or f"call_t{len(turns) - 1}_{len(case.calls) - 1}"
        proposals = [p for p, _ in self.store.proposals.list() if p.thread_id == thread]
        if any(p.call_id == target for p in proposals) and state.get("__interrupt__"):
            outcome = PROPOSAL_CREATED
        elif target in statuses:
            payload = statuses[target]
            outcome = (
                ACCEPTED if payload.get("status") == "completed" else str(payload.get("error", "NO_CODE"))
            )
        else:
            outcome = "NO_RESULT"
        completed = sum(1 for p in statuses.values() if p.get("status") == "completed")
        return CaseResult(
            case=case,
            outcome=outcome,
            handler_calls=sum(self.counts.values()) - before,
            completed_reads=completed,
            proposals=len(proposals),
        )

    def run(self, cases: Iterable[AdversarialCase] = CASES) -> RunReport:
        """Run every case and summarize."""
        report = RunReport()
        for index, case in enumerate(cases):
            report.results.append(self.run_case(case, index))
        report.write_handler_calls = sum(self.counts[name] for name in self.writes)
        return report


def run_adversarial(cases: Iterable[AdversarialCase] = CASES, directory: Path | None = None) -> RunReport:
    """Run ``cases`` on a fresh embedded store in ``directory`` (a temporary one by default)."""
    with tempfile.TemporaryDirectory(prefix="toolgate-adversarial-") as tmp:
        store = SQLiteStore(Path(directory or tmp) / "adversarial.sqlite", key=secrets.token_bytes(32))
        return DispatchRunner(store).run(cases)


__all__ = ["CaseResult", "DispatchRunner", "RunReport", "run_adversarial"]
