"""The rows of release control, as frozen values, and their schema (component ``release-control``).

Rows that carry authority (which release is active, which phase a rollout is in, which arm a
thread is pinned to) are bound by a MAC under the store's ``release`` key, like identity rows:
a row edited or inserted with database access alone does not verify, and trusted code refuses
to act on it (routing falls back to the operator's configured release, commands refuse). Every
write is also bound into the audit chain with its version (`toolgate.store.record_versions`): an
older, validly MAC'd row copied back reads as ``replayed`` and is refused the same way. Shadow
decisions are evidence, not authority, and carry no MAC.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from toolgate.store.migrations import Migration

COMPONENT = "release-control"
"""The migration component of these tables."""

_V1 = """
CREATE TABLE release_pointer (
    configured TEXT PRIMARY KEY,
    active TEXT NOT NULL,
    active_sha256 TEXT NOT NULL,
    previous TEXT,
    previous_sha256 TEXT,
    rollout_id TEXT,
    version INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE TABLE release_rollouts (
    rollout_id TEXT PRIMARY KEY,
    configured TEXT NOT NULL,
    control TEXT NOT NULL,
    control_sha256 TEXT NOT NULL,
    candidate TEXT NOT NULL,
    candidate_sha256 TEXT NOT NULL,
    phase TEXT NOT NULL CHECK (phase IN ('shadow', 'canary', 'promoted', 'stopped', 'rolled_back')),
    canary_bp INTEGER NOT NULL,
    salt TEXT NOT NULL,
    started_at TEXT NOT NULL,
    started_seq INTEGER NOT NULL,
    stop_reason TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
);
CREATE TABLE release_pins (
    rollout_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    release TEXT NOT NULL,
    arm TEXT NOT NULL CHECK (arm IN ('control', 'candidate')),
    pinned_at TEXT NOT NULL,
    mac TEXT NOT NULL,
    PRIMARY KEY (rollout_id, thread_id)
);
CREATE TABLE shadow_decisions (
    shadow_id TEXT PRIMARY KEY,
    rollout_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    turn INTEGER NOT NULL,
    control_release TEXT NOT NULL,
    candidate_release TEXT NOT NULL,
    control TEXT NOT NULL,
    candidate TEXT NOT NULL,
    candidate_calls INTEGER NOT NULL,
    matched INTEGER NOT NULL,
    error TEXT,
    recorded_at TEXT NOT NULL
);
CREATE INDEX shadow_decisions_rollout_idx ON shadow_decisions (rollout_id);
CREATE INDEX audit_release_idx ON audit_events (tool_release, seq)"""

_V2_THREAD_RELEASES = """
CREATE TABLE release_thread_pins (
    thread_id TEXT PRIMARY KEY,
    release TEXT NOT NULL,
    tenant_id TEXT NOT NULL,
    rollout_id TEXT NOT NULL,
    changed_by TEXT NOT NULL,
    version INTEGER NOT NULL,
    updated_at TEXT NOT NULL,
    mac TEXT NOT NULL
)"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        name="release pointer, rollouts, thread pins and shadow decisions; audit events by release",
        sqlite=_V1,
        postgres=_V1,
    ),
    Migration(
        name="the release each thread keeps until it ends, independent of rollouts",
        sqlite=_V2_THREAD_RELEASES,
        postgres=_V2_THREAD_RELEASES,
    ),
)
"""Append-only, like the store's own list."""


def signed_content(record: Any, kind: str) -> dict[str, Any]:
    """What a release-control row's MAC covers: every field but ``authentic`` and ``replayed`` (set
    on read), and the kind of row, so one row can never pass for another."""
    data = asdict(record)
    data.pop("authentic")
    data.pop("replayed")
    return {"kind": kind, **data}


@dataclass(frozen=True, kw_only=True)
class ReleasePointer:
    """Which release a configured release id resolves to: what `open_app` serves."""

    configured: str
    """The release the operator configured (``TOOLGATE_RELEASE``)."""
    active: str
    """The release served now (the configured one until a promotion)."""
    active_sha256: str
    """Digest of the active release's effective manifest, recorded when it became active."""
    previous: str | None = None
    """The complete bundle a rollback restores (set by a promotion)."""
    previous_sha256: str | None = None
    """Digest of the previous release's effective manifest while it was active."""
    rollout_id: str | None = None
    """The current (or latest) rollout of this configured release."""
    version: int = 0
    """Bumped by every change; changes are conditional on it."""
    updated_at: str = ""
    """Time of the last change (the store's clock)."""
    authentic: bool = False
    """Set on read: whether the row's MAC verified and it is the latest version the audit chain
    bound."""
    replayed: bool = False
    """Set on read: the MAC verifies but the row is older than its latest audited version (copied
    back); never authentic then."""

    def content(self) -> dict[str, Any]:
        """Everything the row's MAC covers."""
        return signed_content(self, "pointer")


