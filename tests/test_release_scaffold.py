"""Bring your own tools: a release scaffolded by ``toolgate release init`` is served by every door.

From a clean directory: ``release init`` writes the package; its generated test passes; with
``TOOLGATE_RELEASE`` pointing at the file, ``registry audit`` passes, people are imported, a
customer's write is proposed (``run``), approved by support (``approve``), executed once
(``resume``); another customer's ticket is refused; and the real ``langgraph dev`` serves the same
release and records it as loaded. Wrong references, a drifted bundle and an unsafe target are
refused with stable errors, changing nothing.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_support import client_as, interrupts_of, langgraph_dev
from support import TEST_KEY, cli_env, kv_lines, open_test_store, toolgate

from toolgate.errors import RegistryError, UnknownReleaseError
from toolgate.graph.bootstrap import initialize_store
from toolgate.policy.identities import IdentityDirectory, load_seed_file
from toolgate.releases.loader import load_release
from toolgate.store import SQLiteStore
from toolgate.testing import open_test_app

NAME = "acme-tools"


@pytest.fixture(scope="module")
def scaffolded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    parent = tmp_path_factory.mktemp("scaffold")
    (parent / "data").mkdir()
    result = toolgate(["release", "init", NAME, "--dir", str(parent)], cli_env(parent / "data"))
    facts = kv_lines(result.stdout)
    assert facts[0]["release"] == f"{NAME}/0.1.0" and facts[0]["tools"] == "close_ticket,get_ticket"
    yield parent / NAME


def reference(root: Path) -> str:
    return f"{root / 'acme_tools' / 'release.py'}:release"


def test_the_generated_package_passes_its_own_test(scaffolded: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=scaffolded,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout


def test_every_cli_door_serves_the_scaffolded_release(scaffolded: Path, tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    env = cli_env(tmp_path / "data", TOOLGATE_RELEASE=reference(scaffolded))
    audit = toolgate(["registry", "audit"], env).stdout.splitlines()
    assert {f"release={NAME}/0.1.0", "manifest=MATCH", "audit=PASS", "tool_count=2"} <= set(audit)
    tokens = {
        f["identity"]: f["token"]
        for f in kv_lines(toolgate(["identities", "import", str(scaffolded / "identities.json")], env).stdout)
    }
    as_ada, as_sam = {**env, "TOOLGATE_TOKEN": tokens["ada"]}, {**env, "TOOLGATE_TOKEN": tokens["sam"]}
    ran = kv_lines(
        toolgate(
            ["run", "--as", "ada", 'call close_ticket {"ticket_id": "T-100", "resolution": "replaced"}'],
            as_ada,
        ).stdout
    )
    assert ran[0]["status"] == "awaiting_approval" and ran[1]["tool"] == "close_ticket"
    toolgate(["approve", ran[1]["proposal"], "--as", "sam"], as_sam)
    resumed = toolgate(["resume", ran[0]["thread"]], env).stdout
    assert "close_ticket" in resumed and "completed" in resumed
    refused = toolgate(["run", "--as", "ada", 'call get_ticket {"ticket_id": "T-101"}'], as_ada).stdout
    assert "rejected (not_owner)" in refused
    store = open_test_store(tmp_path / "data")
    try:
        with store.transaction(write=False) as tx:
            closures = tx.one("SELECT COUNT(*) AS n FROM acme_tools_closures", ())
        assert closures is not None and closures["n"] == 1
        loaded = [e for e in store.audit.events() if e.event == "release.loaded"]
        assert [e.tool_release for e in loaded] == [f"{NAME}/0.1.0"]
        assert not store.proposals.list("pending_approval")
    finally:
        store.close()
    assert "tamper_check=PASS" in toolgate(["audit", "verify", "--as", "sam"], as_sam).stdout


@pytest.mark.server
@pytest.mark.slow
def test_the_langgraph_server_serves_the_scaffolded_release(scaffolded: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    store = SQLiteStore(data / "toolgate.sqlite", key=TEST_KEY)
    release = load_release(reference(scaffolded))
    initialize_store(store, release)
    directory = IdentityDirectory(store)
    for person in load_seed_file(scaffolded / "identities.json"):
        directory.add(person, by=None, token=f"token-of-{person.user_id}-0123456789")
    store.close()
    extra = {"TOOLGATE_RELEASE": reference(scaffolded), "TOOLGATE_AUDIT_KEY": TEST_KEY.decode()}
    with langgraph_dev(tmp_path, extra) as server:
        with client_as(server, None, token="token-of-ada-0123456789") as client:
            thread = client.threads.create()["thread_id"]
            request = 'call close_ticket {"ticket_id": "T-100", "resolution": "replaced"}'
            waiting = client.runs.wait(
                thread, "toolgate", input={"messages": [{"role": "user", "content": request}]}
            )
            assert waiting["status"] == "awaiting_approval", waiting
            proposal = interrupts_of(client.threads.get_state(thread))[0]["value"]["toolgate"]["proposals"][0]
        store = open_test_store(data)
        try:
            from toolgate.graph.review.decisions import decide

            gateway = open_test_app(release=release, store=store, start=False).gateway
            sam = IdentityDirectory(store).authenticate("sam", "token-of-sam-0123456789")
            decide(gateway, proposal["proposal_id"], sam, "approve")
            with client_as(server, None, token="token-of-ada-0123456789") as client:
                done = client.runs.wait(thread, "toolgate", command={"resume": {"wake": True}})
            assert done["status"] == "done", done
            loaded = [e.tool_release for e in store.audit.events() if e.event == "release.loaded"]
            assert loaded == [f"{NAME}/0.1.0"]  # recorded by the server's own bootstrap
            with store.transaction(write=False) as tx:
                closures = tx.one("SELECT COUNT(*) AS n FROM acme_tools_closures", ())
            assert closures is not None and closures["n"] == 1
        finally:
            store.close()


def test_references_that_name_no_release_are_refused_with_their_forms(
    tmp_path: Path, scaffolded: Path
) -> None:
    with pytest.raises(
        UnknownReleaseError, match=re.escape("ops-tools/1.1.0")
    ):  # the message lists installed ids
        load_release("my-tools/1.0.0")
    with pytest.raises(UnknownReleaseError):
        load_release("no_such_package.release:release")
    with pytest.raises(UnknownReleaseError):
        load_release(f"{scaffolded / 'acme_tools' / 'release.py'}:missing")
    with pytest.raises(RegistryError, match="not a toolgate Release"):
        load_release(f"{scaffolded / 'acme_tools' / 'tools.py'}:SUPPORT")
    failed = toolgate(
        ["registry", "audit"], cli_env(tmp_path, TOOLGATE_RELEASE="my-tools/1.0.0"), check=False
    )
    assert failed.returncode == 2 and "error=unknown_release" in failed.stderr
    assert "Traceback" not in failed.stderr


def test_a_drifted_scaffolded_release_refuses_to_serve(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    toolgate(["release", "init", "drift-tools", "--dir", str(tmp_path)], cli_env(tmp_path / "data"))
    tools = tmp_path / "drift-tools" / "drift_tools" / "tools.py"
    env = cli_env(tmp_path / "data", TOOLGATE_RELEASE=f"{tools.parent / 'release.py'}:release")
    tools.write_text(tools.read_text().replace("timeout_s=10", "timeout_s=11"), encoding="utf-8")
    refused_init = toolgate(["init"], env, check=False)  # even the explicit init refuses to serve it
    assert refused_init.returncode == 2 and "drifted from its reviewed manifest" in refused_init.stderr
    assert not (tmp_path / "data" / "toolgate.sqlite").exists()  # refused before the store was touched
    tools.write_text(tools.read_text().replace("timeout_s=11", "timeout_s=10"), encoding="utf-8")
    toolgate(["init"], env)  # the store, made while the release still matched its manifest
    store_files = {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir()}
    tools.write_text(tools.read_text().replace("timeout_s=10", "timeout_s=11"), encoding="utf-8")
    ran = toolgate(["run", "--as", "ada", "call get_ticket {}"], {**env, "TOOLGATE_TOKEN": "x"}, check=False)
    assert ran.returncode == 2 and "drifted from its reviewed manifest" in ran.stderr
    assert "close_ticket: metadata_sha256 drifted" in ran.stderr
    # refused before the store was touched
    assert {p.name: p.read_bytes() for p in (tmp_path / "data").iterdir()} == store_files
    audit = toolgate(["registry", "audit"], env, check=False)
    assert audit.returncode == 1 and "manifest=DRIFT" in audit.stdout


def test_init_refuses_bad_names_and_existing_directories(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    for bad in ("Acme", "a", "acme_tools", "../escape", "acme-"):
        result = toolgate(
            ["release", "init", bad, "--dir", str(tmp_path)], cli_env(tmp_path / "d"), check=False
        )
        assert result.returncode == 2 and "error=configuration_error" in result.stderr, bad
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    result = toolgate(
        ["release", "init", "taken", "--dir", str(tmp_path)], cli_env(tmp_path / "d"), check=False
    )
    assert result.returncode == 2 and "already exists" in result.stderr
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]
