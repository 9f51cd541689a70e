"""Durable waits through the real CLI processes: ``toolgate resume`` on a waiting thread, ``toolgate
worker run`` checking the job and resuming the thread, ``toolgate worker waits`` showing progress."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from support import cli_env, kv_lines, open_test_store, seed_people, toolgate

from toolgate.clock import iso

REQUEST = 'call submit_report_job {"report_type": "sales_summary", "date_from": "2025-01-01", "date_to": "2025-01-31"}'


def test_the_cli_resumes_a_waiting_thread_and_the_worker_finishes_the_wait(
    tmp_path: Path, database_url: str | None
) -> None:
    env = cli_env(tmp_path, database_url)
    seed_people(tmp_path, database_url)
    ran = toolgate(["run", REQUEST, "--as", "lee", "--thread", "t-cli-wait"], env)
    proposal = next(r["proposal"] for r in kv_lines(ran.stdout) if "proposal" in r)
    toolgate(["approve", proposal, "--as", "ana"], env)
    resumed = toolgate(["resume", "t-cli-wait"], env)
    assert kv_lines(resumed.stdout)[0]["status"] == "waiting"
    again = toolgate(["resume", "t-cli-wait"], env)  # a wake before the job is done: still waiting
    assert kv_lines(again.stdout)[0]["status"] == "waiting"
    (waiting,) = kv_lines(toolgate(["worker", "waits"], env).stdout)
    assert (waiting["thread"], waiting["state"], waiting["checks"]) == ("t-cli-wait", "waiting", "0")

    store = open_test_store(tmp_path, database_url)
    try:  # the job's own clock: it started 3 minutes ago; its wait's next check (a schedule hint) is due
        past = iso(store.now() - timedelta(minutes=3))
        with store.transaction() as tx:
            tx.execute("UPDATE sor_report_jobs SET submitted_at = ?", (past,))
            tx.execute("UPDATE job_waits SET next_check_at = ?", (past,))
    finally:
        store.close()
    worker = toolgate(["worker", "run", "--once"], env)
    facts = kv_lines(worker.stdout)
    assert any(f.get("state") == "ready" and f.get("outcome") == "done" for f in facts), worker.stdout
    assert any(f.get("resumed") == "true" and f.get("state") == "resumed" for f in facts), worker.stdout
    (done,) = kv_lines(toolgate(["worker", "waits", "--state", "resumed"], env).stdout)
    assert (done["outcome"], done["job_status"], done["checks"]) == ("done", "complete", "1")

    store = open_test_store(tmp_path, database_url)
    try:
        responses = [e for e in store.audit.events() if e.event == "model.response"]
        ready = [e for e in store.audit.events() if e.event == "wait.ready"]
    finally:
        store.close()
    assert len(responses) == 2  # the call and the answer; none while the job ran
    assert len(ready) == 1 and ready[0].detail["job_status"] == "complete"
    assert done["verified"] == "true"
