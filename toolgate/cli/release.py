"""``toolgate release``: start a release package of your own, and roll releases out.

``toolgate release init acme-tools`` writes a package with one read and one write tool, its
policy, its reviewed manifest, a seed file of people and a passing test (`toolgate.scaffold.command`),
then prints how to point ``TOOLGATE_RELEASE`` at it.

``shadow``, ``canary``, ``promote``, ``rollback`` and ``migrate-thread`` change release control
(`toolgate.releases.control`, `toolgate.releases.migrate`): each authenticates the person acting (``--as`` and
``TOOLGATE_TOKEN``), who must hold the ``admin`` role; a refusal exits 2 with its code and is
audited. ``rollback --dry-run`` and ``waive-review`` record release evidence, which shadow,
canary and promote demand (`toolgate.releases.evidence`); ``evidence`` shows what a candidate has.
``status`` reads (and evaluates the automatic stop).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from toolgate.cli.common import kv, open_from_env, person
from toolgate.config import Settings
from toolgate.graph.bootstrap import release_manifest
from toolgate.releases.bundle import ReleaseEnv
from toolgate.releases.loader import load_release, registered_releases
from toolgate.scaffold.command import package_name, scaffold
from toolgate.store.factory import open_store

release_app = typer.Typer(no_args_is_help=True, help="Create, list and roll out tool releases.")

AsAdmin = Annotated[str, typer.Option("--as", help="Acting admin (token in TOOLGATE_TOKEN).")]

SPECS_ONLY_KEY = b"toolgate-release-init-specs-only-never-connected"
"""The manifest is computed from specs built on a store that is never connected."""


@release_app.command("init")
def init(
    name: Annotated[str, typer.Argument(help="Distribution name of the new release, e.g. acme-tools.")],
    directory: Annotated[Path, typer.Option("--dir", help="Where to create it.")] = Path("."),
) -> None:
    """Create a release package NAME with one read and one write tool, its policy, reviewed
    manifest and a test that passes as generated."""
    root = scaffold(name, directory)
    reference = f"{(root / package_name(name) / 'release.py').resolve()}:release"
    release = load_release(reference)
    settings = Settings.from_env()
    store = open_store(None, settings.data_dir, key=SPECS_ONLY_KEY)
    manifest = release_manifest(release, release.registry(ReleaseEnv(store, secret=SPECS_ONLY_KEY)))
    assert release.home is not None
    (release.home / "manifest.json").write_text(
        json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8"
    )
    kv(release=release.id, created=root, tools=",".join(sorted(manifest["tools"])))
    kv(next=f"export TOOLGATE_RELEASE={reference}")


@release_app.command("list")
def list_releases() -> None:
    """Releases installed packages register (entry points), and the configured one."""
    for release_id in registered_releases():
        kv(release=release_id, installed="true")
    kv(configured=Settings.from_env().release)


@release_app.command("shadow")
def shadow(
    candidate: Annotated[str, typer.Argument(help="Release id to shadow, e.g. ops-tools/1.1.0.")],
    as_user: AsAdmin,
) -> None:
    """Shadow CANDIDATE: it judges copies of the active release's turns; nothing it decides runs."""
    from toolgate.releases.control import ReleaseControl

    application = open_from_env()
    rollout = ReleaseControl(application).shadow(person(application, as_user), candidate)
    kv(release=rollout.candidate, phase=rollout.phase, control=rollout.control, rollout=rollout.rollout_id)


@release_app.command("canary")
def canary(
    candidate: Annotated[str, typer.Argument(help="The release in shadow.")],
    as_user: AsAdmin,
    percent: Annotated[float, typer.Option(help="Share of users routed to the candidate.")] = 2.0,
) -> None:
    """Route a stable cohort of PERCENT % of users to CANDIDATE (high-risk tools excluded)."""
    from toolgate.releases.control import ReleaseControl
    from toolgate.releases.rules import bp_to_percent

    application = open_from_env()
    rollout = ReleaseControl(application).canary(person(application, as_user), candidate, percent)
    kv(
        release=rollout.candidate,
        phase=rollout.phase,
        canary_percent=bp_to_percent(rollout.canary_bp),
        control=rollout.control,
        automatic_stop="armed",
    )


@release_app.command("promote")
def promote(as_user: AsAdmin) -> None:
    """Make the canaried candidate the active release (the control stays the rollback target)."""
    from toolgate.releases.control import ReleaseControl

    application = open_from_env()
    state = ReleaseControl(application).promote(person(application, as_user))
    assert state.pointer is not None
    kv(release=state.pointer.active, phase="promoted", rollback_release=state.pointer.previous)