@dataclass(frozen=True, kw_only=True)
class Rollout:
    """One candidate's way from shadow to promotion (or to a stop)."""

    rollout_id: str
    """``rol_...`` identifier."""
    configured: str
    """The configured release this rollout belongs to."""
    control: str
    """The release serving everyone else (the active release when the rollout began)."""
    control_sha256: str
    """Digest of the control's effective manifest when the rollout began."""
    candidate: str
    """The release being rolled out."""
    candidate_sha256: str
    """Digest of the candidate's effective manifest when the rollout began."""
    phase: str
    """`toolgate.releases.rules.Phase`."""
    canary_bp: int
    """Canary size in basis points (200 = 2 %)."""
    salt: str
    """Random per rollout: the cohort hash input, so arms differ between rollouts."""
    started_at: str
    """When the rollout began (the store's clock; informational only)."""
    started_seq: int
    """Audit sequence number when the rollout began: the candidate's signals are the events after
    it, so no process clock (nor the store's) decides what counts."""
    stop_reason: str = ""
    """Why it stopped (a stable code with numbers) or was rolled back."""
    changed_by: str = ""
    """User id of the admin who made the last change, or ``automatic``."""
    version: int = 0
    """Bumped by every change."""
    updated_at: str = ""
    """Time of the last change (the store's clock)."""
    authentic: bool = False
    """Set on read: whether the row's MAC verified and it is the latest version the audit chain
    bound."""
    replayed: bool = False
    """Set on read: the MAC verifies but the row is older than its latest audited version (copied
    back); never authentic then."""

    def content(self) -> dict[str, Any]:
        """Everything the row's MAC covers."""
        return signed_content(self, "rollout")


@dataclass(frozen=True, kw_only=True)
class ThreadPin:
    """The arm a thread runs in for one rollout, fixed by its first model turn."""

    rollout_id: str
    thread_id: str
    release: str
    """The release that serves this thread."""
    arm: str
    """``control`` or ``candidate``."""
    pinned_at: str = ""
    authentic: bool = False
    """Set on read: whether the row's MAC verified and it is the latest version the audit chain
    bound."""
    replayed: bool = False
    """Set on read: the MAC verifies but the row is older than its latest audited version (copied
    back); never authentic then."""

    def content(self) -> dict[str, Any]:
        """Everything the row's MAC covers."""
        return signed_content(self, "pin")


@dataclass(frozen=True, kw_only=True)
class ThreadRelease:
    """The release one thread keeps until it ends, whatever rollouts come after: recorded by the
    router on the thread's first model turn, changed only by an operator's migration."""

    thread_id: str
    release: str
    """The release id (`Registry.release`) that serves this thread."""
    tenant_id: str
    """The tenant of the authenticated principal of the first turn ("" when none was known)."""
    rollout_id: str = ""
    """The rollout the thread was pinned under ("" outside a rollout or after a migration)."""
    changed_by: str = ""
    """``router`` when pinned by the first turn, else the user id of the migrating operator."""
    version: int = 1
    """Bumped by every migration."""
    updated_at: str = ""
    authentic: bool = False
    """Set on read: whether the row's MAC verified and it is the latest version the audit chain
    bound."""
    replayed: bool = False
    """Set on read: the MAC verifies but the row is older than its latest audited version (copied
    back); never authentic then."""

    def content(self) -> dict[str, Any]:
        """Everything the row's MAC covers."""
        return signed_content(self, "thread_release")


@dataclass(frozen=True, kw_only=True)
class ShadowRecord:
    """The control's and the candidate's decisions on one model turn of a control thread."""

    rollout_id: str
    thread_id: str
    turn: int
    control_release: str
    candidate_release: str
    control: list[dict[str, Any]]
    """Per proposed call: ``tool``, ``arguments_sha256``, ``decision`` (``allowed``,
    ``proposal_required`` or the refusal code)."""
    candidate: list[dict[str, Any]]
    """The same for the candidate's response to the same messages."""
    matched: bool
    """True when both made the same decisions on the same calls."""
    error: str | None = None
    """Why the candidate produced no decisions (its model failed), else None."""
    recorded_at: str = ""


@dataclass(frozen=True)
class ReleaseState:
    """The configured release's pointer and current rollout, as read together."""

    pointer: ReleasePointer | None
    rollout: Rollout | None
    missing_rollout: bool = False
    """The pointer names a rollout that does not exist (a deleted row)."""

    @property
    def tampered(self) -> list[str]:
        """Which records do not verify ([] when all do): ``pointer``, ``rollout`` (MAC),
        ``pointer_replayed``, ``rollout_replayed`` (an older row copied back), ``rollout_missing``."""
        bad = []
        if self.pointer is not None and not self.pointer.authentic:
            bad.append("pointer_replayed" if self.pointer.replayed else "pointer")
        if self.rollout is not None and not self.rollout.authentic:
            bad.append("rollout_replayed" if self.rollout.replayed else "rollout")
        if self.missing_rollout:
            bad.append("rollout_missing")
        return bad


__all__ = [
    "COMPONENT",
    "MIGRATIONS",
    "ReleasePointer",
    "ReleaseState",
    "Rollout",
    "ShadowRecord",
    "ThreadPin",
    "ThreadRelease",
]
