"""The embedding kit: what an integrator's own tests and harnesses do around a running gateway,
by public names (re-exported by `toolgate.testing`).

An integrator who brings their own tools needs, besides `toolgate.testing.open_test_app` and the
scripted model, three things that production does through its doors (CLI, console, worker):

- `store_with_people`: a store set up for a release with the people who act in it (requesters,
  reviewers), added by the trusted bootstrap as a seed file would add them;
- `review`: one reviewer's decision on a proposal, recorded exactly as the CLI, console and HTTP
  API record it (same checks: role, separation of duties, digest, expiry);
- `deliver`: one worker delivery of an approved operation (atomic claim, handler run once, stored
  result for a duplicate), as ``toolgate worker`` runs it.

Each wraps the one production function that does it, so a harness built on the kit keeps working
when the modules behind it move.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from toolgate.graph.bootstrap import App, initialize_store
from toolgate.graph.delivery.result import Delivery
from toolgate.graph.review.decisions import ReviewOutcome, decide
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import Release
from toolgate.store import Store
from toolgate.store.sqlite import SQLiteStore


def store_with_people(
    people: Iterable[Principal],
    *,
    store: Store | None = None,
    path: Path | None = None,
    key: bytes | None = None,
    release: Release | None = None,
) -> Store:
    """``store`` (or a new SQLite store at ``path`` with secret ``key``) set up for ``release``
    (its schema and the release's own tables) with every one of ``people`` who is not there yet.

    People are added by the trusted bootstrap (no administrator acts); their tokens are not
    returned: a harness acts as a `Principal` through the graph's `Context`, never by token."""
    if store is None:
        if path is None or key is None:
            raise TypeError("store_with_people needs a store, or a path and a key for a new SQLite store")
        store = SQLiteStore(path, key=key)
    initialize_store(store, release)
    directory = IdentityDirectory(store)
    for person in people:
        if store.identities.get(person.user_id) is None:
            directory.add(person, by=None)
    return store


def review(
    app: App,
    proposal_id: str,
    reviewer: Principal,
    decision: Literal["approve", "reject"],
    *,
    reason: str = "",
) -> ReviewOutcome:
    """Record ``reviewer``'s decision on ``proposal_id`` under the release the proposal was made
    in; raises `toolgate.errors.ApprovalError` when a check refuses it (own proposal, wrong role,
    expired, already decided)."""
    return decide(app.gateway_for_proposal(proposal_id), proposal_id, reviewer, decision, reason=reason)


def deliver(app: App, operation_key: str, *, worker_id: str = "test-worker") -> Delivery:
    """One worker delivery of ``operation_key`` (an approved operation runs once; a delivered one
    answers its stored result with ``duplicate=True``)."""
    return app.executor_gateway(operation_key).executor.deliver(operation_key, worker_id=worker_id)


__all__ = ["Delivery", "ReviewOutcome", "deliver", "review", "store_with_people"]
