"""Handler calls run on reused daemon worker threads (no thread start per read).

A call only goes to an idle worker or a new one, never behind a busy one, so a hung handler
delays nothing else; a hung handler never holds up the process's exit; a forked child starts
with its own workers.
"""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import threading
from typing import Any

from toolgate.tools import loaded_code


def test_sequential_calls_reuse_workers() -> None:
    threads: list[int] = []
    for _ in range(40):
        loaded_code.run_with_timeout(lambda: threads.append(threading.get_ident()), 30.0)
    assert len(threads) == 40
    assert len(set(threads)) <= 2  # the previous worker may still be finishing; never one per call


def test_a_hung_handler_delays_no_other_call() -> None:
    release = threading.Event()
    hung = loaded_code.start(release.wait, 60)
    try:
        for n in range(5):
            assert loaded_code.run_with_timeout(lambda n=n: n * 2, 30.0) == n * 2
        assert not hung.done()
    finally:
        release.set()
    assert hung.result(timeout=30) is True


def test_the_callers_context_reaches_the_handler() -> None:
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("trace", default="none")
    var.set("trace-1")
    assert loaded_code.run_with_timeout(var.get, 30.0) == "trace-1"
    var.set("trace-2")
    assert loaded_code.run_with_timeout(var.get, 30.0) == "trace-2"  # a reused worker, the new context


def _child(queue: Any) -> None:
    queue.put(loaded_code.run_with_timeout(lambda: "from the child", 30.0))


def test_a_forked_child_gets_its_own_workers() -> None:
    loaded_code.run_with_timeout(lambda: None, 30.0)  # the parent now has an idle worker
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get(timeout=10) == "from the child"


def test_a_hung_handler_never_holds_up_the_process_exit() -> None:
    code = (
        "import threading\n"
        "from toolgate.tools import loaded_code\n"
        "loaded_code.start(threading.Event().wait)\n"  # never returns
        "print('exiting')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "exiting"
