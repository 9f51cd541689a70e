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

    def next_attempt(self) -> None:
        """The read is tried again: number its chunks afresh, with a full budget."""
        with self._lock:
            self.attempt += 1
            self.seq = 0
            self.sent_bytes = 0

    def emit(self, chunk: Any) -> None:
        """Send one chunk the handler yielded (dropped once the call's budget is spent)."""
        text = chunk if isinstance(chunk, str) else json.dumps(redact(chunk), ensure_ascii=False, default=str)
        text = redact_text(text)
        with self._lock:
            budget = self.max_bytes - self.sent_bytes
            if budget <= 0:
                return
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


def drained(handler: Callable[..., Any], stream: OutputStream | None) -> Callable[..., Any]:
    """``handler`` as a plain function: when a call returns a generator, its chunks are sent to
    ``stream`` (or dropped without one) and its return value is the result; any other result is
    returned as it is. Judged per call, so a wrapped generator handler streams too."""

    def run(*args: Any) -> Any:
        chunks = handler(*args)
        if not inspect.isgenerator(chunks):
            return chunks
        while True:
            try:
                chunk = next(chunks)
            except StopIteration as stop:
                return stop.value
            if stream is not None:
                stream.emit(chunk)

    return run


__all__ = ["STREAM_EVENT", "OutputStream", "drained"]
