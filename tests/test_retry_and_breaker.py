"""Retry matrix, model-transport retries and circuit breakers: retries defined by failure state.

Retries use a fake clock and a recorded ``sleep`` so timing is exact; the round trip uses the real
``langchain-openai`` client against a stdlib HTTP server on 127.0.0.1 that answers like OpenAI. The
breaker's half-open probe is raced by real threads released together by a barrier.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import openai
import pytest
from pydantic import SecretStr

from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.policy.breaker import BreakerOpenError, BreakerRegistry, CircuitBreaker
from toolgate.policy.retry import (
    DEFAULT_RETRY_MATRIX,
    SEED_RETRY_POLICY,
    RetryDecision,
    RetryMatrix,
    call_with_retry,
    classify_model_error,
)

SEED_LINE = (
    "429=retry_with_jitter invalid_arguments=no_retry refusal=no_retry pending_approval=no_retry "
    "handler_timeout=reconcile duplicate_delivery=stored_result max_attempts=3"
)


class FakeClock:
    """A monotonic clock that only moves when told to (or when the fake ``sleep`` runs)."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


class MaxRng(random.Random):
    """Always draws the top of the jitter window, to make deadline arithmetic exact."""

    def uniform(self, a: float, b: float) -> float:
        return b


class StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code


class _Resp:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class ResponseError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code}")
        self.response = _Resp(status_code)


def failing(*errors: BaseException, result: Any = "ok") -> tuple[Any, list[int]]:
    """A callable that raises ``errors`` in order, then returns ``result``; and its call counter."""
    calls: list[int] = []

    def fn() -> Any:
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    return fn, calls


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://x/v1/chat/completions")


# --------------------------------------------------------------------------- the matrix


def test_default_matrix_is_the_seeds_policy_and_prints_the_seed_line() -> None:
    assert DEFAULT_RETRY_MATRIX.lines() == [SEED_LINE]
    assert DEFAULT_RETRY_MATRIX.model_transport.retry == (408, 429, 500, 502, 503, 504, 529)
    assert DEFAULT_RETRY_MATRIX.max_attempts == 3
    assert DEFAULT_RETRY_MATRIX.decision("model_transport").retry is True
    assert DEFAULT_RETRY_MATRIX.decision("invalid_tool_call") == RetryDecision(False, "needs_review")
    assert DEFAULT_RETRY_MATRIX.decision("refusal") == RetryDecision(False, "explain_or_review")
    assert DEFAULT_RETRY_MATRIX.decision("pending_approval") == RetryDecision(False, "wait")
    assert DEFAULT_RETRY_MATRIX.decision("handler_timeout") == RetryDecision(False, "reconcile_operation")
    assert DEFAULT_RETRY_MATRIX.decision("completed_operation") == RetryDecision(
        False, "return_stored_result"
    )
    with pytest.raises(ValueError, match="unknown failure class"):
        DEFAULT_RETRY_MATRIX.decision("approval_denied")
    assert RetryMatrix.from_mapping(DEFAULT_RETRY_MATRIX.to_mapping()) == DEFAULT_RETRY_MATRIX
    assert DEFAULT_RETRY_MATRIX.to_mapping() == json.loads(json.dumps(dict(SEED_RETRY_POLICY)))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"duplicate_delivery": {"retry": False, "fallback": "return_stored_result"}}, "unknown classes"),
        ({"refusal": None}, "missing classes"),
        ({"refusal": {"retry": True, "fallback": "explain_or_review"}}, "must never retry"),
        ({"handler_timeout": {"retry": True, "fallback": "reconcile_operation"}}, "must never retry"),
        ({"pending_approval": {"retry": False, "fallback": "approve"}}, "unknown fallback"),
        ({"model_transport": {"retry": [429, 400], "max_attempts": 3}}, "not transient"),
        ({"model_transport": {"retry": [429], "max_attempts": 0}}, "max_attempts"),
        ({"model_transport": {"retry": [429], "max_attempts": 3, "jitter": "none"}}, "unknown keys"),
    ],
)
def test_from_mapping_fails_closed(change: dict[str, Any], message: str) -> None:
    data = {k: dict(v) for k, v in SEED_RETRY_POLICY.items()}
    for key, value in change.items():
        if value is None:
            del data[key]
        else:
            data[key] = value
    with pytest.raises(ConfigurationError, match=message):
        RetryMatrix.from_mapping(data)


# --------------------------------------------------------------------------- classification


