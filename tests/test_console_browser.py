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
* the page loads nothing from elsewhere: every request it makes goes to the server's own URL;
* at 1280 and at 390 px, a refund whose order has other pending refunds and was partly refunded
  meanwhile shows its reviewer the order's facts (amount, already refunded, remaining), what the
  requester asked (redacted), the other refunds of the order and the warnings (it would fail at
  execution; together they ask for more than remains); the support reviewer (rita) edits the
  amount from the console (the new proposal and its digest are shown), the finance reviewer
  (fiona) approves it and it succeeds; the page never scrolls sideways at 390 px, and at 1280 px
  the audit table fits and breaks no ordinary word.

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
from server_support import LOCAL_HOSTS, REPO, Server, client_as, interrupts_of, people_server_and_store
from support import REFUND_REQUEST

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
TABLE_FITS = """(testId) => { const wrap = document.querySelector(`[data-testid="${testId}"]`).parentElement;
    return wrap.scrollWidth <= wrap.clientWidth; }"""
"""Whether a table fits its box (its wrapper would otherwise scroll it sideways)."""
WIDER_THAN_THE_WINDOW = """() => Array.from(document.querySelectorAll('body *'))
    .filter(e => e.getClientRects().length && (e.getBoundingClientRect().right > window.innerWidth + 0.5
        || e.getBoundingClientRect().left + e.scrollWidth > window.innerWidth + 0.5))
    .slice(0, 8).map(e => e.tagName + '#' + (e.id || e.getAttribute('data-testid') || '')
        + ' right=' + Math.round(e.getBoundingClientRect().right))"""
"""Shown elements reaching past the window's right edge (what makes a page scroll sideways)."""


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
    with people_server_and_store(tmp_path_factory.mktemp("lgdev-console")) as (server, store):
        yield Rig(server, store)


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


def start_refund(rig: Rig, order: str | None = None, request: str = REFUND_REQUEST) -> dict[str, Any]:
    """cust-ada's thread refunding ``order`` (a fresh one by default) with ``request`` (her words,
    naming O-5512), waiting at the approval interrupt: the proposal facts."""
    request = request.replace("O-5512", order or new_order(rig))
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
    and signs in there: the console keeps its token in the page's memory only)."""
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

    def sign_out(self) -> None:
        from playwright.sync_api import expect

        self.page.get_by_role("button", name="Sign out").click()
        expect(self.by("status")).to_have_text("Signed out.", timeout=TIMEOUT_MS)

    def open_audit_trace(self, operation_key: str, auditor: str = "audrey") -> None:
        """Sign out, open ``console#trace=KEY`` afresh and sign in as an auditor, who sees the
        operation's audit trace (a reviewer is told it is for auditors only)."""
        from playwright.sync_api import expect

        self.sign_out()
        self.page.goto(f"{self.server_url}/console#trace={operation_key}")
        self.page.reload()
        self.sign_in(auditor)
        expect(self.by("operation-key")).to_have_text(operation_key, timeout=TIMEOUT_MS)
        expect(self.by("trace-wrap")).to_be_visible(timeout=TIMEOUT_MS)

    def assert_trace_is_for_auditors(self) -> None:
        """A reviewer following an operation sees its status, and no audit events."""
        from playwright.sync_api import expect

        expect(self.by("trace-summary")).to_have_text(
            "The audit trace is shown to auditors (role auditor) only.", timeout=TIMEOUT_MS
        )
        expect(self.by("trace-wrap")).to_be_hidden()
        expect(self.by("trace-rows").locator("tr")).to_have_count(0)
        expect(self.by("alert")).to_be_hidden()

    def assert_no_horizontal_scroll(self) -> None:
        """The page never scrolls sideways at this width (every table stacks, every id wraps)."""
        widths = self.page.evaluate(
            "() => [document.documentElement.scrollWidth, window.innerWidth, document.body.scrollWidth]"
        )
        wide = self.page.evaluate(WIDER_THAN_THE_WINDOW)
        assert widths[0] <= widths[1] and widths[2] <= widths[1], (widths, wide)

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
    console.assert_trace_is_for_auditors()
    result = json.loads(console.by("operation-result").text_content())
    assert result, "the console shows no result for a succeeded operation"
    console.shot("03-operation-succeeded")
    expect(console.by("alert")).to_be_hidden()

    # acme's auditor opens the operation's audit trace: complete and verified
    console.open_audit_trace(key)
    expect(console.by("operation-status")).to_have_text("succeeded", timeout=TIMEOUT_MS)
    expect(console.by("trace-summary")).to_contain_text(
        "final state succeeded; missing transitions: none; approver verified; audit chain PASS.",
        timeout=TIMEOUT_MS,
    )
    trace_rows = console.by("trace-rows").locator("tr")
    expect(trace_rows.filter(has_text="operation.completed")).to_have_count(1)
    expect(trace_rows.filter(has_text="approval.recorded")).to_have_count(1)
    expect(console.by("alert")).to_be_hidden()
    reads = [e for e in rig.store.audit.events() if e.event == "audit.read"]
    assert [(e.result, e.code) for e in reads[-2:]] == [("refused", "not_auditor"), ("read", None)], reads[-2:]

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


