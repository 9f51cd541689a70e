"""The command line as a person meets it (issue 28, item 4): ``--help`` and simple reads import
no graph stack, every refusal is ``error=<code>`` with a stable code (never a class name),
filters are validated, only ``demo``, ``init`` and seeding an empty store's people create a
store, and an empty store says what is likely wrong.

Start-up time itself is measured, not asserted, by ``bench/cli_start.py``; here the behaviour
behind it is checked: which modules a command line imports.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest
from support import TEST_KEY, cli_env, kv_lines, toolgate
from test_store_contract import make_proposal

from toolgate.cli.app import GROUPS, LIST_PAGE, LIST_PAGE_MAX, OPERATION_STATUSES, error_line, group
from toolgate.errors import (
    ConfigurationError,
    DirectInvocationError,
    InvalidTransitionError,
    NotFoundError,
    RegistryError,
    StoreError,
    ToolgateError,
    ToolgateRuntimeError,
    ToolgateUsageError,
    UnknownReleaseError,
)
from toolgate.store import SQLiteStore
from toolgate.store.proposals import PAGE_MAX, PAGE_SIZE
from toolgate.store.records import OperationStatus

HEAVY = ("langgraph", "langchain_core", "langsmith", "toolgate.graph", "psycopg", "rich", "openai")
"""Modules whose import is most of a command's former start-up (the graph stack, a driver)."""

PROBE = """
import json, sys
sys.argv = ["toolgate", *json.loads(sys.argv[1])]
from toolgate.cli.app import main
try:
    main()
except SystemExit:
    pass
print("MODULES=" + json.dumps(sorted(sys.modules)), file=sys.stderr)
"""


