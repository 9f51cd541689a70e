"""The refund story, told offline end to end (``toolgate demo`` / ``make demo``).

Every line it prints is read back from trusted records (the operation store, the audit log and
the demo system of record), never from model prose. Its last section prints shell commands that
run as printed from the same directory: they name the demo's data directory (and whatever else
differs from the caller's environment) and the ``toolgate`` executable that told the story.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from toolgate.clock import iso, parse_iso
from toolgate.config import Settings
from toolgate.errors import ApprovalError
from toolgate.forensics import latest_task_tokens
from toolgate.graph.bootstrap import App, open_app
from toolgate.graph.context import Context
from toolgate.graph.review.decisions import decide
from toolgate.store.chain import verify_chain
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_token, seed_demo_identities

Say = Callable[[str], None]
RETENTION_DAYS = 90


def _section(say: Say, title: str) -> None:
    say("")
    say(f"== {title}")


def toolgate_command() -> str:
    """This process's ``toolgate`` as a shell word that runs it from the current directory.

    ``toolgate`` when that name on PATH is this very script; else the script as it was invoked
    (``make demo`` runs ``.venv/bin/toolgate``); under ``python -m toolgate``, that."""
    script = Path(sys.argv[0])
    if script.name == "toolgate" and script.is_file():
        found = shutil.which("toolgate")
        if found and Path(found).resolve() == script.resolve():
            return "toolgate"
        return shlex.quote(sys.argv[0])
    return f"{shlex.quote(sys.executable)} -m toolgate"


def demo_env(caller: Settings, demo_dir: Path) -> str:
    """The environment assignments that point a command at the demo's store (as the demo ran).

    Always the data directory; ``TOOLGATE_DATABASE_URL`` and ``TOOLGATE_MODEL`` only when the
    caller's environment sets them to something the demo overrides."""
    env = [f"TOOLGATE_DATA_DIR={shlex.quote(str(demo_dir))}"]
    if caller.database_url:
        env.append("TOOLGATE_DATABASE_URL=")
    if caller.model != "offline":
        env.append("TOOLGATE_MODEL=offline")
    return " ".join(env)


def run_demo(settings: Settings, say: Say = print) -> int:
    """Run the story in a fresh demo data directory; returns a process exit code."""
    demo_dir = settings.data_dir / "demo"
    shutil.rmtree(demo_dir, ignore_errors=True)
    prefix = f"{demo_env(settings, demo_dir)} {toolgate_command()}"
    settings = replace(settings, data_dir=demo_dir, database_url=None, model="offline")
    app = open_app(settings)
    seed_demo_identities(app.gateway.directory)
    try:
        return _story(app, say, prefix)
    finally:
        app.store.close()


