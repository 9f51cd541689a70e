"""Handlers as an evaluation sees them: counted, their effects ledgered, and faults injected.

Each spec of the release under test gets one wrapped handler (one ``replace``: building a spec
validates its schemas, the main cost of setting up a case), innermost first:

1. the ledger records every *completed* handler run of a write by its operation key. Two
   completions for one key is a duplicate effect, whatever the downstream would have deduped;
2. a fault (`FaultKind`), when the case injects one for that tool;
3. the ledger counts the invocation per tool (as `toolgate.testing.HandlerCounter` does).

Faults raise ordinary connection errors, never ``TimeoutError``: a handler that raises
``TimeoutError`` itself is indistinguishable, to `toolgate.graph.delivery.loaded_code.wait`, from its own wait
timing out (``concurrent.futures.TimeoutError`` is ``TimeoutError``), so it would be waited on
until the deadline. An unknown outcome is what both produce, and that is what the cases test.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pydantic import BaseModel

from toolgate.errors import ToolExecutionError
from toolgate.evals.fixtures import Fault
from toolgate.tools.spec import HandlerContext, ToolSpec

Handler = Callable[[Any, HandlerContext], Any]


class EffectLedger:
    """Handler invocations per tool and completed write-handler runs per operation key (thread-safe)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        """Invocations per tool, counted before the handler (or its fault) runs."""
        self.completions: Counter[str] = Counter()
        """Completed runs per operation key (writes only: reads carry no key)."""
        self._lock = threading.Lock()

    def completing(self, handler: Handler) -> Handler:
        """``handler``, recording each completed run that carries an operation key."""

        def ledgered(args: Any, ctx: HandlerContext) -> Any:
            result = handler(args, ctx)
            if ctx.operation_key:
                with self._lock:
                    self.completions[ctx.operation_key] += 1
            return result

        return ledgered

    def counting(self, name: str, handler: Handler) -> Handler:
        """``handler``, counting each invocation of tool ``name``."""

        def counted(args: Any, ctx: HandlerContext) -> Any:
            with self._lock:
                self.calls[name] += 1
            return handler(args, ctx)

        return counted

    def duplicates(self) -> int:
        """Completions beyond the first, summed over operation keys (must be 0)."""
        return sum(n - 1 for n in self.completions.values() if n > 1)


OVERSIZED = 256 * 1024
"""Characters an ``oversized_result`` adds: far past any output bound a release may declare."""


def _oversized(result: Any) -> Any:
    """``result`` with its longest string field grown by `OVERSIZED` characters (unchanged
    when it has none: there is nothing a bound could cut)."""
    data = result.model_dump() if isinstance(result, BaseModel) else result
    if not isinstance(data, dict):
        return result
    strings = [key for key, value in data.items() if isinstance(value, str)]
    if not strings:
        return result
    longest = max(strings, key=lambda key: len(data[key]))
    return {**data, longest: data[longest] + "x" * OVERSIZED}


def _faulty(handler: Handler, kind: str) -> Handler:
    """``handler`` failing the way ``kind`` says (each fault fires once, then the handler is healthy)."""
    fired = threading.Event()

    def faulty(args: Any, ctx: HandlerContext) -> Any:
        if kind == "oversized_result":
            return _oversized(handler(args, ctx))
        if fired.is_set():
            return handler(args, ctx)
        fired.set()
        if kind == "lost_response":
            handler(args, ctx)
            raise ConnectionResetError("the connection dropped after the request was sent")
        if kind == "crash_before_effect":
            raise ConnectionResetError("the connection dropped before the request was sent")
        raise ToolExecutionError("server_error", "the downstream system answered 503", retryable=True)

    return faulty


HANDLER_FAULTS = frozenset({"lost_response", "crash_before_effect", "server_error", "oversized_result"})


def instrument(specs: Sequence[ToolSpec], faults: Sequence[Fault], ledger: EffectLedger) -> list[ToolSpec]:
    """The specs with the ledger and the case's faults around each handler (see the module docstring)."""
    by_tool = {f.tool: f.kind for f in faults if f.kind in HANDLER_FAULTS and f.tool}
    wrapped = []
    for spec in specs:
        handler = ledger.completing(spec.handler)
        if spec.name in by_tool:
            handler = _faulty(handler, by_tool[spec.name])
        wrapped.append(replace(spec, handler=ledger.counting(spec.name, handler)))
    return wrapped


__all__ = ["HANDLER_FAULTS", "EffectLedger", "instrument"]