def test_classify_model_error_across_exception_shapes() -> None:
    def status_error(cls: type[openai.APIStatusError], status: int) -> openai.APIStatusError:
        response = httpx.Response(
            status, request=httpx.Request("POST", "http://x"), json={"error": {"message": "m"}}
        )
        return cls("m", response=response, body={"error": {"message": "m"}})  # type: ignore[arg-type]

    assert classify_model_error(status_error(openai.RateLimitError, 429)) == 429
    assert classify_model_error(status_error(openai.InternalServerError, 500)) == 500
    assert classify_model_error(status_error(openai.BadRequestError, 400)) == 400
    assert classify_model_error(openai.APITimeoutError(request=_request())) == 408  # type: ignore[arg-type]
    assert classify_model_error(openai.APIConnectionError(request=_request())) == 503  # type: ignore[arg-type]
    assert classify_model_error(httpx.ReadTimeout("slow", request=_request())) == 408
    assert classify_model_error(httpx.ConnectError("refused", request=_request())) == 503
    response = httpx.Response(502, request=_request())
    assert (
        classify_model_error(httpx.HTTPStatusError("bad gateway", request=_request(), response=response))
        == 502
    )
    assert classify_model_error(StatusError(504)) == 504
    assert classify_model_error(ResponseError(503)) == 503
    assert classify_model_error(ValueError("refusal: I can't help with that")) is None
    assert classify_model_error(ToolExecutionError("server_error", "down")) is None


# --------------------------------------------------------------------------- call_with_retry


def test_429_then_success_sleeps_once_within_the_first_window() -> None:
    clock = FakeClock()
    audit: list[tuple[int, int, float]] = []
    fn, calls = failing(StatusError(429))
    result = call_with_retry(
        fn, sleep=clock.sleep, clock=clock, rng=random.Random(7), on_retry=lambda *a: audit.append(a)
    )
    assert result == "ok"
    assert len(calls) == 2
    assert len(clock.sleeps) == 1 and 0.0 <= clock.sleeps[0] <= 0.5
    assert audit == [(1, 429, clock.sleeps[0])]


@pytest.mark.parametrize("status", [408, 500, 502, 503, 504, 529])
def test_transient_statuses_are_retried(status: int) -> None:
    clock = FakeClock()
    fn, calls = failing(StatusError(status), ResponseError(status))
    assert call_with_retry(fn, sleep=clock.sleep, clock=clock, rng=random.Random(1)) == "ok"
    assert len(calls) == 3 and len(clock.sleeps) == 2


@pytest.mark.parametrize(
    "error", [StatusError(400), StatusError(401), ResponseError(404), StatusError(422), ValueError("no")]
)
def test_non_transient_errors_propagate_at_once(error: Exception) -> None:
    clock = FakeClock()
    fn, calls = failing(error)
    with pytest.raises(type(error)) as raised:
        call_with_retry(fn, sleep=clock.sleep, clock=clock)
    assert raised.value is error
    assert len(calls) == 1 and clock.sleeps == []


def test_at_most_max_attempts_then_the_last_error() -> None:
    clock = FakeClock()
    errors = [StatusError(503), StatusError(502), StatusError(500), StatusError(429)]
    fn, calls = failing(*errors)
    with pytest.raises(StatusError) as raised:
        call_with_retry(fn, sleep=clock.sleep, clock=clock, rng=random.Random(3))
    assert raised.value is errors[2]
    assert len(calls) == 3 and len(clock.sleeps) == 2


def test_deadline_is_never_crossed_by_a_sleep() -> None:
    clock = FakeClock()
    deadline = clock.now + 0.6
    fn, calls = failing(StatusError(503), StatusError(503), StatusError(503))
    with pytest.raises(StatusError):
        call_with_retry(fn, deadline=deadline, sleep=clock.sleep, clock=clock, rng=MaxRng(), base_delay_s=0.5)
    # first retry sleeps 0.5 (ends at +0.5); the second would sleep 1.0 and end at +1.5 > +0.6
    assert len(calls) == 2 and clock.sleeps == [0.5]
    assert clock.now <= deadline

    clock = FakeClock()
    fn, calls = failing(StatusError(429))
    with pytest.raises(StatusError):
        call_with_retry(fn, deadline=clock.now + 0.1, sleep=clock.sleep, clock=clock, rng=MaxRng())
    assert len(calls) == 1 and clock.sleeps == []


