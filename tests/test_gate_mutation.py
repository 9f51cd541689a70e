"""Issue 25: the gate tests itself. Every single-point loosening of a fresh ``toolgate release init``
release fails its gate (mutation score 100%); a dataset that seeds too little shows the mutants it
lets through, by name; a release that fails its own gate is not scored. The demo releases' scores
are in ``test_gate_mutation_demo.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import cli_env, kv_lines, toolgate

from toolgate.evals.fixtures import dump_cases, load_dataset
from toolgate.evals.mutation import mutate


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path | str]:
    parent = tmp_path_factory.mktemp("mutation")
    (parent / "data").mkdir()
    toolgate(["release", "init", "mutation-tools", "--dir", str(parent)], cli_env(parent / "data"))
    root = parent / "mutation-tools"
    return {
        "data": parent / "data",
        "dataset": root / "gate.jsonl",
        "release": f"{root / 'mutation_tools' / 'release.py'}:release",
    }


def mutate_cli(world: dict[str, Path | str], dataset: Path, *extra: str) -> tuple[int, list[dict[str, str]]]:
    """Exit code and rows; a quoted value (``description="..."``) is read whole as JSON."""
    args = ["evals", "mutate", "--release", str(world["release"]), "--dataset", str(dataset), *extra]
    ran = toolgate(args, cli_env(Path(world["data"])), check=False)
    rows = []
    for line in ran.stdout.splitlines():
        head, quoted, text = line.partition('="')
        if quoted:
            key = head.rsplit(" ", 1)[-1]
            rows.append({**kv_lines(head.rsplit(" ", 1)[0])[0], key: json.loads('"' + text)})
        else:
            rows.extend(kv_lines(line))
    return ran.returncode, rows


def test_every_loosening_of_a_fresh_release_fails_its_gate(scaffolded: dict[str, Path | str]) -> None:
    code, rows = mutate_cli(scaffolded, Path(scaffolded["dataset"]))
    head = rows[0]
    assert code == 0, rows
    assert head["mutation"] == "100.0%" and head["release"] == "mutation-tools/0.1.0"
    assert head["survived"] == "0" and head["killed"] == head["mutants"] and int(head["mutants"]) >= 14
    kinds = {row["kind"]: row["killed"] for row in rows if "kind" in row}
    assert kinds == {
        "approval_widened": "1/1",  # to customer: the role the dataset's people hold
        "approval_window_extended": "1/1",
        "output_bound_raised": "1/1",
        "ownership_dropped": "2/2",
        "rate_limit_raised": "1/1",
        "resources_dropped": "2/2",
        "scope_dropped": "2/2",
        "secrets_reviewed": "1/1",
        "staff_widened": "2/2",
        "write_declared_read": "1/1",
    }
    assert not [row for row in rows if "description" in row]  # no survivor line


def test_a_dataset_that_seeds_too_little_names_the_loosenings_it_lets_through(
    scaffolded: dict[str, Path | str], tmp_path: Path
) -> None:
    """Without a case reading a ticket, nothing probes the read: its loosenings pass the gate."""
    data = load_dataset(Path(scaffolded["dataset"]))
    writes_only = tmp_path / "writes.jsonl"
    writes_only.write_text(dump_cases([c for c in data.cases if c.id != "ticket-read"]), encoding="utf-8")
    code, rows = mutate_cli(scaffolded, writes_only)
    assert code == 1
    head = rows[0]
    assert float(head["mutation"].rstrip("%")) < 100 and int(head["survived"]) >= 4
    survived = {row["survived"]: row["description"] for row in rows if "description" in row}
    assert {
        "scope_dropped:get_ticket:tickets:read",
        "ownership_dropped:get_ticket",
        "resources_dropped:get_ticket",
        "output_bound_raised:get_ticket",
    } <= set(survived)
    assert survived["ownership_dropped:get_ticket"] == "get_ticket reaches any user's resource of the tenant"


def test_a_release_that_fails_its_own_gate_is_not_scored(
    scaffolded: dict[str, Path | str], tmp_path: Path
) -> None:
    data = load_dataset(Path(scaffolded["dataset"]))
    reads_only = tmp_path / "reads.jsonl"
    reads_only.write_text(dump_cases([c for c in data.cases if c.id == "ticket-read"]), encoding="utf-8")
    code, rows = mutate_cli(scaffolded, reads_only)
    assert code == 1
    assert rows[0] == {
        "mutation": "not_scored",
        "release": "mutation-tools/0.1.0",
        "reason": "release_fails_its_own_gate",
    }
    report = mutate(str(scaffolded["release"]), load_dataset(reads_only))
    assert report.base_failures == ["uncovered=1 targets=write:close_ticket"] and report.results == []


def test_only_the_kinds_asked_for_run(scaffolded: dict[str, Path | str]) -> None:
    code, rows = mutate_cli(scaffolded, Path(scaffolded["dataset"]), "--kind", "scope_dropped")
    assert code == 0
    assert rows[0]["mutants"] == "2" and [row["kind"] for row in rows if "kind" in row] == ["scope_dropped"]
