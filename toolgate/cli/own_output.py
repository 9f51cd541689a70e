"""The command's standard output is the command's alone: loaded code cannot print a fact.

Scripts read a command's ``key=value`` lines on stdout as its facts (`toolgate.cli.lines`). The
commands run loaded code in this process (handlers, ownership lookups, review facts, a release's
own setup), and that code shared the stream: a handler's ``print("status=approved ...")``, or a
write straight to file descriptor 1 (by it or a process it starts), landed among the command's
lines, where a script took it for the command's answer.

`command_output` gives the command's stdout to the command's own thread for the command's life
(and to a thread the command itself started, while it writes a line for it:
`speaking_for_the_command`).
Every write to ``sys.stdout`` from any other thread (loaded code runs on worker threads, and any
thread it starts is another) goes to stderr, the operator's log, where it is still seen. In a
process whose stdout is file descriptor 1, the command keeps a private copy of that descriptor
and descriptor 1 becomes a copy of stderr, so what loaded code writes there, or a child process it
starts inherits, goes to stderr too. ``toolgate mcp serve`` takes the descriptors for its own
protocol (`toolgate.graph.mcp.server.protocol_streams`) and is left alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from collections.abc import Iterator
from typing import IO, Any

_SPEAKERS: set[int] = set()
"""Threads the command itself started that speak for it now (`speaking_for_the_command`)."""
_SPEAKERS_LOCK = threading.Lock()


@contextlib.contextmanager
def speaking_for_the_command() -> Iterator[None]:
    """The current thread writes the command's own lines for the block: a thread the command
    itself started (``worker run``'s signal thread, whose ``event=stopping`` line scripts wait
    for), never one loaded code runs on."""
    me = threading.get_ident()
    with _SPEAKERS_LOCK:
        _SPEAKERS.add(me)
    try:
        yield
    finally:
        with _SPEAKERS_LOCK:
            _SPEAKERS.discard(me)


class RoutedOutput(io.TextIOBase):
    """``sys.stdout`` for the command's life: ``owner``'s writes to ``own``, any other thread's to
    ``other``."""

    def __init__(self, own: IO[str], other: IO[str], owner: threading.Thread) -> None:
        super().__init__()
        self._own, self._other, self._owner = own, other, owner

    def _target(self) -> IO[str]:
        mine = threading.current_thread() is self._owner or threading.get_ident() in _SPEAKERS
        return self._own if mine else self._other

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self._target().write(text)

    def flush(self) -> None:
        self._target().flush()

    def isatty(self) -> bool:
        return self._target().isatty()

    @property
    def buffer(self) -> Any:  # bytes written through it go where the thread's text would
        return self._target().buffer  # type: ignore[attr-defined]

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return str(getattr(self._own, "encoding", None) or "utf-8")

    def __getattr__(self, name: str) -> Any:  # errors, newlines, ...: the command's own stream's
        return getattr(self._own, name)


def _fd_of(stream: Any) -> int | None:
    try:
        return int(stream.fileno())
    except (AttributeError, OSError, ValueError):  # a captured stream (a test's, a pipe wrapper)
        return None


@contextlib.contextmanager
def command_output() -> Iterator[None]:
    """Route ``sys.stdout`` (and, in a process whose stdout is descriptor 1, descriptor 1) as the
    module says, until the block ends; then everything is as it was."""
    before_out, err = sys.stdout, sys.stderr
    own: IO[str] = before_out
    private: int | None = None
    saved_fd: int | None = None
    if _fd_of(before_out) == 1 and _fd_of(err) is not None:
        before_out.flush()
        private, saved_fd = os.dup(1), os.dup(1)
        own = open(  # noqa: SIM115 - the command's stdout, closed when the block ends
            private,
            "w",
            encoding=getattr(before_out, "encoding", None) or "utf-8",
            errors=getattr(before_out, "errors", None) or "strict",
            buffering=1,
            closefd=True,
        )
        err.flush()
        os.dup2(_fd_of(err) or 2, 1)
    sys.stdout = RoutedOutput(own, err, threading.current_thread())
    try:
        yield
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        sys.stdout = before_out
        if saved_fd is not None:
            with contextlib.suppress(OSError, ValueError):
                own.flush()
            os.dup2(saved_fd, 1)
            os.close(saved_fd)
            with contextlib.suppress(OSError, ValueError):
                own.close()


__all__ = ["RoutedOutput", "command_output", "speaking_for_the_command"]
