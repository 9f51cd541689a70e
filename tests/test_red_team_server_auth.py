"""Red team, the LangGraph server's auth handler called as the server calls it: a reviewer may
resume a thread of their tenant, nothing more. A resume that also names a node to go to
(``Command(resume=..., goto="model")``) is a new step of the owner's thread, not an answer to its
interrupt: it would run a model turn as the requester. Only the owner may send it."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from langgraph_sdk import Auth
from support import Harness, audit_events, in_process_auth

from toolgate.graph.server import auth as auth_module


class _User(dict):  # type: ignore[type-arg]
    """What `authenticate` hands the server, as its handlers read it."""

    @property
    def identity(self) -> str:
        return str(self["identity"])


@pytest.fixture
def harness(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Harness:
    return in_process_auth(tmp_path, monkeypatch)


_ABSENT = object()


def _run_create(user: str, roles: list[str], command: dict[str, Any], inp: Any = None) -> Any:
    ctx = Auth.types.AuthContext(
        permissions=roles,
        user=_User(identity=user, tenant_id="acme", roles=roles),  # type: ignore[arg-type]
        resource="threads",
        action="create_run",
    )
    kwargs: dict[str, Any] = {"command": command} if inp is _ABSENT else {"command": command, "input": inp}
    value: dict[str, Any] = {"thread_id": "t1", "kwargs": kwargs}
    return asyncio.run(auth_module.on_run_create(ctx, value))  # type: ignore[arg-type]


def test_a_reviewer_may_resume_a_tenants_thread(harness: Harness) -> None:
    assert _run_create("fiona", ["finance"], {"resume": {"wake": True}}) == {"tenant": "acme"}


@pytest.mark.parametrize("goto", ["model", ["execute"], {"node": "dispatch", "arg": {}}])
def test_a_reviewers_resume_that_goes_to_a_node_is_only_the_owners(harness: Harness, goto: Any) -> None:
    """Not refused outright: filtered to threads the reviewer owns, so someone else's thread is not
    found (as for any new turn in it)."""
    assert _run_create("fiona", ["finance"], {"resume": {"wake": True}, "goto": goto}) == {
        "owner": "fiona",
        "tenant": "acme",
    }
    assert not audit_events(harness.store, "access.refused")


@pytest.mark.parametrize(
    ("inp", "filtered_to"),
    [
        (None, {"tenant": "acme"}),  # the Python SDK and Studio
        (_ABSENT, {"tenant": "acme"}),
        ({}, {"tenant": "acme"}),  # agent-chat-ui: useStream().submit({}, {command: {resume}})
        (
            {"messages": [{"type": "human", "content": "refund O-5513 too"}]},
            {"owner": "fiona", "tenant": "acme"},
        ),
        ({"status": "done"}, {"owner": "fiona", "tenant": "acme"}),
        ([], {"owner": "fiona", "tenant": "acme"}),
    ],
)
def test_a_resume_with_no_input_of_its_own_is_a_resume_whatever_client_sent_it(
    harness: Harness, inp: Any, filtered_to: dict[str, str]
) -> None:
    """An empty input carries nothing: the resume is a reviewer's to send. Input with anything in
    it is a new turn, only the owner's (someone else's thread is not found)."""
    resume = {"resume": {"decisions": [{"type": "approve"}]}}
    assert _run_create("fiona", ["finance"], resume, inp) == filtered_to
    assert not audit_events(harness.store, "access.refused")
