"""``toolgate audit trace`` shows the tokens of the task turn that proposed the operation, summed
over its model turns, across processes: the real ``ChatOpenAI`` (Responses API) against the local
replay server proposes a gated refund in one process, another approves, a third resumes, a fourth
traces. Reading the trace still needs the store secret, as it did before tokens were shown (and an
auditor's credential, `test_audit_access`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from provider_flows import OPENAI, Cli
from replay_openai import FAKE_KEY, function_call_item, message_item, reasoning_item, response, usage
from support import seed_people, toolgate

pytestmark = pytest.mark.slow

SNAPSHOT = "gpt-5-mini-2025-08-07"
CALL_ID = "call_Tc8mQ3zR6yXv2KdP"
ENCRYPTED = "gAAAAABoTc8mQ3zR6yXv2KdP" + "dG9rZW5zIGluIHRoZSB0cmFjZQ" * 6 + "=="
REFUND_ARGS = {"order_id": "O-5512", "amount_cents": 4999, "reason": "damaged"}
TASK_TOKENS = "tokens input=2116 output=229 reasoning=144 model_turns=2 source=reported"
"""912 + 1204 input, 188 + 41 output, 128 + 16 reasoning: the two responses of the task turn."""


def script() -> list[Any]:
    return [
        response(
            "resp_tc_1",
            [
                reasoning_item("rs_tc_1", ENCRYPTED),
                function_call_item("fc_tc_1", CALL_ID, "issue_refund", REFUND_ARGS),
            ],
            model=SNAPSHOT,
            tokens=usage(912, 188, 128),
        ),
        response(
            "resp_tc_2",
            [message_item("msg_tc_2", "The refund went through.")],
            model=SNAPSHOT,
            tokens=usage(1204, 41, 16),
        ),
    ]


def test_audit_trace_prints_the_task_tokens_and_still_needs_the_store_secret(tmp_path: Path) -> None:
    seed_people(tmp_path)
    with OPENAI.serve(script()) as replay:
        cli = Cli(OPENAI.cli_env(tmp_path, None, replay))
        proposal, ran, resumed = cli.refund_approved_and_resumed(replay, "t-trace-tokens", CALL_ID)
        assert len(replay.bodies()) == 2 and replay.script == []
    # what each command says of the task turn so far: one model turn, then both
    assert (
        "tokens input=912 output=188 reasoning=128 model_turns=1 source=reported" in ran.stdout.splitlines()
    )
    assert TASK_TOKENS in resumed.stdout.splitlines()

    key, traced = cli.trace(proposal)
    lines = traced.stdout.splitlines()
    assert TASK_TOKENS in lines, traced.stdout
    assert lines.index(TASK_TOKENS) == len(lines) - 2  # after the events, before the summary
    assert "tamper_check=PASS" in lines[-1] and "approver=verified" in lines[-1]
    assert FAKE_KEY not in traced.stdout + traced.stderr

    # no store secret: refused before anything is read, tokens included
    secretless = {k: v for k, v in cli.env.items() if k != "TOOLGATE_AUDIT_KEY"}
    refused = toolgate(["audit", "trace", key], secretless, check=False)
    assert refused.returncode == 2 and "no store secret" in refused.stderr
    assert "tokens" not in refused.stdout and "event=" not in refused.stdout
    # a wrong secret verifies no identity: refused before anything is read or written (an event
    # appended under it would break the chain), and the chain still verifies with the right one
    forged = toolgate(
        ["audit", "trace", key, "--as", "audrey"],
        {**cli.env, "TOOLGATE_AUDIT_KEY": "not-the-store-secret-000000000"},
        check=False,
    )
    assert forged.returncode == 2 and "the store secret verifies no identity" in forged.stderr
    assert "event=" not in forged.stdout
    assert "tamper_check=PASS" in cli("audit", "verify", "--as", "otto").stdout
