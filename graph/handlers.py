"""Running one handler call: in a thread, under its timeout, with its claim's lease kept alive.

A Python thread cannot be killed, so a handler that overruns its timeout keeps running. For a
write that means the outcome is *unknown*, and also that the effect may still happen: while the
thread lives, its owner keeps renewing the claim's lease (from the store's clock), so no other
worker's recovery treats the operation as abandoned and delivers it a second time. When the
thread ends, its late outcome is handed to a callback and the lease is given up.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import threading
import time
from collections.abc import Callable
from typing import Any


def start(fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
    """Run ``fn(*args)`` in a new daemon thread (a hung handler never blocks the process's exit)."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()  # the caller's trace context follows the handler

    def run() -> None:
        try:
            future.set_result(context.run(fn, *args))
        except BaseException as exc:  # handed to whoever waits on the future
            future.set_exception(exc)

    threading.Thread(target=run, name="toolgate-handler", daemon=True).start()
    return future


def wait(
    future: concurrent.futures.Future[Any],
    timeout_s: float,
    *,
    heartbeat: Callable[[], object] | None = None,
    interval_s: float = 20.0,
) -> Any:
    """The handler's result, or `TimeoutError` after ``timeout_s``; ``heartbeat`` runs every
    ``interval_s`` while waiting (lease renewal)."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"handler exceeded {timeout_s}s")
        try:
            return future.result(timeout=min(remaining, interval_s) if heartbeat else remaining)
        except concurrent.futures.TimeoutError:
            # `concurrent.futures.TimeoutError` is the builtin `TimeoutError`: a handler that
            # raised one itself (``socket.timeout``) is finished, not still running
            if future.done():
                raise
            if heartbeat is not None and deadline - time.monotonic() > 0:
                heartbeat()


def run_with_timeout(fn: Callable[..., Any], timeout_s: float, *args: Any) -> Any:
    """``fn(*args)`` under ``timeout_s`` (reads: no lease to keep)."""
    return wait(start(fn, *args), timeout_s)


class Overruns:
    """Handler threads of this process that outlived their timeout, by operation key."""

    def __init__(self) -> None:
        self._futures: dict[str, concurrent.futures.Future[Any]] = {}
        self._lock = threading.Lock()

    def running(self, operation_key: str) -> bool:
        """True while the overrunning handler of ``operation_key`` in this process still runs."""
        with self._lock:
            future = self._futures.get(operation_key)
        return future is not None and not future.done()

    def watch(
        self,
        operation_key: str,
        future: concurrent.futures.Future[Any],
        *,
        renew: Callable[[], object],
        finished: Callable[[concurrent.futures.Future[Any]], None],
        interval_s: float,
    ) -> None:
        """Keep renewing the lease until ``future`` ends, then call ``finished(future)``."""
        with self._lock:
            self._futures[operation_key] = future

        def keep() -> None:
            while True:
                try:
                    future.result(timeout=interval_s)
                except concurrent.futures.TimeoutError:
                    if future.done():  # the handler's own TimeoutError: it has ended
                        break
                    renew()
                    continue
                except BaseException:
                    pass
                break
            try:
                finished(future)
            finally:
                with self._lock:
                    self._futures.pop(operation_key, None)

        threading.Thread(target=keep, name=f"toolgate-lease-{operation_key[:16]}", daemon=True).start()


__all__ = ["Overruns", "run_with_timeout", "start", "wait"]
