"""The public test kit: a strict scripted chat model, counted handlers, and a running gateway
around them built by the composition root.

Tests, evaluations and benchmarks get a running gateway from `open_test_app`, which calls
`toolgate.graph.bootstrap.open_app` (the one root every CLI, server and worker process uses) with
the parts a test owns injected by keyword: the model, the store, the clock, the checkpointer and
the tools or release. Nothing here wires `build_gateway` or `build_graph` by hand, so a test runs
the same composition as production::

    from toolgate.testing import ScriptedChatModel, ai, open_test_app, tool_call

    model = ScriptedChatModel(responses=[ai("", tool_call("lookup_order", {"order_id": "O-1"})), ai("Done.")])
    app = open_test_app(tools=my_specs, policy=my_policy, model=model, data_dir=tmp_path)
    graph = app.compiled()  # an in-memory checkpointer unless one is given
    app.gateway_with(other_model)  # the same release around a second worker's model

- `open_test_app`: the store is a `Store` you own, a ``postgresql://`` URL, or an SQLite file in
  ``data_dir`` (a fresh temporary directory by default); the release is a reference
  (``ops-tools/1.1.0``, verified against its reviewed manifest as in production) or a `Release`,
  or given tools (specs or a built `Registry`, e.g. with `HandlerCounter`'s counting handlers)
  with their policy, served as given;
- `ScriptedChatModel` replays the responses it was given, records every request (messages,
  bound tools and request options), fails loudly on a call nobody scripted, and checks with
  `assert_complete()` that every scripted response was consumed. It never cycles silently;
- `ShiftableClock`: a frozen process clock a test moves on explicitly (handler deadlines);
- `HandlerCounter`: handlers that count their real invocations;
- `store_with_people`, `review`, `deliver` (`toolgate.testing_kit`): a store with the people who
  act in it, a reviewer's decision and a worker delivery, by public names.
"""

from __future__ import annotations

import atexit
import functools
import itertools
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, ToolCall
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.runnables import Runnable
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import PrivateAttr

from toolgate.clock import Clock
from toolgate.config import Settings
from toolgate.graph.bootstrap import App, open_app
from toolgate.policy.breaker import BreakerRegistry
from toolgate.policy.retry import ReadRetry
from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import INSTRUCTIONS, NoResources, Release
from toolgate.releases.loader import load_release
from toolgate.store.base import Store
from toolgate.testing_kit import Delivery, ReviewOutcome, deliver, review, store_with_people
from toolgate.tools.registry import Registry
from toolgate.tools.spec import HandlerContext, ToolSpec

_ids = itertools.count(1)


class UnexpectedModelCallError(AssertionError):
    """The model was asked for more responses than were scripted."""


@dataclass(frozen=True)
class ModelRequest:
    """One request the scripted model received."""

    messages: list[BaseMessage]
    """Messages sent, system instructions first."""
    tools: list[dict[str, Any]]
    """Tool definitions bound for this request (exactly what a provider would receive)."""
    options: dict[str, Any]
    """Other request options (``tool_choice``, ``parallel_tool_calls``, ``strict``...)."""

    @property
    def tool_names(self) -> list[str]:
        """Names of the bound tools."""
        return [t.get("function", t).get("name", "") for t in self.tools]


def tool_call(name: str, args: dict[str, Any], call_id: str | None = None) -> ToolCall:
    """A tool call as a provider integration would parse it."""
    return ToolCall(name=name, args=args, id=call_id or f"call_{next(_ids)}", type="tool_call")


def ai(content: str = "", *calls: ToolCall, invalid: Sequence[dict[str, Any]] = ()) -> AIMessage:
    """An assistant message with ``calls`` (and optionally ``invalid_tool_calls``)."""
    return AIMessage(
        content=content,
        tool_calls=list(calls),
        invalid_tool_calls=[{"type": "invalid_tool_call", **i} for i in invalid],
    )