def _imported(args: list[str], env: dict[str, str]) -> set[str]:
    """The modules a fresh interpreter holds after ``toolgate ARGS``."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args)], env=env, capture_output=True, text=True, timeout=120
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("MODULES="))
    return set(json.loads(line.removeprefix("MODULES=")))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY))


def _error(result: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    """``(code, message)`` of the one ``error=`` line a refused command prints."""
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("error=")]
    code, _, message = line.removeprefix("error=").partition(" message=")
    return code, json.loads(message)


def _files(root: Path) -> list[Path]:
    return sorted(root.rglob("*"))


def _env(tmp_path: Path) -> dict[str, str]:
    """`cli_env` on an empty data directory (the CLI helper runs commands inside it)."""
    (tmp_path / "data").mkdir(exist_ok=True)
    return cli_env(tmp_path / "data")


def test_help_imports_no_graph_stack_no_settings_and_no_driver(tmp_path: Path) -> None:
    modules = _imported(["--help"], cli_env(tmp_path / "data"))
    assert _heavy(modules) == []
    assert "pydantic" not in modules  # settings are parsed by commands, not by --help
    assert _files(tmp_path) == []


def test_proposals_list_reads_the_store_without_the_graph_stack(tmp_path: Path) -> None:
    env = _env(tmp_path)
    toolgate(["init"], env)
    modules = _imported(["proposals", "list"], env)
    assert _heavy(modules) == []
    assert "toolgate.store.sqlite" in modules  # it did read the store


def test_a_group_is_imported_only_when_its_command_runs(tmp_path: Path) -> None:
    modules = _imported(["audit", "--help"], cli_env(tmp_path / "data"))
    assert "toolgate.cli.audit" in modules
    assert not {"toolgate.cli.evals", "toolgate.cli.release", "toolgate.cli.worker"} & modules


def test_root_help_lists_each_group_with_its_own_help_line() -> None:
    for name, (_, help_line) in GROUPS.items():
        assert group(name).info.help == help_line, name


def test_help_shows_version_as_a_flag_without_a_type(tmp_path: Path) -> None:
    shown = toolgate(["--help"], _env(tmp_path)).stdout
    assert "--version" in shown
    assert "<bool>" not in shown
    assert "identities" in shown and "Manage the people who may act" in shown
    assert "<bool>" not in toolgate(["worker", "run", "--help"], _env(tmp_path)).stdout


def test_operation_statuses_of_the_filter_are_the_store_s() -> None:
    assert get_args(OperationStatus) == OPERATION_STATUSES


def test_the_list_page_bounds_are_the_store_s_and_a_bad_position_is_refused(tmp_path: Path) -> None:
    assert (LIST_PAGE, LIST_PAGE_MAX) == (PAGE_SIZE, PAGE_MAX)
    env = _env(tmp_path)
    toolgate(["init"], env)
    refused = toolgate(["proposals", "list", "--after", "not-a-position"], env, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    code, message = _error(refused)
    assert code == "invalid_filter" and "--after" in message
    too_many = toolgate(["proposals", "list", "--limit", str(LIST_PAGE_MAX + 1)], env, check=False)
    assert too_many.returncode == 2 and too_many.stdout == ""


def test_proposals_list_prints_one_page_and_names_the_next_on_stderr(tmp_path: Path) -> None:
    env = _env(tmp_path)
    toolgate(["init"], env)
    with SQLiteStore(tmp_path / "data" / "toolgate.sqlite", key=TEST_KEY) as store:
        for n in (1, 2, 3):
            store.proposals.create(make_proposal(n))
    first = toolgate(["proposals", "list", "--limit", "2"], env)
    assert [r["proposal"] for r in kv_lines(first.stdout)] == ["prop_test1", "prop_test2"]
    (more,) = [r for r in kv_lines(first.stderr) if "next_after" in r]
    rest = toolgate(["proposals", "list", "--limit", "2", "--after", more["next_after"]], env)
    assert [r["proposal"] for r in kv_lines(rest.stdout)] == ["prop_test3"]
    assert "next_after" not in rest.stderr and "note=no proposals" not in rest.stderr


@pytest.mark.parametrize(
    ("args", "keep_key"),
    [
        (["run", "refund please", "--as", "cust-ada"], False),
        (["run", "refund please", "--as", "cust-ada"], True),
        (["resume", "thread-1"], True),
        (["proposals", "list"], False),
        (["proposals", "list"], True),
        (["proposals", "show", "prop_1"], True),
        (["approve", "prop_1", "--as", "fiona"], True),
        (["audit", "verify", "--as", "audrey"], False),
        (["identities", "list", "--as", "ivy"], True),
        (["deadletter", "list"], True),
        (["worker", "waits"], True),
        (["verify"], True),
    ],
)
def test_a_command_on_a_missing_store_is_refused_store_missing_and_creates_nothing(
    tmp_path: Path, args: list[str], keep_key: bool
) -> None:
    env = _env(tmp_path)
    if not keep_key:  # no TOOLGATE_AUDIT_KEY: the secret would have been generated into the data dir
        env.pop("TOOLGATE_AUDIT_KEY")
    refused = toolgate(args, env, check=False)
    assert refused.returncode == 2
    code, message = _error(refused)
    assert code == "store_missing"
    assert str((tmp_path / "data" / "toolgate.sqlite").absolute()) in message
    assert "toolgate init" in message and "toolgate demo" in message
    assert _files(tmp_path) == [tmp_path / "data"]  # the empty directory it ran in: no store, no secret


def test_init_creates_the_store_and_secret_once_and_then_says_it_is_empty(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.pop("TOOLGATE_AUDIT_KEY")
    first = toolgate(["init"], env).stdout.splitlines()
    assert first[0] == f"store={tmp_path / 'data' / 'toolgate.sqlite'} created=true identities=0"
    assert first[1].startswith("next=") and "identities import" in first[1]
    secret = (tmp_path / "data" / "audit.key").read_bytes()
    again = toolgate(["init"], env).stdout.splitlines()
    assert again[0].endswith("created=false identities=0")
    assert (tmp_path / "data" / "audit.key").read_bytes() == secret  # never a second secret

    listed = toolgate(["proposals", "list"], env)
    assert listed.stdout == ""
    assert "note=no proposals" in listed.stderr

    ran = toolgate(["run", "refund please", "--as", "cust-ada"], {**env, "TOOLGATE_TOKEN": "t" * 20}, check=False)
    assert ran.returncode == 2
    code, message = _error(ran)
    assert code == "no_identities"  # not a bare authentication_failed
    assert "TOOLGATE_DATA_DIR" in message and "identities import" in message


def test_init_never_gives_an_existing_store_a_new_secret(tmp_path: Path) -> None:
    env = _env(tmp_path)
    env.pop("TOOLGATE_AUDIT_KEY")
    toolgate(["init"], env)
    (tmp_path / "data" / "audit.key").unlink()  # the secret is lost; the store is not
    for args in (["init"], ["proposals", "list"], ["run", "hi", "--as", "cust-ada"]):
        refused = toolgate(args, env, check=False)
        code, message = _error(refused)
        assert code == "store_missing", args
        assert "restore that file or set TOOLGATE_AUDIT_KEY" in message
    assert not (tmp_path / "data" / "audit.key").exists()


def test_seeding_people_is_an_explicit_init(tmp_path: Path) -> None:
    env = _env(tmp_path)
    seeded = toolgate(["identities", "seed-demo"], env)
    assert "identity=fiona" in seeded.stdout
    assert (tmp_path / "data" / "toolgate.sqlite").exists()


def test_filters_are_validated_against_the_real_values(tmp_path: Path) -> None:
    env = _env(tmp_path)
    toolgate(["init"], env)
    refused = toolgate(["proposals", "list", "--status", "pending"], env, check=False)
    assert refused.returncode == 2 and refused.stdout == ""
    code, message = _error(refused)
    assert code == "invalid_filter"
    assert "pending_approval" in message and "dead_lettered" in message
    assert "did you mean pending_approval" in message
    assert toolgate(["proposals", "list", "--status", "pending_approval"], env).returncode == 0

    waits = toolgate(["worker", "waits", "--state", "sleeping"], env, check=False)
    assert waits.returncode == 2 and "state must be waiting, ready or resumed" in waits.stderr
    captured = toolgate(["evals", "captured", "list", "--as", "x", "--status", "open"], env, check=False)
    assert _error(captured)[0] == "invalid_filter"
    assert "pending_review" in _error(captured)[1]


def test_former_class_name_errors_print_codes(tmp_path: Path) -> None:
    env = _env(tmp_path)
    toolgate(["init"], env)
    missing = toolgate(["proposals", "show", "prop_nope"], env, check=False)
    assert _error(missing) == ("not_found", "no proposal prop_nope")
    unknown = toolgate(["proposals", "show", "prop_nope"], {**env, "TOOLGATE_RELEASE": "nope/9"}, check=False)
    assert _error(unknown)[0] == "unknown_release"
    not_a_release = toolgate(
        ["proposals", "show", "prop_nope"], {**env, "TOOLGATE_RELEASE": "json:JSONDecoder"}, check=False
    )
    assert _error(not_a_release)[0] == "registry_invalid"
    bad_url = toolgate(["proposals", "list"], {**env, "TOOLGATE_DATABASE_URL": "mysql://db/x"}, check=False)
    assert _error(bad_url)[0] == "configuration_error"
    for result in (missing, unknown, not_a_release, bad_url):
        assert "Error" not in result.stderr  # no class name (NotFoundError, RegistryError, ...)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (NotFoundError("no proposal p"), "not_found"),
        (ConfigurationError("bad"), "configuration_error"),
        (UnknownReleaseError("x/1"), "unknown_release"),
        (RegistryError("bad bundle"), "registry_invalid"),
        (StoreError("disk"), "store_error"),
        (InvalidTransitionError("op_1", "approved", "executing"), "invalid_transition"),
        (DirectInvocationError("issue_refund"), "direct_invocation"),
        (ToolgateUsageError("misuse"), "usage_error"),
        (ToolgateRuntimeError("broke"), "runtime_error"),
        (ToolgateError("plain"), "toolgate_error"),
    ],
)
def test_every_error_line_carries_the_error_s_code(error: ToolgateError, code: str) -> None:
    line = error_line(error)
    assert line == f"error={code} message={json.dumps(str(error))}"
    assert type(error).__name__ not in line.split(" message=")[0]


@pytest.mark.parametrize("ending", ["returns", "refused", "exits", "crashes"])
def test_every_app_a_command_opened_is_closed_however_the_command_ends(
    monkeypatch: pytest.MonkeyPatch, ending: str
) -> None:
    """`closed_at_exit` handed the app to click's current context, which Typer 0.29's vendored
    click never made current for ours: no command ever closed its app (its store's connections
    went back only at the process's exit). `main` now closes them itself."""
    from toolgate.cli import app as cli_app
    from toolgate.cli import common
    from toolgate.errors import NotFoundError

    closed: list[str] = []

    class Opened:
        def __init__(self, name: str, fails: bool = False) -> None:
            self.name, self.fails = name, fails

        def close(self) -> None:
            closed.append(self.name)
            if self.fails:
                raise RuntimeError("a close that fails does not stop the others")

    class Command:
        def main(self, args: list[str], standalone_mode: bool) -> None:
            common.closed_at_exit(Opened("first"))  # type: ignore[arg-type]
            common.closed_at_exit(Opened("second", fails=True))  # type: ignore[arg-type]
            if ending == "refused":
                raise NotFoundError("nothing here")
            if ending == "exits":
                raise SystemExit(75)
            if ending == "crashes":
                raise RuntimeError("a bug")

    monkeypatch.setattr(cli_app, "command_line", lambda args: Command())
    monkeypatch.setattr(sys, "argv", ["toolgate", "--version"])  # no settings read
    raised: BaseException | None = None
    try:
        cli_app.main()
    except BaseException as exc:  # each ending's own exception is checked below
        raised = exc
    assert closed == ["second", "first"] and not common._opened
    expected = {"returns": None, "refused": SystemExit, "exits": SystemExit, "crashes": RuntimeError}[ending]
    assert (type(raised) if raised else None) is expected
