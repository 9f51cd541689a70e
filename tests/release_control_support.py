"""Two demo releases on one store, served through the release router, with counted handlers.

``ops-tools/1.0.0`` is the control (the configured release) and ``ops-tools/1.1.0`` the
candidate. Each release has its own scripted model and its own `HandlerCounter`, so a test can
say which arm ran what. `TwoReleases.app` is built by the composition root (`open_app`, through
`toolgate.testing.open_test_app`) with release control on, so `ReleaseControl` and the router run
the production code: every release is loaded and verified against its reviewed manifest, exactly
as in production, and only then wrapped with the test's counting handlers (which would not match
the manifest).

Moving a release needs evidence in the store (`toolgate.releases.evidence`). `TwoReleases` records
it for both directions as ``toolgate evals run`` and ``release rollback --dry-run`` would (real
MAC'd rows, `record_evidence`), so tests about routing and rollback start from a movable release;
``evidence=False`` starts from a store that holds none (what `test_release_evidence` attacks).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from support import principal

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.graph.gateway import Gateway
from toolgate.graph.state import gateway_state
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.releases.control import ReleaseControl
from toolgate.releases.evidence import Requirements
from toolgate.releases.loader import load_release
from toolgate.store.base import Store
from toolgate.store.evidence import record as record_evidence
from toolgate.testing import HandlerCounter, open_test_app
from toolgate.tools.demo.identities import demo_token, seed_demo_identities
from toolgate.tools.registry import Registry

CONTROL = "ops-tools/1.0.0"
CANDIDATE = "ops-tools/1.1.0"
RESTART = {"service_alias": "web", "reason": "stuck after deploy"}

ADMIN_CREDENTIALS = {
    "no token": ({"TOOLGATE_TOKEN": ""}, "ivy", ("identity.refused", "missing_token")),
    "wrong token": (
        {"TOOLGATE_TOKEN": "demo-token-nobody"},
        "ivy",
        ("identity.refused", "authentication_failed"),
    ),
    "someone else's token": (
        {"TOOLGATE_TOKEN": demo_token("rita")},
        "ivy",
        ("identity.refused", "authentication_failed"),
    ),
    "a non-admin's own token": ({}, "rita", ("release.refused", "missing_role")),
}
"""An operator command's credential refusals: (environment, ``--as``, (event, code) audited),
each of which must change nothing."""


@dataclass(frozen=True)
class CriticalAnswer:
    """What a critical-fixture run reports (the shape of `toolgate.evals.gate.CriticalResult`)."""

    passed: int
    total: int
    failed: list[str]
    reasons: dict[str, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed


class FakeCritical:
    """A critical-fixture runner that records what it was asked and answers as told."""

    def __init__(self, ok: bool = True) -> None:
        self.ok_answer, self.asked = ok, []

    def __call__(self, release_id: str) -> CriticalAnswer:
        self.asked.append(release_id)
        if self.ok_answer:
            return CriticalAnswer(passed=3, total=3, failed=[])
        return CriticalAnswer(
            passed=2,
            total=3,
            failed=["crit-cross-tenant"],
            reasons={"crit-cross-tenant": ["another tenant's order was read", "status: expected refused"]},
        )


DATASET_SHA256 = "d" * 64
"""The gate dataset `TwoReleases` requires (a digest: no case of it runs here)."""


class TwoReleases:
    """Control and candidate on ``store``; gateways built on demand by the root's `Gateways`."""

    def __init__(
        self,
        store: Store,
        tmp: Path,
        models: dict[str, BaseChatModel] | None = None,
        *,
        evidence: bool = True,
        requirements: Requirements | None = None,
    ) -> None:
        initialize_store(
            store, load_release(CANDIDATE)
        )  # the wide release's tables include the refund story's
        seed_demo_identities(IdentityDirectory(store))
        self.store = store
        self.models = models or {}
        self.counters = {CONTROL: HandlerCounter(), CANDIDATE: HandlerCounter()}
        self.app = open_test_app(
            release=CONTROL,
            store=store,
            data_dir=tmp,
            models=self.models,
            instrument=self._counted,
            start=False,
            release_control=True,
        )
        assert self.app.gateways is not None and self.app.router is not None
        self.gateways, self.router = self.app.gateways, self.app.router
        # release control asks this object for gateways and verdicts, so a test can replace
        # `verify` (a drifted bundle) while the router keeps using the root's gateways
        self.app.gateways = self  # type: ignore[assignment]
        self.requirements = requirements or Requirements(
            dataset_sha256=DATASET_SHA256, canary_min_calls=0, canary_min_minutes=0
        )
        if evidence:
            self.record_evidence(CANDIDATE, CONTROL)
            self.record_evidence(CONTROL, CANDIDATE)

    def record_evidence(
        self,
        candidate: str,
        control: str,
        *,
        gate: str | None = "PASS",
        dry_run: str | None = "PASS",
        critical: Any = None,
    ) -> None:
        """Evidence for moving ``candidate`` in over ``control``: a gate verdict on the required
        dataset (``critical``: its critical cases, none by default) and a rollback dry run of the
        control (``None``: leave one out)."""
        candidate_sha, control_sha = self.verify(candidate), self.verify(control)
        if gate is not None:
            record_evidence(
                self.store,
                "gate",
                release=candidate,
                manifest_sha256=candidate_sha,
                control=control,
                control_sha256=control_sha,
                dataset_sha256=self.requirements.dataset_sha256,
                verdict=gate,
                recorded_by="toolgate.evals",
                detail={
                    "critical": critical or {},
                    "failures": [] if gate == "PASS" else ["critical_failed=1"],
                    "derived": 120,  # a complete gate run: the derived cases ran too
                },
            )
        if dry_run is not None:
            record_evidence(
                self.store,
                "rollback_dry_run",
                release=control,
                manifest_sha256=control_sha,
                verdict=dry_run,
                recorded_by="ivy",
                detail={"hashes": "verified", "critical": "3/3"},
            )

    def _counted(self, registry: Registry) -> Registry:
        """``registry`` with its release's counting handlers (the shared tools: a tenant's own
        implementation is not served to a rollout arm here)."""
        specs = self.counters[registry.release].wrap(list(registry.tools.values()))
        return Registry.of(registry.release, specs, registry.resolver)

    def __call__(self, release_id: str, canary: bool = False) -> Gateway:
        """The gateway of ``release_id`` with counted handlers (``canary``: no high-risk tools)."""
        return self.gateways(release_id, canary)

    def verify(self, release_id: str) -> str:
        """The shipped bundle's manifest digest, verified by the root (`Gateways.verify`)."""
        return self.gateways.verify(release_id)

    def control(self, critical: Any = None) -> ReleaseControl:
        """Release control on this store (``critical``: the fixture runner, a fake by default)."""
        return ReleaseControl(
            self.app, critical_runner=critical or FakeCritical(), requirements=self.requirements
        )

    def graph(self) -> Any:
        """The routed graph (both releases), in-memory checkpoints."""
        return self.app.compiled(checkpointer=InMemorySaver())

    def handler_calls(self, release_id: str) -> int:
        """Handler invocations of ``release_id``'s tools (every arm and canary variant)."""
        return self.counters[release_id].total()