def test_deadline_with_random_jitter_over_many_runs() -> None:
    rng = random.Random(2024)
    for _ in range(300):
        clock = FakeClock()
        deadline = clock.now + rng.uniform(0.0, 2.0)
        fn, _ = failing(*[StatusError(503)] * 5)
        with pytest.raises(StatusError):
            call_with_retry(fn, deadline=deadline, sleep=clock.sleep, clock=clock, rng=rng)
        assert clock.now <= deadline


def test_full_jitter_bounds_with_a_seeded_rng() -> None:
    matrix = RetryMatrix.from_mapping(
        {**SEED_RETRY_POLICY, "model_transport": {"retry": [429], "max_attempts": 6}}
    )
    rng = random.Random(12345)
    base, cap = 0.5, 2.0
    draws: dict[int, list[float]] = {k: [] for k in range(5)}
    seen: list[tuple[int, int, float]] = []
    for _ in range(400):
        seen.clear()
        fn, calls = failing(*[StatusError(429)] * 6)
        with pytest.raises(StatusError):
            call_with_retry(
                fn,
                matrix=matrix,
                base_delay_s=base,
                max_delay_s=cap,
                sleep=lambda s: None,
                rng=rng,
                on_retry=lambda *a: seen.append(a),
            )
        assert len(calls) == 6 and [a for a, _, _ in seen] == [1, 2, 3, 4, 5]
        for k, (_, status, delay) in enumerate(seen):
            assert status == 429
            draws[k].append(delay)
    for k, delays in draws.items():
        window = min(cap, base * 2**k)
        assert all(0.0 <= d <= window for d in delays)
        # full jitter: the whole window is used, not just its top (no "base + small jitter")
        assert min(delays) < 0.05 * window and max(delays) > 0.95 * window
        assert 0.4 * window < sum(delays) / len(delays) < 0.6 * window


def test_real_openai_errors_drive_the_loop() -> None:
    def make(cls: type[openai.APIStatusError], status: int) -> openai.APIStatusError:
        response = httpx.Response(status, request=httpx.Request("POST", "http://x"))
        return cls("e", response=response, body=None)  # type: ignore[arg-type]

    fn, calls = failing(make(openai.RateLimitError, 429), make(openai.InternalServerError, 500))
    assert call_with_retry(fn, sleep=lambda s: None) == "ok" and len(calls) == 3
    fn, calls = failing(make(openai.BadRequestError, 400))
    with pytest.raises(openai.BadRequestError):
        call_with_retry(fn, sleep=lambda s: None)
    assert len(calls) == 1


# --------------------------------------------------------------------------- real round trip


def _completion() -> dict[str, Any]:
    return {
        "id": "chatcmpl-toolgateretry0001",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": "gpt-4.1-mini-2025-04-14",
        "system_fingerprint": "fp_toolgate_retry",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello", "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
    }


def _error(status: int, message: str, type_: str, code: str | None) -> tuple[int, dict[str, Any]]:
    return status, {"error": {"message": message, "type": type_, "param": None, "code": code}}


RATE_LIMITED = _error(
    429,
    "Rate limit reached for gpt-4.1-mini on requests per min (RPM): Limit 3, Used 3, Requested 1.",
    "requests",
    "rate_limit_exceeded",
)
BAD_REQUEST = _error(400, "Invalid value for 'messages'.", "invalid_request_error", "invalid_value")


@contextmanager
def fake_openai(script: list[tuple[int, dict[str, Any]]]) -> Iterator[tuple[str, list[str]]]:
    """Answer POST /v1/chat/completions with ``script`` in order (the last entry repeats)."""
    paths: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with lock:
                paths.append(self.path)
                status, body = script[min(len(paths), len(script)) - 1]
            if self.path != "/v1/chat/completions":
                status, body = 404, {"error": {"message": "not found", "type": "invalid_request_error"}}
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("x-request-id", f"req_retry_{len(paths)}")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1", paths
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _llm(base_url: str) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model="gpt-4.1-mini", base_url=base_url, api_key=SecretStr("sk-test-fake-0000000000"), max_retries=0
    )


def test_chat_openai_429_then_success_round_trip() -> None:
    with fake_openai([RATE_LIMITED, (200, _completion())]) as (base_url, paths):
        llm = _llm(base_url)
        retried: list[tuple[int, int, float]] = []
        answer = call_with_retry(
            lambda: llm.invoke("hi"), sleep=lambda s: None, on_retry=lambda *a: retried.append(a)
        )
    assert answer.content == "hello"
    assert paths == ["/v1/chat/completions"] * 2
    assert [(a, s) for a, s, _ in retried] == [(1, 429)]


