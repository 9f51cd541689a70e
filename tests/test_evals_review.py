"""``toolgate evals review``: authenticated sign-off of a gate report's critical cases, per tenant,
bound to the report, the dataset and the candidate bundle; every refusal audited, nothing written."""

from __future__ import annotations

import json
import sqlite3
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from support import cli_env, open_test_store, seed_people, shift_store_clock, toolgate

from toolgate.clock import iso, parse_iso
from toolgate.errors import StoreError
from toolgate.evals.fixtures import DEFAULT_DATASET, dump_cases, load_dataset
from toolgate.evals.gate import evaluate_gate
from toolgate.evals.gate_record import record_gate_run
from toolgate.evals.report import build_report, report_digest, write_reports
from toolgate.evals.signoff import ReviewRefused, reviewed_cases, sign_off
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.store.audit import Auditor
from toolgate.store.base import Store

CASES = ("sel-ada-order-status", "xt-ada-reads-globex", "byp-no-review", "xt-gina-reads-acme")
"""Two critical cases acting in acme, one in globex, one not critical."""
PEOPLE = {
    "gus": Principal(user_id="gus", tenant_id="globex", roles=frozenset({"admin"})),
    "irene": Principal(user_id="irene", tenant_id="initech", roles=frozenset({"admin"})),
}


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Any]:
    """A store with the demo people (and a globex and an initech admin), a dataset file and the
    report of its gate run against the control, recorded in the store."""
    data = tmp_path / "data"
    data.mkdir()
    seed_people(data)
    store = open_test_store(data)
    for principal in PEOPLE.values():
        IdentityDirectory(store).add(principal, by=None, token=f"token-of-{principal.user_id}")
    full = load_dataset(DEFAULT_DATASET)
    dataset_path = tmp_path / "subset.jsonl"
    dataset_path.write_text(dump_cases([c for c in full.cases if c.id in CASES]), encoding="utf-8")
    result = evaluate_gate(load_dataset(dataset_path), "ops-tools/1.1.0", "ops-tools/1.0.0")
    report = build_report(result)
    report_path, _ = write_reports(report, tmp_path / "reports")
    record_gate_run(store, result, report["digest"])  # as `evals run` keeps it: only such a report is signed
    return {
        "data": data,
        "store": store,
        "dataset": dataset_path,
        "report": report_path,
        "digest": report["digest"],
    }


def signoffs(store: Store) -> list[dict[str, Any]]:
    try:
        with store.transaction(write=False) as tx:
            return tx.execute("SELECT * FROM toolgate_eval_signoffs ORDER BY reviewer_id, case_id")
    except StoreError:
        return []  # the table is made by the first sign-off


def review(world: dict[str, Any], user: str, report: Path | None = None, **env: str) -> Any:
    return toolgate(
        ["evals", "review", str(report or world["report"]), "--as", user],
        cli_env(world["data"], **env),
        check=False,
    )


@pytest.mark.slow
def test_each_tenant_admin_signs_their_cases_and_a_later_run_counts_them(world: dict[str, Any]) -> None:
    before = toolgate(
        [
            "evals",
            "run",
            "--dataset",
            str(world["dataset"]),
            "--require-review",
            "--no-derived",  # sign-offs are about the dataset's critical cases
            "--report-dir",
            str(world["data"] / "r"),
        ],
        cli_env(world["data"]),
        check=False,
    )
    assert before.returncode == 1 and "human_reviewed_critical=0/3 gate=FAIL" in before.stdout
    assert "gate_failure unreviewed_critical=3" in before.stdout

    ivy = review(world, "ivy")
    assert ivy.returncode == 0, ivy.stderr
    assert f"digest={world['digest']} reviewer=ivy signed=2 already_signed=0 other_tenant=1" in ivy.stdout
    again = review(world, "ivy")
    assert "signed=0 already_signed=2 other_tenant=1" in again.stdout
    gus = review(world, "gus", TOOLGATE_TOKEN="token-of-gus")
    assert "reviewer=gus signed=1 already_signed=0 other_tenant=2" in gus.stdout

    rows = signoffs(world["store"])
    assert [(r["reviewer_id"], r["case_id"], r["case_tenant_id"]) for r in rows] == [
        ("gus", "xt-gina-reads-acme", "globex"),
        ("ivy", "byp-no-review", "acme"),
        ("ivy", "xt-ada-reads-globex", "acme"),
    ]
    assert {r["report_digest"] for r in rows} == {world["digest"]}
    events = [e for e in world["store"].audit.events() if e.event == "evals.reviewed"]
    assert [e.detail["signed"] for e in events] == [
        ["xt-ada-reads-globex", "byp-no-review"],
        [],
        ["xt-gina-reads-acme"],
    ]

    after = toolgate(
        [
            "evals",
            "run",
            "--dataset",
            str(world["dataset"]),
            "--require-review",
            "--no-derived",  # sign-offs are about the dataset's critical cases
            "--report-dir",
            str(world["data"] / "r"),
        ],
        cli_env(world["data"]),
    )
    assert after.stdout.splitlines()[0].endswith("human_reviewed_critical=3/3 gate=PASS")