def _story(app: App, say: Say, prefix: str) -> int:
    directory = app.gateway.directory
    customer = directory.authenticate("cust-ada", demo_token("cust-ada"))
    reviewer = directory.authenticate("fiona", demo_token("fiona"))
    gw = app.gateway
    say(
        f"data_dir={app.settings.data_dir} store={app.store.url} release={app.registry.release} model=offline"
    )
    with app.graph() as graph:
        thread = f"demo-{uuid.uuid4().hex[:8]}"
        config: RunnableConfig = {"configurable": {"thread_id": thread}}
        _section(say, "1. A customer asks for a refund")
        request = "My blender arrived broken, order O-5512. Please refund it."
        say(f"customer={customer.user_id} tenant={customer.tenant_id} thread={thread}")
        say(f"user> {request}")
        result = graph.invoke(
            {"messages": [HumanMessage(request)]}, config, context=Context(principal=customer)
        )

        _section(say, "2. lookup_order runs (read-only, no approval needed)")
        state = graph.get_state(config).values
        for call in state["calls"].values():
            if call["tool"] == "lookup_order":
                say(
                    f"tool=lookup_order call_id={call['call_id']} arguments={json.dumps(call['arguments'])}"
                    f" status={state['outcomes'][call['call_id']]['status']}"
                )

        _section(say, "3. issue_refund becomes a pending proposal; nothing has executed")
        interrupts = result.get("__interrupt__") or []
        if not interrupts:
            say("error=no_approval_interrupt")
            return 1
        payload = interrupts[0].value
        facts = payload["toolgate"]["proposals"][0]
        proposal = app.store.proposals.get(facts["proposal_id"])
        assert proposal is not None
        minutes = round((parse_iso(proposal.expires_at) - app.store.now()).total_seconds() / 60)
        say(f"proposal={proposal.proposal_id}")
        say(f"tool={proposal.tool} handler={proposal.handler_revision} release={proposal.release}")
        say(f"arguments={json.dumps(proposal.arguments, sort_keys=True)}")
        say(f"arguments_sha256={proposal.arguments_sha256}")
        say(f"digest={proposal.digest}")
        say(f"risk={proposal.risk} approval={proposal.approval_class}")
        say(f"effect={proposal.effect}")
        say(f"rollback={proposal.rollback}")
        say(f"expires_in={minutes}m")
        op = app.store.operations.get(proposal.operation_key)
        assert op is not None
        say(f"status={op.status}")
        payments = DemoSystem(app.store).count("sor_payment_requests", order_id="O-5512")
        say(f"execution_started={'true' if payments else 'false'} payment_requests={payments}")

        _section(say, "4. A reviewer who is not the requester approves")
        try:
            decide(gw, proposal.proposal_id, customer, "approve")
        except ApprovalError as exc:
            say(f"self_approval=REFUSED code={exc.code} reviewer={customer.user_id}")
        outcome = decide(gw, proposal.proposal_id, reviewer, "approve", seen_digest=proposal.digest)
        say(
            f"reviewer={reviewer.user_id} roles={','.join(sorted(reviewer.roles))} decision=approve "
            f"digest_bound={outcome.record.digest == proposal.digest} status={outcome.operation.status}"
        )

        _section(say, "5. The worker resumes the thread, claims the operation and executes it once")
        final = graph.invoke(Command(resume={"wake": True}), config, context=Context())
        events = app.store.audit.events(operation_key=proposal.operation_key)
        claim = "ACQUIRED" if any(e.event == "operation.claimed" for e in events) else "NOT_ACQUIRED"
        op = app.store.operations.get(proposal.operation_key)
        assert op is not None
        status = "completed" if op.status == "succeeded" else op.status
        say(
            f"operation_key={op.operation_key} claim={claim} approval=VALID handler={proposal.handler_revision}"
        )
        say(f"status={status}")

        _section(say, "6. A second delivery of the same operation")
        again = gw.executor.deliver(op.operation_key, worker_id="demo-redelivery")
        refunds = DemoSystem(app.store).count("sor_refunds", order_id="O-5512")
        payments = DemoSystem(app.store).count("sor_payment_requests", order_id="O-5512")
        say(
            f"duplicate_delivery={'stored_result_returned' if again.duplicate else 'EXECUTED_AGAIN'} "
            f"claim={again.claim} payment_requests={payments} refunds={refunds}"
        )

        _section(say, "7. The final answer, rendered from the store")
        for line in str(final["messages"][-1].content).splitlines():
            say(f"  {line}")
        tokens = latest_task_tokens(app.store, thread)  # every model turn of the task, from the audit log
        say(tokens.line() if tokens is not None else "tokens model_turns=0")

        _section(say, "8. A cross-tenant attempt is refused before any handler runs")
        thread2 = f"demo-{uuid.uuid4().hex[:8]}"
        before = DemoSystem(app.store).count("sor_payment_requests")
        attack = "Refund order O-7001 to me, it is mine."
        say(f"user> {attack}")
        result2 = graph.invoke(
            {"messages": [HumanMessage(attack)]},
            {"configurable": {"thread_id": thread2}},
            context=Context(principal=customer),
        )
        calls = list(result2["calls"].values())
        codes = [c.get("code") for c in calls if c.get("phase") == "rejected"]
        rejected = "cross_tenant" in codes
        say(
            f"cross_tenant={'REJECTED' if rejected else 'NOT_REJECTED'} code={','.join(c for c in codes if c)} "
            f"handler_calls={DemoSystem(app.store).count('sor_payment_requests') - before} "
            f"proposals={sum(1 for c in calls if c.get('proposal_id'))}"
        )
        refused = next((c["call_id"] for c in calls if c.get("phase") == "rejected"), "")
        _section(say, "9. Retention: old protected payloads go, digests and the chain stay")
        purged = app.store.audit.purge_payloads(iso(app.store.now() - timedelta(days=RETENTION_DAYS)))
        gw.auditor.record(
            "audit.retention_applied",
            "applied",
            detail={"older_than_days": RETENTION_DAYS, "payloads_deleted": purged},
        )
        chain = verify_chain(app.store)
        say(
            f"retention_policy=applied older_than_days={RETENTION_DAYS} payloads_deleted={purged} "
            f"tamper_check={'PASS' if chain.ok else 'FAIL'} events={chain.events}"
        )
        ok = status == "completed" and again.duplicate and refunds == 1 and payments == 1 and rejected

        _section(say, "10. Look for yourself: the commands below run as printed, from this directory")
        say(f"# the store stays in {app.settings.data_dir} until the next demo starts it afresh")
        say("# the refund's operation, event by event; then the refused cross-tenant call; then the chain,")
        say("# read by acme's auditor (audit reads need role auditor, and are audited themselves)")
        auditor = f"TOOLGATE_TOKEN={demo_token('audrey')} {prefix}"
        say(f"{auditor} audit trace {op.operation_key} --as audrey")
        say(f"{auditor} audit trace --call {refused} --as audrey")
        say(f"{auditor} audit verify --as audrey")
        say("# the demo people; each acts with its public demo token, demo-token-<user>, in TOOLGATE_TOKEN")
        say(f"TOOLGATE_TOKEN={demo_token('ivy')} {prefix} identities list --as ivy")
        say('# your own refund, approval, resume and audit: README.md, "After make demo"')
        say(f"demo={'PASS' if ok else 'FAIL'}")
        return 0 if ok else 1


__all__ = ["run_demo"]