def test_chat_openai_400_is_not_retried() -> None:
    with fake_openai([BAD_REQUEST, (200, _completion())]) as (base_url, paths):
        llm = _llm(base_url)
        with pytest.raises(openai.BadRequestError) as raised:
            call_with_retry(lambda: llm.invoke("hi"), sleep=lambda s: None)
    assert raised.value.status_code == 400
    assert paths == ["/v1/chat/completions"]


# --------------------------------------------------------------------------- circuit breaker


def server_down() -> None:
    raise ToolExecutionError("server_error", "carrier API returned 503", retryable=False)


def caller_error() -> None:
    raise ToolExecutionError("caller_error", "no such tracking number")


def _trip(breaker: CircuitBreaker, n: int = 5) -> None:
    for _ in range(n):
        with pytest.raises(ToolExecutionError):
            breaker.call(server_down)


def test_opens_after_five_consecutive_failures_then_fails_fast() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", clock=clock)
    _trip(breaker, 4)
    assert breaker.state == "closed"
    with pytest.raises(TimeoutError):
        breaker.call(lambda: (_ for _ in ()).throw(TimeoutError("30s")))
    assert breaker.state == "open"

    calls: list[int] = []
    for _ in range(10):
        with pytest.raises(BreakerOpenError) as raised:
            breaker.call(lambda: calls.append(1))
    assert calls == []
    err = raised.value
    assert isinstance(err, ToolExecutionError)
    assert (err.kind, err.retryable) == ("server_error", False)
    assert err.message == "carrier is temporarily unavailable (circuit open)"
    snap = breaker.snapshot()
    assert snap["state"] == "open" and snap["rejected"] == 10 and snap["times_opened"] == 1
    assert snap["retry_in_s"] == pytest.approx(30.0)


def test_caller_errors_and_successes_do_not_trip() -> None:
    breaker = CircuitBreaker("carrier", clock=FakeClock())
    for _ in range(20):
        with pytest.raises(ToolExecutionError):
            breaker.call(caller_error)
    with pytest.raises(ValueError):
        breaker.call(lambda: int("x"))
    _trip(breaker, 4)
    assert breaker.call(lambda: 42) == 42  # a success resets the consecutive count
    _trip(breaker, 4)
    assert breaker.state == "closed" and breaker.snapshot()["consecutive_failures"] == 4
    _trip(breaker, 1)
    assert breaker.state == "open"
    # another breaker's refusal is not a failure of this dependency
    assert not breaker.counts_as_failure(BreakerOpenError("host", 1.0))


def _race_probe(breaker: CircuitBreaker, probe: Any, threads: int = 20) -> tuple[list[Any], int]:
    """Release ``threads`` callers together at a half-open breaker; ``probe`` blocks until all others
    were refused. Returns each caller's outcome and how often ``probe`` ran."""
    barrier = threading.Barrier(threads)
    started = threading.Event()
    release = threading.Event()
    refused = threading.Semaphore(0)
    ran: list[int] = []

    def blocking_probe() -> Any:
        ran.append(1)
        started.set()
        assert release.wait(10), "test harness never released the probe"
        return probe()

    def caller() -> Any:
        barrier.wait(10)
        try:
            return breaker.call(blocking_probe)
        except BreakerOpenError as exc:
            refused.release()
            return exc
        except ToolExecutionError as exc:
            return exc

    with ThreadPoolExecutor(max_workers=threads) as pool:
        futures = [pool.submit(caller) for _ in range(threads)]
        assert started.wait(10), "no caller got the probe"
        for _ in range(threads - 1):
            assert refused.acquire(timeout=10), "a caller was neither the probe nor refused"
        assert breaker.state == "half_open" and breaker.snapshot()["probe_in_flight"]
        release.set()
        outcomes = [f.result(timeout=10) for f in futures]
    return outcomes, len(ran)


def test_exactly_one_probe_after_reset_and_success_closes() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", clock=clock)
    _trip(breaker)
    clock.now += 29.9
    with pytest.raises(BreakerOpenError):
        breaker.acquire()
    clock.now += 0.1
    outcomes, probes = _race_probe(breaker, lambda: "tracked")
    assert probes == 1
    assert outcomes.count("tracked") == 1
    assert sum(isinstance(o, BreakerOpenError) for o in outcomes) == 19
    assert breaker.state == "closed" and breaker.snapshot()["consecutive_failures"] == 0
    assert breaker.call(lambda: "again") == "again"


