"""The registry audit's probes: does the registry still reject what it must never load?

A bundle with no shell tool proves nothing about the rule that keeps one out. Each probe builds a
tool that breaks one rule, complete in every other respect, and puts it through the same checks a
real bundle meets: a generic executor (``run_shell(command)``) must be found by the audit's
generic-executor rule, and a write whose recovery is unknown (an empty rollback statement) must
refuse to construct. The audit prints ``REJECTED`` only when the probe was refused *and* the
bundle itself holds no such tool, so the seeds' inventory line carries a measured value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from pydantic import Field

from toolgate.errors import RegistryError
from toolgate.tools.handler import HandlerContext, StrictArgs, ToolResult
from toolgate.tools.spec import ToolSpec
from toolgate.tools.write_review import ApprovalClass, NoRollback, Rollback

ProbeResult = Literal["REJECTED", "ACCEPTED"]


class _ShellArgs(StrictArgs):
    command: str = Field(max_length=200, description="Shell command to run.")


class _Done(ToolResult):
    ok: bool


def _never(args: object, ctx: HandlerContext) -> _Done:  # never called: the probes only register
    raise AssertionError("a registry probe's handler ran")


def _probe(**overrides: object) -> ToolSpec:
    fields: dict[str, object] = {
        "name": "registry_probe",
        "version": "0.0.0",
        "owner": "toolgate-registry-audit",
        "description": "A probe of the registry audit; never offered to a model.",
        "args_model": _ShellArgs,
        "result_model": _Done,
        "risk": "read-only",
        "effect": "None: the probe is only registered, never run.",
        "timeout_s": 1,
        "max_output_bytes": 64,
        "approval": ApprovalClass.none(),
        "required_scopes": frozenset({"probe:read"}),
        "handler": _never,
        "handler_revision": "registry-probe/0",
        "rollback": NoRollback("read-only: nothing to undo"),
    }
    fields.update(overrides)
    return ToolSpec(**fields)  # type: ignore[arg-type]


def arbitrary_shell_probe(executor_fields: Callable[[ToolSpec], list[str]]) -> ProbeResult:
    """``REJECTED`` when the audit's generic-executor rule (``executor_fields``) finds
    ``run_shell(command)``."""
    try:
        spec = _probe(name="run_shell")
    except RegistryError:
        return "REJECTED"
    return "REJECTED" if executor_fields(spec) else "ACCEPTED"


def unknown_rollback_probe() -> ProbeResult:
    """``REJECTED`` when a write with an empty rollback statement refuses to construct."""
    try:
        _probe(
            name="restart_probe",
            risk="caution",
            approval=ApprovalClass.role("operator"),
            rollback=Rollback(statement=""),
        )
    except RegistryError as exc:
        return "REJECTED" if any(code == "missing_rollback" for code, _ in exc.problems) else "ACCEPTED"
    return "ACCEPTED"


__all__ = ["ProbeResult", "arbitrary_shell_probe", "unknown_rollback_probe"]
