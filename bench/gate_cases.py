"""Release gate: what one evaluation case costs, against bare LangGraph running the same turns.

The gate (`toolgate.evals.gate.run_release`) runs every dataset case through the real gateway
graph: a copy of the template store, the release's registry with counted, ledgered and
hidden-write-checked handlers, a freshly compiled graph with an in-memory checkpointer, the
scripted model, reviewers deciding through the real review path, then the observation and its
score. Generated cases and mutation testing multiply the number of cases, so the per-case cost
decides whether they are usable.

Contenders, alternated every round (baseline first), on the first ``--cases`` cases of the packaged
dataset (tool-calling-v1) against ``ops-tools/1.1.0``:

- ``baseline``: per case, a bare LangGraph `StateGraph` with the same seven node names and five
  routed edges, compiled with an `InMemorySaver`, running the case's scripted model turns (as many
  as toolgate's run of the case made): each tool call answered by a `ToolMessage`, then the next
  turn. It is the framework's floor for the same conversation (a compile, the same model turns,
  checkpoints); everything toolgate does beyond it is toolgate's own cost;
- ``toolgate``: `CaseRunner.run_case` and `score_case` for every case, as `run_release` does them
  (the template store is made once per release, outside the rounds, as in the gate).

A second pair isolates compiling, which every case (and every App open) pays: ``bare_compile``
compiles the baseline graph, ``toolgate_compile`` compiles one app's graph (`App.compiled`).

Each figure is a ratio of medians of per-case seconds, with the spread of the paired per-round
ratios; absolute medians are printed for orientation only. After the timed rounds one cProfile
pass over the toolgate contender writes ``bench/results/profile_gate_cases.txt``.

Run: ``.venv/bin/python bench/gate_cases.py [--full]``
"""

from __future__ import annotations

import cProfile
import io
import pstats
import time
from typing import Annotated, Any, Literal, TypedDict

from _common import (  # bench/ is on sys.path when run as a script
    RESULTS,
    alternate,
    arguments,
    boxplot,
    plot,
    print_table,
    ratio,
    spread,
    write_results,
)
from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from toolgate.evals.fixtures import DEFAULT_DATASET, EvalCase, load_dataset
from toolgate.evals.runner import CaseRunner, scripted_responses
from toolgate.evals.scoring import score_case
from toolgate.graph.bootstrap import initialize_store
from toolgate.store import SQLiteStore
from toolgate.testing import ScriptedChatModel, open_test_app

RELEASE = "ops-tools/1.1.0"
COMPILES = 20
"""Graphs compiled per round by each compile contender."""


