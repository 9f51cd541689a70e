"""The one boundary between the gateway and the code a release loads into it.

Handlers, status checks, ownership checks and resolvers, review-detail lookups and MCP sessions
are written by a tool's team, not by the gateway's, and the gateway treats them as it treats the
model: whatever they raise, return or block on, one call fails with a stable code and the run goes
on. Each call runs here, on a pooled daemon worker thread, under a deadline:

- a timeout is the caller's `TimeoutError` (the thread cannot be killed and keeps running; for a
  write the outcome is then unknown and `toolgate.graph.delivery.overruns` keeps its lease alive),
  but none of its records units of work stays open longer than its timeout, so a hung handler
  holds no database lock past it (`toolgate.store.records_expiry`);
- any `BaseException` the code raises (``SystemExit``, ``KeyboardInterrupt``, one of its own) is
  raised in *its* worker thread, where it can never be the process's own shutdown (signals reach
  only the main thread): it becomes `HandlerAborted`, that call's failure;
- every call runs under a `toolgate.store.handler_access.HandlerAccess` (read-only unless its
  caller says it writes: only an approved write's handler does; lookups read), and a handler
  with an egress capability runs confined to its allowlist (`confined`).

Lookups (ownership, a tool's semantic check, review details) get `LOOKUP_TIMEOUT_S` through
`lookup`: a slow resolver or check refuses its call instead of stalling dispatch and the claim.
Several ownership lookups of one call travel in one hop (`start_checked`), and a read's lookups
at execute travel with its handler: one hop to a worker instead of one per lookup plus one for
the handler, each lookup still under its own deadline and the handler under its own. What the
code's exceptions *say* is the caller's to redact (`toolgate.policy.output`): nothing raised here
is ever shown raw.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import os
import queue
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from toolgate.errors import CapabilityDenied, ToolDrifted, ToolExecutionError
from toolgate.refusal_codes import lookup as catalogued
from toolgate.store.handler_access import HandlerAccess, handler_access
from toolgate.tools.egress import EGRESS_SCOPE, Egress
from toolgate.tools.handler import HandlerContext


class HandlerAborted(Exception):
    """A handler raised a `BaseException` that is not an `Exception` (``SystemExit``,
    ``KeyboardInterrupt``, its own subclass). Callers treat it as any unclassified handler crash:
    a read fails with ``server_error``, a write's outcome is ``unknown`` and reconciled."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the handler raised {kind}")
        self.kind = kind


_OWN_ERRORS: frozenset[type[BaseException]] = frozenset({ToolExecutionError, CapabilityDenied, ToolDrifted})
"""The classified failures trusted code raises inside a call (a capability's refusal, a remote
tool's drift) or that loaded code may raise itself, whose fields every caller reads."""
_CAUSE = BaseException.__dict__["__cause__"]
_CONTEXT = BaseException.__dict__["__context__"]
_ARGS = BaseException.__dict__["args"]
"""The chain and arguments of an exception, read without its own code (a subclass may override them)."""


def _handler_kind(kind: str) -> str:
    """``kind`` when the catalog lists it as a handler's failure, else ``server_error``."""
    entry = catalogued("execution", kind)
    return kind if entry is not None and entry.owner == "handler" else "server_error"


def _text(value: object) -> str:
    """``value``'s characters as a plain ``str`` (never its own ``__str__``), or ""."""
    return str.__str__(value) if isinstance(value, str) else ""


