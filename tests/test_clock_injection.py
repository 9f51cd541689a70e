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


def test_stored_time_text_parses_as_strptime_reads_it_and_refuses_what_it_refuses() -> None:
    """`parse_iso` reads `iso`'s fixed-width text by a faster route than ``strptime``; the
    moment is the same, and text of any other shape is judged by ``strptime`` as before."""
    from toolgate.clock import iso, parse_iso

    def by_strptime(text: str) -> datetime:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)

    for moment in (
        FROZEN,
        datetime(2026, 12, 7, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(1970, 1, 1, tzinfo=UTC),
    ):
        text = iso(moment)
        assert parse_iso(text) == by_strptime(text) == moment
        assert parse_iso(text).tzinfo is UTC
    assert parse_iso("2026-12-07T08:00:00.12345Z") == by_strptime("2026-12-07T08:00:00.12345Z")
    for bad in (
        "2026-12-07T08:00:00Z",
        "2026-13-07T08:00:00.123456Z",
        "2026-02-30T08:00:00.123456Z",
        "2026-12-07 08:00:00.123456Z",
        "2026-12-07T08:00:00.123456+00:00",
        "",
    ):
        for parse in (parse_iso, by_strptime):
            try:
                parse(bad)
            except ValueError:
                continue
            raise AssertionError(f"{parse.__name__} took {bad!r}")
