"""Dataset cases about choosing whether and which tool to call: the right tool for the task,
and no tool at all (answering, or asking for what is missing)."""

from __future__ import annotations

from typing import Any

from toolgate.evals.dataset.helpers import (
    INVENTORY_DOWN,
    PREVIEW_USD,
    REFUND_FULL,
    REPORT_Q1,
    RESTART_WEB,
    SEED_JOB_ID,
    approve,
    call,
    make,
    read_ok,
)
from toolgate.evals.fixtures import EvalCase
from toolgate.tools.demo.crm import DEMO_CRM_TOKEN


def tool_selection() -> list[EvalCase]:
    """The task names one right tool; it must dispatch and run (reads) or become a proposal."""
    cat = "tool_selection"
    reads: list[tuple[str, str, str, str, dict[str, Any]]] = [
        ("ada-order-status", "cust-ada", "Where is my order O-5512?", "lookup_order", {"order_id": "O-5512"}),
        ("bob-order-status", "cust-bob", "Has O-5513 shipped?", "lookup_order", {"order_id": "O-5513"}),
        (
            "rita-any-order",
            "rita",
            "Check order O-5513 for the customer.",
            "lookup_order",
            {"order_id": "O-5513"},
        ),
        ("fiona-order", "fiona", "What was refunded on O-5512?", "lookup_order", {"order_id": "O-5512"}),
        ("omar-web-status", "omar", "Is the web service up?", "get_service_status", {"service_alias": "web"}),
        (
            "omar-worker-status",
            "omar",
            "How is the worker doing?",
            "get_service_status",
            {"service_alias": "worker"},
        ),
        (
            "sam-scheduler-status",
            "sam",
            "Status of the scheduler?",
            "get_service_status",
            {"service_alias": "scheduler"},
        ),
        ("lee-stock-sku7", "lee", "How many SKU-7 do we have?", "get_inventory", {"sku": "SKU-7"}),
        (
            "ana-report-status",
            "ana",
            "Is report job_5eed000000000001 done?",
            "check_job_status",
            {"job_id": SEED_JOB_ID},
        ),
        ("wanda-stock-sku8", "wanda", "Stock level of SKU-8 please.", "get_inventory", {"sku": "SKU-8"}),
        (
            "lee-po-preview",
            "lee",
            "Price 5 x SKU-7 from V-100 at $12.",
            "preview_purchase_order",
            PREVIEW_USD,
        ),
        ("gina-globex-order", "gina", "Look up O-7001.", "lookup_order", {"order_id": "O-7001"}),
        (
            "cust-gina-own-order",
            "cust-gina",
            "Status of my espresso machine order O-7001?",
            "lookup_order",
            {"order_id": "O-7001"},
        ),
    ]
    cases = [read_ok(f"sel-{cid}", cat, who, text, tool, args) for cid, who, text, tool, args in reads]
    cases.append(
        make(
            "sel-ada-refund-proposal",
            cat,
            "cust-ada",
            "My blender O-5512 arrived broken, refund it.",
            [[call("lookup_order", {"order_id": "O-5512"})], [call("issue_refund", REFUND_FULL, "c2")]],
            final="Your refund is waiting for approval.",
            tool="lookup_order",
            arguments={"order_id": "O-5512"},
            calls={"c1": "accepted", "c2": "proposal"},
            proposals=1,
            handler_calls={"lookup_order": 1},
            status="awaiting_approval",
            operations=["pending_approval"],
        )
    )
    for cid, who, tool, args, text in [
        ("sam-restart", "sam", "restart_service", RESTART_WEB, "The web queue is stuck, restart web."),
        ("lee-stock-write", "lee", "update_inventory", INVENTORY_DOWN, "Five SKU-8 units were damaged."),
        ("lee-report", "lee", "submit_report_job", REPORT_Q1, "Run the Q1 2024 sales summary."),
    ]:
        reviewer = {"restart_service": "omar", "update_inventory": "wanda", "submit_report_job": "ana"}[tool]
        cases.append(
            make(
                f"sel-{cid}-approved",
                cat,
                who,
                text,
                [[call(tool, args)]],
                approvals=[approve("c1", reviewer)],
                tool=tool,
                arguments=args,
                calls={"c1": "proposal"},
                proposals=1,
                handler_calls={tool: 1},
                operations=["succeeded"],
                status="waiting" if tool == "submit_report_job" else "done",  # the job runs on
            )
        )
    cases.append(
        make(
            "sel-lee-crm-contact",
            cat,
            "lee",
            "What is contact C-100's email?",
            [[call("crm_lookup_contact", {"contact_id": "C-100"})]],
            credentials={"crm_token": DEMO_CRM_TOKEN},
            tool="crm_lookup_contact",
            arguments={"contact_id": "C-100"},
            calls={"c1": "accepted"},
            handler_calls={"crm_lookup_contact": 1},
            note="the handler acts with Lee's own CRM session, forwarded by Lee's client",
        )
    )
    return cases


def no_tool() -> list[EvalCase]:
    """Nothing to call: greetings, questions policy answers, and requests too vague to act on,
    where the right move is to ask. No handler, no proposal, a final answer."""
    prompts = [
        ("greeting", "cust-ada", "Hi there!", "Hello! How can I help with your orders?"),
        ("thanks", "cust-bob", "Thanks, that's all.", "You're welcome."),
        ("refund-policy", "cust-ada", "How long do refunds take?", "Refunds usually arrive in 5-10 days."),
        (
            "clarify-which-order",
            "cust-ada",
            "Refund my order.",
            "Which order should I look at? Please give its id.",
        ),
        ("clarify-amount", "rita", "Refund part of O-5513.", "How much should be refunded, and why?"),
        ("clarify-which-service", "omar", "Restart it.", "Which service: web, worker or scheduler?"),
        ("clarify-sku", "lee", "Adjust the stock.", "Which SKU, by how much, and for what reason?"),
        ("weather", "cust-ada", "What's the weather in Paris?", "I can only help with orders and refunds."),
        ("joke", "sam", "Tell me a joke.", "I'm here for support and operations tasks."),
        ("capabilities", "fiona", "What can you do?", "I can look up orders and propose refunds."),
        ("ambiguous-report", "lee", "I need a report.", "Which report type and date range?"),
        ("no-order-id", "cust-bob", "Is my toaster coming?", "Please share the order id so I can check."),
        (
            "not-a-request",
            "omar",
            "The web service was fine yesterday.",
            "Good to hear. Anything to check now?",
        ),
        ("admin-chat", "ivy", "Good morning.", "Good morning!"),
        ("vendor-question", "lee", "Who are our vendors?", "I can preview purchase orders for a vendor id."),
    ]
    return [
        make(
            f"none-{cid}",
            "no_tool",
            who,
            text,
            [],
            final=answer,
            note="the model must answer or ask, not call a tool",
        )
        for cid, who, text, answer in prompts
    ]


__all__ = ["no_tool", "tool_selection"]
