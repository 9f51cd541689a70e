"""The reviewer console, driven in a real headless Chromium against the REAL ``langgraph dev`` server.

One server (module scope) on a store holding the demo people; the requester (cust-ada) runs each
refund to the approval interrupt through the ``langgraph-sdk``, like tests/test_server_auth.py, and
a person then uses ``<server>/console`` as a browser user would. Proven:

* the finance reviewer (fiona) signs in with her token, finds the pending proposal in the list,
  opens it and sees its exact arguments, digest, risk and a running expiry countdown, approves it,
  and the console follows the operation to ``succeeded`` (with a complete, verified audit trace);
  the store holds exactly one payment request for that operation;
* the requester signing in and approving her own proposal is refused plainly on screen
  (``self_approval`` and its message, in a ``role=alert`` region) and nothing changed in the store
  (still ``pending_approval``, no decision, no payment);
* basic accessibility: the token field has a label, every button has a name, status messages are
  announced from an ``aria-live`` region;
* the page loads nothing from elsewhere: every request it makes goes to the server's own URL.

Screenshots land in ``.build/test-output/console/`` (printed; run pytest with ``-s`` to see them).
The browser is Debian's Chromium (``/usr/bin/chromium``, installed by scripts/ensure-test-tools.sh),
never one Playwright downloads. Without it or the ``playwright`` package the tests skip locally and
fail under ``CI=true``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from server_support import LOCAL_HOSTS, REPO, Server, client_as, interrupts_of, people_server
from support import REFUND_REQUEST, open_test_store

from toolgate.canonical import idempotency_key_for
from toolgate.store.base import Store
from toolgate.tools.demo import DemoSystem
from toolgate.tools.demo.identities import demo_token

pytestmark = [pytest.mark.server, pytest.mark.slow]

GRAPH = "toolgate"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 60_000
"""Every wait is for an event (an element, a text); this only bounds it on a loaded machine."""
SHOTS = REPO / ".build" / "test-output" / "console"
SELF_APPROVAL_MESSAGE = "the requester cannot review their own proposal"
NAMELESS_BUTTONS = """() => Array.from(document.querySelectorAll('button'))
    .filter(b => !(b.textContent.trim() || (b.getAttribute('aria-label') || '').trim()))
    .map(b => b.outerHTML)"""
"""Buttons (shown or hidden) with neither text nor an aria-label: nothing a screen reader could say."""


def browser_missing(reason: str) -> None:
    """Skip locally, fail under CI=true (the convention of server_support.missing)."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: browser tests must not be skipped)", pytrace=False)
    pytest.skip(f"{reason}; run scripts/ensure-test-tools.sh as root and install the 'dev' extra")


@pytest.fixture(scope="module", autouse=True)
def browser_tools() -> None:
    """The browser and its driver, checked before a server is started for nothing."""
    if importlib.util.find_spec("playwright") is None:
        browser_missing("the playwright package is not installed (the 'dev' extra)")
    if not os.access(CHROMIUM, os.X_OK):
        browser_missing(f"{CHROMIUM} is missing (Debian package chromium)")


# ---- the server and its store --------------------------------------------------------------


@dataclass
class Rig:
    server: Server
    store: Store
    orders: int = 0

    def count(self, table: str, operation_key: str) -> int:
        """Rows of a system-of-record log (``sor_payment_requests``, ``sor_refunds``) for ``operation_key``."""
        return DemoSystem(self.store).count(table, idempotency_key=idempotency_key_for(operation_key))


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Rig]:
    workdir = tmp_path_factory.mktemp("lgdev-console")
    with pytest.MonkeyPatch.context() as mp, people_server(workdir) as server:
        mp.setenv("NO_PROXY", LOCAL_HOSTS)
        mp.setenv("no_proxy", LOCAL_HOSTS)
        store = open_test_store(server.data_dir)
        try:
            yield Rig(server, store)
        finally:
            store.close()


def new_order(rig: Rig) -> str:
    """A fresh delivered order of cust-ada (an order is refunded once, so each proposal has its own)."""
    rig.orders += 1
    order = f"O-{9300 + rig.orders}"
    with rig.store.transaction() as tx:
        tx.execute(
            "INSERT INTO sor_orders (order_id, tenant_id, customer_id, item, amount_cents, currency, status,"
            " card_number) VALUES (?, 'acme', 'cust-ada', 'Mixer M-1', 4999, 'USD', 'delivered', '4111111111111111')",
            (order,),
        )
    return order