def denial_in_chain(exc: BaseException) -> CapabilityDenied | None:
    """The first `CapabilityDenied` of trusted code's class in ``exc``'s chain (read without its code)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if type(current) is CapabilityDenied:
            return current
        seen.add(id(current))
        current = _CAUSE.__get__(current) or _CONTEXT.__get__(current)
    return None


def plain_failure(exc: Exception) -> Exception:
    """What loaded code raised, as trusted code may read it, made on the code's own worker thread:
    whatever runs here is under the call's deadline, never in the caller's thread.

    A classified failure (`ToolExecutionError`) is what callers read fields of and branch on by
    type. One of trusted code's classes keeps its class, its text fields made plain characters (a
    ``str`` subclass's methods are loaded code's); any other subclass, a hostile one with
    properties that hang or raise ``SystemExit``, or one of the gateway's own control-flow
    failures the code forged (a busy slot, an open breaker, a refused delegation: raised only by
    trusted code outside a call), is rebuilt as a plain `ToolExecutionError` (a `CapabilityDenied`
    as one) from fields read here, chained to the refusal it wrapped, if any; a kind the catalog
    does not list for handlers is ``server_error``, never retryable, before its breaker judges
    it (as `toolgate.policy.output.handler_failure` reports it). A handler's own
    ``TimeoutError`` becomes a plain one. Anything else is returned as it is: callers read only
    its class's name, and its chain through `denial_in_chain`."""
    if isinstance(exc, ToolExecutionError):
        if type(exc) in _OWN_ERRORS:
            for name, value in list(vars(exc).items()):
                if isinstance(value, str) and type(value) is not str:
                    setattr(exc, name, _text(value))
            if type(exc.kind) is not str:
                exc.kind = "server_error"
            if type(exc.message) is not str:
                exc.message = ""
            exc.retryable = exc.retryable is True
            exc.args = (exc.message,)  # what ``str(exc)`` reads: its message, as every class sets it
            if type(exc) is ToolExecutionError and _handler_kind(exc.kind) != exc.kind:
                exc.kind, exc.retryable = "server_error", False  # made up: unclassified (its breaker counts it)
            return exc
        message = _text(getattr(exc, "message", ""))
        plain: ToolExecutionError
        if isinstance(exc, CapabilityDenied):
            plain = CapabilityDenied(_text(getattr(exc, "capability", "")), _text(getattr(exc, "target", "")), message)
        else:
            kind = _text(getattr(exc, "kind", ""))
            retryable = getattr(exc, "retryable", False) is True and _handler_kind(kind) == kind
            plain = ToolExecutionError(_handler_kind(kind), message, retryable=retryable)
        plain.__cause__ = denial_in_chain(exc)
        return plain
    if isinstance(exc, TimeoutError):
        args = _ARGS.__get__(exc)
        return TimeoutError(_text(args[0]) if args else "")
    return exc


class _Worker:
    """One daemon thread that runs handler calls handed to it, one at a time."""

    def __init__(self, pool: _WorkerPool) -> None:
        self.inbox: queue.SimpleQueue[
            tuple[contextvars.Context, Callable[..., Any], tuple[Any, ...], Any]
        ] = queue.SimpleQueue()
        self._pool = pool
        threading.Thread(target=self._loop, name="toolgate-handler", daemon=True).start()

    def _loop(self) -> None:
        while True:
            context, fn, args, future = self.inbox.get()
            try:
                future.set_result(context.run(fn, *args))
            except Exception as exc:  # handed to whoever waits on the future, as it may read it
                future.set_exception(_readable(exc))
            except BaseException as exc:  # the handler's own, never this process's
                # SystemExit, KeyboardInterrupt or a BaseException of its own raised by the handler
                # in this worker thread (signals reach only the main thread): that call's failure,
                # never the caller's run or the process
                future.set_exception(HandlerAborted(type(exc).__name__))
            del context, fn, args, future  # nothing of this call outlives it in an idle worker
            if not self._pool.give_back(self):
                return


def _readable(exc: Exception) -> Exception:
    """`plain_failure`, or `HandlerAborted` when reading the failure itself raised (in this thread)."""
    try:
        return plain_failure(exc)
    except BaseException as broken:
        return HandlerAborted(type(broken).__name__)


