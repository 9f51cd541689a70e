"""Benchmark: time to a final answer against a dead downstream, with and without the circuit breaker.

An agent task needs the same read tool ten times (ten calls per task). The downstream is
dead: every call hangs past the tool's timeout. Both runs go through the real graph with the same
scripted model; only the breaker differs (opens after 5 failures, versus never). The result is a
ratio measured in the same run, written to ``bench/results/lab6_breaker.json``.

Run: ``.venv/bin/python bench/lab6_breaker.py``
"""

from __future__ import annotations

import json
import secrets
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from toolgate.graph import Context
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy import Principal
from toolgate.policy.breaker import BreakerRegistry
from toolgate.policy.rules import RateLimits
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call
from toolgate.tools import Registry
from toolgate.tools.demo import REFUND_RELEASE, DemoSystem, demo_specs
from toolgate.tools.demo.release import DEMO_RELEASES

CALLS = 10
TIMEOUT_S = 0.3
RESULTS = Path(__file__).parent / "results" / "lab6_breaker.json"
CUSTOMER = Principal(
    user_id="cust-ada", tenant_id="acme", roles=frozenset({"customer"}), scopes=frozenset({"orders:read"})
)


def run(failure_threshold: int) -> dict[str, Any]:
    """One task of CALLS lookups against a dead downstream; seconds to the final answer and per-call results."""
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(Path(tmp) / "lab6.sqlite", key=secrets.token_bytes(32))
        initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
        system = DemoSystem(store)

        def dead(args: Any, ctx: Any) -> Any:
            time.sleep(TIMEOUT_S * 2)  # never answers within the timeout
            raise AssertionError("unreachable")

        specs = [
            replace(s, handler=dead, timeout_s=TIMEOUT_S) if s.name == "lookup_order" else s
            for s in demo_specs(system)
        ]
        responses = [
            # orders cust-ada owns: anyone else's is refused (not_owner) before the dead tool is reached
            ai("", tool_call("lookup_order", {"order_id": ("O-5512", "O-5514")[i % 2]}, f"c{i}"))
            for i in range(CALLS)
        ]
        model = ScriptedChatModel(responses=[*responses, ai("Tracking is temporarily unavailable.")])
        policy = replace(DEMO_RELEASES[REFUND_RELEASE].policy, rate_limits=RateLimits())
        graph = open_test_app(
            release=DEMO_RELEASES[REFUND_RELEASE],
            tools=Registry.of(REFUND_RELEASE, specs, system),
            policy=policy,
            model=model,
            store=store,
            breakers=BreakerRegistry(failure_threshold=failure_threshold, reset_timeout_s=30),
            start=False,
        ).compiled()
        started = time.perf_counter()
        state = graph.invoke(
            {"messages": [("user", "where are my orders?")]},
            {"configurable": {"thread_id": "lab6"}},
            context=Context(
                principal=CUSTOMER,
                max_tool_calls=CALLS + 2,
                max_model_turns=CALLS + 2,
                max_identical_calls=CALLS,
            ),
        )
        seconds = time.perf_counter() - started
        calls = [json.loads(str(m.content)) for m in state["messages"] if getattr(m, "tool_call_id", None)]
        return {
            "seconds_to_final_answer": round(seconds, 3),
            "calls": len(calls),
            "timeouts": sum(c.get("error") == "timeout" for c in calls),
            "failed_fast": sum("circuit open" in c.get("message", "") for c in calls),
            "final_status": state.get("status"),
        }


def main() -> None:
    without = run(failure_threshold=10**9)
    with_breaker = run(failure_threshold=5)
    saved = without["seconds_to_final_answer"] - with_breaker["seconds_to_final_answer"]
    result = {
        "lab": "6: circuit breaker against a dead downstream",
        "tool_timeout_s": TIMEOUT_S,
        "calls_per_task": CALLS,
        "without_breaker": without,
        "with_breaker": with_breaker,
        "speedup_ratio": round(
            without["seconds_to_final_answer"] / with_breaker["seconds_to_final_answer"], 2
        ),
        "avoided_timeout_waits": without["timeouts"] - with_breaker["timeouts"],
        "seconds_saved": round(saved, 3),
        "share_of_saving_explained_by_avoided_timeouts": round(
            (without["timeouts"] - with_breaker["timeouts"]) * TIMEOUT_S / saved, 2
        )
        if saved > 0
        else None,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