@pytest.mark.parametrize(
    ("user", "env", "code"),
    [
        ("ivy", {"TOOLGATE_TOKEN": ""}, "missing_token"),
        ("ivy", {"TOOLGATE_TOKEN": "demo-token-rita"}, "authentication_failed"),
        ("nobody", {"TOOLGATE_TOKEN": "demo-token-nobody"}, "authentication_failed"),
        ("rita", {}, "not_reviewer"),
        ("irene", {"TOOLGATE_TOKEN": "token-of-irene"}, "cross_tenant"),
    ],
)
def test_a_refused_reviewer_writes_nothing_but_the_refusal(
    world: dict[str, Any], user: str, env: dict[str, str], code: str
) -> None:
    refused = review(world, user, **env)
    assert refused.returncode == 2 and refused.stderr.startswith(f"error={code} ")
    assert signoffs(world["store"]) == []
    codes = [e.code for e in world["store"].audit.events() if e.event == "evals.review_refused"]
    assert codes == [code]


def _rewrite(path: Path, change: Any, *, keep_digest: bool) -> Path:
    report = json.loads(path.read_text(encoding="utf-8"))
    change(report)
    if not keep_digest:
        report["digest"] = report_digest(report)
    changed = path.with_name("changed.json")
    changed.write_text(json.dumps(report), encoding="utf-8")
    return changed


@pytest.mark.parametrize(
    ("change", "keep_digest", "code"),
    [
        (
            lambda r: r["candidate"]["cases"][1].update(passed=not r["candidate"]["cases"][1]["passed"]),
            True,
            "report_tampered",
        ),
        (lambda r: r["candidate"].update(manifest_sha256="0" * 64), True, "report_tampered"),
        (
            lambda r: r.update(generated_at=iso(parse_iso(r["generated_at"]) + timedelta(hours=2))),
            False,
            "report_clock_skew",
        ),
        (lambda r: r.update(kind="something-else"), False, "report_unreadable"),
        (  # re-digested after the edit: a report no gate run recorded in this store
            lambda r: r["candidate"]["cases"][1].update(passed=not r["candidate"]["cases"][1]["passed"]),
            False,
            "report_unknown",
        ),
    ],
)
def test_a_changed_or_misdated_report_is_refused(
    world: dict[str, Any], change: Any, keep_digest: bool, code: str
) -> None:
    refused = review(world, "ivy", _rewrite(world["report"], change, keep_digest=keep_digest))
    assert refused.returncode == 2 and refused.stderr.startswith(f"error={code} ")
    assert signoffs(world["store"]) == []
    assert [e.code for e in world["store"].audit.events() if e.event == "evals.review_refused"] == [code]


def _sign(world: dict[str, Any], user: str) -> Any:
    store = world["store"]
    directory = IdentityDirectory(store)
    reviewer = directory.active(user, {"ivy": "acme", "gus": "globex"}[user])
    assert reviewer is not None
    return sign_off(store, Auditor(store, "ops-tools/1.1.0"), directory, world["report"], reviewer)


def test_the_store_clock_dates_sign_offs_and_judges_the_report_date(
    world: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = world["store"]
    shift_store_clock(monkeypatch, store, timedelta(hours=-1))  # the store is an hour behind this host
    with pytest.raises(ReviewRefused) as behind:
        _sign(world, "ivy")
    assert behind.value.code == "report_clock_skew" and signoffs(store) == []
    monkeypatch.undo()
    shift_store_clock(monkeypatch, store, timedelta(hours=3))
    signed = _sign(world, "ivy")
    assert parse_iso(signed.signed_at) - store.now() < timedelta(
        seconds=5
    )  # the store's time, not the host's
    assert {r["signed_at"] for r in signoffs(store)} == {signed.signed_at}


def test_only_authentic_sign_offs_of_current_reviewers_count(world: dict[str, Any]) -> None:
    store = world["store"]
    report = json.loads(world["report"].read_text(encoding="utf-8"))
    tenants = {c["id"]: c["tenant"] for c in report["candidate"]["cases"] if c["critical"]}
    binding = (report["dataset"]["sha256"], report["candidate"]["manifest_sha256"], tenants)
    _sign(world, "ivy")
    _sign(world, "gus")
    assert reviewed_cases(store, *binding) == sorted(tenants)
    assert reviewed_cases(store, binding[0], "f" * 64, tenants) == []  # another bundle: not reviewed
    with sqlite3.connect(store.path) as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE toolgate_eval_signoffs SET case_passed = 0 WHERE reviewer_id = 'gus'")
    assert reviewed_cases(store, *binding) == ["byp-no-review", "xt-ada-reads-globex"]
    IdentityDirectory(store).revoke("ivy", by=None)
    assert reviewed_cases(store, *binding) == []
