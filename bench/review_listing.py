"""The reviewer's pending list with 1 and with 1,000 proposals pending, on SQLite and PostgreSQL.

Two stores per backend, the same demo release on each: one holds 1 pending refund proposal, the
other 1,000 (inserted outside the timing through `store.proposals.create`, as the proposal node
does). Each round asks the approval API's list view (``GET /toolgate/proposals``, the function
behind the route, `toolgate.graph.server.reads.list_proposals`) as fiona, a finance reviewer of
the tenant, on one store and then the other; rounds alternate. The figure is the ratio of the
medians: what the listing costs at 1,000 pending against 1 (target: within 1.5x, a reviewer's
page costs the same however many are waiting). Two page sizes: ``limit=1`` (the head of the
queue, the same rows shown on both stores: the target figure) and the default page (1 row shown
against up to 100: its ratio is mostly the per-row work of the rows shown, reported for scale).
Before keyset pagination the route ignored ``limit`` and listed every pending proposal.

Run: ``.venv/bin/python bench/review_listing.py [--full]`` (PostgreSQL via scripts/with-postgres.sh)
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

from _common import (  # bench/ is on sys.path when run as a script
    Demo,
    alternate,
    arguments,
    fresh_pg_database,
    new_key,
    open_store,
    pg_url,
    print_table,
    ratio,
    spread,
    verdict,
    write_results,
)

from toolgate.canonical import digest
from toolgate.clock import iso
from toolgate.graph.server.reads import list_proposals
from toolgate.graph.server.serving import ViewInput
from toolgate.store.records import ProposalRecord
from toolgate.testing import ScriptedChatModel

PENDING = (1, 1000)
TARGET = 1.5
PAGES = {"limit=1": {"limit": "1"}, "default page": {}}
"""The listing's query per measured page size."""


def proposal(n: int, now: Any) -> ProposalRecord:
    base = ProposalRecord(
        proposal_id=f"prop_bench{n:05d}",
        operation_key=f"op_bench{n:05d}",
        thread_id=f"bench-{n}",
        call_id=f"call_{n}",
        tool="issue_refund",
        tool_version="1.0.0",
        handler_revision="issue-refund/1.0.0",
        release="ops-tools/1.0.0",
        tenant_id="acme",
        requester_id="cust-ada",
        arguments={"order_id": "O-5512", "amount_cents": 100 + n, "reason": "damaged"},
        arguments_sha256="",
        digest="",
        risk="danger",
        effect="moves money",
        rollback="none",
        approval_class="finance",
        created_at=iso(now + timedelta(microseconds=n)),
        expires_at=iso(now + timedelta(hours=1)),
    )
    with_args = ProposalRecord(**{**base.__dict__, "arguments_sha256": digest(base.arguments)})
    return ProposalRecord(**{**with_args.__dict__, "digest": digest(with_args.content())})


@contextlib.contextmanager
def stores(kind: str, tmp: str) -> Iterator[dict[int, Any]]:
    """One store per pending count (a file each, or a fresh database each)."""
    with contextlib.ExitStack() as stack:
        made: dict[int, Any] = {}
        for count in PENDING:
            if kind == "sqlite":
                made[count] = open_store("sqlite", str(Path(tmp) / f"store-{count}.sqlite"), key=new_key())
            else:
                url = pg_url()
                assert url is not None
                made[count] = open_store("postgres", stack.enter_context(fresh_pg_database(url)), key=new_key())
            stack.callback(made[count].close)
        yield made


def run_kind(kind: str, rounds: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, stores(kind, tmp) as by_count:
        views: dict[str, Any] = {}
        shown: dict[str, int] = {}
        for count, store in by_count.items():
            demo = Demo(store)
            now = store.now()
            for n in range(count):
                store.proposals.create(proposal(n, now))
            gateway = demo.gateway(ScriptedChatModel(responses=[]))
            fiona = demo.principals["fiona"]

            for page, query in PAGES.items():

                def view(
                    _: int,
                    gateway: Any = gateway,
                    fiona: Any = fiona,
                    query: dict[str, str] = query,
                    name: str = f"{page}, {count} pending",
                ) -> float:
                    started = time.perf_counter()
                    reply = list_proposals(gateway, fiona, ViewInput(path={}, query=query))
                    seconds = time.perf_counter() - started
                    shown[name] = len(reply.body["proposals"])
                    return seconds

                views[f"{page}, {count} pending"] = view
        samples = alternate(rounds, views)
    return {"samples": samples, "shown": shown}


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=15, full=60)
    kinds = {"sqlite": run_kind("sqlite", args.rounds)}
    if pg_url():
        kinds["postgres"] = run_kind("postgres", args.rounds)
    else:
        print("review_listing: PostgreSQL skipped (set TOOLGATE_BENCH_PG_URL or run via scripts/with-postgres.sh)")
    rows, result = [], {"target_ratio": TARGET, "rounds": args.rounds, "kinds": {}}
    for kind, data in kinds.items():
        result["kinds"][kind] = {"samples_s": data["samples"], "shown": data["shown"], "ratios": {}}
        for page in PAGES:
            few, many = (f"{page}, {c} pending" for c in PENDING)
            r = ratio(data["samples"][many], data["samples"][few])
            targeted = page == "limit=1"
            rows.append(
                {
                    "store": kind,
                    "page": page,
                    f"ms at {PENDING[0]}": spread(data["samples"][few])["median"] * 1000,
                    f"ms at {PENDING[1]}": spread(data["samples"][many])["median"] * 1000,
                    "ratio": r["ratio"],
                    "rounds_min-max": f"{r['round_min']:.2f}-{r['round_max']:.2f}",
                    "rows_shown": f"{data['shown'][few]} vs {data['shown'][many]}",
                    "target": f"<= {TARGET}" if targeted else "",
                    "verdict": verdict(r["ratio"], TARGET) if targeted else "",
                }
            )
            result["kinds"][kind]["ratios"][page] = r
    result["table"] = rows
    print_table(f"reviewer listing, {PENDING[1]} pending vs {PENDING[0]} (target <= {TARGET}x)", rows)
    write_results("review_listing", result)


if __name__ == "__main__":
    main()