class Plain(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def baseline_graph(model: ScriptedChatModel) -> Any:
    """Seven nodes as toolgate names them, routed like a bare tool-calling loop: the model's tool
    calls are answered (dispatch, then execute) while the script has turns left."""

    def call_model(state: Plain) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    def after_model(state: Plain) -> Literal["dispatch", "respond", "__end__"]:
        last = state["messages"][-1]
        more = len(model.requests) < len(model.responses)
        if isinstance(last, AIMessage) and (last.tool_calls or last.invalid_tool_calls) and more:
            return "dispatch"
        return "__end__"

    def after_dispatch(state: Plain) -> Literal["proposal", "execute", "model", "respond"]:
        return "execute"

    def after_proposal(state: Plain) -> Literal["approval", "execute", "respond"]:
        return "execute"

    def after_execute(state: Plain) -> Literal["approval", "model", "respond"]:
        return "model"

    def after_wait(state: Plain) -> Literal["model", "respond"]:
        return "model"

    def execute(state: Plain) -> dict[str, Any]:
        last = next(m for m in reversed(state["messages"]) if isinstance(m, AIMessage))
        calls = [*last.tool_calls, *last.invalid_tool_calls]
        return {
            "messages": [
                ToolMessage(content='{"status": "ok"}', tool_call_id=str(c.get("id")), name=c.get("name"))
                for c in calls
            ]
        }

    def passing(state: Plain) -> dict[str, Any]:
        return {}

    builder: StateGraph[Any, Any, Any, Any] = StateGraph(Plain)
    builder.add_node("model", call_model)
    for name in ("dispatch", "proposal", "approval", "respond", "wait"):
        builder.add_node(name, passing)
    builder.add_node("execute", execute)
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", after_model)
    builder.add_conditional_edges("dispatch", after_dispatch)
    builder.add_conditional_edges("proposal", after_proposal)
    builder.add_edge("approval", "execute")
    builder.add_conditional_edges("execute", after_execute)
    builder.add_conditional_edges("wait", after_wait)
    builder.add_edge("respond", END)
    return builder.compile(checkpointer=InMemorySaver())


def _checkpointable(value: Any) -> Any:
    """``value`` with integers past 64 bits as text: LangGraph's serializer cannot checkpoint them
    (toolgate's model node screens such a call out before anything is stored)."""
    if isinstance(value, dict):
        return {k: _checkpointable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_checkpointable(v) for v in value]
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**64:
        return str(value)
    return value


def baseline_script(case: EvalCase, turns: int) -> list[AIMessage]:
    """The case's scripted responses, the first ``turns`` of them (as many as toolgate's run made)."""
    responses = scripted_responses(case)[: max(turns, 1)]
    return [
        m.model_copy(update={"tool_calls": [{**c, "args": _checkpointable(c["args"])} for c in m.tool_calls]})
        for m in responses
    ]


def run_baseline(case: EvalCase, script: list[AIMessage]) -> int:
    """One case on the bare graph; the model turns it made."""
    model = ScriptedChatModel(responses=list(script))
    baseline_graph(model).invoke(
        {"messages": [HumanMessage(case.input)]}, {"configurable": {"thread_id": f"eval-{case.id}"}}
    )
    return len(model.requests)


def run_toolgate(runner: CaseRunner, case: EvalCase) -> tuple[bool, int]:
    """One case as the gate runs it: observed, then scored. (passed, model turns)."""
    observation = runner.run_case(case)
    return score_case(case, observation).passed, observation.model_turns


def profile_round(runner: CaseRunner, cases: list[EvalCase]) -> None:
    profile = cProfile.Profile()
    profile.enable()
    for case in cases:
        run_toolgate(runner, case)
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(45)
    stats.sort_stats("tottime").print_stats(25)
    path = RESULTS / "profile_gate_cases.txt"
    header = f"# gate cases: {len(cases)} cases of {DEFAULT_DATASET.name} on {RELEASE}, one profiled pass\n"
    path.write_text(header + out.getvalue(), encoding="utf-8")
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=7, full=15)
    dataset = load_dataset(DEFAULT_DATASET)
    cases = list(dataset.cases if args.full else dataset.cases[:60])
    started = time.perf_counter()
    runner = CaseRunner(RELEASE, cases=cases)
    template_s = time.perf_counter() - started
    try:
        first = {case.id: run_toolgate(runner, case) for case in cases}  # warm-up, and the turns
        turns = {case_id: model_turns for case_id, (_, model_turns) in first.items()}
        store = SQLiteStore(runner.directory / "compile.sqlite", key=runner.key)
        initialize_store(store, runner.release)
        app = open_test_app(release=runner.release, store=store, start=False)
        scripts = {c.id: baseline_script(c, turns[c.id]) for c in cases}
        baseline_turns = {c.id: run_baseline(c, scripts[c.id]) for c in cases}
        passed: list[int] = []

        def per_case(fn: Any) -> float:
            begun = time.perf_counter()
            fn()
            return (time.perf_counter() - begun) / len(cases)

        def per_compile(fn: Any) -> float:
            begun = time.perf_counter()
            for _ in range(COMPILES):
                fn()
            return (time.perf_counter() - begun) / COMPILES

        def toolgate_round() -> None:
            passed.append(sum(run_toolgate(runner, case)[0] for case in cases))

        samples = alternate(
            args.rounds,
            {
                "baseline": lambda n: per_case(lambda: [run_baseline(c, scripts[c.id]) for c in cases]),
                "toolgate": lambda n: per_case(toolgate_round),
                "bare_compile": lambda n: per_compile(
                    lambda: baseline_graph(ScriptedChatModel(responses=[]))
                ),
                "toolgate_compile": lambda n: per_compile(lambda: app.compiled(checkpointer=InMemorySaver())),
            },
        )
        profile_round(runner, cases)
        store.close()
    finally:
        runner.close()

    expected = sum(p for p, _ in first.values())
    if set(passed) != {expected}:
        print(f"gate_cases: cases passed differ between rounds: {passed} (first pass: {expected})")
    case_ratio = ratio(samples["toolgate"], samples["baseline"])
    compile_ratio = ratio(samples["toolgate_compile"], samples["bare_compile"])
    ms = {name: spread(s)["median"] * 1000 for name, s in samples.items()}
    rows = [
        {
            "what": "one gate case",
            "toolgate_ms": ms["toolgate"],
            "baseline_ms": ms["baseline"],
            "ratio": case_ratio["ratio"],
            "rounds_min-max": f"{case_ratio['round_min']:.2f}-{case_ratio['round_max']:.2f}",
        },
        {
            "what": "compile the graph",
            "toolgate_ms": ms["toolgate_compile"],
            "baseline_ms": ms["bare_compile"],
            "ratio": compile_ratio["ratio"],
            "rounds_min-max": f"{compile_ratio['round_min']:.2f}-{compile_ratio['round_max']:.2f}",
        },
    ]
    print_table(f"gate cases: {len(cases)} cases of {DEFAULT_DATASET.name} on {RELEASE}, per case", rows)
    write_results(
        "gate_cases",
        {
            "release": RELEASE,
            "dataset": DEFAULT_DATASET.name,
            "cases": len(cases),
            "rounds": args.rounds,
            "cases_passed": expected,
            "cases_passed_per_round": passed,
            "model_turns": {"toolgate": sum(turns.values()), "baseline": sum(baseline_turns.values())},
            "template_store_s_once": template_s,
            "case_vs_baseline": case_ratio,
            "compile_vs_bare_compile": compile_ratio,
            "spread_s": {name: spread(s) for name, s in samples.items()},
            "table": rows,
            "samples_s": samples,
            "note": (
                "per-case seconds (a round's time over its cases); baseline: a bare 7-node StateGraph "
                "with an InMemorySaver, compiled per case, running the case's scripted turns"
            ),
        },
    )

    def draw(axes: Any) -> None:
        boxplot(axes, samples, ylabel="ms per case (per graph for the compile pair)")

    plot("gate_cases", draw, title=f"Gate case cost, {len(cases)} cases, {args.rounds} alternated rounds")


if __name__ == "__main__":
    main()
