"""Settings: every ``TOOLGATE_*`` variable declared once, read when a command runs, refused in one line.

Through the real CLI in a separate process: a bad value is one line on stderr naming the variable
and the form it expects, exit code 2, and nothing written; ``--help`` and ``--version`` work with
any environment; a good value is honoured. In process: the defaults are the documented ones, and
the LangGraph server's entry points refuse a bad value with the same line.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from support import REFUND_REQUEST, REPO, cli_env, kv_lines, seed_people, toolgate

from toolgate.config import Settings
from toolgate.graph import Context
from toolgate.graph.server.process import SERVER_DATA_DIR, server_parts
from toolgate.settings import DEFAULT_RELEASE, VARIABLES, InvalidSetting, read_settings, setting

SHORT_SECRET = "short-secret"
"""A store secret under 16 bytes: refused, and never printed."""


def files(data_dir: Path) -> dict[str, bytes]:
    """Every file under ``data_dir`` with its bytes (what "nothing is written" compares)."""
    return {str(p.relative_to(data_dir)): p.read_bytes() for p in sorted(data_dir.rglob("*")) if p.is_file()}


def run_each(runs: list[tuple[list[str], dict[str, str]]]) -> list[subprocess.CompletedProcess[str]]:
    """Independent ``toolgate`` runs, one after another."""
    return [toolgate(*run, check=False) for run in runs]


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """No ``TOOLGATE_*`` variable set in this process."""
    for name in VARIABLES:
        monkeypatch.delenv(name, raising=False)
    yield monkeypatch


# ---- the CLI ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variable", "value", "args", "line"),
    [
        (
            "TOOLGATE_MAX_MODEL_TURNS",
            "eight",
            ["run", REFUND_REQUEST, "--as", "cust-ada"],
            "toolgate: TOOLGATE_MAX_MODEL_TURNS must be an integer >= 1 (got 'eight')",
        ),
        (
            "TOOLGATE_RECONCILE_DELAYS",
            "1,2,soon",
            ["worker", "recover"],
            "toolgate: TOOLGATE_RECONCILE_DELAYS must be comma-separated numbers of seconds >= 0, "
            "e.g. 1,2,4,8,16 (got '1,2,soon')",
        ),
        (
            "TOOLGATE_WAKER_INTERVAL_S",
            "-1",
            ["proposals", "list"],
            "toolgate: TOOLGATE_WAKER_INTERVAL_S must be a number of seconds >= 0 (got '-1')",
        ),
        (
            "TOOLGATE_ALLOW_MODEL_REQUESTS",
            "maybe",
            ["audit", "retention"],
            "toolgate: TOOLGATE_ALLOW_MODEL_REQUESTS must be 1 or 0 (got 'maybe')",
        ),
        (
            "TOOLGATE_AUDIT_KEY",
            SHORT_SECRET,
            ["audit", "verify"],
            "toolgate: TOOLGATE_AUDIT_KEY must be at least 16 bytes",
        ),
    ],
)
def test_a_bad_value_is_one_line_exit_2_and_nothing_is_written(
    tmp_path: Path, variable: str, value: str, args: list[str], line: str
) -> None:
    seed_people(tmp_path)
    before = files(tmp_path)
    result = toolgate(args, cli_env(tmp_path, **{variable: value}), check=False)
    assert result.returncode == 2
    assert result.stderr == line + "\n"
    assert result.stdout == ""
    assert files(tmp_path) == before


def test_a_command_that_writes_first_is_stopped_before_it_writes(tmp_path: Path) -> None:
    target = tmp_path / "releases"
    target.mkdir()
    result = toolgate(
        ["release", "init", "acme-tools", "--dir", str(target)],
        cli_env(tmp_path, TOOLGATE_MAX_CALLS_PER_TURN="many"),
        check=False,
    )
    assert (result.returncode, result.stderr) == (
        2,
        "toolgate: TOOLGATE_MAX_CALLS_PER_TURN must be an integer >= 1 (got 'many')\n",
    )
    assert list(target.iterdir()) == []


def test_version_prints_the_installed_version_whatever_the_settings(tmp_path: Path) -> None:
    envs = [cli_env(tmp_path), cli_env(tmp_path, TOOLGATE_MAX_MODEL_TURNS="eight")]
    for result in run_each([(["--version"], env) for env in envs]):
        assert (result.returncode, result.stdout, result.stderr) == (
            0,
            f"toolgate {version('langgraph-toolgate')}\n",
            "",
        )


def test_help_works_with_a_bad_value(tmp_path: Path) -> None:
    env = cli_env(tmp_path, TOOLGATE_MAX_MODEL_TURNS="eight", TOOLGATE_MODEL_MAX_TOKENS="lots")
    usages = {
        "toolgate [OPTIONS] COMMAND [ARGS]...": ["--help"],
        "toolgate run [OPTIONS]": ["run", "--help"],
        "toolgate registry audit [OPTIONS]": ["registry", "audit", "--help"],
    }
    results = run_each([(args, env) for args in usages.values()])
    for usage, result in zip(usages, results, strict=True):
        assert (result.returncode, result.stderr) == (0, ""), usage
        assert usage in result.stdout, usage
    assert files(tmp_path) == {}


def test_a_good_value_is_honoured(tmp_path: Path) -> None:
    seed_people(tmp_path)
    default = toolgate(["audit", "retention", "--as", "otto"], cli_env(tmp_path))
    assert kv_lines(default.stdout)[0]["older_than_days"] == "90.0"
    configured = toolgate(
        ["audit", "retention", "--as", "otto"], cli_env(tmp_path, TOOLGATE_AUDIT_RETENTION_DAYS="30")
    )
    assert kv_lines(configured.stdout)[0]["older_than_days"] == "30.0"
    given = toolgate(
        ["audit", "retention", "--older-than-days", "7", "--as", "otto"],
        cli_env(tmp_path, TOOLGATE_AUDIT_RETENTION_DAYS="30"),
    )
    assert kv_lines(given.stdout)[0]["older_than_days"] == "7.0"


# ---- in process ---------------------------------------------------------------------------------


def test_defaults_are_unchanged(clean_env: pytest.MonkeyPatch) -> None:
    context = Context()
    assert (
        context.max_model_turns,
        context.max_tool_calls,
        context.max_calls_per_turn,
        context.deadline_s,
        context.max_validation_retries,
        context.max_identical_calls,
        context.reconcile_delays,
        context.max_parallel_calls,
        context.batch_deadline_s,
        context.claim_lease_s,
        context.duplicate_wait_s,
    ) == (24, 40, 32, 300.0, 2, 2, (1.0, 2.0, 4.0, 8.0, 16.0), 5, 120.0, 60.0, 30.0)
    settings = Settings.from_env()
    assert settings == Settings(data_dir=Path(".toolgate"))
    assert (settings.model, settings.model_max_tokens, settings.release, settings.allow_model_requests) == (
        "offline",
        800,
        "ops-tools/1.1.0",
        True,
    )
    values = read_settings()
    assert (values.audit_retention_days, values.waker_interval_s, values.token, values.audit_key) == (
        90.0,
        2.0,
        None,
        None,
    )
    assert Settings.from_env(default_data_dir=SERVER_DATA_DIR).data_dir == SERVER_DATA_DIR


def test_the_default_release_is_the_demo_chosen_by_its_id() -> None:
    """A bare ``toolgate run`` serves the demo's wide release: the entry point's choice, by id,
    resolved through the entry point the demo registers like any other release package; reading
    settings imports nothing of the demo."""
    from toolgate.releases.loader import load_release
    from toolgate.tools.demo import WIDE_RELEASE
    from toolgate.tools.demo.release import wide

    assert DEFAULT_RELEASE == WIDE_RELEASE
    assert load_release(DEFAULT_RELEASE) is wide
    script = (
        "import sys, toolgate.config; print(any(m.startswith('toolgate.tools.demo') for m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "False"


def test_the_context_takes_its_knobs_from_the_environment_when_made(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TOOLGATE_MAX_MODEL_TURNS", "3")
    clean_env.setenv("TOOLGATE_RECONCILE_DELAYS", "0.5, 1")
    clean_env.setenv("TOOLGATE_CLAIM_LEASE_S", "")  # empty counts as unset
    context = Context()
    assert (context.max_model_turns, context.reconcile_delays, context.claim_lease_s) == (3, (0.5, 1.0), 60.0)
    assert Context(max_model_turns=9).max_model_turns == 9
    clean_env.setenv("TOOLGATE_MAX_MODEL_TURNS", "0")
    with pytest.raises(InvalidSetting) as refused:
        Context()
    assert str(refused.value) == "TOOLGATE_MAX_MODEL_TURNS must be an integer >= 1 (got '0')"
    assert refused.value.variable == "TOOLGATE_MAX_MODEL_TURNS"


FORMS = [
    ("TOOLGATE_MODEL_MAX_TOKENS", "8k", "an integer >= 1 (got '8k')"),
    ("TOOLGATE_MAX_VALIDATION_RETRIES", "-1", "an integer >= 0 (got '-1')"),
    ("TOOLGATE_DEADLINE_S", "0", "a number of seconds > 0 (got '0')"),
    ("TOOLGATE_BATCH_DEADLINE_S", "inf", "a number of seconds > 0 (got 'inf')"),
    ("TOOLGATE_DUPLICATE_WAIT_S", "nan", "a number of seconds >= 0 (got 'nan')"),
    ("TOOLGATE_AUDIT_RETENTION_DAYS", "a year", "a number of days >= 0 (got 'a year')"),
    (
        "TOOLGATE_RECONCILE_DELAYS",
        "1,,2",
        "comma-separated numbers of seconds >= 0, e.g. 1,2,4,8,16 (got '1,,2')",
    ),
    (
        "TOOLGATE_MODEL",
        "gpt-4.1",
        "'offline' or 'provider:model', e.g. 'openai:gpt-4.1-mini' (got 'gpt-4.1')",
    ),
    ("TOOLGATE_AUDIT_KEY", "fifteen-bytes!!", "at least 16 bytes"),
    ("TOOLGATE_OPENAI_API", "completions", "'responses' or 'chat' (got 'completions')"),
    ("TOOLGATE_SIGN_IN_WINDOW_S", "0", "an integer of seconds, 1..86400 (got '0')"),
    ("TOOLGATE_SIGN_IN_WINDOW_S", "86401", "an integer of seconds, 1..86400 (got '86401')"),
]
"""A bad value of each form, and what its message says after ``VARIABLE must be``."""


@pytest.mark.parametrize(("variable", "value", "expected"), FORMS)
def test_each_form_is_named_in_its_message(variable: str, value: str, expected: str) -> None:
    with pytest.raises(InvalidSetting) as refused:
        read_settings({variable: value})
    assert (str(refused.value), refused.value.variable) == (f"{variable} must be {expected}", variable)


def test_the_first_bad_variable_is_named_and_others_are_read_as_given() -> None:
    with pytest.raises(InvalidSetting) as refused:
        read_settings({"TOOLGATE_MAX_TOOL_CALLS": "x", "TOOLGATE_CLAIM_LEASE_S": "y"})
    assert str(refused.value) == "TOOLGATE_MAX_TOOL_CALLS must be an integer >= 1 (got 'x')"
    values = read_settings(
        {
            "TOOLGATE_ALLOW_MODEL_REQUESTS": "0",
            "TOOLGATE_TOKEN": "tg_secret",
            "TOOLGATE_IDENTITIES": "ignored",
        }
    )
    assert values.allow_model_requests is False
    assert values.token is not None and values.token.get_secret_value() == "tg_secret"
    assert "tg_secret" not in repr(values)


def test_setting_reads_one_variable(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("TOOLGATE_MAX_TOOL_CALLS", "not checked by a read of another variable")
    clean_env.setenv("TOOLGATE_MAX_PARALLEL_CALLS", "7")
    assert setting("max_parallel_calls") == 7
    with pytest.raises(InvalidSetting) as refused:
        setting("max_tool_calls")
    assert refused.value.variable == "TOOLGATE_MAX_TOOL_CALLS"


# ---- the LangGraph server ---------------------------------------------------------------------


def test_the_server_refuses_a_bad_value_before_it_opens_anything(
    tmp_path: Path, clean_env: pytest.MonkeyPatch
) -> None:
    clean_env.setenv("TOOLGATE_DATA_DIR", str(tmp_path))
    clean_env.setenv("TOOLGATE_MAX_MODEL_TURNS", "eight")
    server_parts.cache_clear()
    try:
        with pytest.raises(InvalidSetting) as refused:
            server_parts()
    finally:
        server_parts.cache_clear()
    assert str(refused.value) == "TOOLGATE_MAX_MODEL_TURNS must be an integer >= 1 (got 'eight')"
    assert files(tmp_path) == {}


@pytest.mark.parametrize(
    ("module", "variable", "value", "line"),
    [
        (
            "toolgate.graph.server.app",
            "TOOLGATE_AUDIT_KEY",
            SHORT_SECRET,
            "toolgate.settings.InvalidSetting: TOOLGATE_AUDIT_KEY must be at least 16 bytes",
        ),
        (
            "toolgate.graph.server.http",
            "TOOLGATE_WAKER_INTERVAL_S",
            "soon",
            "toolgate.settings.InvalidSetting: TOOLGATE_WAKER_INTERVAL_S must be a number of seconds >= 0 "
            "(got 'soon')",
        ),
    ],
)
def test_the_server_entry_points_fail_to_load_with_the_one_line(
    tmp_path: Path, module: str, variable: str, value: str, line: str
) -> None:
    """What ``langgraph.json`` names is imported by the server: the import itself refuses."""
    env = cli_env(tmp_path, **{variable: value})
    result = subprocess.run(
        [sys.executable, "-c", f"import {module}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == line
    assert SHORT_SECRET not in result.stderr
    assert files(tmp_path) == {}


# ---- documentation ----------------------------------------------------------------------------


def test_the_readme_lists_every_setting() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert [name for name in VARIABLES if f"| `{name}` |" not in readme] == []
