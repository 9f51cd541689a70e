"""toolgate's target and evaluators under ``langsmith.evaluate`` / ``aevaluate``, fully offline, and
the dataset push (refused without a key; against a local server replaying LangSmith's REST API,
create then update, with the real `langsmith.Client`)."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from langsmith import Client, aevaluate, evaluate
from langsmith.schemas import Example
from support import REPO, cli_env, toolgate

from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.langsmith_target import (
    EVALUATORS,
    EXAMPLE_NAMESPACE,
    case_to_example,
    make_async_target,
    make_target,
)

UNSAFE_REF = f"{REPO / 'tests' / 'fixtures' / 'unsafe_release.py'}:release"
BETA = "ignore:'upload_runs' parameter is in beta"


class _Recorder(BaseHTTPRequestHandler):
    requests: list[str] = []

    def _record(self) -> None:
        type(self).requests.append(f"{self.command} {self.path}")
        self.send_response(500)
        self.end_headers()

    do_GET = do_POST = do_PATCH = do_PUT = _record

    def log_message(self, *args: Any) -> None:
        """Quiet."""


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Client, list[str]]]:
    """No key, no tracing, and a LangSmith endpoint on this host that records any request it gets."""
    _Recorder.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    for name in ("LANGSMITH_API_KEY", "LANGCHAIN_API_KEY", "LANGCHAIN_TRACING_V2"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LANGSMITH_TRACING", "false")
    monkeypatch.setenv("LANGSMITH_ENDPOINT", url)
    # auto_batch_tracing=False: no background thread, so the client never asks the endpoint for /info
    client = Client(api_url=url, api_key="offline-never-sent", auto_batch_tracing=False)
    try:
        yield client, _Recorder.requests
    finally:
        server.shutdown()
        server.server_close()


def examples(*ids: str) -> list[Example]:
    cases = {c.id: c for c in load_dataset(DEFAULT_DATASET).cases}
    dataset_id = uuid.uuid4()
    return [Example(**case_to_example(cases[i]), dataset_id=dataset_id) for i in ids]


def scores(results: Any) -> dict[str, dict[str, Any]]:
    return {
        row["example"].metadata["case_id"]: {r.key: r.score for r in row["evaluation_results"]["results"]}
        for row in results
    }


ALL_GOOD = {
    "handler_invocations": 1,
    "proposals": 1,
    "call_outcomes": 1.0,
    "final_status": 1,
    "exactly_once": 1,
    "no_unsafe_effect": 1,
    "case_passed": 1,
    "trajectory_strict_match": True,
}


@pytest.mark.filterwarnings(BETA)
def test_evaluate_scores_the_demo_release_offline(offline: tuple[Client, list[str]]) -> None:
    client, requests = offline
    ids = ("sel-ada-order-status", "xt-ada-reads-globex", "dup-concurrent-issue_refund", "none-greeting")
    results = evaluate(
        make_target("ops-tools/1.1.0"),
        data=examples(*ids),
        evaluators=EVALUATORS,
        client=client,
        upload_results=False,
    )
    rows = list(results)
    assert scores(rows) == dict.fromkeys(ids, ALL_GOOD)
    outputs = {row["example"].metadata["case_id"]: row["run"].outputs for row in rows}
    refund = outputs["dup-concurrent-issue_refund"]
    assert refund["handler_calls"] == {"issue_refund": 1} and refund["operations"][0]["status"] == "succeeded"
    assert [m["role"] for m in refund["messages"]][:3] == ["user", "assistant", "tool"]
    assert refund["messages"][1]["tool_calls"][0]["function"]["name"] == "issue_refund"
    assert outputs["xt-ada-reads-globex"]["outcomes"] == {"c1": "cross_tenant"}
    assert requests == []


@pytest.mark.filterwarnings(BETA)
def test_the_evaluators_catch_an_unsafe_candidate(offline: tuple[Client, list[str]]) -> None:
    client, requests = offline
    results = evaluate(
        make_target(UNSAFE_REF),
        data=examples("xu-ada-reads-bob", "byp-no-review", "sel-ada-order-status"),
        evaluators=EVALUATORS,
        client=client,
        upload_results=False,
    )
    got = scores(results)
    assert got["sel-ada-order-status"] == ALL_GOOD
    assert got["xu-ada-reads-bob"] == {
        **ALL_GOOD,
        "handler_invocations": 0,
        "call_outcomes": 0.0,
        "no_unsafe_effect": 0,
        "case_passed": 0,
        "trajectory_strict_match": False,  # the gateway let through a call it must refuse
    }
    assert got["byp-no-review"]["no_unsafe_effect"] == 0 and got["byp-no-review"]["proposals"] == 0
    # the same call went through, so the trajectory matches: only the store-level evaluators see
    # that it ran at once, without a proposal or an approval
    assert got["byp-no-review"]["trajectory_strict_match"] is True
    assert requests == []


@pytest.mark.filterwarnings(BETA)
def test_aevaluate_runs_the_async_target(offline: tuple[Client, list[str]]) -> None:
    client, requests = offline

    async def run() -> list[Any]:
        results = await aevaluate(
            make_async_target("ops-tools/1.1.0"),
            data=examples("unk-lost-response-restart_service"),
            evaluators=EVALUATORS,
            client=client,
            upload_results=False,
        )
        return [row async for row in results]

    assert scores(asyncio.run(run())) == {"unk-lost-response-restart_service": ALL_GOOD}
    assert requests == []


def test_an_example_carries_the_case_and_a_stable_id() -> None:
    case = load_dataset(DEFAULT_DATASET).cases[0]
    example = case_to_example(case)
    assert example["id"] == str(uuid.uuid5(EXAMPLE_NAMESPACE, f"tool-calling-v1/{case.id}"))
    assert example["inputs"]["case"]["turns"][0][0]["name"] == "lookup_order"
    assert example["outputs"]["expected"] == case.expected.model_dump()
    assert example["metadata"] == {"case_id": case.id, "category": case.category, "critical": case.critical}
    assert Example(**example).outputs == example["outputs"]


def test_push_without_a_key_exits_2_and_sends_nothing(tmp_path: Path) -> None:
    env = cli_env(tmp_path, LANGSMITH_ENDPOINT="http://127.0.0.1:9")
    env.pop("LANGSMITH_API_KEY", None)
    env.pop("LANGCHAIN_API_KEY", None)
    refused = toolgate(["evals", "push", "--name", "toolgate-tool-calling-v1"], env, check=False)
    assert refused.returncode == 2
    assert refused.stderr.startswith("error=langsmith_not_configured ") and refused.stdout == ""


class FakeLangSmith(BaseHTTPRequestHandler):
    """The slice of LangSmith's REST API a dataset push uses (JSON endpoints, no multipart), in memory."""

    datasets: ClassVar[list[dict[str, Any]]] = []
    examples: ClassVar[dict[str, dict[str, Any]]] = {}
    log: ClassVar[list[str]] = []
    keys: ClassVar[set[str | None]] = set()

    def _reply(self, body: Any, status: int = 200) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        url = urlsplit(self.path)
        type(self).log.append(f"{self.command} {url.path}")
        type(self).keys.add(self.headers.get("x-api-key"))
        return url.path, parse_qs(url.query)

    def do_GET(self) -> None:
        path, query = self._route()
        if path == "/info":
            self._reply({"version": "0.0.0-replay"})
        elif path == "/datasets":
            self._reply([d for d in self.datasets if d["name"] in query.get("name", [d["name"]])])
        elif path == "/examples":
            offset = int(query.get("offset", ["0"])[0])
            rows = [e for e in self.examples.values() if e["dataset_id"] in query.get("dataset", [])]
            self._reply(rows[offset : offset + int(query.get("limit", ["100"])[0])])
        else:
            self._reply({"detail": "not found"}, 404)

    def do_POST(self) -> None:
        path, _ = self._route()
        body = self._body()
        if path == "/datasets":
            dataset = {**body, "id": str(uuid.uuid4()), "created_at": "2026-01-01T00:00:00Z"}
            type(self).datasets.append(dataset)
            self._reply(dataset)
        elif path == "/examples/bulk":
            for example in body:
                self.examples[example["id"]] = {**example, "created_at": "2026-01-01T00:00:00Z"}
            self._reply([{"id": e["id"]} for e in body])
        else:
            self._reply({"detail": "not found"}, 404)

    def do_PATCH(self) -> None:
        self._route()
        body = self._body()
        for update in body:
            self.examples[str(update["id"])].update({k: v for k, v in update.items() if k != "id"})
        self._reply({"message": f"{len(body)} examples updated", "count": len(body)})

    def log_message(self, *args: Any) -> None:
        """Quiet."""


