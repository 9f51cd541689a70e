"""Runs evaluation cases through the real gateway graph of one release.

`CaseRunner` loads the release once and initializes a template store (schema, the release's own
tables and seed data, the people); every case then runs on its own copy of that template (an
SQLite backup, milliseconds), so cases are independent: a refund in one case never changes an
order another case reads. Each case gets the release's real registry with counted and ledgered
handlers (`toolgate.evals.faults`), the real graph with an in-memory checkpointer, the scripted model
(or a live one), and reviewers deciding through the real review path (`decide`).

A live model (``run_case(case, model=...)``) has its calls scored under the case's call ids
(`toolgate.evals.call_alignment`); a ``replay_turn`` fault replays its responses of this run (what
a retried provider request returns); its turns, tokens and failures come from the case's audit log.
"""

from __future__ import annotations

import secrets
import shutil
import sqlite3
import tempfile
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from toolgate.clock import parse_iso
from toolgate.evals.call_alignment import align_observation, alignment, model_responses
from toolgate.evals.case_world import (
    CaseScriptModel,
    CaseStore,
    apply_people,
    prelude_results,
    references_of,
    use_rate_windows,
)
from toolgate.evals.execution_steps import CaseSaver, apply_approvals, concurrent_resume, redeliver
from toolgate.evals.faults import EffectLedger, instrument
from toolgate.evals.fixtures import EvalCase, ScriptedCall
from toolgate.evals.hidden_writes import HiddenWriteCheck
from toolgate.evals.observation import (
    Observation,
    audited_turns,
    call_outcomes,
    final_text,
    message_facts,
    model_failures,
    store_facts,
    usage,
)
from toolgate.evals.release_facts import ReleaseFacts, release_facts
from toolgate.graph import Context
from toolgate.graph.bootstrap import App, initialize_store
from toolgate.policy.identities import IdentityDirectory
from toolgate.policy.principal import Principal
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.store.sqlite import SQLiteStore
from toolgate.testing import ScriptedChatModel, open_test_app
from toolgate.tools.demo.identities import DEMO_IDENTITIES
from toolgate.tools.registry import Registry

EXTRA_PEOPLE: tuple[dict[str, Any], ...] = (
    {
        "user_id": "gina_support",
        "tenant_id": "globex",
        "roles": ["support"],
        "scopes": ["orders:read", "refunds:request"],
    },
    {
        "user_id": "gina_ops",
        "tenant_id": "globex",
        "roles": ["operator"],
        "scopes": ["ops:read", "ops:restart"],
    },
)
"""People some cases need beyond the demo identities (globex staff)."""


def default_people() -> dict[str, Principal]:
    """The demo identities and `EXTRA_PEOPLE`, by user id."""
    raw = [*DEMO_IDENTITIES["identities"], *EXTRA_PEOPLE]
    return {p["user_id"]: Principal.from_dict(p) for p in raw}


def scratch_dir() -> Path:
    """A directory for throwaway stores: memory-backed when the host has one (no fsync per event)."""
    shm = Path("/dev/shm")
    base = shm if shm.is_dir() and shm.stat().st_mode & 0o002 else None
    return Path(tempfile.mkdtemp(prefix="toolgate-evals-", dir=base))


def scripted_responses(case: EvalCase) -> list[AIMessage]:
    """The case's turns as model responses, then its final text, each with the id of its place in
    the script (``resp_scripted_1``, ``_2``...: what one model answering the whole thread says).

    A second worker's model continues the script from where the first stopped, so it never reuses
    the id of a response already in the thread: LangGraph replaces a message with the id of one it
    holds, and the model's tool calls would vanish from the history the case is scored on."""
    return turn_messages(case.turns, case.final)


def turn_messages(turns: Sequence[Sequence[ScriptedCall]], final: str) -> list[AIMessage]:
    """Scripted turns, then a final text, as model responses (see `scripted_responses`)."""
    from toolgate.evals.adversarial.case import Call
    from toolgate.evals.adversarial.runner import _message

    messages = [
        _message([Call(c.name, c.args, raw=c.raw, call_id=c.id) for c in turn], index)
        for index, turn in enumerate(turns)
    ]
    return [
        m.model_copy(update={"id": f"resp_scripted_{n}"})
        for n, m in enumerate([*messages, AIMessage(final)], start=1)
    ]


def _copy_database(source_path: Path, target_path: Path) -> None:
    """A consistent copy of one SQLite database (the backup API: a writer never tears it)."""
    source, target = sqlite3.connect(source_path), sqlite3.connect(target_path)
    try:
        source.backup(target)
    finally:
        source.close()
        target.close()