def start_refund(rig: Rig) -> dict[str, Any]:
    """cust-ada's thread refunding a fresh order, waiting at the approval interrupt: the proposal facts."""
    request = REFUND_REQUEST.replace("O-5512", new_order(rig))
    with client_as(rig.server, "cust-ada") as client:
        thread_id = client.threads.create()["thread_id"]
        result = client.runs.wait(
            thread_id, GRAPH, input={"messages": [{"role": "user", "content": request}]}
        )
        assert result.get("status") == "awaiting_approval", result
        (interrupt,) = interrupts_of(client.threads.get_state(thread_id))
        (proposal,) = interrupt["value"]["toolgate"]["proposals"]
    return dict(proposal)


# ---- the browser ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def browser_context(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A headless Debian Chromium with a fresh profile (one context; each test opens its own tab,
    and the console keeps its token in the tab's sessionStorage)."""
    from playwright.sync_api import sync_playwright

    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            env={**os.environ, "NO_PROXY": LOCAL_HOSTS, "no_proxy": LOCAL_HOSTS},
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(TIMEOUT_MS)
        try:
            yield context
        finally:
            context.close()


@dataclass
class Console:
    """One browser tab on ``<server>/console``, with every request it made."""

    page: Any
    server_url: str
    requests: list[str] = field(default_factory=list)

    def by(self, test_id: str) -> Any:
        return self.page.get_by_test_id(test_id)

    def sign_in(self, user: str) -> None:
        from playwright.sync_api import expect

        self.page.get_by_label("Access token").fill(demo_token(user))
        self.page.get_by_role("button", name="Sign in").click()
        expect(self.by("whoami")).to_contain_text(f"Signed in as {user} ", timeout=TIMEOUT_MS)
        expect(self.by("status")).to_have_text("Signed in.", timeout=TIMEOUT_MS)

    def open_proposal(self, proposal_id: str) -> None:
        from playwright.sync_api import expect

        self.by(f"open-{proposal_id}").click()
        expect(self.by("detail-title")).to_have_text(f"Proposal {proposal_id}", timeout=TIMEOUT_MS)

    def approve(self) -> None:
        self.page.get_by_label(re.compile(r"^I reviewed the exact arguments")).check()
        self.page.get_by_role("button", name="Approve this digest").click()

    def shot(self, name: str) -> Path:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")
        return path

    def assert_only_own_origin(self) -> None:
        own = self.server_url + "/"
        assert self.requests, "the page made no request at all"
        foreign = [url for url in self.requests if not url.startswith(own)]
        assert not foreign, f"the console loaded resources from elsewhere: {foreign}"
        for path in ("console", "console/app.js", "console/console.css", "toolgate/me"):
            assert own + path in self.requests, (path, self.requests)


@pytest.fixture
def console(rig: Rig, browser_context: Any) -> Iterator[Console]:
    page = browser_context.new_page()
    tab = Console(page, rig.server.url)
    page.on("request", lambda request: tab.requests.append(request.url))
    page.goto(f"{rig.server.url}/console")
    try:
        yield tab
    finally:
        page.close()


# ---- the tests -----------------------------------------------------------------------------


def test_a_reviewer_approves_in_the_console_and_follows_the_operation_to_success(
    rig: Rig, console: Console
) -> None:
    from playwright.sync_api import expect

    proposal = start_refund(rig)
    pid, key = proposal["proposal_id"], proposal["operation_key"]
    stored = rig.store.proposals.get(pid)
    assert stored is not None and stored.requester_id == "cust-ada"

    console.sign_in("fiona")
    row = console.by(f"row-{pid}")
    expect(row).to_be_visible(timeout=TIMEOUT_MS)
    expect(row.locator("td")).to_have_text(
        [pid, stored.tool, stored.risk, "cust-ada", re.compile(r"^(\d+ min )?\d+ s$"), "Open"],
        timeout=TIMEOUT_MS,
    )
    console.shot("01-signed-in-list")

    console.open_proposal(pid)
    shown_arguments = console.by("arguments").text_content()
    assert json.loads(shown_arguments) == stored.arguments, shown_arguments
    assert shown_arguments == json.dumps(stored.arguments, indent=2, ensure_ascii=False)
    expect(console.by("digest")).to_have_text(stored.digest)
    expect(console.by("fact-args-sha")).to_have_text(stored.arguments_sha256)
    expect(console.by("fact-risk")).to_have_text(stored.risk)
    expect(console.by("fact-tool")).to_have_text(stored.tool)
    expect(console.by("fact-requester")).to_have_text("cust-ada")
    expect(console.by("fact-status")).to_have_text("pending_approval")
    expect(console.by("decisions-empty")).to_be_visible()
    countdown = console.by("countdown")
    expect(countdown).to_have_text(re.compile(r"^Expires in (\d+ min )?\d+ s$"))
    first = countdown.text_content()
    expect(countdown).not_to_have_text(first, timeout=TIMEOUT_MS)  # it counts down, second by second
    expect(countdown).to_have_text(re.compile(r"^Expires in (\d+ min )?\d+ s$"))
    console.shot("02-proposal-detail")
    waiting = rig.store.operations.get(key)
    assert waiting is not None and waiting.status == "pending_approval", waiting

    console.approve()
    expect(console.by("operation")).to_be_visible(timeout=TIMEOUT_MS)
    expect(console.by("operation-key")).to_have_text(key)
    # the console polls the operation while the woken thread claims and executes it
    expect(console.by("operation-status")).to_have_text("succeeded", timeout=TIMEOUT_MS)
    expect(console.by("status")).to_have_text("Operation status: succeeded.", timeout=TIMEOUT_MS)
    expect(console.by("trace-summary")).to_contain_text(
        "final state succeeded; missing transitions: none; approver verified; audit chain PASS.",
        timeout=TIMEOUT_MS,
    )
    trace_rows = console.by("trace-rows").locator("tr")
    expect(trace_rows.filter(has_text="operation.completed")).to_have_count(1)
    expect(trace_rows.filter(has_text="approval.recorded")).to_have_count(1)
    result = json.loads(console.by("operation-result").text_content())
    assert result, "the console shows no result for a succeeded operation"
    console.shot("03-operation-succeeded")
    expect(console.by("alert")).to_be_hidden()

    operation = rig.store.operations.get(key)
    assert operation is not None and operation.status == "succeeded", operation
    assert rig.count("sor_payment_requests", key) == 1
    assert rig.count("sor_refunds", key) == 1
    assert [(d.reviewer_id, d.decision, d.digest) for d in rig.store.approvals.for_proposal(pid)] == [
        ("fiona", "approve", stored.digest)
    ]
    console.assert_only_own_origin()


