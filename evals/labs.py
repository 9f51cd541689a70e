"""A reusable check of the status-check pattern against a legacy system that loses replies.

Submissions go to a fake legacy filing service (no idempotency keys, natural-key status query)
that drops a fraction of responses after committing. The adapter must produce zero duplicate
filings and zero false "failed" outcomes; what stays undetermined is reported as unresolved.
"""

from __future__ import annotations

import random
import secrets
import tempfile
from dataclasses import dataclass
from pathlib import Path

from toolgate.canonical import idempotency_key_for
from toolgate.errors import ToolExecutionError
from toolgate.graph.bootstrap import initialize_store
from toolgate.store.sqlite import SQLiteStore
from toolgate.tools.demo.filing import FilingService, FilingType, LegacyFilingService, SubmitFilingArgs
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.spec import HandlerContext

KINDS: tuple[FilingType, ...] = ("income_tax_return", "vat_return", "payroll_annual")


@dataclass(frozen=True)
class Lab4Result:
    """Counts of one run."""

    submissions: int
    dropped: int
    duplicates: int
    false_failures: int
    unresolved: int


def run_lab4(*, submissions: int = 50, drop_rate: float = 0.3, seed: int = 7) -> Lab4Result:
    """Run ``submissions`` filings through the status-check adapter with ``drop_rate`` lost replies."""
    with tempfile.TemporaryDirectory(prefix="toolgate-lab4-") as tmp:
        store = SQLiteStore(Path(tmp) / "lab4.sqlite", key=secrets.token_bytes(32))
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        legacy = LegacyFilingService(store, drop_response_rate=drop_rate, rng=random.Random(seed))
        adapter = FilingService(store, legacy=legacy, backoff_s=(0.001,) * 5)
        false_failures = unresolved = dropped = 0
        for n in range(submissions):
            args = SubmitFilingArgs(
                taxpayer_ref=f"TP-{1001 + n % 10}",
                tax_year=2000 + n // 10 % 100,
                filing_type=KINDS[n % len(KINDS)],
            )
            ctx = HandlerContext(
                tenant_id="acme",
                user_id="lab4",
                operation_key=f"op_lab4_{n}",
                idempotency_key=idempotency_key_for(f"op_lab4_{n}"),
            )
            try:
                result = adapter.submit_with_status_check(args, ctx)
            except ToolExecutionError as exc:
                if exc.kind == "timeout":
                    unresolved += 1
                    continue
                false_failures += 1
                continue
            dropped += result.note == "confirmed via status check"
        with store.transaction(write=False) as tx:
            duplicate_rows = tx.execute(
                "SELECT COUNT(*) AS n FROM sor_filings GROUP BY tenant_id, taxpayer_ref, tax_year, filing_type"
                " HAVING COUNT(*) > 1"
            )
        return Lab4Result(
            submissions=submissions,
            dropped=dropped,
            duplicates=len(duplicate_rows),
            false_failures=false_failures,
            unresolved=unresolved,
        )


__all__ = ["Lab4Result", "run_lab4"]
