"""The demo tax filing integration: ``submit_filing`` over a legacy service without idempotency keys.

`LegacyFilingService` is the downstream as legacy systems really are: it offers ONLY
``submit(...)`` (no idempotency key, no uniqueness: a blind retry files twice) and a natural-key
``status(...)`` query. It can drop the response after committing (the filing exists, the caller
sees `TimeoutError`) or lose the request before it arrives, from a seeded ``rng``.

`FilingService` is our side, the status-check pattern: ask the status first (already filed ->
return it, not resubmitted); else submit once; on a timeout never resubmit and never say
"failed" -- poll the status with backoff and return the confirmation when it appears; when it
does not, raise an *unresolved* timeout so the gateway records the outcome as unknown and a
person (or the recovery worker, through `FilingService.filing_status`) settles it.
"""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from datetime import timedelta
from typing import Any

from toolgate.clock import iso, utcnow
from toolgate.errors import ToolExecutionError
from toolgate.store import Migration, Store
from toolgate.store.records_scope import RecordsScope, ServiceRecords
from toolgate.tools.demo.filing_models import FilingResult, FilingType, SubmitFilingArgs
from toolgate.tools.demo.service import DemoService, Owner, Seed, records_of
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    ToolSpec,
)

_SCHEMA = """
CREATE TABLE sor_taxpayers (taxpayer_ref TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, name TEXT NOT NULL);
CREATE TABLE sor_filing_requests (
    request_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, taxpayer_ref TEXT NOT NULL,
    tax_year INTEGER NOT NULL, filing_type TEXT NOT NULL, transport TEXT NOT NULL, received_at TEXT NOT NULL
);
CREATE TABLE sor_filings (
    filing_id TEXT PRIMARY KEY, confirmation_number TEXT NOT NULL, tenant_id TEXT NOT NULL,
    taxpayer_ref TEXT NOT NULL, tax_year INTEGER NOT NULL, filing_type TEXT NOT NULL,
    status TEXT NOT NULL, submitted_at TEXT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(name="demo filing: taxpayers, legacy requests and filings", sqlite=_SCHEMA, postgres=_SCHEMA),
)

SEED_TAXPAYERS = (
    *((f"TP-{1000 + n}", "acme", f"Acme taxpayer {n}") for n in range(1, 11)),
    ("TP-2001", "globex", "Globex taxpayer 1"),
)
"""TP-1001..TP-1010 belong to acme, TP-2001 to globex."""

DEFAULT_BACKOFF_S: tuple[float, ...] = (1, 2, 4, 8, 16)
"""Waits between status checks after a timeout (31 s in total)."""


LEGACY_SCOPE = RecordsScope("demo_filing_legacy", frozenset({"sor_filing_requests", "sor_filings"}))


@dataclass
class LegacyFilingService:
    """A fake legacy filing service: ``submit`` and a natural-key ``status``, nothing else.

    ``drop_request_rate``: the request is lost before it arrives (nothing filed, caller times out).
    ``drop_response_rate``: the filing is committed, then the response is lost (caller times out).
    ``status_available``: False makes status queries time out (an outage of the lookup endpoint).
    """

    store: InitVar[Store | None]
    records: ServiceRecords = field(init=False, repr=False, compare=False)
    drop_response_rate: float = 0.0
    drop_request_rate: float = 0.0
    rng: random.Random = field(default_factory=random.Random)
    status_available: bool = True

    def __post_init__(self, store: Store | None) -> None:
        self.records = records_of(store, LEGACY_SCOPE)

    def submit(self, tenant_id: str, taxpayer_ref: str, tax_year: int, filing_type: str) -> dict[str, Any]:
        """File once per call -- including a blind retry, which files again."""
        draw = self.rng.random()
        transport = "ok"
        if draw < self.drop_request_rate:
            transport = "request_dropped"
        elif draw < self.drop_request_rate + self.drop_response_rate:
            transport = "response_dropped"
        now = iso(utcnow())
        filing = {
            "filing_id": "fil_" + secrets.token_hex(8),
            "confirmation_number": "CN-" + secrets.token_hex(5).upper(),
            "tenant_id": tenant_id,
            "taxpayer_ref": taxpayer_ref,
            "tax_year": tax_year,
            "filing_type": filing_type,
            "status": "submitted",
            "submitted_at": now,
        }
        with self.records.transaction() as tx:
            tx.execute(
                "INSERT INTO sor_filing_requests VALUES (?, ?, ?, ?, ?, ?, ?)",
                (
                    "freq_" + secrets.token_hex(8),
                    tenant_id,
                    taxpayer_ref,
                    tax_year,
                    filing_type,
                    transport,
                    now,
                ),
            )
            if transport != "request_dropped":
                tx.execute(
                    f"INSERT INTO sor_filings ({', '.join(filing)}) VALUES ({', '.join('?' for _ in filing)})",
                    tuple(filing.values()),
                )
        if transport != "ok":
            raise TimeoutError("the filing service did not answer in time")
        return filing

    def status(
        self, tenant_id: str, taxpayer_ref: str, tax_year: int, filing_type: str
    ) -> dict[str, Any] | None:
        """The earliest filing for the natural key, or None."""
        if not self.status_available:
            raise TimeoutError("the filing status service did not answer in time")
        with self.records.transaction(write=False) as tx:
            return tx.one(
                "SELECT * FROM sor_filings WHERE tenant_id = ? AND taxpayer_ref = ? AND tax_year = ?"
                " AND filing_type = ? ORDER BY submitted_at, filing_id LIMIT 1",
                (tenant_id, taxpayer_ref, tax_year, filing_type),
            )


def _result(filing: dict[str, Any], note: str) -> FilingResult:
    return FilingResult.model_validate({**filing, "note": note})


@dataclass
class FilingService(DemoService):
    """Our adapter over the legacy service: the status-check pattern, with injectable waits."""

    legacy: LegacyFilingService | None = None
    backoff_s: tuple[float, ...] = DEFAULT_BACKOFF_S
    sleep: Callable[[float], None] = time.sleep

    component = "demo_filing"
    migrations = MIGRATIONS
    seeds = (Seed("sor_taxpayers", ("taxpayer_ref", "tenant_id", "name"), SEED_TAXPAYERS),)
    owners = {"taxpayer": Owner("sor_taxpayers", "taxpayer_ref")}
    """A taxpayer reference belongs to exactly one tenant."""
    countable = reads = LEGACY_SCOPE.tables  # the legacy service writes them; our side reads the evidence
    tables = frozenset({"sor_taxpayers"})
    downstreams = {"legacy": LegacyFilingService}

    @property
    def downstream(self) -> LegacyFilingService:
        """The legacy service this adapter talks to."""
        assert self.legacy is not None
        return self.legacy

    def filing_status(self, args: SubmitFilingArgs, ctx: HandlerContext) -> FilingResult | None:
        """Pure natural-key status check (for the recovery worker): never submits anything."""
        try:
            found = self.downstream.status(ctx.tenant_id, args.taxpayer_ref, args.tax_year, args.filing_type)
        except TimeoutError as exc:
            raise ToolExecutionError(
                "server_error", "the filing status service is not answering", retryable=True
            ) from exc
        return _result(found, "found by status check") if found else None

    def submit_with_status_check(self, args: SubmitFilingArgs, ctx: HandlerContext) -> FilingResult:
        """Status first, submit at most once, and on a timeout check -- never resubmit, never guess."""
        if not ctx.idempotency_key:
            raise ToolExecutionError("server_error", "write handler called without an idempotency key")
        # The legacy API cannot take the idempotency key; the natural key below does its job.
        if self.resource_status("taxpayer", args.taxpayer_ref, ctx.tenant_id) != "owned":
            raise ToolExecutionError("caller_error", f"no taxpayer {args.taxpayer_ref} for this account")
        natural_key = (ctx.tenant_id, args.taxpayer_ref, args.tax_year, args.filing_type)
        try:
            existing = self.downstream.status(*natural_key)
        except TimeoutError as exc:
            raise ToolExecutionError(
                "server_error", "the filing service is not answering; nothing was submitted", retryable=True
            ) from exc
        if existing is not None:
            return _result(existing, "already existed; not resubmitted")
        try:
            return _result(self.downstream.submit(*natural_key), "submitted")
        except TimeoutError:
            pass  # unknown outcome: the filing may well exist. Check; do not resubmit.
        checks = 0
        for delay in self.backoff_s:
            if ctx.deadline is not None and utcnow() + timedelta(seconds=delay) >= ctx.deadline:
                break
            self.sleep(delay)
            checks += 1
            try:
                found = self.downstream.status(*natural_key)
            except TimeoutError:
                continue
            if found is not None:
                return _result(found, "confirmed via status check")
        raise ToolExecutionError(
            "timeout",
            f"unresolved: the submit timed out and {checks} status check(s) did not find the filing; "
            "it may still exist. Do not resubmit; a person will confirm the outcome.",
            retryable=False,
        )


def filing_specs(service: FilingService) -> list[ToolSpec]:
    """``submit_filing``, bound to ``service``."""

    def submit_filing(args: SubmitFilingArgs, ctx: HandlerContext) -> FilingResult:
        return service.submit_with_status_check(args, ctx)

    # the handler's timeout must outlast every status check, or the gateway gives up first
    timeout_s = max(60.0, sum(service.backoff_s) + 30.0)
    return [
        ToolSpec(
            name="submit_filing",
            version="1.0.0",
            owner="tax-operations",
            description=(
                "Propose submitting one tax filing (taxpayer, tax year, filing type) to the tax agency. A tax "
                "preparer must approve it; the result says pending_approval until then. If the filing already "
                "exists it is returned, not filed again. If the agency does not answer, the outcome is "
                "reported as unresolved: never propose the same filing again to 'retry' it. Not for internal "
                "reports (that is submit_report_job)."
            ),
            args_model=SubmitFilingArgs,
            result_model=FilingResult,
            risk="danger",
            effect="Files a legally binding tax filing with the agency for the taxpayer and year.",
            timeout_s=timeout_s,
            max_output_bytes=1024,
            approval=ApprovalClass.role("tax_preparer"),
            required_scopes=frozenset({"filings:write"}),
            handler=submit_filing,
            handler_revision="submit-filing/1.0.0",
            rollback=NoRollback(
                "a filing received by the agency cannot be withdrawn; corrections are an amended filing"
            ),
            resource=ResourceRef(kind="taxpayer", argument="taxpayer_ref", conflict=True),
            audit_fields=frozenset({"taxpayer_ref", "tax_year", "filing_type"}),
            reconcile=service.filing_status,
            # no key downstream: an absent filing after a timeout goes to a person, never
            # straight back to the submit path
            retry_safe_when_absent=False,
        ),
    ]


__all__ = [
    "DEFAULT_BACKOFF_S",
    "LEGACY_SCOPE",
    "MIGRATIONS",
    "FilingResult",
    "FilingService",
    "FilingType",
    "LegacyFilingService",
    "SubmitFilingArgs",
    "filing_specs",
]
