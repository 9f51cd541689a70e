"""Streamed tool output: the chunks a long read yields, sent to the end user while it runs.

The chapter's §11.4: the model still consumes one complete, bounded tool result, but the person
watching should not wait for the whole of a long file read or log tail. A read handler may be a
generator: every value it yields is a chunk, and the value it returns is its result (validated,
reduced and bounded like any other). Each chunk goes to LangGraph's custom stream (the node's
``runtime.stream_writer``; a client sees it with ``stream_mode="custom"``) as::

    {"toolgate": "tool_output", "call_id": ..., "tool": ..., "attempt": 1, "seq": 0,
     "chunk": "...", "truncated": false}

Redacted (`toolgate.policy.output.redact_text`, like everything a client is shown) and bounded:
all chunks of one call together carry at most the tool's ``max_output_bytes``; the chunk that
reaches the bound is cut and says ``truncated``, and later ones are dropped (the handler still
runs to its result). A read retried after a failure (`toolgate.policy.retry.ReadRetry`) streams
again under the next ``attempt`` number, so a client discards the earlier attempt's chunks.
Secrets are redacted per chunk: a handler should yield whole lines.

An attempt given up (timed out, and retried or answered) cannot be stopped while it runs, but a
generator yields control at every chunk: its next chunk is never sent (it would go out under
the later attempt's number, or after the call was answered) and the generator is closed there,
so a handler that yields forever past its timeout ends instead of holding its worker and its
handler slot for good.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections.abc import Callable
from typing import Any

from toolgate.policy.output import redact, redact_text

STREAM_EVENT = "tool_output"
"""The ``toolgate`` tag of a streamed chunk in the custom stream."""


class OutputStream:
    """Where one read call's chunks go: bounded, redacted, numbered."""

    def __init__(self, writer: Callable[[Any], None], *, call_id: str, tool: str, max_bytes: int) -> None:
        self.writer = writer
        self.call_id = call_id
        self.tool = tool
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self.attempt = 1
        self.seq = 0
        self.sent_bytes = 0
        self.closed = False

    def next_attempt(self) -> None:
        """The read is tried again: number its chunks afresh, with a full budget."""
        with self._lock:
            self.attempt += 1
            self.seq = 0
            self.sent_bytes = 0

    def close(self) -> None:
        """The call is answered: no attempt sends anything more."""
        with self._lock:
            self.closed = True

    def _current(self, attempt: int | None) -> bool:
        """Whether ``attempt`` (None: whichever runs) may still send: not given up, call not
        answered (under the lock)."""
        return not self.closed and (attempt is None or attempt == self.attempt)

    def emit(self, chunk: Any, attempt: int | None = None) -> bool:
        """Send one chunk the handler yielded under ``attempt`` (dropped once the call's budget is
        spent). False: ``attempt`` was given up or the call answered, nothing sent (stop it)."""
        with self._lock:
            if not self._current(attempt):
                return False
            if self.sent_bytes >= self.max_bytes:
                return True
        text = chunk if isinstance(chunk, str) else json.dumps(redact(chunk), ensure_ascii=False, default=str)
        text = redact_text(text)
        with self._lock:
            if not self._current(attempt):
                return False
            budget = self.max_bytes - self.sent_bytes
            if budget <= 0:
                return True
            data = text.encode("utf-8")
            truncated = len(data) > budget
            if truncated:
                text = data[:budget].decode("utf-8", errors="ignore")
                budget = 0
            self.sent_bytes = self.max_bytes if truncated else self.sent_bytes + len(data)
            event = {
                "toolgate": STREAM_EVENT,
                "call_id": self.call_id,
                "tool": self.tool,
                "attempt": self.attempt,
                "seq": self.seq,
                "chunk": text,
                "truncated": truncated,
            }
            self.seq += 1
        self.writer(event)
        return True


class AttemptGivenUp(Exception):
    """A streaming attempt yielded after it was given up (timed out) or its call was answered:
    its generator was closed; nobody waits for its result."""


def drained(handler: Callable[..., Any], stream: OutputStream | None) -> Callable[..., Any]:
    """``handler`` as a plain function: when a call returns a generator, its chunks are sent to
    ``stream`` (or dropped without one) and its return value is the result; any other result is
    returned as it is. Judged per call, so a wrapped generator handler streams too. Built once per
    attempt: its chunks go out under the attempt running now, and once that attempt is given up
    the generator is closed at its next chunk (`AttemptGivenUp`)."""
    attempt = stream.attempt if stream is not None else None

    def run(*args: Any) -> Any:
        chunks = handler(*args)
        if not inspect.isgenerator(chunks):
            return chunks
        while True:
            try:
                chunk = next(chunks)
            except StopIteration as stop:
                return stop.value
            if stream is not None and not stream.emit(chunk, attempt):
                chunks.close()
                raise AttemptGivenUp(f"attempt {attempt} was given up")

    return run


__all__ = ["STREAM_EVENT", "AttemptGivenUp", "OutputStream", "drained"]
