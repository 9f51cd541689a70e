"""A one-tool release for `tests/test_worker_run.py`, loadable by a ``toolgate worker run`` child
(``TOOLGATE_RELEASE=tests/worker_run_release.py:release``).

``record_effect`` is a write whose downstream is the table ``wr_effects`` in the toolgate store's
database, reached through a records capability on that table (handlers never get the store): one
row per performed effect (never deduplicated, so a duplicate delivery shows as a second row for
the same idempotency key). Its status check finds the row by idempotency key.

A child controls the handler through its environment, so a test can stop it at a known point
without sleeping: ``WR_BLOCK=before`` (or ``after``) makes the handler, before (or after) its
effect, write the file ``started`` (holding its pid) in ``WR_SIGNAL_DIR`` and wait until the
test creates ``release`` there.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from pydantic import Field
from release_files import with_manifest

from toolgate.clock import iso, utcnow
from toolgate.errors import ToolExecutionError
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.store.base import Store
from toolgate.store.migration import Migration
from toolgate.store.records_scope import RecordsScope
from toolgate.store.service_records import open_service_records, provision_service_records
from toolgate.tools.spec import ApprovalClass, HandlerContext, NoRollback, StrictArgs, ToolResult, ToolSpec

RELEASE_ID = "worker-run/1.0.0"
TOOL = "record_effect"
_SCHEMA = (
    "CREATE TABLE wr_effects (idempotency_key TEXT NOT NULL, operation_key TEXT NOT NULL,"
    " label TEXT NOT NULL, pid INTEGER NOT NULL, created_at TEXT NOT NULL)"
)
MIGRATIONS = (Migration(name="worker-run effects", sqlite=_SCHEMA, postgres=_SCHEMA),)
SCOPE = RecordsScope("worker_run", frozenset({"wr_effects"}))
"""What the handler and its status check reach: the downstream's table."""
BLOCK_LIMIT_S = 300.0
"""A blocked handler gives up after this long (a test that never releases it fails, never hangs)."""


class EffectArgs(StrictArgs):
    label: str = Field(min_length=1, max_length=64, pattern=r"^[a-z0-9-]+$")


class EffectResult(ToolResult):
    label: str
    status: str


def setup(store: Store) -> None:
    """The downstream's table (created once, under the store's migration lock) and its records
    capability."""
    store.migrate("worker-run-release", MIGRATIONS)
    provision_service_records(store, SCOPE)


def _block(where: str) -> None:
    if os.environ.get("WR_BLOCK") != where:
        return
    signals = Path(os.environ["WR_SIGNAL_DIR"])
    tmp = signals / "started.tmp"
    tmp.write_text(str(os.getpid()))
    os.replace(tmp, signals / "started")
    deadline = time.monotonic() + BLOCK_LIMIT_S
    while not (signals / "release").exists():  # polls a file the test creates: the test decides
        if time.monotonic() > deadline:
            raise ToolExecutionError("timeout", "never released")
        time.sleep(0.01)


def tools(env: ReleaseEnv) -> list[ToolSpec]:
    records = open_service_records(env.store, SCOPE)

    def record_effect(args: EffectArgs, ctx: HandlerContext) -> EffectResult:
        key = ctx.require_idempotency_key()
        _block("before")
        with records.transaction() as tx:
            tx.execute(
                "INSERT INTO wr_effects VALUES (?, ?, ?, ?, ?)",
                (key, ctx.operation_key, args.label, os.getpid(), iso(utcnow())),
            )
        _block("after")
        return EffectResult(label=args.label, status="recorded")

    def effect_status(args: EffectArgs, ctx: HandlerContext) -> EffectResult | None:
        with records.transaction(write=False) as tx:
            row = tx.one("SELECT label FROM wr_effects WHERE idempotency_key = ?", (ctx.idempotency_key,))
        return EffectResult(label=row["label"], status="recorded") if row else None

    return [
        ToolSpec(
            name=TOOL,
            version="1.0.0",
            owner="worker-tests",
            description="Record one labelled effect downstream. Needs an operator's approval.",
            args_model=EffectArgs,
            result_model=EffectResult,
            risk="caution",
            effect="Adds one row to the test downstream.",
            timeout_s=120,
            max_output_bytes=4096,
            approval=ApprovalClass.role("operator"),
            required_scopes=frozenset({"ops:restart"}),
            handler=record_effect,
            handler_revision="record-effect/1.0.0",
            rollback=NoRollback("test effect"),
            audit_fields=frozenset({"label"}),
            reconcile=effect_status,
        )
    ]


release = with_manifest(
    Release(
        id=RELEASE_ID,
        tools=tools,
        policy=PolicyRules.from_mapping(
            {"schema_version": 1, "policy_version": "wr-1", "approval_minutes": 60}
        ),
        setup=setup,
    )
)
"""The release a worker child serves."""
