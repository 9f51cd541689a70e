"""Graceful shutdown of ``toolgate worker run``: the first SIGTERM/SIGINT stops claiming (the
delivery in flight finishes), a second one ends the process at once."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from typing import Any


def stop_on_signals(
    stop: threading.Event, on_stop: Callable[[str], None] = lambda name: None
) -> Callable[[], None]:
    """SIGTERM/SIGINT call ``on_stop`` with the signal's name, then set ``stop`` (the loop
    finishes its delivery in flight, then ends); a second signal ends the process at once (exit
    128 + signal). Returns a function restoring the old handlers. Both run on a short thread: a
    signal handler that took the event's lock (or stdout's) itself could deadlock with the main
    thread holding it."""
    received: list[int] = []

    def stopping(name: str) -> None:
        try:
            on_stop(name)  # first: its line comes before the loop's closing one
        finally:
            stop.set()

    def handle(signum: int, frame: Any) -> None:
        received.append(signum)
        if len(received) > 1:
            os._exit(128 + signum)
        name = signal.Signals(signum).name
        threading.Thread(target=stopping, args=(name,), name="toolgate-worker-stop", daemon=True).start()

    previous = {sig: signal.signal(sig, handle) for sig in (signal.SIGTERM, signal.SIGINT)}

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)

    return restore


__all__ = ["stop_on_signals"]