class CaseRunner:
    """One release, a template store, and `run_case` for any number of cases."""

    people: dict[str, Principal]
    """Who cases may name, by user id (the demo identities, inline principals, `EXTRA_PEOPLE`)."""
    key: bytes
    """The template store's secret (every case's copy shares it)."""

    def __init__(
        self,
        release: str | Release,
        *,
        cases: Iterable[EvalCase] = (),
        people: Mapping[str, Principal] | None = None,
        directory: Path | None = None,
        like: CaseRunner | None = None,
    ) -> None:
        """``like``: another runner whose template this one copies (same secret, same people)
        instead of initializing its own, for a variant of its release with the same setup (a
        mutant: `toolgate.evals.mutation`)."""
        self.release = load_release(release) if isinstance(release, str) else release
        self.people = dict(like.people if like is not None else people or default_people())
        self.directory = directory or scratch_dir()
        self._owns_directory = directory is None
        self.key = like.key if like is not None else secrets.token_bytes(32)
        self.template = self.directory / "template.sqlite"
        if like is not None:
            if like.release.setup is not self.release.setup:
                raise ValueError("a runner copies the template of a release with the same setup only")
            _copy_database(like.template, self.template)
        store = SQLiteStore(self.template, key=self.key)
        if like is None:
            initialize_store(store, self.release)
        self._identities = IdentityDirectory(store)
        known = set(self.people) if like is not None else set()
        for case in cases:
            if isinstance(case.principal, dict):
                self.people.setdefault(case.user_id, Principal.from_dict(case.principal))
        for principal in self.people.values():
            if principal.user_id not in known:
                self._identities.add(principal, by=None, token=f"eval-token-{principal.user_id}")
        self.registry: Registry = self.release.registry(ReleaseEnv(store, self.key))
        """The release's registry as loaded (uninstrumented): what its declarations are read from."""
        self.facts: ReleaseFacts = release_facts(self.release, self.registry)
        self._count = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        """Remove the scratch directory this runner made."""
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> CaseRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _fresh_store(self, case: EvalCase) -> tuple[CaseStore, Path]:
        with self._lock:
            if isinstance(case.principal, dict) and case.user_id not in self.people:
                principal = Principal.from_dict(case.principal)  # a case the runner was not built with
                self._identities.add(principal, by=None, token=f"eval-token-{principal.user_id}")
                self.people[principal.user_id] = principal
            self._count += 1
            path = self.directory / f"case-{self._count}.sqlite"
        _copy_database(self.template, path)
        started = parse_iso(case.starts_at) if case.starts_at else None
        return CaseStore(path, key=self.key, started=started), path

    def principal(
        self, user: str | Mapping[str, Any], case_people: Mapping[str, Principal] | None = None
    ) -> Principal:
        """The principal a case names (a known user id, or an inline principal); ``case_people``
        (the case's own `EvalCase.people`) come first."""
        if isinstance(user, Mapping):
            return Principal.from_dict(user)
        if case_people and user in case_people:
            return case_people[user]
        if user not in self.people:
            raise KeyError(f"unknown person {user!r}: add them to the runner's people or inline them")
        return self.people[user]

    def requester(self, case: EvalCase) -> Principal:
        """Who makes the case's request, as the case's world holds them (its own people first)."""
        own = {str(p["user_id"]): Principal.from_dict(p) for p in case.people}
        return self.principal(case.principal, own)

    def context(self, case: EvalCase, principal: Principal | None = None) -> Context:
        """The run context: the case's budgets and immediate status checks (no waits)."""
        limits = {k: v for k, v in case.limits.model_dump().items() if v is not None}
        return Context(
            principal=principal,
            reconcile_delays=(0.0,),
            worker_id="eval-worker",
            credentials=dict(case.credentials),
            **limits,
        )

    def run_case(self, case: EvalCase, *, model: BaseChatModel | None = None) -> Observation:
        """Run ``case`` on a fresh copy of the template store and observe what happened."""
        store, path = self._fresh_store(case)
        try:
            return self._run(case, store, model)
        finally:
            path.unlink(missing_ok=True)
            for suffix in ("-wal", "-shm"):
                Path(f"{path}{suffix}").unlink(missing_ok=True)

    def _prelude(
        self, case: EvalCase, app: Callable[[BaseChatModel], App], person: Callable[[str], Principal]
    ) -> dict[str, str]:
        """Run the case's prelude thread (someone else's, first); its results by ``prelude.<call id>``."""
        assert case.prelude is not None
        chat = CaseScriptModel(responses=turn_messages(case.prelude.turns, "Done."))
        graph = app(chat).compiled(checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": f"eval-{case.id}-prelude"}}
        state = graph.invoke(
            {"messages": [HumanMessage(case.input)]},
            config,
            context=self.context(case, person(case.prelude.principal)),
        )
        return prelude_results(list(state.get("messages", [])))

    def _run(self, case: EvalCase, store: CaseStore, model: BaseChatModel | None) -> Observation:
        ledger = EffectLedger()
        case_people = apply_people(store, case)

        def person(user: str) -> Principal:
            return self.principal(user, case_people)

        requester = self.principal(case.principal, case_people)
        base = self.release.registry(ReleaseEnv(store, self.key))
        use_rate_windows(store, case.faults, self.release.policy.rate_limits, requester, base, case)
        hidden = HiddenWriteCheck(store)  # every read compared before and after (hidden_writes.py)
        # every tenant's implementation instrumented and compared, not only the shared tools
        registry = base.mapped(lambda specs: hidden.wrap(instrument(specs, case.faults, ledger)))

        def app(chat: BaseChatModel) -> App:
            """The case's release around ``chat`` on the case's store, by the composition root."""
            return open_test_app(release=self.release, tools=registry, model=chat, store=store, start=False)

        earlier = self._prelude(case, app, person) if case.prelude is not None else {}
        responses = scripted_responses(case)
        references = references_of(case)
        live = model is not None
        main_model = model or CaseScriptModel(responses=responses, references=references, earlier=earlier)
        saver = CaseSaver()

        main = app(main_model)
        gw, graph = main.gateway, main.compiled(checkpointer=saver)
        thread = f"eval-{case.id}"
        config: Any = {"configurable": {"thread_id": thread}}
        obs = Observation(case_id=case.id, release=self.release.id, thread_id=thread)
        models: list[BaseChatModel] = [main_model]
        state: dict[str, Any] = {}
        try:
            state = graph.invoke(
                {"messages": [HumanMessage(case.input)]}, config, context=self.context(case, requester)
            )

            def resume_once(payload: dict[str, Any]) -> dict[str, Any]:
                return graph.invoke(Command(resume=payload), config, context=self.context(case))

            def resume_twice() -> dict[str, Any]:
                twin_model: BaseChatModel = main_model  # a live model serves both workers
                if isinstance(main_model, ScriptedChatModel):
                    twin_model = CaseScriptModel(
                        responses=responses[len(main_model.requests) :],
                        references=references,
                        earlier=earlier,
                    )
                    models.append(twin_model)
                twin = app(twin_model).compiled(checkpointer=saver)
                return concurrent_resume(graph, twin, config, self.context(case))

            def aligned(now: dict[str, Any]) -> dict[str, str]:
                return alignment(case, now.get("messages", []))

            state = apply_approvals(
                gw,
                case,
                obs,
                state,
                person,
                resume_once,
                resume_twice,
                store.advance_to,
                aligned=aligned if live else None,
            )
            if any(f.kind == "redeliver" and not f.concurrent for f in case.faults):
                redeliver(gw, store, thread)
            if any(f.kind == "replay_turn" for f in case.faults):
                if live:  # a retried provider request answers what the model answered
                    replay: ScriptedChatModel = ScriptedChatModel(
                        responses=model_responses(state.get("messages", []))
                    )
                else:
                    replay = CaseScriptModel(responses=responses, references=references, earlier=earlier)
                models.append(replay)
                app(replay).compiled(checkpointer=InMemorySaver()).invoke(
                    {"messages": [HumanMessage(case.input)]}, config, context=self.context(case, requester)
                )
        except Exception as exc:  # the case fails with the reason; the run goes on
            obs.errors.append(f"{type(exc).__name__}: {str(exc)[:300]}")
            state = dict(graph.get_state(config).values or state)
        obs.errors += sorted({v.reason for v in hidden.take()})  # a read that wrote fails the case
        messages = list(state.get("messages", []))
        obs.calls = [
            {"turn": turn, "id": c.get("id"), "name": c.get("name"), "args": c.get("args")}
            for turn, m in enumerate(m for m in messages if isinstance(m, AIMessage))
            for c in [*m.tool_calls, *m.invalid_tool_calls]
        ]
        obs.outcomes, obs.arguments = call_outcomes(state)
        obs.handler_calls = dict(ledger.calls)
        obs.duplicate_effects = ledger.duplicates()
        store_facts(obs, store, registry, gw.authority)
        obs.status = str(state.get("status", "unknown"))
        obs.messages = messages
        message_facts(obs, messages)
        obs.final_text = final_text(messages)
        obs.tool_calls = len(obs.calls)
        if live:
            align_observation(obs, case)
            obs.errors += model_failures(store, thread)
            obs.model_turns, obs.tokens = audited_turns(store, thread)
            return obs
        obs.model_turns = sum(len(m.requests) for m in models if isinstance(m, ScriptedChatModel)) or int(
            state.get("budget", {}).get("model_turns", 0)
        )
        obs.tokens = usage(
            messages, [r for m in models if isinstance(m, ScriptedChatModel) for r in m.requests]
        )
        return obs


__all__ = ["EXTRA_PEOPLE", "CaseRunner", "concurrent_resume", "default_people", "scratch_dir"]