def test_the_console_keeps_the_token_in_memory_only_and_a_reload_signs_out(
    rig: Rig, console: Console
) -> None:
    """The token is never written to the tab's storage, where any script of this origin reads it and
    it outlives the tab: a stale token an older console left behind is removed, and a reload asks
    for the token again."""
    from playwright.sync_api import expect

    page = console.page
    token = demo_token("fiona")
    page.evaluate("(t) => window.sessionStorage.setItem('toolgate.token', t)", token)
    page.reload()
    expect(console.by("signin")).to_be_visible(timeout=TIMEOUT_MS)
    assert page.evaluate("() => window.sessionStorage.getItem('toolgate.token')") is None

    console.sign_in("fiona")
    stored = page.evaluate(
        "() => [window.sessionStorage, window.localStorage].flatMap(s => Object.keys(s).map(k => s.getItem(k)))"
    )
    assert token not in stored and stored == [], stored
    assert token not in page.evaluate("() => document.cookie")
    assert token not in page.content()  # nor left in the form field

    page.reload()
    expect(console.by("signin")).to_be_visible(timeout=TIMEOUT_MS)
    expect(console.by("whoami")).to_have_text("")


WORDS = "My blender arrived broken, order O-5512. Please refund it. password=hunter2"
"""cust-ada's words, with a secret a reviewer must never see (redacted before it is stored)."""
SINGLE_LINE_WORDS = """(testId) => Array.from(document.querySelectorAll(`[data-testid="${testId}"] td`))
    .filter(td => (!td.querySelector('code') || td.classList.contains('keep'))
                  && td.textContent.trim() && !/\\s/.test(td.textContent.trim()))
    .filter(td => { const r = document.createRange(); r.selectNodeContents(td);
                    return new Set(Array.from(r.getClientRects()).map(x => Math.round(x.top))).size > 1; })
    .map(td => td.textContent)"""
"""Cells of one word (ordinary text, or a time, release or revision kept whole) that the browser
broke over more than one line."""


