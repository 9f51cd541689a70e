"""Eval reports, their HTML view and printed lines are redacted like tool output, and a report
holding a secret is never signed (`toolgate.evals.redaction`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from test_evals_review import _rewrite, review, signoffs, world  # noqa: F401 (the fixture)

from toolgate.evals.fixtures import DEFAULT_DATASET, Dataset, load_dataset
from toolgate.evals.gate import evaluate_gate
from toolgate.evals.report import build_report, lines, write_reports

API_KEY = "sk-live4f9QmZ2xTqP8wLk3Rb7Yv"
CARD = "4111 1111 1111 1111"


def test_a_secret_in_a_case_never_appears_in_the_report_its_html_or_its_lines(tmp_path: Path) -> None:
    full = load_dataset(DEFAULT_DATASET)
    by_id = {c.id: c for c in full.cases}
    assert CARD in by_id["ref-card-number"].input  # a packaged case that carries a card number
    leaky = by_id["sel-ada-order-status"].model_copy(
        update=dict(
            id="sel-ada-order-status-with-key",
            input=f"Where is my order O-5512? my api_key={API_KEY} and token: {API_KEY}",
        )
    )
    data = Dataset(path=full.path, cases=(leaky, by_id["ref-card-number"]), sha256=full.sha256)
    result = evaluate_gate(data, "ops-tools/1.1.0", derived=False)
    assert [r.score.passed for r in result.candidate.records] == [True, True]  # the runs saw the secrets
    report = build_report(result)
    json_path, html_path = write_reports(report, tmp_path / "reports")
    for text in (
        json_path.read_text(encoding="utf-8"),
        html_path.read_text(encoding="utf-8"),
        *lines(result),
    ):
        assert API_KEY not in text and CARD not in text and "4111111111111111" not in text
    inputs = {
        c["id"]: c["input"] for c in json.loads(json_path.read_text(encoding="utf-8"))["candidate"]["cases"]
    }
    assert inputs == {
        "sel-ada-order-status-with-key": "Where is my order O-5512? my api_key=[REDACTED] and token: [REDACTED]",
        "ref-card-number": "Look up [REDACTED].",
    }
    assert report["candidate"]["token_source"]  # the report's own keys are figures, kept


def test_a_report_holding_a_secret_is_not_signed(world: dict[str, Any]) -> None:  # noqa: F811
    def leak(report: dict[str, Any]) -> None:
        report["candidate"]["cases"][0]["input"] = f"my card is {CARD}"

    refused = review(world, "ivy", _rewrite(world["report"], leak, keep_digest=False))
    assert refused.returncode == 2 and refused.stderr.startswith("error=report_unredacted ")
    assert signoffs(world["store"]) == []
    codes = [e.code for e in world["store"].audit.events() if e.event == "evals.review_refused"]
    assert codes == ["report_unredacted"]
    assert CARD not in json.dumps([e.detail for e in world["store"].audit.events()])
