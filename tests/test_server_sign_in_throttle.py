"""Failed sign-ins on the REAL ``langgraph dev`` (issue 29): a guesser at the port is throttled
after `SignInLimits.per_source` failures, a right token included, on the runtime's own routes and
on toolgate's approval API alike (one count per address, in the store), and its attempts past the
limit write no audit row of their own. Its own server: every test client here shares 127.0.0.1,
and a throttled address would refuse the other modules' clients too. Its window is a day
(``TOOLGATE_SIGN_IN_WINDOW_S``): with the default minute, a window that ended between two guesses
(30 requests, seconds apart on a loaded machine) reset the count and the test failed."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from server_support import Server, people_server_and_store

from toolgate.policy.sign_in_throttle import DEFAULT_LIMITS
from toolgate.store.base import Store
from toolgate.tools.demo.identities import demo_token

pytestmark = [pytest.mark.server, pytest.mark.slow]


@pytest.fixture(scope="module")
def server_and_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Store]]:
    day = {"TOOLGATE_SIGN_IN_WINDOW_S": "86400"}
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-throttle"), day) as pair:
        yield pair


def request(server: Server, method: str, path: str, token: str | None, **kw: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    with httpx.Client(base_url=server.url, timeout=60, trust_env=False) as http:
        return http.request(method, path, headers=headers, **kw)


def test_a_guesser_at_the_port_is_throttled_on_every_route_and_counted_not_logged_per_guess(
    server_and_store: tuple[Server, Store],
) -> None:
    server, store = server_and_store
    assert request(server, "POST", "/threads/search", demo_token("fiona"), json={}).status_code == 200
    # the server records its bundle (``release.loaded``) at its store's first use, which a busy
    # machine may delay past the first request: counted from then on, it read as a change
    deadline = time.monotonic() + 120
    while not any(e.event == "release.loaded" for e in store.audit.events()):
        assert time.monotonic() < deadline, "the server never recorded the bundle it serves"
        time.sleep(0.05)
    before = {e.seq for e in store.audit.events()}
    limit = DEFAULT_LIMITS.per_source
    answers = []
    for guess in range(limit):  # missing, wrong, someone's revoked-looking: each a failure
        token = None if guess % 3 == 0 else f"tg_guess_{guess}"
        route = ("POST", "/threads/search") if guess % 2 else ("GET", "/toolgate/me")
        answers.append(
            request(server, *route, token, **({"json": {}} if route[0] == "POST" else {})).status_code
        )
    assert answers == [401] * limit
    # the right token from the same address: refused before it is checked, on both kinds of route
    # (the runtime's auth hook can answer only 401 or 403: 401 with the code; toolgate's own
    # routes 429 with Retry-After)
    runtime = request(server, "POST", "/threads/search", demo_token("fiona"), json={})
    approval = request(server, "GET", "/toolgate/me", demo_token("fiona"))
    assert (runtime.status_code, approval.status_code) == (401, 429), (runtime.text, approval.text)
    assert "sign_in_throttled" in runtime.text and approval.json()["error"] == "sign_in_throttled"
    assert int(approval.headers["retry-after"]) > 0
    # a row for each failure up to the limit, none for the throttled attempts after it
    rows = [e for e in store.audit.events() if e.seq not in before and e.event == "identity.refused"]
    assert [e.detail["failures"]["source"] for e in rows] == list(range(1, limit + 1))
    assert {e.code for e in rows} <= {"missing_token", "authentication_failed"}
    # nothing else changed: no thread was created for anyone
    assert not [e for e in store.audit.events() if e.seq not in before and e.event != "identity.refused"]
