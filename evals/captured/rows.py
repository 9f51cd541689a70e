"""Rows of the ``captured_cases`` table: captured dataset cases and their review, MAC-bound.

Written and read only through `toolgate.evals.captured.capture`, which decides who may do what. Every
column but the MAC is covered by it, under the store's ``capture`` key: a case body, a status, a
reviewer or an author list changed with database access alone, or a row copied under another id,
reads back with ``authentic=False`` and is never reviewed, edited or exported. The body is the
case's canonical JSON and ``digest`` its SHA-256, so a reviewer approves exactly one content.

A row changes only by conditional updates on its ``version`` (review, supersession), so two people
acting on one row at once cannot both succeed. At most one capture of a task turn is active
(``pending_review`` or ``reviewed``): a unique index, so two captures at once record one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

from toolgate.canonical import canonical_json, sha256_hex
from toolgate.clock import iso
from toolgate.evals.fixtures import EvalCase
from toolgate.store.base import Store, Tx

Status = Literal["pending_review", "reviewed", "rejected", "superseded"]
"""``pending_review``: waits for a reviewer, never exported; ``reviewed``: counts (exported);
``rejected``: a reviewer refused it; ``superseded``: an edit replaced it."""

_COLUMNS = (
    "capture_id",
    "case_id",
    "tenant_id",
    "source_kind",
    "source_id",
    "thread_id",
    "task",
    "release",
    "body",
    "digest",
    "authors",
    "captured_by",
    "supersedes",
    "status",
    "reviewed_by",
    "reviewed_at",
    "review_reason",
    "version",
    "created_at",
    "updated_at",
)


@dataclass(frozen=True, kw_only=True)
class CapturedCase:
    """One captured case as stored (``authentic``: its MAC verified on read)."""

    capture_id: str
    """``cap_...``; the case's id is ``captured-`` and its hex part."""
    case_id: str
    tenant_id: str
    """The tenant whose thread it came from: who may review and export it."""
    source_kind: str
    """``thread``, ``operation`` or ``proposal``: what the capturer named."""
    source_id: str
    thread_id: str
    task: int
    """The task turn of the thread the case replays."""
    release: str
    """The release that served the thread."""
    body: str
    """The case's canonical JSON (redacted)."""
    digest: str
    """SHA-256 of ``body``."""
    authors: tuple[str, ...]
    """The capturer and everyone who edited the case along its chain: none of them may review it."""
    captured_by: str
    """Who made this row: the capturer, or the editor of an edit."""
    supersedes: str | None = None
    """The capture this edit replaced."""
    status: Status = "pending_review"
    reviewed_by: str | None = None
    reviewed_at: str | None = None
    review_reason: str | None = None
    version: int = 1
    created_at: str = ""
    updated_at: str = ""
    authentic: bool = False

    def content(self) -> dict[str, Any]:
        """Everything the MAC covers."""
        data = asdict(self)
        data.pop("authentic")
        return {"kind_of_row": "captured_case", **data, "authors": sorted(self.authors)}

    def case(self) -> EvalCase:
        """The case the body holds (`ValueError` when it is no valid case, or another case's)."""
        case = EvalCase.model_validate_json(self.body)
        if case.id != self.case_id:
            raise ValueError(f"the body holds case {case.id}, not {self.case_id}")
        return case

    def intact(self) -> bool:
        """Authentic, with a body that is its digest's and a valid case of this row's id."""
        if not self.authentic or sha256_hex(self.body) != self.digest:
            return False
        try:
            self.case()
        except ValueError:
            return False
        return True


def body_of(case: EvalCase) -> tuple[str, str]:
    """``(body, digest)`` of a case."""
    body = canonical_json(case.model_dump(mode="json"))
    return body, sha256_hex(body)


def _now(store: Store, tx: Tx) -> str:
    tx_now = getattr(store, "_tx_now", None)
    return tx_now(tx) if tx_now is not None else iso(store.now())