def test_push_creates_the_dataset_then_updates_the_same_examples(tmp_path: Path) -> None:
    FakeLangSmith.datasets, FakeLangSmith.examples, FakeLangSmith.log, FakeLangSmith.keys = [], {}, [], set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeLangSmith)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        env = cli_env(
            tmp_path,
            LANGSMITH_API_KEY="lsv2-replay-key",
            LANGSMITH_ENDPOINT=f"http://127.0.0.1:{server.server_address[1]}",
        )
        first = toolgate(["evals", "push", "--name", "toolgate-tool-calling-v1"], env)
        cases = load_dataset(DEFAULT_DATASET).cases
        assert (
            first.stdout.strip()
            == f"dataset=toolgate-tool-calling-v1 created={len(cases)} updated=0 examples={len(cases)}"
        )
        created = json.loads(json.dumps(FakeLangSmith.examples))  # as the first push left them
        second = toolgate(["evals", "push", "--name", "toolgate-tool-calling-v1"], env)
        assert second.stdout.strip().endswith(f"created=0 updated={len(cases)} examples={len(cases)}")
    finally:
        server.shutdown()
        server.server_close()
    assert [d["name"] for d in FakeLangSmith.datasets] == ["toolgate-tool-calling-v1"]
    stored = FakeLangSmith.examples
    assert set(stored) == {case_to_example(c)["id"] for c in cases}
    first_case = case_to_example(cases[0])
    assert stored[first_case["id"]]["inputs"] == first_case["inputs"]
    assert stored[first_case["id"]]["metadata"]["case_id"] == cases[0].id
    expected = json.loads(json.dumps(first_case["outputs"]))
    assert created[first_case["id"]]["outputs"] == stored[first_case["id"]]["outputs"] == expected
    assert FakeLangSmith.log.count("POST /datasets") == 1 and "PATCH /examples/bulk" in FakeLangSmith.log
    assert FakeLangSmith.keys == {"lsv2-replay-key"}


