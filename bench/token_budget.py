"""Input tokens per model turn with the gateway's output bounds against the same task unbounded.

A scripted four-turn task (read a long order history, page 1 and page 2, look up one order,
answer) runs through the real gateway twice in the same run, on the same store: once with the
history tool's reviewed bound (``max_output_bytes=4096``, the operator default for a read tool),
once with the same tool unbounded (the bound raised out of reach). Everything else is identical:
instructions, tool definitions, arguments, handler results. Each model request is what the
scripted model really received (instructions, the thread's messages, the tool definitions); its
input tokens are estimated as its UTF-8 bytes / 4 (`toolgate.telemetry.tokens.estimate_tokens`,
the estimate the offline model and the evals use). A tokenizer would give other absolute
figures; tiktoken is installed but its encodings download on first use, which is not possible
here, so the estimate is used and the ratios are what the table is about. Every later turn
re-sends every earlier tool result, so the difference grows turn by turn.

Writes ``bench/results/token_budget.json``. Run: ``.venv/bin/python bench/token_budget.py``
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage
from pydantic import Field

from toolgate import ApprovalClass, HandlerContext, NoRollback, StrictArgs, ToolResult, spec_from_function
from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy.identities import IdentityDirectory
from toolgate.store import SQLiteStore
from toolgate.telemetry.tokens import estimate_tokens, request_text
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.identities import demo_principals, seed_demo_identities
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.spec import ToolSpec

RESULTS = Path(__file__).parent / "results" / "token_budget.json"
BOUND = 4096
"""The history tool's reviewed bound (the operator default for a read tool)."""
UNBOUNDED = 1 << 30
ORDERS_PER_PAGE = 60


class HistoryArgs(StrictArgs):
    page: int = Field(ge=1, le=20, description="Page of the order history, 1 first.")


class HistoryEntry(ToolResult):
    order_id: str
    item: str
    status: str
    amount_cents: int
    note: str


class History(ToolResult):
    page: int
    orders: list[HistoryEntry]


def order_history(page: int, *, ctx: HandlerContext) -> History:
    """List the customer's past orders, newest first, one page at a time. Changes nothing."""
    first = (page - 1) * ORDERS_PER_PAGE
    return History(
        page=page,
        orders=[
            HistoryEntry(
                order_id=f"O-{9000 - n}",
                item=f"Kitchen appliance model K-{n % 17}",
                status=("delivered", "returned", "in transit")[n % 3],
                amount_cents=1999 + 37 * n,
                note=f"Delivered to the {ctx.tenant_id} address on file; signed for at the front desk.",
            )
            for n in range(first, first + ORDERS_PER_PAGE)
        ],
    )


def history_spec(max_output_bytes: int) -> ToolSpec:
    return spec_from_function(
        order_history,
        args_model=HistoryArgs,
        result_model=History,
        version="1.0.0",
        owner="commerce-support",
        risk="read-only",
        effect="Reads the customer's order history.",
        timeout_s=5,
        max_output_bytes=max_output_bytes,
        approval=ApprovalClass.none(),
        required_scopes=frozenset({"orders:read"}),
        handler_revision="order-history/1.0.0",
        rollback=NoRollback("read-only: nothing to undo"),
    )


def script() -> list[Any]:
    return [
        ai("", tool_call("order_history", {"page": 1}, "call_h1")),
        ai("", tool_call("order_history", {"page": 2}, "call_h2")),
        ai("", tool_call("lookup_order", {"order_id": "O-5512"}, "call_l1")),
        ai("Your blender order O-5512 was delivered; the history shows no earlier return."),
    ]


def run_task(store: SQLiteStore, system: DemoSystem, bound: int, thread: str) -> dict[str, Any]:
    """One scripted task through the gateway; input tokens of each model request, tool result bytes."""
    registry = Registry.of(REFUND_RELEASE, [*demo_specs(system), history_spec(bound)], system)
    model = ScriptedChatModel(responses=script())
    graph = open_test_app(
        release=DEMO_RELEASES[REFUND_RELEASE], tools=registry, model=model, store=store, start=False
    ).compiled()
    final = graph.invoke(
        {"messages": [HumanMessage("Was my blender order O-5512 delivered? Check my order history.")]},
        {"configurable": {"thread_id": thread}},
        context=Context(principal=demo_principals()["cust-ada"]),
    )
    model.assert_complete()
    results = [m for m in final["messages"] if isinstance(m, ToolMessage)]
    return {
        "status": final["status"],
        "input_tokens": [estimate_tokens(request_text(r.messages, r.tools)) for r in model.requests],
        "tool_result_bytes": [len(str(m.content).encode("utf-8")) for m in results],
        "truncated": [bool(m.additional_kwargs.get("toolgate", {}).get("truncated")) for m in results],
    }


def table(bounded: dict[str, Any], unbounded: dict[str, Any]) -> list[str]:
    rows = [
        "| model turn | input tokens, bounded | input tokens, unbounded | bounded / unbounded |",
        "| --- | --- | --- | --- |",
    ]
    pairs = list(zip(bounded["input_tokens"], unbounded["input_tokens"], strict=True))
    for turn, (b, u) in enumerate(pairs, start=1):
        rows.append(f"| {turn} | {b} | {u} | {b / u:.2f} |")
    b_sum, u_sum = sum(bounded["input_tokens"]), sum(unbounded["input_tokens"])
    rows.append(f"| task total | {b_sum} | {u_sum} | {b_sum / u_sum:.2f} |")
    return rows


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "bench.sqlite", key=secrets.token_bytes(32))
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        seed_demo_identities(IdentityDirectory(store))
        system = DemoSystem(store)
        bounded = run_task(store, system, BOUND, "bounded")
        unbounded = run_task(store, system, UNBOUNDED, "unbounded")
        store.close()
    assert bounded["status"] == unbounded["status"] == "done", (bounded["status"], unbounded["status"])
    rows = table(bounded, unbounded)
    result = {
        "task": "4 model turns: order_history page 1, page 2, lookup_order, answer",
        "estimate": "input tokens = UTF-8 bytes of each model request (instructions, messages, tool definitions) / 4",
        "bound_bytes": BOUND,
        "bounded": bounded,
        "unbounded": {**unbounded, "bound_bytes": UNBOUNDED},
        "ratio_total": round(sum(bounded["input_tokens"]) / sum(unbounded["input_tokens"]), 3),
        "ratio_last_turn": round(bounded["input_tokens"][-1] / unbounded["input_tokens"][-1], 3),
        "table": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print("\n".join(rows))
    print(
        f"tool_result_bytes bounded={bounded['tool_result_bytes']} unbounded={unbounded['tool_result_bytes']} "
        f"ratio_total={result['ratio_total']} ratio_last_turn={result['ratio_last_turn']}"
    )


if __name__ == "__main__":
    main()