@pytest.mark.parametrize("width", [1280, 390])
def test_a_reviewer_decides_a_refund_from_its_facts_the_requesters_words_and_a_warning(
    rig: Rig, console: Console, width: int
) -> None:
    """Three refunds of one order wait at once, and part of the order was refunded meanwhile: the
    support reviewer (rita) sees the order's facts, what the requester asked, the other two
    refunds and the warnings, and edits the amount down to what remains; the finance reviewer
    (fiona) approves the edited proposal and it succeeds."""
    from playwright.sync_api import expect

    page = console.page
    page.set_viewport_size({"width": width, "height": 900})
    order = new_order(rig)
    first, second, third = (start_refund(rig, order, WORDS) for _ in range(3))
    pid = third["proposal_id"]
    stored = rig.store.proposals.get(pid)
    assert stored is not None and stored.arguments["amount_cents"] == 4999  # the offline model asks for all
    assert stored.requester_text is not None and "hunter2" not in stored.requester_text
    with rig.store.transaction() as tx:  # another channel refunded 19.99 of it meanwhile
        tx.execute("UPDATE sor_orders SET refunded_cents = 1999 WHERE order_id = ?", (order,))

    console.sign_in("rita")
    console.open_proposal(pid)
    # the facts that matter, from the payment system's records
    expect(console.by("detail-order_id")).to_have_text(order)
    expect(console.by("detail-order_amount_cents")).to_have_text("49.99 USD (4999 cents)")
    expect(console.by("detail-already_refunded_cents")).to_have_text("19.99 USD (1999 cents)")
    expect(console.by("detail-remaining_cents")).to_have_text("30.00 USD (3000 cents)")
    expect(console.by("detail-this_refund_cents")).to_have_text("49.99 USD (4999 cents)")
    expect(console.by("detail-remaining_after_cents")).to_contain_text("-19.99 USD (-1999 cents)")
    # the requester's words, as hers, redacted
    expect(console.by("requester-text")).to_have_text(stored.requester_text)
    expect(console.by("requester-text")).to_contain_text(f"order {order}. Please refund it.")
    expect(console.by("requester-caption")).to_contain_text("cust-ada, in their own words")
    # the other refunds of the same order, newest first, each with its status and a way to it
    related = console.by("related-rows").locator("tr")
    expect(related).to_have_count(2)
    for row, other in zip((0, 1), (second, first), strict=True):
        expect(related.nth(row)).to_have_attribute("data-testid", f"related-{other['proposal_id']}")
        expect(related.nth(row)).to_contain_text("pending_approval")
        expect(related.nth(row)).to_contain_text('"amount_cents":4999')
    expect(
        page.get_by_role("button", name=f"Open related proposal {first['proposal_id']} (pending_approval)")
    ).to_be_visible()
    # the warnings, in words and before the approve button
    warnings = page.get_by_role("region", name=re.compile("^(⚠ )?Warning: check before you approve"))
    expect(warnings).to_be_visible()
    expect(console.by("warning-semantic_check")).to_have_text(
        "Would fail at execution: If approved now, execution would be refused:"
        " amount_cents must be at most the unrefunded amount of the order (3000)."
    )
    expect(console.by("warning-same_resource")).to_contain_text(
        f"2 other issue_refund proposals for order {order} are pending or approved"
    )
    expect(console.by("warning-exceeds_remaining")).to_contain_text(
        "Together with this one they ask for 14997 cents; only 3000 cents remain."
    )
    expect(console.by("status")).to_contain_text("3 warning(s) to check before approving.")
    assert "hunter2" not in page.content()
    console.assert_no_horizontal_scroll()
    if width >= 1280:  # statuses, requesters and times stay whole at desktop width
        assert page.evaluate(SINGLE_LINE_WORDS, "related-rows") == []
    console.shot(f"05-refund-facts-and-warnings-{width}")

    # rita edits the amount down to what remains: a new proposal with its own digest
    shown = json.loads(console.by("edit-arguments").input_value())
    assert shown == stored.arguments
    console.by("edit-arguments").fill(json.dumps({**shown, "amount_cents": 3000}, indent=2))
    page.get_by_role("button", name="Propose the edited call").click()
    expect(console.by("edit-result")).to_contain_text(f" replaces {pid} (digest ", timeout=TIMEOUT_MS)
    edited = rig.store.proposals.superseding(pid)
    assert edited is not None and edited.arguments == {**stored.arguments, "amount_cents": 3000}
    assert edited.editors == ("rita",) and edited.requester_text == stored.requester_text
    expect(console.by("detail-title")).to_have_text(f"Proposal {edited.proposal_id}")
    expect(console.by("edit-result")).to_contain_text(f"new proposal {edited.proposal_id} replaces {pid}")
    expect(console.by("edit-result")).to_contain_text(edited.digest)
    expect(console.by("digest")).to_have_text(edited.digest)
    expect(console.by("detail-this_refund_cents")).to_have_text("30.00 USD (3000 cents)")
    expect(console.by("detail-remaining_after_cents")).to_have_text("0.00 USD (0 cents)")
    expect(console.by("warning-semantic_check")).to_have_count(0)  # it fits what remains now
    expect(console.by("warning-same_resource")).to_be_visible()  # the two others still wait
    expect(console.by(f"related-{pid}")).to_contain_text("rejected")  # the original, superseded
    original = rig.store.operations.get(third["operation_key"])
    assert original is not None and original.status == "rejected"
    console.assert_no_horizontal_scroll()
    console.shot(f"06-refund-edited-{width}")

    # fiona (finance) approves the edited proposal; the refund of what remained succeeds
    console.sign_out()
    console.sign_in("fiona")
    console.open_proposal(edited.proposal_id)
    expect(console.by("warning-same_resource")).to_be_visible()
    console.approve()
    expect(console.by("operation-status")).to_have_text("succeeded", timeout=TIMEOUT_MS)
    console.assert_trace_is_for_auditors()
    operation = rig.store.operations.get(edited.operation_key)
    assert operation is not None and operation.status == "succeeded", operation
    assert rig.count("sor_refunds", edited.operation_key) == 1
    assert DemoSystem(rig.store).order("acme", order)["refunded_cents"] == 4999
    console.assert_no_horizontal_scroll()
    console.shot(f"07-refund-approved-{width}")

    # acme's auditor reads the edited refund's audit trace, on the same screen width
    console.open_audit_trace(edited.operation_key)
    expect(console.by("trace-summary")).to_contain_text("audit chain PASS.", timeout=TIMEOUT_MS)
    expect(console.by("trace-rows").locator("tr").filter(has_text="operation.completed")).to_have_count(1)
    console.assert_no_horizontal_scroll()
    if width >= 1280:  # the audit table fits and breaks no ordinary word at desktop width
        assert page.evaluate(SINGLE_LINE_WORDS, "trace-rows") == []
        assert page.evaluate(TABLE_FITS, "trace"), "the audit table scrolls sideways at 1280 px"
    console.shot(f"08-refund-audit-trace-{width}")
    console.assert_only_own_origin()