class HandlerCounter:
    """Wraps tool handlers so every real invocation is counted (thread-safe).

    Tests and evaluations assert on these counts ("a refused call ran no handler") rather than on
    what the code looks like it does.
    """

    def __init__(self, delay_s: float = 0.0) -> None:
        self.calls: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._delay_s = delay_s

    def wrap(self, specs: Sequence[ToolSpec]) -> list[ToolSpec]:
        """The same specs with counting handlers (``delay_s`` widens race windows in tests)."""
        return [replace(spec, handler=self._counted(spec.name, spec.handler)) for spec in specs]

    def wrap_registry(self, registry: Registry) -> Registry:
        """``registry`` with counting handlers, each tenant's own implementations too (a tenant's
        call of a tool counts under the tool's name, as the shared one's does)."""
        return registry.mapped(self.wrap)

    def _counted(
        self, name: str, handler: Callable[[Any, HandlerContext], Any]
    ) -> Callable[[Any, HandlerContext], Any]:
        def counted(args: Any, ctx: HandlerContext) -> Any:
            with self._lock:
                self.calls[name] += 1
            if self._delay_s:
                time.sleep(self._delay_s)
            return handler(args, ctx)

        return counted

    def total(self) -> int:
        """Handler invocations of every tool."""
        return sum(self.calls.values())


