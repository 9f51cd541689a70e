"""Regenerate the figures of BENCHMARKS.md from the results of one ``make bench`` run.

Reads ``bench/results/*.json`` (every figure there is a ratio against a baseline measured in the
same process run) and rewrites the part of BENCHMARKS.md between the two ``bench:generated``
markers: the summary against issue 31's targets, then every benchmark's own table. The prose
around the markers (method, what the figures mean) is written by hand.

Run: ``.venv/bin/python bench/report.py`` (`bench/run_all.sh` runs it last)
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
TARGET_FILE = ROOT / "BENCHMARKS.md"
START = "<!-- bench:generated:start (bench/report.py writes this part; edit the prose outside it) -->"
END = "<!-- bench:generated:end -->"
TABLES = (
    ("read_path", "Read call end to end"),
    ("write_path", "Approved write end to end"),
    ("growth", "Growth over a 200-call thread (SQLite)"),
    ("throughput", "Throughput, PostgreSQL"),
    ("audit_appends", "Audit appends alone, PostgreSQL"),
    ("review_listing", "Reviewer listing"),
)


def load(name: str) -> dict[str, Any] | None:
    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else None


def _num(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    return "" if value is None else str(value).replace("|", "/")


def markdown(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """A markdown table of ``rows`` (columns of the first row)."""
    if not rows:
        return ["(no rows)"]
    columns = list(rows[0])
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(_num(row.get(c)) for c in columns) + " |" for row in rows]
    return lines


def _row(measure: str, value: float | None, target: str, met: bool | None, note: str = "") -> dict[str, Any]:
    return {
        "figure": measure,
        "value": "not run" if value is None else value,
        "target": target,
        "met": "" if met is None else ("met" if met else "not met"),
        "note": note,
    }


def _cpu_note(cpu: Mapping[str, Any] | None) -> str:
    """The process-CPU ratio of the same rounds (steadier under load than wall time), if measured."""
    return f"; CPU {cpu['ratio']:.2f}x" if cpu else ""


def summary(results: Mapping[str, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """One row per figure issue 31 names, with its target."""
    rows: list[dict[str, Any]] = []
    read, write = results.get("read_path"), results.get("write_path")
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        r = (read or {}).get("kinds", {}).get(kind, {}).get("toolgate_vs_react")
        cpu = (read or {}).get("kinds", {}).get(kind, {}).get("toolgate_vs_react_cpu")
        rows.append(
            _row(
                f"read call vs create_react_agent, {label}",
                r and r["ratio"],
                "<= 1.2x",
                r and r["ratio"] <= 1.2,
                r and f"per-round {r['round_min']:.2f}-{r['round_max']:.2f}" + _cpu_note(cpu),
            )
        )
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        r = (write or {}).get("kinds", {}).get(kind, {}).get("toolgate_vs_plain")
        cpu = (write or {}).get("kinds", {}).get(kind, {}).get("toolgate_vs_plain_cpu")
        rows.append(
            _row(
                f"approved write vs plain LangGraph approval flow, {label}",
                r and r["ratio"],
                "<= 1.5x",
                r and r["ratio"] <= 1.5,
                r and f"per-round {r['round_min']:.2f}-{r['round_max']:.2f}" + _cpu_note(cpu),
            )
        )
    floor = (write or {}).get("kinds", {}).get("postgres", {}).get("floor")
    if floor:
        rows.append(
            _row(
                "PostgreSQL store round trips per approved write vs floor",
                floor["round_trips_vs_floor"],
                "<= 2x",
                floor["round_trips_vs_floor"] <= 2,
                f"{floor['round_trips']} round trips in {floor['transactions']} transactions"
                f" ({floor['write_tx']} writing) against {floor['floor_round_trips']}",
            )
        )
        rows.append(
            _row(
                "PostgreSQL store transactions per approved write vs floor",
                floor["transactions"] / floor["floor_write_tx"],
                "",
                None,
                f"{floor['write_tx']} writing vs floor {floor['floor_write_tx']}",
            )
        )
    growth = results.get("growth")
    if growth:
        first = growth.get("first_bytes_ratio")
        rows.append(
            _row("checkpoint bytes at call 1 vs bare", first, "<= 1.1x", first is not None and first <= 1.1)
        )
        rows.append(
            _row(
                f"checkpoint bytes at call {growth['calls']} vs bare",
                growth["bytes_ratio"],
                "<= 1.1x",
                growth["bytes_ratio"] <= 1.1,
            )
        )
    throughput = results.get("throughput")
    if throughput:
        checks = throughput.get("exactly_once_checks", [])
        dup = sum(c.get("duplicates", 0) for c in checks)
        lost = sum(c.get("lost", 0) for c in checks)
        rows.append(
            _row(
                "distinct approved ops/s at the best worker count vs claim-only (one resource per operation)",
                throughput["best_ratio"],
                ">= 0.3x, 0 duplicates, 0 lost",
                throughput["best_ratio"] >= 0.3 and dup == 0 and lost == 0,
                f"best at {throughput['best_workers']} workers; {dup} duplicates, {lost} lost"
                f" in {len(checks)} deliver rounds",
            )
        )
        if "best_one_resource_ratio" in throughput:
            rows.append(
                _row(
                    "the same, every operation on one resource (serialized by its lease)",
                    throughput["best_one_resource_ratio"],
                    "",
                    None,
                    f"best at {throughput['best_one_resource_workers']} workers",
                )
            )
        rows.append(
            _row(
                "audit-lock wait at 8 deliver workers (share of worker time)",
                throughput["audit_lock_wait_at_8"],
                "< 0.10",
                throughput["audit_lock_wait_at_8"] < 0.10,
            )
        )
    appends = results.get("audit_appends")
    if appends:
        rows.append(
            _row(
                "audit-lock wait at 8 processes appending only",
                appends["lock_wait_share_at_8"],
                "",
                None,
                "worst case: every unit of work is an append",
            )
        )
    listing = results.get("review_listing")
    for kind, label in (("sqlite", "SQLite"), ("postgres", "PostgreSQL")):
        r = (listing or {}).get("kinds", {}).get(kind, {}).get("ratios", {}).get("limit=1")
        rows.append(
            _row(
                f"reviewer listing, 1,000 pending vs 1, {label}",
                r and r["ratio"],
                "<= 1.5x",
                r and r["ratio"] <= 1.5,
                "head of the queue (limit=1)",
            )
        )
    return rows


GROUPS = (
    ("messages", ("messages",)),
    ("seal", ("seal", "bookkeeping: seal")),
    ("bookkeeping (the other grouped keys)", ("bookkeeping",)),
    ("LangGraph's tasks (the tool node's Send)", ("__pregel_tasks",)),
    ("LangGraph's input and branch channels", ("__start__", "branch:*")),
)
"""How `bench/growth.py`'s per-channel breakdown is grouped on this page (the JSON has each channel)."""


