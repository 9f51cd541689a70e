"""Handlers that outlive their timeout: their claims stay leased until they end.

A Python thread cannot be killed (`toolgate.tools.loaded_code`), so a write handler that overruns
its timeout keeps running and its effect may still happen (though no unit of work on its records
stays open longer than its timeout: `toolgate.store.records_expiry`). While the thread lives, its owner keeps
renewing the claim's lease (from the store's clock), so no other worker's recovery treats the
operation as abandoned and delivers it a second time. When the thread ends, its late outcome is
handed to a callback and the lease is given up.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable
from typing import Any


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


__all__ = ["Overruns"]
