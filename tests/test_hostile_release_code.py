"""A release is code loaded into the gateway, and untrusted like any: whatever its import, its
factory or its tool factories raise (a `SystemExit` included) or return, the door that asked for
it refuses the release with ``registry_invalid`` naming it, and nothing else happens. Before,
``TOOLGATE_RELEASE=json:dumps`` ended every command with a ``TypeError`` traceback, and a pinned
release whose factory raised a ``TypeError`` would have ended the run that routed to it (the
router only contains `ToolgateError` and `ImportError`)."""

from __future__ import annotations

import dataclasses
import secrets
import textwrap
from pathlib import Path

import pytest
from support import TEST_KEY, cli_env, toolgate

from toolgate.errors import RegistryError, UnknownReleaseError
from toolgate.releases.bundle import ReleaseEnv
from toolgate.releases.loader import load_release
from toolgate.store.sqlite import SQLiteStore
from toolgate.tools.demo.release import wide

HOSTILE = textwrap.dedent(
    """
    import sys

    from toolgate.tools.demo.release import wide

    def raises_type_error():
        raise TypeError("a factory with a bug")

    def exits():
        sys.exit(3)

    def returns_a_dict():
        return {"id": "ops-tools/9.9.9"}

    released = wide
    """
)


@pytest.fixture
def hostile_module(tmp_path: Path) -> Path:
    package = tmp_path / "hostile_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "releases.py").write_text(HOSTILE)
    (package / "broken_import.py").write_text("raise RuntimeError('import-time failure')\n")
    return package


@pytest.mark.parametrize(
    ("attribute", "named"),
    [("raises_type_error", "TypeError: a factory with a bug"), ("exits", "SystemExit: 3")],
)
def test_a_factory_that_raises_is_refused_registry_invalid_naming_the_release(
    hostile_module: Path, attribute: str, named: str
) -> None:
    reference = f"{hostile_module / 'releases.py'}:{attribute}"
    with pytest.raises(RegistryError) as refused:
        load_release(reference)
    assert refused.value.code == "registry_invalid"
    assert reference in str(refused.value) and named in str(refused.value)


def test_a_factory_that_returns_something_else_is_refused(hostile_module: Path) -> None:
    with pytest.raises(RegistryError, match="is a dict, not a toolgate Release") as refused:
        load_release(f"{hostile_module / 'releases.py'}:returns_a_dict")
    assert refused.value.code == "registry_invalid"


def test_a_module_that_fails_at_import_is_refused_and_a_missing_one_is_unknown(hostile_module: Path) -> None:
    with pytest.raises(RegistryError, match="RuntimeError: import-time failure") as refused:
        load_release(f"{hostile_module / 'broken_import.py'}:anything")
    assert refused.value.code == "registry_invalid"
    with pytest.raises(UnknownReleaseError):
        load_release(f"{hostile_module / 'absent.py'}:anything")
    with pytest.raises(UnknownReleaseError):
        load_release("no_such_package_anywhere:release")
    assert load_release(f"{hostile_module / 'releases.py'}:released") is wide  # the good one still loads


@pytest.mark.parametrize(
    ("tools", "named"),
    [
        (lambda env: 1 / 0, "ZeroDivisionError"),
        (lambda env: (_ for _ in ()).throw(SystemExit(4)), "SystemExit: 4"),
        (lambda env: 42, "TypeError"),  # not a collection
        (lambda env: ["not a spec"], "a str among its tools, not a ToolSpec"),
    ],
)
def test_tool_factories_that_raise_or_return_junk_are_refused(tmp_path: Path, tools: object, named: str) -> None:
    release = dataclasses.replace(wide, id="ops-tools/9.9.9-hostile", tools=tools, manifest=None)
    key = secrets.token_bytes(32)
    with pytest.raises(RegistryError) as refused:
        release.registry(ReleaseEnv(SQLiteStore(tmp_path / "s.sqlite", key=key), secret=key))
    assert refused.value.code == "registry_invalid" and named in str(refused.value)


def test_the_cli_refuses_a_release_that_is_not_one_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    env = cli_env(tmp_path / "data")
    toolgate(["init"], env)
    store = SQLiteStore(tmp_path / "data" / "toolgate.sqlite", key=TEST_KEY)
    before = store.audit.events()
    refused = toolgate(["registry", "audit"], {**env, "TOOLGATE_RELEASE": "json:dumps"}, check=False)
    assert refused.returncode == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "error=registry_invalid" in refused.stderr and "json:dumps" in refused.stderr
    assert store.audit.events() == before