def breakdown_rows(breakdown: Mapping[str, Mapping[str, Any]], call: str) -> list[dict[str, Any]]:
    """One row per part of the checkpoint bytes of ``call``, bare beside toolgate."""
    names = [n for n in ("bare", "toolgate") if call in breakdown.get(n, {})]
    parts = {n: breakdown[n][call] for n in names}
    grouped = {c for _, channels in GROUPS for c in channels}

    def channels(n: str, where: str, wanted: Sequence[str] | None) -> int:
        held = parts[n].get(where, {})
        return sum(v for c, v in held.items() if (c in wanted if wanted is not None else c not in grouped))

    rows: list[dict[str, Any]] = [
        {"part": "checkpoints (steps)", **{n: parts[n]["checkpoints"] for n in names}},
        {"part": "messages in the thread after the call", **{n: parts[n]["messages_in_thread"] for n in names}},
    ]
    for label, wanted in [*GROUPS, ("the other state channels", None)]:
        for where, what in (("channel_values", "in the checkpoint blobs"), ("writes", "pending writes")):
            rows.append({"part": f"{label}: {what}", **{n: channels(n, where, wanted) for n in names}})
    for key in ("channel_versions", "versions_seen", "metadata", "blob framing, id, ts, updated_channels"):
        rows.append({"part": key, **{n: parts[n].get(key, 0) for n in names}})
    rows.append({"part": "total bytes", **{n: parts[n]["total"] for n in names}})
    return rows


def generated() -> list[str]:
    results = {name: load(name) for name, _ in TABLES}
    # the commits the results were measured on; results from before they recorded one: this HEAD
    commits = sorted({r["machine"]["commit"] for r in results.values() if r and "commit" in r.get("machine", {})})
    head = ", ".join(commits) or subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    loads = sorted(
        {r["machine"]["load_avg_1_5_15"][0] for r in results.values() if r and "machine" in r}
    )
    lines = [
        START,
        "",
        f"Figures of one `make bench` run on `{head or 'unknown'}` (1-minute load averages at the start"
        f" of each benchmark: {', '.join(f'{x:g}' for x in loads) or 'unknown'}). Ratios only: each"
        " against its baseline in the same run.",
        "",
        "### Summary against issue 31's targets",
        "",
        *markdown(summary(results)),
    ]
    for name, title in TABLES:
        data = results.get(name)
        lines += ["", f"### {title} (`bench/{name}.py`)", ""]
        if data is None:
            lines.append("not run")
            continue
        lines += markdown(data.get("table", []))
        if name == "growth":
            for call in ("call 1", f"call {data.get('calls')}"):
                if data.get("breakdown", {}).get("toolgate", {}).get(call):
                    lines += ["", f"Checkpoint bytes of {call}, by part (bytes the turn added):", ""]
                    lines += markdown(breakdown_rows(data["breakdown"], call))
        if name == "write_path":
            for kind, facts in data.get("kinds", {}).items():
                steps = facts.get("steps_toolgate")
                if steps:
                    lines += ["", f"One approved write on {kind}, transaction by transaction (store only):", ""]
                    lines += markdown([{"n": i + 1, **s} for i, s in enumerate(steps)])
    return [*lines, "", END]


def main() -> None:
    # no options: parsing still answers --help (and refuses anything else) before BENCHMARKS.md is touched
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    text = TARGET_FILE.read_text(encoding="utf-8")
    body = "\n".join(generated())
    if START in text and END in text:
        before, rest = text.split(START, 1)
        after = rest.split(END, 1)[1]
        text = before + body + after
    else:
        text = text.rstrip("\n") + "\n\n## Figures\n\n" + body + "\n"
    TARGET_FILE.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET_FILE.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
