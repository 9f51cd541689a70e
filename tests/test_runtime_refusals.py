"""`toolgate.graph.server.runtime_refusals` on its own: which answers it audits, and that a
failing audit write never changes or breaks the runtime's answer. The real server's filters
(404, 409, 422 to a signed-in caller) are tests/test_red_team_server_threads.py's."""

from __future__ import annotations

import asyncio
import logging
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from toolgate.graph.server import process
from toolgate.graph.server.runtime_refusals import RuntimeRefusals, refusal_code


class User:
    """What the runtime's authentication puts in ``scope["user"]``."""

    is_authenticated = True

    def __init__(self, identity: str) -> None:
        self.identity = identity


def runtime(status: int, user: Any) -> Any:
    """A stand-in for the runtime's routes behind its authentication: sets ``user`` and answers
    ``status``."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        scope["user"] = user
        await send({"type": "http.response.start", "status": status, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"answer"})

    return app


class Auditor:
    def __init__(self, fail: bool = False) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.fail = fail

    def record(self, event: str, result: str, **fields: Any) -> None:
        if self.fail:
            raise RuntimeError("the audit store is down")
        self.events.append((event, result, fields))


@pytest.fixture
def auditor(monkeypatch: pytest.MonkeyPatch) -> Auditor:
    found = Auditor()
    parts = SimpleNamespace(gateway=SimpleNamespace(auditor=found))
    monkeypatch.setattr(process, "server_parts", lambda: parts)
    return found


def call(app: Any, method: str = "GET", path: str = "/threads/t-1") -> httpx.Response:
    """One request through ``app``, as a client of the server would make it."""

    async def request() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://server") as client:
            return await client.request(method, path)

    return asyncio.run(request())


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (404, "not_found_or_hidden"),
        (409, "conflict"),
        (422, "invalid_request"),
        (405, "request_refused"),
        (400, "request_refused"),
    ],
)
def test_a_runtime_client_error_to_a_signed_in_caller_is_audited(
    auditor: Auditor, status: int, code: str
) -> None:
    answer = call(RuntimeRefusals(runtime(status, User("cust-bob"))), "DELETE", "/threads/t-9")
    assert (answer.status_code, answer.text) == (status, "answer")
    assert auditor.events == [
        (
            "access.refused",
            "refused",
            {"user_id": "cust-bob", "code": code, "detail": {"method": "DELETE", "path": "/threads/t-9", "status": status}},
        )
    ]
    assert refusal_code(status) == code


@pytest.mark.parametrize("status", [200, 201, 204, 401, 403, 500, 503])
def test_answers_audited_elsewhere_or_not_refusals_are_not(auditor: Auditor, status: int) -> None:
    answer = call(RuntimeRefusals(runtime(status, User("cust-bob"))))
    assert answer.status_code == status and auditor.events == []


@pytest.mark.parametrize(
    "user",
    [None, SimpleNamespace(is_authenticated=False, identity="x"), SimpleNamespace(is_authenticated=True, identity="")],
    ids=["loopback", "unauthenticated", "no-identity"],
)
def test_nobody_signed_in_is_not_audited_here(auditor: Auditor, user: Any) -> None:
    """The server's own loopback (no user) and toolgate's ``/toolgate`` routes (which audit
    their own refusals) pass untouched."""
    answer = call(RuntimeRefusals(runtime(404, user)))
    assert answer.status_code == 404 and auditor.events == []


def test_a_failing_audit_write_is_logged_and_the_answer_still_goes_out(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    parts = SimpleNamespace(gateway=SimpleNamespace(auditor=Auditor(fail=True)))
    monkeypatch.setattr(process, "server_parts", lambda: parts)
    with caplog.at_level(logging.ERROR, logger="toolgate.graph.server.runtime_refusals"):
        answer = call(RuntimeRefusals(runtime(404, User("cust-bob"))))
    assert (answer.status_code, answer.text) == (404, "answer")
    assert "could not audit the runtime's 404 to GET /threads/t-1" in caplog.text


def test_other_scopes_pass_through(auditor: Auditor) -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["type"])

    asyncio.run(RuntimeRefusals(app)({"type": "lifespan"}, None, None))  # type: ignore[arg-type]
    assert seen == ["lifespan"] and auditor.events == []
