"""A gateway serving the demo report tools on a controlled clock, for the durable-wait tests."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from support import TEST_KEY, principal, shift_store_clock

from toolgate.graph import Context
from toolgate.graph.bootstrap import App, initialize_store
from toolgate.graph.gateway import Gateway
from toolgate.graph.review.decisions import decide
from toolgate.graph.waits.progress import WaitPass, graph_resumer
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import Store
from toolgate.testing import HandlerCounter, ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import WIDE_RELEASE, DemoResolver, DemoServices, DemoSystem
from toolgate.tools.demo import reports as reports_mod
from toolgate.tools.demo.identities import seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.demo.reports import ReportService, report_specs

REPORT_ARGS = {"report_type": "sales_summary", "date_from": "2025-01-01", "date_to": "2025-01-31"}
THREAD = "t-wait"


class WaitWorld:
    """The report tools on ``store``: the service's clock and the store's clock move together."""

    def __init__(self, store: Store, monkeypatch: pytest.MonkeyPatch, job_s: int = 180) -> None:
        monkeypatch.setitem(reports_mod.REPORT_DURATIONS_S, "sales_summary", job_s)
        initialize_store(store, DEMO_RELEASES[WIDE_RELEASE])
        seed_demo_identities(IdentityDirectory(store))
        self.store, self.monkeypatch = store, monkeypatch
        self.t: datetime = store.now()
        self.reports = ReportService(store, now=lambda: self.t)
        self.counter = HandlerCounter()
        resolver = DemoResolver(DemoSystem(store), DemoServices.on(store, secret=TEST_KEY))
        self.registry = Registry.of(WIDE_RELEASE, self.counter.wrap(report_specs(self.reports)), resolver)
        self.model = ScriptedChatModel(
            responses=[
                ai("", tool_call("submit_report_job", REPORT_ARGS, "call_rep")),
                ai("Your sales summary is ready."),
            ]
        )
        self.saver = InMemorySaver()
        self.config: Any = {"configurable": {"thread_id": THREAD}}

    def app(self) -> App:
        """The wide release around this world's registry and model as they are now (a subclass
        replaces the registry), on the shared checkpointer, built by the composition root."""
        return open_test_app(
            release=DEMO_RELEASES[WIDE_RELEASE],
            tools=self.registry,
            model=self.model,
            store=self.store,
            checkpointer=self.saver,
            start=False,
        )

    def gateway(self) -> Gateway:
        return self.app().gateway

    def graph(self) -> Any:
        """A graph on the shared checkpointer (a new one per 'process')."""
        return self.app().compiled()

    def advance(self, seconds: float) -> None:
        """Move both clocks (the job's and the store's) ``seconds`` on; nothing sleeps."""
        self.t += timedelta(seconds=seconds)
        shift_store_clock(self.monkeypatch, self.store, timedelta(seconds=seconds))

    def start_and_approve(self, graph: Any) -> dict[str, Any]:
        """Lee asks for a report; Ana approves it; the resume runs the write and suspends on the wait."""
        first = graph.invoke(
            {"messages": [HumanMessage("Sales summary for January please.")]},
            self.config,
            context=Context(principal=principal("lee")),
        )
        proposal_id = first["__interrupt__"][0].value["toolgate"]["proposals"][0]["proposal_id"]
        decide(self.gateway(), proposal_id, principal("ana"), "approve")
        return graph.invoke(Command(resume={"wake": True}), self.config, context=Context())

    def wait_pass(self, graph: Any, report: Any = lambda facts: None) -> WaitPass:
        gw = self.gateway()
        return WaitPass(self.store, lambda key: gw.executor, resume=graph_resumer(graph), report=report)

    def operation_key(self) -> str:
        (wait,) = self.store.waits.list()
        return wait.operation_key


__all__ = ["REPORT_ARGS", "THREAD", "WaitWorld"]
