"""The approval API answers a request refused for load (`toolgate.policy.admission.Overloaded`)
with ``503``, a ``Retry-After`` header (whole seconds, rounded up) and its stable JSON error body.

The app is the real one (`toolgate.graph.server.http.create_app`, served through Starlette's client as
tests/test_http_api.py does); the ``/toolgate/me`` view is made to hold a model-request slot of
the real process admission, and the slot is held by another thread (released by an event) so the
request finds none free. The refusal is audited once (``admission.overloaded``), the caller is
authenticated first (no token: ``401``, nothing about load), and once the slot is free the same
request succeeds."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from support import Harness, audit_events

import toolgate.graph.server.http as http
from toolgate.graph.gateway import Gateway
from toolgate.graph.server.reads import me
from toolgate.graph.server.serving import Reply, ViewInput, retry_after_header
from toolgate.policy.admission import Overloaded, admitted, process_admission
from toolgate.policy.principal import Principal
from toolgate.tools.demo.identities import demo_token

WAIT = 30.0


def auth(user: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {demo_token(user)}"}


def me_in_a_model_slot(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
    """``/toolgate/me`` whose work needs a model-request slot of the caller's tenant."""
    with admitted(gw.auditor, "model", caller.tenant_id, user_id=caller.user_id):
        return me(gw, caller, inp)


def served(harness: Harness, monkeypatch: pytest.MonkeyPatch, view: Callable[..., Reply]) -> TestClient:
    gw = harness.gateway()
    monkeypatch.setattr(http, "me", view)  # create_app routes /toolgate/me to it
    return TestClient(http.create_app(lambda: gw, waker_interval_s=None))


@pytest.fixture
def limits(monkeypatch: pytest.MonkeyPatch) -> None:
    """One model request per tenant, two per process, refused after 10 ms."""
    for name, value in {
        "MAX_CONCURRENT_MODEL_REQUESTS": "2",
        "MAX_CONCURRENT_MODEL_REQUESTS_PER_TENANT": "1",
        "ADMISSION_WAIT_S": "0.01",
    }.items():
        monkeypatch.setenv(f"TOOLGATE_{name}", value)


@pytest.fixture
def acme_slot_held(harness: Harness, limits: None) -> Iterator[None]:
    """Another thread holds acme's only model-request slot until the test ends."""
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with admitted(harness.gateway().auditor, "model", "acme"):
            held.set()
            done.wait(WAIT)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(WAIT)
    try:
        yield
    finally:
        done.set()
        holder.join(WAIT)
    assert process_admission().in_flight("model") == 0


def overloaded_events(harness: Harness) -> list[Any]:
    return audit_events(harness.store, "admission.overloaded")


def test_a_request_refused_for_load_gets_503_with_retry_after(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, acme_slot_held: None
) -> None:
    client = served(harness, monkeypatch, me_in_a_model_slot)
    answer = client.get("/toolgate/me", headers=auth("cust-ada"))
    assert answer.status_code == 503
    body = answer.json()
    assert sorted(body) == ["error", "kind", "message", "retry_after_s", "scope"]
    assert (body["error"], body["kind"], body["scope"]) == ("overloaded", "model", "tenant")
    assert body["retry_after_s"] >= 1.0
    assert answer.headers["retry-after"] == str(math.ceil(body["retry_after_s"]))
    assert answer.headers["cache-control"] == "no-store"
    (event,) = overloaded_events(harness)
    assert (event.tenant_id, event.code, event.result) == ("acme", "overloaded", "refused")
    assert event.actor_id is not None  # the authenticated caller (keyed hash)
    assert (event.detail["kind"], event.detail["scope"], event.detail["limit"]) == ("model", "tenant", 1)


def test_another_tenant_is_not_refused_while_acme_is_full(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, acme_slot_held: None
) -> None:
    client = served(harness, monkeypatch, me_in_a_model_slot)
    answer = client.get("/toolgate/me", headers=auth("gina"))
    assert answer.status_code == 200 and answer.json()["tenant"] == "globex"
    assert "retry-after" not in answer.headers
    assert overloaded_events(harness) == []


@pytest.mark.parametrize(
    ("headers", "code"),
    [({}, "missing_token"), ({"Authorization": "Bearer demo-token-nobody"}, "authentication_failed")],
)
def test_a_caller_without_a_valid_token_gets_401_not_503(
    harness: Harness,
    monkeypatch: pytest.MonkeyPatch,
    acme_slot_held: None,
    headers: dict[str, str],
    code: str,
) -> None:
    client = served(harness, monkeypatch, me_in_a_model_slot)
    answer = client.get("/toolgate/me", headers=headers)
    assert answer.status_code == 401 and answer.json()["error"] == code
    assert "retry-after" not in answer.headers
    assert overloaded_events(harness) == []


def test_once_the_slot_is_free_the_same_request_succeeds(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, limits: None
) -> None:
    client = served(harness, monkeypatch, me_in_a_model_slot)
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with admitted(harness.gateway().auditor, "model", "acme"):
            held.set()
            done.wait(WAIT)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert held.wait(WAIT)
    try:
        assert client.get("/toolgate/me", headers=auth("rita")).status_code == 503
    finally:
        done.set()
        holder.join(WAIT)
    again = client.get("/toolgate/me", headers=auth("rita"))
    assert again.status_code == 200 and again.json()["user_id"] == "rita"
    assert len(overloaded_events(harness)) == 1
    assert process_admission().in_flight("model") == 0


@pytest.mark.parametrize(("seconds", "header"), [(2.1, "3"), (1.0, "1"), (60.0, "60"), (0.2, "1")])
def test_retry_after_is_whole_seconds_rounded_up(
    harness: Harness, monkeypatch: pytest.MonkeyPatch, seconds: float, header: str
) -> None:
    def refused(gw: Gateway, caller: Principal, inp: ViewInput) -> Reply:
        raise Overloaded("tool", "process", 4, seconds, caller.tenant_id)

    answer = served(harness, monkeypatch, refused).get("/toolgate/me", headers=auth("fiona"))
    assert answer.status_code == 503 and answer.headers["retry-after"] == header
    assert answer.json() == {
        "error": "overloaded",
        "message": f"too many concurrent tool requests (the process limit is 4); retry after {seconds} s",
        "retry_after_s": seconds,
        "kind": "tool",
        "scope": "process",
    }
    assert retry_after_header(seconds) == header


def test_other_errors_carry_no_retry_after(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    client = served(harness, monkeypatch, me)
    missing = client.get("/toolgate/proposals/prop_nothing", headers=auth("fiona"))
    assert missing.status_code == 404 and "retry-after" not in missing.headers
    assert retry_after_header(0) == "0"