class ScriptedChatModel(BaseChatModel):
    """Replays scripted `AIMessage` responses in order; strict about extra calls."""

    responses: list[AIMessage]
    """Responses to return, in order."""
    _requests: list[ModelRequest] = PrivateAttr(default_factory=list)
    _position: int = PrivateAttr(default=0)

    @property
    def _llm_type(self) -> str:
        return "toolgate-scripted"

    @property
    def requests(self) -> list[ModelRequest]:
        """Every request received so far."""
        return list(self._requests)

    def bind_tools(
        self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any
    ) -> Runnable[Any, Any]:
        """Record the tools with each request, like a provider integration would send them."""
        if tool_choice is not None:
            kwargs["tool_choice"] = tool_choice
        return self.bind(tools=list(tools), **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        tools = list(kwargs.pop("tools", []))
        self._requests.append(ModelRequest(messages=list(messages), tools=tools, options=dict(kwargs)))
        if self._position >= len(self.responses):
            raise UnexpectedModelCallError(
                f"model call #{self._position + 1} was not scripted (only {len(self.responses)} responses)"
            )
        response = self.responses[self._position]
        self._position += 1
        if response.id is None:
            response = response.model_copy(update={"id": f"resp_scripted_{self._position}"})
        return ChatResult(generations=[ChatGeneration(message=response)])

    def assert_complete(self) -> None:
        """Fail unless every scripted response was consumed."""
        if self._position != len(self.responses):
            raise AssertionError(
                f"{len(self.responses) - self._position} scripted response(s) were never requested"
            )


TEST_SECRET = b"toolgate-test-kit-store-secret-01"
"""The secret of a store `open_test_app` opens itself (never a production secret)."""
TEST_MODEL = "offline"
"""The model name a test app is configured with: the pinned deterministic model, so a release
verified against its reviewed manifest starts as it would in production."""


class ShiftableClock:
    """A frozen process clock that moves only when told (`shift`): handler deadlines in a test
    neither race the host clock nor sleep."""

    def __init__(self, at: datetime | None = None) -> None:
        self._now = at or datetime(2025, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        """The current (frozen) time."""
        with self._lock:
            return self._now

    def shift(self, delta: timedelta | float) -> datetime:
        """Move the clock on by ``delta`` (seconds, or a `timedelta`); returns the new time."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        with self._lock:
            self._now += step
            return self._now


def open_test_app(
    *,
    release: str | Release | None = None,
    tools: Sequence[ToolSpec] | Registry | None = None,
    policy: PolicyRules | None = None,
    model: BaseChatModel | None = None,
    store: Store | str | None = None,
    data_dir: Path | None = None,
    clock: Clock | None = None,
    breakers: BreakerRegistry | None = None,
    read_retry: ReadRetry | None = None,
    checkpointer: BaseCheckpointSaver[Any] | None = None,
    instructions: str | None = None,
    tool_choice: str | None = None,
    server_mode: bool = False,
    start: bool = True,
    release_control: bool = False,
    instrument: Callable[[Registry], Registry] | None = None,
    models: Mapping[str, BaseChatModel] | None = None,
) -> App:
    """A running gateway for a test, an evaluation or a benchmark, built by `open_app`.

    Args:
        release: the release to serve: a reference (verified against its reviewed manifest, as
            in production) or a `Release` (served as given); with ``tools``, the release whose
            policy, instructions and setup they are served with.
        tools: the tools to serve instead of the release's own, as specs or a built `Registry`
            (counted or instrumented handlers); never verified against a manifest.
        policy: the rules ``tools`` are judged by (default: ``release``'s).
        model: the chat model (default: a `ScriptedChatModel` with an empty script, for a
            gateway used outside a graph run).
        store: a `Store` the caller owns (never closed by the app), or a database URL the app
            opens and owns; default: an SQLite store in ``data_dir``.
        data_dir: where an SQLite store (and an app's checkpoints) live; default a temporary
            directory removed when the process exits.
        clock: the process clock (e.g. a `ShiftableClock`); default the system clock.
        breakers: the circuit breakers (e.g. with a low threshold); default shared through the store.
        read_retry: how reads are retried (e.g. with a fake sleep); default `DEFAULT_READ_RETRY`.
        checkpointer: what `App.compiled` and `App.graph` checkpoint into (default in memory).
        instructions, tool_choice: override the release's, for given ``tools``.
        server_mode: build the gateway as the LangGraph server does (principal from its auth).
        start: initialize the store for the release and record the release (as a process start
            does); ``False`` when the caller prepared the store itself.
        release_control: follow the store's release pointer and rollouts (a router), as
            production does; off by default, so a test serves exactly what it gave.
        instrument: wraps every registry served, after its verification (counting handlers
            around a release verified against its reviewed manifest).
        models: the chat model of a release by id, where it differs from ``model`` (rollout arms
            scripted apart).
    """
    if data_dir is None:  # an app around a given store writes nothing into its data directory
        data_dir = _scratch_dir() if isinstance(store, Store) else _temporary_dir()
    served, registry = _served(release, tools, policy, instructions, tool_choice)
    settings = Settings(
        data_dir=data_dir,
        database_url=store if isinstance(store, str) else None,
        model=TEST_MODEL,
        release=served if isinstance(served, str) else served.id,
        audit_key_value=TEST_SECRET.decode(),
    )
    return open_app(
        settings,
        model=model or ScriptedChatModel(responses=[]),
        server_mode=server_mode,
        clock=clock,
        breakers=breakers,
        read_retry=read_retry,
        store=store if isinstance(store, Store) else None,
        release=served,
        registry=registry,
        checkpointer=checkpointer or InMemorySaver(),
        verify=isinstance(served, str) and registry is None,
        start=start,
        release_control=release_control,
        instrument=instrument,
        models=models,
    )


def _temporary_dir() -> Path:
    """A new directory, removed when the process exits."""
    path = Path(tempfile.mkdtemp(prefix="toolgate-test-"))
    atexit.register(shutil.rmtree, path, True)
    return path


@functools.cache
def _scratch_dir() -> Path:
    """One directory per process for apps that write nothing into theirs (a given store and
    checkpointer): evaluation cases open thousands of them."""
    return _temporary_dir()


def _served(
    release: str | Release | None,
    tools: Sequence[ToolSpec] | Registry | None,
    policy: PolicyRules | None,
    instructions: str | None,
    tool_choice: str | None,
) -> tuple[str | Release, Registry | None]:
    """The release `open_app` serves and, for given tools, their registry."""
    if tools is None:
        if release is None:
            raise TypeError("open_test_app needs a release or tools")
        if policy is None and instructions is None and tool_choice is None:
            return release, None
        raise TypeError("policy, instructions and tool_choice override a release's only for given tools")
    bundle = release if isinstance(release, Release) else None
    if isinstance(release, str):
        bundle = load_release(release)
    registry = (
        tools if isinstance(tools, Registry) else Registry.of(_tools_release(bundle), tools, NoResources())
    )
    if bundle is not None and bundle.id == registry.release and policy is instructions is tool_choice is None:
        return bundle, registry  # the release's own bundle around an instrumented registry
    rules = policy or (bundle.policy if bundle is not None else None)
    if rules is None:
        raise TypeError("given tools need a policy (or a release whose policy they are served with)")
    served = Release(
        id=registry.release,
        tools=(),
        policy=rules,
        instructions=instructions or (bundle.instructions if bundle is not None else INSTRUCTIONS),
        tool_choice=tool_choice or (bundle.tool_choice if bundle is not None else "auto"),
        setup=bundle.setup if bundle is not None else None,
    )
    return served, registry


def _tools_release(bundle: Release | None) -> str:
    return bundle.id if bundle is not None else "test-tools/1.0.0"


__all__ = [
    "TEST_MODEL",
    "TEST_SECRET",
    "Delivery",
    "HandlerCounter",
    "ModelRequest",
    "ReviewOutcome",
    "ScriptedChatModel",
    "ShiftableClock",
    "UnexpectedModelCallError",
    "ai",
    "deliver",
    "open_test_app",
    "review",
    "store_with_people",
    "tool_call",
]