def test_probe_failure_reopens_with_a_fresh_timer() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", clock=clock)
    _trip(breaker)
    clock.now += 30.0
    outcomes, probes = _race_probe(breaker, server_down)
    assert probes == 1
    assert sum(isinstance(o, BreakerOpenError) for o in outcomes) == 19
    assert sum(type(o) is ToolExecutionError for o in outcomes) == 1
    assert breaker.state == "open" and breaker.snapshot()["times_opened"] == 2
    clock.now += 29.0  # the timer restarted at the probe's failure, not at the first opening
    with pytest.raises(BreakerOpenError):
        breaker.acquire()
    clock.now += 1.0
    breaker.acquire()  # the next probe
    assert breaker.state == "half_open"
    breaker.record_success()
    assert breaker.state == "closed"


def test_released_probe_lets_the_next_caller_probe() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", clock=clock)
    _trip(breaker)
    clock.now += 30.0
    breaker.acquire()  # probe taken, e.g. before an execution claim ...
    with pytest.raises(BreakerOpenError):
        breaker.acquire()
    breaker.release()  # ... and the claim was lost: no verdict on the dependency
    assert breaker.state == "open"
    breaker.acquire()
    with pytest.raises(ToolExecutionError), breaker.reporting():
        caller_error()  # a caller error proves the dependency answers: the probe closes the breaker
    assert breaker.state == "closed"
    breaker.release()  # already reported: a no-op
    assert breaker.state == "closed"


def test_release_never_cancels_another_threads_probe() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", clock=clock)
    _trip(breaker)
    clock.now += 30.0
    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(breaker.acquire).result(timeout=10)  # another thread holds the probe
    breaker.release()  # e.g. a straggler's `finally` in this thread
    assert breaker.state == "half_open"
    with pytest.raises(BreakerOpenError):
        breaker.acquire()


def test_a_stragglers_failure_never_overrules_the_probe() -> None:
    """A call admitted before the breaker opened fails while the probe is out (redteam8): it is
    counted, but the probe decides, as a straggler's success is ignored while open and as the
    shared breaker decides. It reopened the breaker with a fresh timer, and the probe's success
    that followed was taken for a straggler's and ignored: the tool stayed refused 30 s more."""
    clock = FakeClock()
    breaker = CircuitBreaker("carrier", failure_threshold=1, clock=clock)
    admitted, fail_now, failed = threading.Event(), threading.Event(), threading.Event()

    def straggler() -> None:
        breaker.acquire()  # closed: admitted
        admitted.set()
        assert fail_now.wait(timeout=60)
        breaker.record_failure()  # its timeout, long after the breaker opened
        failed.set()

    with ThreadPoolExecutor(max_workers=1) as pool:
        slow = pool.submit(straggler)
        assert admitted.wait(timeout=60)
        with pytest.raises(ToolExecutionError), breaker.reporting():
            server_down()  # the threshold: open
        assert breaker.state == "open"
        clock.now += 30.0
        breaker.acquire()  # this thread's probe
        assert breaker.state == "half_open"
        fail_now.set()
        assert failed.wait(timeout=60)
        slow.result(timeout=60)
    assert breaker.state == "half_open"  # on the base: open again, the probe's timer restarted
    breaker.record_success()  # the probe's verdict
    assert breaker.state == "closed" and breaker.call(lambda: "up") == "up"


def test_registry_gives_one_breaker_per_key_across_threads() -> None:
    clock = FakeClock()
    registry = BreakerRegistry(failure_threshold=2, reset_timeout_s=5.0, clock=clock)
    barrier = threading.Barrier(16)

    def get(i: int) -> CircuitBreaker:
        barrier.wait(10)
        return registry.get("carrier" if i % 2 else "billing")

    with ThreadPoolExecutor(max_workers=16) as pool:
        got = list(pool.map(get, range(16)))
    assert len({id(b) for b in got}) == 2
    carrier = registry.get("carrier")
    _trip(carrier, 2)
    assert carrier.state == "open" and registry.get("billing").state == "closed"
    assert [s["name"] for s in registry.snapshot()] == ["billing", "carrier"]
    assert registry.snapshot()[1]["reset_timeout_s"] == 5.0