def _read(store: Store, row: dict[str, Any] | None) -> CapturedCase | None:
    if row is None:
        return None
    data = {k: row[k] for k in _COLUMNS}
    try:
        authors = tuple(json.loads(data["authors"]))
    except (TypeError, ValueError):
        authors = ()
    found = CapturedCase(
        **{**data, "task": int(data["task"]), "version": int(data["version"]), "authors": authors}
    )
    return replace(found, authentic=store.keys.verify("capture", found.content(), row["mac"]))


def _values(store: Store, row: CapturedCase) -> list[Any]:
    data = {**asdict(row), "authors": json.dumps(sorted(row.authors))}
    return [*(data[k] for k in _COLUMNS), store.keys.mac("capture", row.content())]


class _Lost(Exception):
    """The transaction lost to a concurrent change: roll it back whole."""


def insert(store: Store, row: CapturedCase, *, supersede: CapturedCase | None = None) -> CapturedCase | None:
    """Insert ``row`` (stamped by the store's clock), first marking ``supersede`` superseded when
    given, in one transaction; None when another active capture of the same task turn exists or
    ``supersede`` changed since it was read (nothing written)."""
    try:
        with store.transaction() as tx:
            now = _now(store, tx)
            if supersede is not None:
                old = replace(supersede, status="superseded", version=supersede.version + 1, updated_at=now)
                if not _update(store, tx, supersede, old):
                    raise _Lost
            stamped = replace(row, created_at=now, updated_at=now, authentic=True)
            inserted = tx.execute(
                f"INSERT INTO captured_cases ({', '.join([*_COLUMNS, 'mac'])})"
                f" VALUES ({', '.join('?' * (len(_COLUMNS) + 1))}) ON CONFLICT DO NOTHING RETURNING capture_id",
                _values(store, stamped),
            )
            if not inserted:
                raise _Lost
    except _Lost:
        return None
    return stamped


def _update(store: Store, tx: Tx, before: CapturedCase, after: CapturedCase) -> bool:
    changed = tx.execute(
        "UPDATE captured_cases SET status = ?, reviewed_by = ?, reviewed_at = ?, review_reason = ?,"
        " version = ?, updated_at = ?, mac = ? WHERE capture_id = ? AND version = ? AND status = ?"
        " RETURNING capture_id",
        (
            after.status,
            after.reviewed_by,
            after.reviewed_at,
            after.review_reason,
            after.version,
            after.updated_at,
            store.keys.mac("capture", after.content()),
            before.capture_id,
            before.version,
            before.status,
        ),
    )
    return bool(changed)


def decide(
    store: Store, before: CapturedCase, status: Status, reviewer: str, reason: str
) -> CapturedCase | None:
    """Record a review of ``before`` (conditional on its version and status); None when it changed."""
    with store.transaction() as tx:
        now = _now(store, tx)
        after = replace(
            before,
            status=status,
            reviewed_by=reviewer,
            reviewed_at=now,
            review_reason=reason,
            version=before.version + 1,
            updated_at=now,
            authentic=True,
        )
        return after if _update(store, tx, before, after) else None


def get(store: Store, capture_id: str) -> CapturedCase | None:
    """The row (check ``intact``), or None."""
    with store.transaction(write=False) as tx:
        return _read(store, tx.one("SELECT * FROM captured_cases WHERE capture_id = ?", (capture_id,)))


def rows(store: Store, *, status: str | None = None) -> list[CapturedCase]:
    """Every row (of ``status``), oldest first (check ``intact``)."""
    where, params = ("WHERE status = ?", (status,)) if status else ("", ())
    with store.transaction(write=False) as tx:
        found = tx.execute(f"SELECT * FROM captured_cases {where} ORDER BY created_at, capture_id", params)
    return [r for r in (_read(store, row) for row in found) if r is not None]


__all__ = ["CapturedCase", "Status", "body_of", "decide", "get", "insert", "rows"]
