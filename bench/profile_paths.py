"""cProfile of toolgate's read path and approved write path on SQLite (evidence for BENCHMARKS.md).

Runs the same flows as ``read_path.py`` and ``write_path.py`` (toolgate only, SQLite saver),
``--rounds`` times each after one warm-up, and writes the top cumulative entries to
``bench/results/profile_read.txt`` and ``bench/results/profile_write.txt``.

Run: ``.venv/bin/python bench/profile_paths.py``
"""

from __future__ import annotations

import cProfile
import io
import pstats
import tempfile
from pathlib import Path

from _common import RESULTS, Demo, arguments, new_key, open_saver, open_store  # bench/ is on sys.path
from langchain_core.messages import HumanMessage
from langgraph.types import Command
from read_path import QUESTION
from read_path import script as read_script
from write_path import ORDER, REQUEST
from write_path import script as write_script

from toolgate.graph.review.decisions import decide


def report(profile: cProfile.Profile, name: str, rounds: int) -> None:
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats(45)
    path = RESULTS / f"profile_{name}.txt"
    RESULTS.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# {name} path, toolgate on SQLite, {rounds} profiled calls\n" + out.getvalue())
    print(f"wrote {path.relative_to(RESULTS.parent.parent)}")


def main() -> None:
    args = arguments(__doc__.splitlines()[0], quick=10, full=30)
    with tempfile.TemporaryDirectory() as tmp:
        store = open_store("sqlite", str(Path(tmp) / "store.sqlite"), key=new_key())
        demo = Demo(store)
        with open_saver("sqlite", str(Path(tmp) / "ckpt.sqlite")) as saver:
            graph = demo.graph(read_script(args.rounds + 1, "r"), saver)
            context = demo.context()
            read = lambda n: graph.invoke(  # noqa: E731
                {"messages": [HumanMessage(QUESTION)]},
                {"configurable": {"thread_id": f"r{n}"}},
                context=context,
            )
            read(-1)
            profile = cProfile.Profile()
            profile.enable()
            for n in range(args.rounds):
                read(n)
            profile.disable()
            report(profile, "read", args.rounds)

            write_app = demo.app(write_script(args.rounds, "w"))
            gateway, wgraph = write_app.gateway, write_app.compiled(checkpointer=saver)
            fiona = demo.principals["fiona"]

            def write(n: int) -> None:
                with store.transaction() as tx:
                    tx.execute("UPDATE sor_orders SET refunded_cents = 0 WHERE order_id = ?", (ORDER,))
                config = {"configurable": {"thread_id": f"w{n}"}}
                paused = wgraph.invoke({"messages": [HumanMessage(REQUEST)]}, config, context=context)
                proposal = paused["__interrupt__"][0].value["toolgate"]["proposals"][0]
                decide(gateway, proposal["proposal_id"], fiona, "approve")
                wgraph.invoke(Command(resume={"wake": True}), config, context=type(context)())

            write(-1)
            profile = cProfile.Profile()
            profile.enable()
            for n in range(args.rounds):
                write(n)
            profile.disable()
            report(profile, "write", args.rounds)
        store.close()


if __name__ == "__main__":
    main()
