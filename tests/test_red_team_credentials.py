"""Red team: forwarded credentials are the requester's own, whoever carries their thread on.

A turn that asks for a read (``crm_lookup_contact``, which runs with the user's own CRM session)
beside a gated write waits for the write's approval, and the read runs when the reviewer resumes
the thread. The resume is the reviewer's request: their ``X-Toolgate-Credential-*`` headers (here
``Context.credentials``) must never reach the requester's read, or the requester sees what the
reviewer's CRM session may see.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from support import audit_events, principal
from test_parallel_batches import Wide

from toolgate.graph import Context
from toolgate.graph.delivery.executor import Executor
from toolgate.testing import ScriptedChatModel, ai, tool_call

LOOKUP = tool_call("crm_lookup_contact", {"contact_id": "C-100"}, "r1")
ADJUST = tool_call("update_inventory", {"sku": "SKU-7", "delta": -4, "reason": "shipped"}, "u1")


@pytest.fixture
def seen(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, str]]]:
    """(tool, principal, credentials) of every read the executor runs."""
    calls: list[tuple[str, str, dict[str, str]]] = []
    real = Executor.run_read

    def spy(self: Executor, spec: Any, arguments: Any, who: Any, credentials: Any = None, **kw: Any) -> Any:
        calls.append((spec.name, who.user_id, dict(credentials or {})))
        return real(self, spec, arguments, who, credentials, **kw)

    monkeypatch.setattr(Executor, "run_read", spy)
    return calls


def test_a_reviewers_resume_never_lends_their_credentials_to_the_requesters_read(
    tmp_path: Path, seen: list[tuple[str, str, dict[str, str]]]
) -> None:
    wide = Wide(tmp_path / "creds.sqlite")
    graph = wide.graph(ScriptedChatModel(responses=[ai("", LOOKUP, ADJUST), ai("done")]))
    cfg = {"configurable": {"thread_id": "t-lend"}}
    waiting = graph.invoke(
        {"messages": [HumanMessage("contact C-100, and ship 4 of SKU-7")]},
        cfg,
        context=Context(principal=principal("lee"), credentials={"crm_token": "lee-crm-session"}),
    )
    assert waiting["status"] == "awaiting_approval" and seen == []
    graph.invoke(
        Command(resume={"decisions": [{"type": "approve"}]}),
        cfg,
        context=Context(principal=principal("wanda"), credentials={"crm_token": "wanda-crm-session"}),
    )
    assert [(tool, who) for tool, who, _ in seen] == [("crm_lookup_contact", "lee")]
    assert all("wanda-crm-session" not in creds.values() for _, _, creds in seen)
    withheld = [e for e in audit_events(wide.store, "delegation.refused") if e.code == "not_requester"]
    assert len(withheld) == 1 and withheld[0].tool == "crm_lookup_contact"
