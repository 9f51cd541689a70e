"""Release evidence rows: append-only, numbered, MAC-bound records of gate runs, rollback dry
runs and review waivers (what `toolgate.releases.evidence` judges a move by, and what tells a
report a gate run wrote from any other, `recorded_gate`).

``seq`` is assigned under a lock (SQLite's writer lock, a PostgreSQL advisory lock) and covered
by the MAC with every other column, so rows cannot be reordered, re-pointed at another bundle or
edited without failing verification; the newest row of a binding is its verdict, whatever any
clock says.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from toolgate.clock import iso, new_id
from toolgate.errors import ReleaseControlError, StoreError
from toolgate.store.base import Store, Tx
from toolgate.store.migrations import Migration

Kind = Literal["gate", "rollback_dry_run", "review_waiver"]
COMPONENT = "release-evidence"
_LOCK = 0x7467_0007
"""PostgreSQL advisory lock numbering evidence rows (SQLite's writer lock does it there)."""

_SCHEMA = """
CREATE TABLE release_evidence (
    seq INTEGER PRIMARY KEY,
    evidence_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL CHECK (kind IN ('gate', 'rollback_dry_run', 'review_waiver')),
    release TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    control TEXT NOT NULL,
    control_sha256 TEXT NOT NULL,
    dataset_sha256 TEXT NOT NULL,
    verdict TEXT NOT NULL CHECK (verdict IN ('PASS', 'FAIL')),
    detail TEXT NOT NULL,
    recorded_by TEXT NOT NULL,
    recorded_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE INDEX release_evidence_binding ON release_evidence (kind, manifest_sha256)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        name="release evidence: gate runs, rollback dry runs, review waivers",
        sqlite=_SCHEMA,
        postgres=_SCHEMA,
    ),
)
"""Append-only schema of the evidence table (component ``release-evidence``)."""

_FIELDS = (
    "seq",
    "evidence_id",
    "kind",
    "release",
    "manifest_sha256",
    "control",
    "control_sha256",
    "dataset_sha256",
    "verdict",
    "detail",
    "recorded_by",
    "recorded_at",
)


@dataclass(frozen=True)
class Evidence:
    """One evidence row as read back (``authentic``: its MAC verifies)."""

    seq: int
    evidence_id: str
    kind: str
    release: str
    manifest_sha256: str
    control: str
    control_sha256: str
    dataset_sha256: str
    verdict: str
    detail: dict[str, Any]
    recorded_by: str
    recorded_at: str
    authentic: bool = False


def _content(row: Mapping[str, Any]) -> dict[str, Any]:
    return {"kind_of_row": "release_evidence", **{k: row[k] for k in _FIELDS}}


def record(
    store: Store,
    kind: Kind,
    *,
    release: str,
    manifest_sha256: str,
    verdict: str,
    recorded_by: str,
    control: str = "",
    control_sha256: str = "",
    dataset_sha256: str = "",
    detail: Mapping[str, Any] | None = None,
) -> Evidence:
    """Append one evidence row (numbered under the lock, stamped by the store's clock, MAC'd)."""
    if verdict not in ("PASS", "FAIL"):
        raise ValueError(f"verdict must be PASS or FAIL, not {verdict!r}")
    store.migrate(COMPONENT, MIGRATIONS)
    with store.transaction() as tx:
        if getattr(store, "dialect", "") == "postgres":
            tx.execute(f"SELECT pg_advisory_xact_lock({_LOCK})")
        last = tx.one("SELECT COALESCE(MAX(seq), 0) AS seq FROM release_evidence")
        row: dict[str, Any] = {
            "seq": int(last["seq"] if last else 0) + 1,
            "evidence_id": new_id("evd"),
            "kind": kind,
            "release": release,
            "manifest_sha256": manifest_sha256,
            "control": control,
            "control_sha256": control_sha256,
            "dataset_sha256": dataset_sha256,
            "verdict": verdict,
            "detail": json.dumps(dict(detail or {}), sort_keys=True, separators=(",", ":")),
            "recorded_by": recorded_by,
            "recorded_at": _now(store, tx),
        }
        mac = store.keys.mac("release", _content(row))
        tx.send(  # with the COMMIT
            f"INSERT INTO release_evidence ({', '.join([*_FIELDS, 'mac'])})"
            f" VALUES ({', '.join('?' for _ in range(len(_FIELDS) + 1))})",
            [*(row[k] for k in _FIELDS), mac],
        )
    return _evidence(row, authentic=True)


def _now(store: Store, tx: Tx) -> str:
    tx_now = getattr(store, "_tx_now", None)
    return tx_now(tx) if tx_now is not None else iso(store.now())


def _evidence(row: Mapping[str, Any], *, authentic: bool) -> Evidence:
    try:
        detail = json.loads(row["detail"])
    except (TypeError, ValueError):
        detail, authentic = {}, False
    if not isinstance(detail, dict):
        detail, authentic = {}, False
    values = {k: row[k] for k in _FIELDS if k not in ("seq", "detail")}
    return Evidence(**values, seq=int(row["seq"]), detail=detail, authentic=authentic)


def evidence_rows(store: Store, kind: Kind, manifest_sha256: str) -> list[Evidence]:
    """Every row of ``kind`` for ``manifest_sha256``, oldest first (check ``authentic``)."""
    try:
        with store.transaction(write=False) as tx:
            rows = tx.execute(
                "SELECT * FROM release_evidence WHERE kind = ? AND manifest_sha256 = ? ORDER BY seq",
                (kind, manifest_sha256),
            )
    except StoreError:
        return []  # no evidence was ever recorded in this store (the table does not exist yet)
    out = []
    for row in rows:
        mac = row["mac"]
        out.append(_evidence(row, authentic=store.keys.verify("release", _content(row), mac)))
    return out


def recorded_gate(store: Store, report_digest: str, candidate_sha256: str, dataset_sha256: str) -> Evidence:
    """The gate row a ``toolgate evals run`` recorded for the report of ``report_digest`` (its MAC
    verifies, for that candidate bundle and dataset): what makes a report one a reviewer may sign
    (`toolgate.evals.signoff`). A report's digest is an unkeyed SHA-256 anyone recomputes, so a
    report written by hand (or by a run that recorded nothing: no control, no store,
    ``--critical-only``) is refused ``report_unknown``."""
    for gate in reversed(evidence_rows(store, "gate", candidate_sha256)):
        named = gate.detail.get("report_digest") == report_digest
        if gate.authentic and named and gate.dataset_sha256 == dataset_sha256:
            return gate
    raise ReleaseControlError(
        "report_unknown",
        f"no gate run recorded report {report_digest[:16]} in this store: sign the report of a"
        " `toolgate evals run --control ...` on this store",
    )


_LOST = """
SELECT
  (SELECT COUNT(*) FROM release_evidence) AS kept,
  (SELECT COALESCE(MAX(seq), 0) FROM release_evidence) AS numbered,
  (SELECT COUNT(*) FROM release_evidence WHERE kind = ? AND release = ?) AS rows_of,
  (SELECT COUNT(*) FROM audit_events WHERE tool_release = ? AND event = ?) AS events_of"""


def lost_rows(store: Store, kind: Kind, release: str, event: str) -> str | None:
    """Why rows were deleted from the table, or None when none was.

    A row's MAC catches an edit, never a deletion, and deleting the newest row of a binding (a
    gate FAIL) brings back the verdict before it. ``seq`` is numbered from 1 without a gap, so a
    row deleted with rows after it leaves a number out; the newest rows are counted against the
    audit chain instead: each ``kind`` row of ``release`` is followed by one ``event`` of that
    release once its row committed (never more events than rows), and the chain's own tamper
    evidence covers those events."""
    try:
        with store.transaction(write=False) as tx:
            row = tx.one(_LOST, (kind, release, release, event))
    except StoreError:
        return None  # no evidence was ever recorded in this store (the table does not exist yet)
    if row is None:
        return None
    if int(row["kept"]) != int(row["numbered"]):
        return f"{int(row['numbered']) - int(row['kept'])} of {int(row['numbered'])} evidence rows are missing"
    if int(row["rows_of"]) < int(row["events_of"]):
        return (
            f"the audit log recorded {int(row['events_of'])} {kind} rows of {release},"
            f" the table holds {int(row['rows_of'])}"
        )
    return None


__all__ = ["COMPONENT", "MIGRATIONS", "Evidence", "Kind", "evidence_rows", "lost_rows", "record", "recorded_gate"]
