"""One injectable process clock: handler deadlines come from the gateway's clock, not from a
module-level ``datetime.now``; expiry and leases keep following the store's own clock."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from support import Harness, principal

from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools import Registry
from toolgate.tools.spec import HandlerContext

FROZEN = datetime(2031, 5, 4, 3, 2, 1, tzinfo=UTC)


@dataclass(frozen=True)
class FrozenClock:
    moment: datetime

    def now(self) -> datetime:
        return self.moment


def test_a_read_handler_gets_its_deadline_from_the_injected_clock(harness: Harness) -> None:
    seen: list[HandlerContext] = []
    lookup = harness.registry.tools["lookup_order"]

    def handler(args: Any, ctx: HandlerContext) -> Any:
        seen.append(ctx)
        return lookup.handler(args, ctx)

    registry = Registry.of(
        harness.registry.release,
        [
            replace(lookup, handler=handler),
            *(s for n, s in harness.registry.tools.items() if n != "lookup_order"),
        ],
        harness.system,
    )
    gateway = open_test_app(
        model=ScriptedChatModel(responses=[]),
        tools=registry,
        policy=harness.policy,
        store=harness.store,
        clock=FrozenClock(FROZEN),
        start=False,
    ).gateway
    assert gateway.clock.now() == FROZEN and gateway.executor.clock is gateway.clock
    gateway.executor.run_read(registry.tools["lookup_order"], {"order_id": "O-5512"}, principal("cust-ada"))
    assert [ctx.deadline for ctx in seen] == [FROZEN + timedelta(seconds=lookup.timeout_s)]
    # the store keeps its own clock: the injected process clock never decides expiry or leases
    assert abs((harness.store.now() - datetime.now(UTC)).total_seconds()) < 3600