class _WorkerPool:
    """Daemon threads reused across handler calls: starting a thread per call costs more than
    many reads. A call only ever goes to an idle worker (or a new one), never behind a busy one,
    so a hung handler delays nothing else; daemon threads never hold up the process's exit; a
    forked child starts with no workers (its parent's threads do not exist there)."""

    MAX_IDLE = 16

    def __init__(self) -> None:
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def worker(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker(self)

    def give_back(self, worker: _Worker) -> bool:
        """Keep ``worker`` for the next call (False: enough are idle, it ends)."""
        with self._lock:
            if len(self._idle) < self.MAX_IDLE:
                self._idle.append(worker)
                return True
        return False

    def forget(self) -> None:
        """After a fork: the idle workers are threads of the parent."""
        self._idle = []
        self._lock = threading.Lock()


_POOL = _WorkerPool()
os.register_at_fork(after_in_child=_POOL.forget)


def start(
    fn: Callable[..., Any], *args: Any, access: HandlerAccess | None = None
) -> concurrent.futures.Future[Any]:
    """Run ``fn(*args)`` on an idle daemon worker thread (a new one when none is idle); a hung
    handler never blocks the process's exit. The call runs `confined`: under ``access`` (a fresh
    read-only `HandlerAccess` when None: a call nobody said may write cannot) and, when its
    context (the last argument) has an egress capability, to its allowlist."""
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()  # the caller's trace context follows the handler
    egress = args[-1].http if args and isinstance(args[-1], HandlerContext) else None
    scoped = (access if access is not None else HandlerAccess(), egress, fn, *args)
    _POOL.worker().inbox.put((context, confined, scoped, future))
    return future


class NotStarted(Exception):
    """The handler of a `start_checked` call did not start: a lookup in front of it failed or did
    not allow it, or outran its deadline (`wait_checked`)."""


class CheckedCall:
    """The lookups a handler call waits behind on its worker (`start_checked`): one answer each,
    and how far the worker has come (which lookup runs, or the handler, and since when), by which
    `wait_checked` holds each to its own deadline. The handler starts only once every answer
    allowed it and its caller has not given up."""

    def __init__(self, count: int) -> None:
        self.answers: list[concurrent.futures.Future[Any]] = []
        """Each lookup's answer (what it returned or raised), in order."""
        for _ in range(count):
            answer: concurrent.futures.Future[Any] = concurrent.futures.Future()
            answer.set_running_or_notify_cancel()
            self.answers.append(answer)
        self._lock = threading.Lock()
        self._given_up = False
        self._stage = 0  # the lookup running (or next to run); ``count``: the handler
        self._since = time.monotonic()

    def stage(self) -> tuple[int, float]:
        """``(stage, since)``: the lookup running (``len(answers)``: the handler) and when it started."""
        with self._lock:
            return self._stage, self._since

    @property
    def started(self) -> bool:
        """Whether the handler has started (every lookup answered and allowed it)."""
        with self._lock:
            return self._stage >= len(self.answers)

    def give_up(self) -> bool:
        """Stop the handler from starting (a lookup outran its deadline). False: too late, every
        lookup has answered and allowed the call, and the handler has started."""
        with self._lock:
            if self._stage >= len(self.answers):
                return False
            self._given_up = True
            return True

    def _enter(self, stage: int) -> bool:
        """The worker moves on to ``stage`` (False: its caller gave up, nothing more runs)."""
        with self._lock:
            if self._given_up:
                return False
            self._stage, self._since = stage, time.monotonic()
            return True


def _checked(
    call: CheckedCall,
    lookups: Sequence[Callable[[], Any]],
    allows: Callable[[int, Any], bool],
    access: HandlerAccess,
    egress: Egress | None,
    fn: Callable[..., Any],
    *args: Any,
) -> Any:
    """On the worker: each lookup in order, as `lookup` runs it (read-only, no egress), its answer
    handed over at once; then, when every answer allowed it and the caller still waits,
    ``fn(*args)`` `confined`. Anything a lookup raises is its answer, never this thread's end."""
    for index, (lookup_fn, answer) in enumerate(zip(lookups, call.answers, strict=True)):
        if not call._enter(index):
            break
        try:
            value = confined(HandlerAccess(timeout_s=LOOKUP_TIMEOUT_S), None, lookup_fn)
        except Exception as exc:
            answer.set_exception(_readable(exc))
            break
        except BaseException as exc:  # the lookup's own (see `_Worker._loop`), never this process's
            answer.set_exception(HandlerAborted(type(exc).__name__))
            break
        answer.set_result(value)
        try:
            allowed = allows(index, value)
        except Exception:  # the caller's judgement on its own thread decides; here: stop
            allowed = False
        if not allowed:
            break
    else:
        if call._enter(len(call.answers)):
            return confined(access, egress, fn, *args)
    for answer in call.answers:  # the lookups that never ran
        if not answer.done():
            answer.set_exception(NotStarted())
    raise NotStarted()


def start_checked(
    lookups: Sequence[Callable[[], Any]],
    allows: Callable[[int, Any], bool],
    fn: Callable[..., Any],
    *args: Any,
    access: HandlerAccess | None = None,
) -> tuple[CheckedCall, concurrent.futures.Future[Any]]:
    """Like `start`, with ``lookups`` run first on the same worker: one hop for all of them and
    the handler. ``allows(index, answer)`` (trusted and pure: the caller's own judgement of an
    answer) stops the worker at the first answer that does not allow the call; the handler's
    future then raises `NotStarted`. Wait for it with `wait_checked`."""
    call = CheckedCall(len(lookups))
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()
    egress = args[-1].http if args and isinstance(args[-1], HandlerContext) else None
    scoped = (call, lookups, allows, access if access is not None else HandlerAccess(), egress, fn, *args)
    _POOL.worker().inbox.put((context, _checked, scoped, future))
    return call, future


def wait_checked(
    call: CheckedCall, future: concurrent.futures.Future[Any], lookup_timeout_s: float, timeout_s: float
) -> Any:
    """The handler's result of a `start_checked` call, waited for once (the caller sleeps until the
    worker is done, not once per lookup): each lookup under ``lookup_timeout_s`` from its own
    start, the handler under ``timeout_s`` from its own. `NotStarted` when the handler did not
    start (a lookup failed, refused or overran: the caller judges `CheckedCall.answers`, one
    still unanswered having overrun); `TimeoutError` when the handler overran."""
    while True:
        stage, since = call.stage()
        now = time.monotonic()
        if stage < len(call.answers):
            left = since + lookup_timeout_s - now
            if left <= 0:
                if call.give_up():
                    raise NotStarted()
                continue  # the handler started as the lookup's time ran out: its own deadline now
            # a handler not started yet ends its time no sooner than now + timeout_s
            remaining = min(left, timeout_s)
        else:
            remaining = since + timeout_s - now
            if remaining <= 0:
                raise TimeoutError(f"handler exceeded {timeout_s}s")
        try:
            return future.result(timeout=remaining)
        except concurrent.futures.TimeoutError:
            if future.done():  # the handler's own `TimeoutError` (see `wait`)
                raise


def first_denial(access: HandlerAccess, egress: Egress | None) -> CapabilityDenied | None:
    """The refusal that fails a call: its first egress refusal, else its first database one."""
    if egress is not None and egress.denials:
        return egress.denials[0]
    return access.denials[0] if access.denials else None


def confined(access: HandlerAccess, egress: Egress | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` with ``access`` as the thread's `HANDLER_ACCESS` (what it may do to the
    databases: `toolgate.store.handler_access`) and ``egress`` as its `EGRESS_SCOPE` (the socket
    audit hook refuses every other host). A refusal of either fails the call even when the handler
    swallowed the `CapabilityDenied` or raised something else instead."""
    token = EGRESS_SCOPE.set(egress) if egress is not None else None
    try:
        with handler_access(access):
            result = fn(*args)
    except BaseException as exc:
        denied = first_denial(access, egress)
        if denied is not None and exc is not denied:
            raise denied from exc
        raise
    finally:
        if token is not None:
            EGRESS_SCOPE.reset(token)
    denied = first_denial(access, egress)
    if denied is not None:
        raise denied
    return result


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


def run_with_timeout(
    fn: Callable[..., Any], timeout_s: float, *args: Any, access: HandlerAccess | None = None
) -> Any:
    """``fn(*args)`` under ``timeout_s`` and ``access`` (reads and checks: no lease to keep; a
    read-only access bounded by ``timeout_s`` when None)."""
    return wait(start(fn, *args, access=access if access is not None else HandlerAccess(timeout_s=timeout_s)), timeout_s)


LOOKUP_TIMEOUT_S = 5.0
"""How long an ownership check, a resolver or a review-detail lookup may take: they run at
dispatch, again before the claim and whenever a proposal is shown, so a slow one would stall every
call that names a resource. Past it the call is refused (retryable), never waited for."""


def lookup(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` as a lookup: on a worker thread, under `LOOKUP_TIMEOUT_S` (read at each call,
    so an operator or a test can change it). Raises `TimeoutError`, `HandlerAborted` or what
    ``fn`` raised."""
    return run_with_timeout(fn, LOOKUP_TIMEOUT_S, *args)


__all__ = [
    "LOOKUP_TIMEOUT_S",
    "CheckedCall",
    "HandlerAborted",
    "NotStarted",
    "confined",
    "denial_in_chain",
    "first_denial",
    "lookup",
    "plain_failure",
    "run_with_timeout",
    "start",
    "start_checked",
    "wait",
    "wait_checked",
]
