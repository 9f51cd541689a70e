"""The order the suite's files start in: the slowest first (scripts/run-tests.sh).

pytest-xdist (``--dist loadfile``) hands whole files to its workers in collection order, each
worker taking the next file as it frees up. A long file that starts late runs alone at the end
while the other workers have nothing left to do; started first, it runs beside the many short
files, which then fill the other workers to the end (longest first). xdist's own order (files
with the most tests first) is switched off there (``--no-loadscope-reorder``) so that this one
holds.

`SLOWEST` names the files that took longest in a whole run (`make test`; ``python
scripts/suite_profile.py .build/test-durations.txt`` prints the slowest files), slowest first.
Every other file keeps its place after them, and the tests of a file keep theirs. A stale or
missing entry only moves a file in the queue: every test still runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

SLOWEST: tuple[str, ...] = (
    "test_evals_capture.py",  # 337 s
    "test_evals_gate.py",  # 289 s
    "test_mcp_drift.py",  # 225 s
    "test_verify.py",  # 184 s
    "test_release_control_cli.py",  # 182 s
    "test_release_control_rollback.py",  # 174 s
    "test_gate_derived.py",  # 165 s
    "test_release_evidence.py",  # 161 s
    "test_readme_commands.py",  # 160 s
    "test_worker_run.py",  # 158 s
    "test_mcp_serve.py",  # 140 s
    "test_gate_mutation_demo.py",  # 130 s
    "test_public_corpus.py",  # 129 s
    "test_state_tampering.py",  # 126 s
    "test_records_confinement.py",  # 114 s
    "test_gate_mutation_demo_wide.py",  # 102 s
    "test_clock_skew.py",  # 98 s
    "test_server_tampering.py",  # 90 s
    "test_cost_gate.py",  # 89 s
    "test_thread_pinning.py",  # 84 s
    "test_hostile_input.py",  # 79 s
    "test_guard_snapshots.py",  # 78 s
    "test_reconcile_delegation.py",  # 75 s
    "test_otel_env.py",  # 74 s
    "test_evals_review.py",  # 74 s
    "test_http_api.py",  # 71 s
    "test_audit_access.py",  # 71 s
    "test_store_contract.py",  # 70 s
    "test_schema_semantics.py",  # 70 s
    "test_hitl.py",  # 67 s
    "test_cli_doors.py",  # 66 s
    "test_sign_in_throttle.py",  # 61 s
    "test_multiprocess.py",  # 60 s
    "test_release_control_stop.py",  # 60 s
    "test_wait_delegation.py",  # 56 s
    "test_console_browser.py",  # 56 s
    "test_ownership.py",  # 54 s
    "test_model_response_fold.py",  # 54 s
    "test_registry_fields.py",  # 53 s
)
"""File names (``test_x.py``), slowest first, with each file's seconds (setup, call and teardown of
all its tests) in the parallel phase of `make test` on c7a611b, on 2 cores shared with other work
(load 10-25, so about twice CI's); the list runs down to files of about 50 s."""


def slowest_first(items: list[pytest.Item], slowest: Sequence[str] = SLOWEST) -> None:
    """Reorder ``items`` in place: the files of ``slowest`` first, in its order; a stable sort,
    so every other file and the tests inside each file keep their order."""
    rank = {name: place for place, name in enumerate(slowest)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