# The README's offline evaluation as a user runs it: no key, no client of their own, results kept
# local. An audit hook sees every connection and name lookup the process tries.
LOCAL_EVALUATION = r"""
import json, sys, uuid
tried = []
def audit(event, args):
    if event in ("socket.connect", "socket.getaddrinfo"):
        tried.append(repr(args[1] if event == "socket.connect" else args[:2]))
sys.addaudithook(audit)
from langsmith import evaluate
from langsmith.schemas import Example
from toolgate.evals.fixtures import DEFAULT_DATASET, load_dataset
from toolgate.evals.langsmith_target import EVALUATORS, case_to_example, make_target

case = next(c for c in load_dataset(DEFAULT_DATASET).cases if c.id == "sel-ada-order-status")
examples = [Example(**case_to_example(case), dataset_id=uuid.uuid4())]
rows = list(evaluate(make_target("ops-tools/1.1.0"), data=examples, evaluators=EVALUATORS, upload_results=False))
print(json.dumps({
    "scores": {r.key: r.score for r in rows[0]["evaluation_results"]["results"]},
    "tried": tried,
}))
"""


def test_a_local_evaluation_without_a_key_tries_no_connection(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {
        k: v
        for k, v in cli_env(tmp_path).items()
        if not k.startswith(("LANGSMITH_", "LANGCHAIN_"))  # a fresh shell: no key, tracing unset
    }
    result = subprocess.run(
        [sys.executable, "-c", LOCAL_EVALUATION], env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["scores"] == ALL_GOOD
    assert report["tried"] == []
    assert "connection" not in result.stderr.lower(), result.stderr
    assert "Failed to get info" not in result.stderr