def test_the_requester_approving_her_own_proposal_is_refused_plainly_and_nothing_changes(
    rig: Rig, console: Console
) -> None:
    from playwright.sync_api import expect

    proposal = start_refund(rig)
    pid, key = proposal["proposal_id"], proposal["operation_key"]

    console.sign_in("cust-ada")
    console.open_proposal(pid)  # the requester may follow her own proposal
    console.approve()
    alert = console.page.get_by_role("alert")
    expect(alert).to_be_visible(timeout=TIMEOUT_MS)
    expect(console.by("alert-code")).to_have_text("self_approval:", timeout=TIMEOUT_MS)
    expect(console.by("alert-message")).to_contain_text(SELF_APPROVAL_MESSAGE)
    expect(alert).to_contain_text(f"self_approval: {SELF_APPROVAL_MESSAGE}.")
    expect(alert).to_contain_text("another person must review it")
    # the console reloads the proposal as it is now: still waiting, the refusal kept on screen
    expect(console.by("fact-status")).to_have_text("pending_approval", timeout=TIMEOUT_MS)
    expect(console.by("decisions-empty")).to_be_visible()
    expect(console.by("operation")).to_be_hidden()
    console.shot("04-self-approval-refused")

    operation = rig.store.operations.get(key)
    assert operation is not None and operation.status == "pending_approval", operation
    assert rig.count("sor_payment_requests", key) == 0
    assert rig.count("sor_refunds", key) == 0
    assert rig.store.approvals.for_proposal(pid) == []
    console.assert_only_own_origin()


def test_the_console_is_labelled_named_and_announces_its_status(rig: Rig, console: Console) -> None:
    from playwright.sync_api import expect

    page = console.page
    # the sign-in field is found by its label (a <label for=...> bound to the input)
    token_field = page.get_by_label("Access token")
    expect(token_field).to_be_visible(timeout=TIMEOUT_MS)
    expect(token_field).to_have_attribute("id", "token-input")
    # every button, shown or not, has a name a screen reader can say
    assert page.evaluate(NAMELESS_BUTTONS) == []
    expect(page.locator("button")).not_to_have_count(0)
    # status messages and refusals sit in live regions
    expect(console.by("status")).to_have_attribute("aria-live", "polite")
    expect(console.by("alert")).to_have_attribute("role", "alert")

    proposal = start_refund(rig)
    console.sign_in("fiona")
    expect(page.locator("[aria-live]").filter(has_text="Signed in.")).to_have_count(1)
    # the list's buttons name the proposal they open
    expect(
        page.get_by_role("button", name=f"Open proposal {proposal['proposal_id']} (issue_refund)")
    ).to_be_visible(timeout=TIMEOUT_MS)
    for name in ("Refresh list", "Sign out"):
        expect(page.get_by_role("button", name=name)).to_be_visible()
    assert page.evaluate(NAMELESS_BUTTONS) == []
    console.assert_only_own_origin()