@release_app.command("rollback")
def rollback(
    as_user: AsAdmin,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only check and report; change nothing.")
    ] = False,
) -> None:
    """Restore the previous complete bundle after checking its hashes and critical fixtures."""
    from toolgate.releases.control import ReleaseControl

    application = open_from_env()
    plan = ReleaseControl(application).rollback(person(application, as_user), dry_run=dry_run)
    facts = {
        "rollback_dry_run" if dry_run else "rollback": plan.status if dry_run else "done",
        "from": plan.source or "none",
        "target": plan.target or "none",
        "hashes": plan.hashes,
        "critical": plan.critical,
    }
    if dry_run:
        facts["evidence"] = "recorded" if plan.target_sha256 else "not_recorded"
    if plan.problems:
        facts["refused"] = plan.problems[0][0]
    kv(**facts)
    if dry_run and plan.status == "FAIL":
        raise typer.Exit(1)


@release_app.command("waive-review")
def waive_review(
    candidate: Annotated[str, typer.Argument(help="The release whose critical cases go unsigned.")],
    reason: Annotated[str, typer.Option(help="Why the sign-offs are waived (kept and audited).")],
    as_user: AsAdmin,
) -> None:
    """Let CANDIDATE's exact bundle move without sign-offs of its critical cases (audited), moved
    by another admin: the waiver's author is refused shadow, canary and promote (own_waiver)."""
    from toolgate.releases.control import ReleaseControl

    application = open_from_env()
    waiver = ReleaseControl(application).waive_review(person(application, as_user), candidate, reason)
    kv(release=candidate, review="waived", by=waiver.recorded_by, evidence=waiver.evidence_id)


@release_app.command("evidence")
def evidence(
    candidate: Annotated[str, typer.Argument(help="The release to move.")],
    control: Annotated[
        str | None, typer.Option(help="The release it replaces (default: the active release).")
    ] = None,
) -> None:
    """What the store holds for moving CANDIDATE (gate, sign-offs, rollback dry run); exit 1 when
    something is missing, printed as ``missing=<code>`` lines."""
    from toolgate.releases.control import ReleaseControl
    from toolgate.releases.evidence import Binding

    release_control = ReleaseControl(open_from_env())
    state = release_control.state()
    control = control or release_control.active(state)
    binding = Binding(
        candidate,
        release_control.manifest_sha256(candidate),
        control,
        release_control.manifest_sha256(control),
    )
    found = release_control.evidence.found(binding)
    kv(
        release=candidate,
        control=control,
        gate=found.gate.verdict if found.gate else "none",
        reviewed=found.reviewed,
        review_waived="yes" if found.waiver else "no",
        rollback_dry_run=found.rollback_dry_run.verdict if found.rollback_dry_run else "none",
        evidence="complete" if not found.problems else "missing",
    )
    for code, message in found.problems:
        kv(missing=code, message=json.dumps(message))
    if found.problems:
        raise typer.Exit(1)


@release_app.command("migrate-thread")
def migrate_thread_command(
    thread: Annotated[str, typer.Argument(help="The thread to move.")],
    to: Annotated[str, typer.Option("--to", help="Release id the thread continues under.")],
    as_user: AsAdmin,
) -> None:
    """Move THREAD to release TO (it otherwise keeps the release it started with until it ends)."""
    from toolgate.releases.control import ReleaseControl
    from toolgate.releases.migrate import migrate_thread

    application = open_from_env()
    actor = person(application, as_user)
    with application.graph() as graph:

        def thread_status(task: str) -> tuple[bool, str]:
            snapshot = graph.get_state({"configurable": {"thread_id": task}})
            return bool(snapshot.next), str((snapshot.values or {}).get("status") or "")

        before, pin = migrate_thread(
            ReleaseControl(application), actor, thread, to, thread_status=thread_status
        )
    kv(thread=thread, migrated="done", **{"from": before}, to=pin.release, by=actor.user_id)


@release_app.command("status")
def status(
    verify_rollback: Annotated[
        bool, typer.Option("--verify-rollback", help="Also dry-run the rollback (hashes, critical fixtures).")
    ] = False,
) -> None:
    """Phase, canary share, shadowed calls, safety counters, latency and rollback readiness."""
    from toolgate.releases.control import ReleaseControl
    from toolgate.releases.status import release_status

    facts = release_status(ReleaseControl(open_from_env()), verify_rollback=verify_rollback)
    kv(**facts)
    if facts.get("state") == "tampered" or facts.get("rollback_dry_run") == "FAIL":
        raise typer.Exit(1)


__all__ = ["release_app"]