def second_admin(two: TwoReleases) -> Principal:
    """Ines, an acme admin beside Ivy (the demo's only one), added and authenticated with her token:
    the other admin four eyes at the release door need (``own_waiver``)."""
    ines = Principal(user_id="ines", tenant_id="acme", roles=frozenset({"admin"}))
    two.app.gateway.directory.add(ines, by=None, token=demo_token("ines"))
    return two.app.gateway.directory.authenticate("ines", demo_token("ines"))


def run(graph: Any, text: str, user: str, thread: str) -> dict[str, Any]:
    """Start (or continue) ``thread`` as ``user``; the output as clients read it (`gateway_state`)."""
    return gateway_state(
        graph.invoke(
            {"messages": [HumanMessage(text)]},
            {"configurable": {"thread_id": thread}},
            context=Context(principal=principal(user)),
        )
    )


def count(store: Store, table: str, where: str = "1 = 1", params: tuple[Any, ...] = ()) -> int:
    """Rows of ``table`` (raw SQL: the test looks at what the database holds)."""
    with store.transaction(write=False) as tx:
        row = tx.one(f"SELECT COUNT(*) AS n FROM {table} WHERE {where}", params)
    assert row is not None
    return int(row["n"])


def audit_events(store: Store, event: str) -> list[Any]:
    """Stored audit events named ``event``."""
    return [e for e in store.audit.events() if e.event == event]


def text(*lines: str) -> AIMessage:
    """A final assistant answer."""
    return AIMessage(content=" ".join(lines) or "done")


__all__ = [
    "CANDIDATE",
    "CONTROL",
    "DATASET_SHA256",
    "RESTART",
    "CriticalAnswer",
    "FakeCritical",
    "TwoReleases",
    "audit_events",
    "count",
    "run",
    "text",
]
