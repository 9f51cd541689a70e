"""The registry audit: is every tool of a bundle reviewable, with no gap left open?

It counts the registry figures and lists each defect: a tool without owner, timeout, output limit,
rollback or no-rollback statement, or approval class for a write; a generic executor under a
friendly name (free-form command, SQL, URL, code, path or template parameters); an identity or
authority field in a schema; a handler resolved dynamically; a hash that drifted from the
reviewed manifest. Specs that refuse to construct are defects too (they fail closed at load).

Probes: does the registry still reject what it must never load? A bundle with no shell tool
proves nothing about the rule that keeps one out. Each probe builds a
tool that breaks one rule, complete in every other respect, and puts it through the same checks a
real bundle meets: a generic executor (``run_shell(command)``) must be found by the audit's
generic-executor rule, and a write whose recovery is unknown (an empty rollback statement) must
refuse to construct. The audit prints ``REJECTED`` only when the probe was refused *and* the
bundle itself holds no such tool, so the seeds' inventory line carries a measured value.
"""

from __future__ import annotations

import functools
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field

from toolgate.errors import RegistryError
from toolgate.tools.code_hash import code_pin, code_target
from toolgate.tools.handler import HandlerContext, StrictArgs, ToolResult
from toolgate.tools.identity_names import is_identity_name
from toolgate.tools.manifest import manifest_drift
from toolgate.tools.schema.quality import release_quality
from toolgate.tools.schema.shape import schema_shape
from toolgate.tools.schema.walk import field_paths
from toolgate.tools.spec import ToolSpec, inventory_text, resource_arguments, spec_problems
from toolgate.tools.write_review import ApprovalClass, NoRollback, Rollback

EXECUTOR_NAMES = frozenset(
    {
        "command",
        "cmd",
        "commands",
        "shell",
        "bash",
        "sql",
        "query_sql",
        "script",
        "code",
        "source",
        "url",
        "uri",
        "href",
        "endpoint",
        "webhook",
        "path",
        "file",
        "filename",
        "filepath",
        "directory",
        "dir",
        "template",
        "expression",
        "expr",
        "eval",
        "exec",
        "module",
        "function",
        "callable",
        "handler",
        "program",
        "args_string",
        "argv",
    }
)
EXECUTOR_SUFFIXES = (
    "_sql",
    "_url",
    "_uri",
    "_path",
    "_command",
    "_cmd",
    "_script",
    "_template",
    "_code_string",
)
DYNAMIC_MARKERS = {
    "getattr(": "resolves code dynamically (getattr)",
    "importlib": "resolves code dynamically (importlib)",
    "__import__": "resolves code dynamically (__import__)",
    "eval(": "evaluates code at run time (eval)",
    "exec(": "executes code at run time (exec)",
    "globals()": "resolves code dynamically (globals)",
    "locals()": "resolves code dynamically (locals)",
    "subprocess": "spawns processes (subprocess)",
    "os.system": "runs shell commands (os.system)",
    "os.popen": "runs shell commands (os.popen)",
}


def identity_fields(spec: ToolSpec) -> list[str]:
    """Argument paths whose names carry identity or authority, less the operator's exemptions.

    Registration already refuses these (`toolgate.tools.spec.identity_problems`); the audit
    reports them for specs built around that check. Fields checked by meaning (caller fields,
    owner-checked resource arguments) are not counted; under ``identity_names="warn"`` the rest
    are load warnings (`ToolSpec.load_warnings`), not defects."""
    checked = spec.identity_exempt | spec.caller_fields | resource_arguments(spec)
    return sorted(
        {
            path
            for path, name, _ in field_paths(spec.contract.json_schema())
            if is_identity_name(name) and path not in checked
        }
    )


def executor_fields(spec: ToolSpec) -> list[str]:
    """Argument paths that make the tool a generic executor (command, SQL, URL, code, path, template)."""
    found: set[str] = set()
    for path, name, node in field_paths(spec.contract.json_schema()):
        lowered = name.casefold()
        fmt = str(node.get("format", "")) if isinstance(node, Mapping) else ""
        if lowered in EXECUTOR_NAMES or lowered.endswith(EXECUTOR_SUFFIXES) or fmt in {"uri", "url", "path"}:
            found.add(path)
    return sorted(found)


def dynamic_handler(spec: ToolSpec) -> str | None:
    """Why the handler is resolved dynamically, or None for a fixed, reviewed function."""
    handler = code_target(spec.handler)  # the code an adapter or wrapper runs, unwrapped
    if isinstance(handler, functools.partial) or not inspect.isfunction(handler):
        return f"handler is a {type(handler).__name__}, not a fixed function"
    try:
        source = inspect.getsource(handler)
    except (OSError, TypeError):
        return "handler source is unavailable for review"
    for marker, reason in DYNAMIC_MARKERS.items():
        if marker in source:
            return f"handler {reason}"
    if re.search(r"\bexec\b|\bcompile\(", source):
        return "handler compiles code at run time"
    return None


@dataclass
class AuditReport:
    """Figures and defects of one bundle."""

    release: str
    tool_count: int = 0
    dynamic_handlers: int = 0
    write_without_approval: int = 0
    timeouts: int = 0
    output_limits: int = 0
    policy_bindings: int = 0
    identity_fields_in_schemas: int = 0
    generic_executors: int = 0
    owners: int = 0
    rollback_statements: int = 0
    complex_schemas: int = 0
    unbounded_arguments: int = 0
    schema_quality: int = 0
    """Tools passing the schema-quality check (`toolgate.tools.schema.quality`); each failure is
    a warning here, and refuses the release's shadow (`toolgate registry lint` shows why)."""
    manifest: str = "NOT_CHECKED"
    inventory: list[str] = field(default_factory=list)
    """One ``tool= risk= approval= timeout=`` line per tool (the seeds' capability inventory)."""
    probes: str = ""
    """The seeds' ``arbitrary_shell= unknown_rollback= registry_candidate=`` line."""
    warnings: list[str] = field(default_factory=list)
    """Shape findings a reviewer should see; never a defect."""
    defects: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when no defect was found."""
        return not self.defects

    def lines(self) -> list[str]:
        """The ``key=value`` figures followed by one ``defect=`` line per defect."""
        n = self.tool_count
        figures = [
            f"release={self.release}",
            f"tool_count={n}",
            f"dynamic_handlers={self.dynamic_handlers}",
            f"write_without_approval={self.write_without_approval}",
            f"timeouts={self.timeouts}/{n}",
            f"output_limits={self.output_limits}/{n}",
            f"policy_bindings={self.policy_bindings}/{n}",
            f"identity_fields_in_schemas={self.identity_fields_in_schemas}",
            f"generic_executors={self.generic_executors}",
            f"owners={self.owners}/{n}",
            f"rollback_statements={self.rollback_statements}/{n}",
            f"complex_schemas={self.complex_schemas}",
            f"unbounded_arguments={self.unbounded_arguments}",
            f"schema_quality={self.schema_quality}/{n}",
            f"manifest={self.manifest}",
        ]
        return (
            figures
            + self.inventory
            + ([self.probes] if self.probes else [])
            + [f"warning={w}" for w in self.warnings]
            + [f"defect={d}" for d in self.defects]
            + [f"audit={'PASS' if self.passed else 'FAIL'}"]
        )


def audit_specs(
    release: str,
    load: Callable[[], Sequence[ToolSpec]],
    *,
    reviewed: Mapping[str, Any] | None = None,
    effective: Callable[[Sequence[ToolSpec]], Mapping[str, Any]] | None = None,
) -> AuditReport:
    """Audit the bundle produced by ``load``; a spec that refuses to construct is reported, not raised."""
    report = AuditReport(release=release)
    try:
        specs = list(load())
    except RegistryError as exc:
        report.tool_count = 1
        codes = [code for code, _ in exc.problems] or ["registry_load"]
        report.write_without_approval += "write_without_approval" in codes
        report.identity_fields_in_schemas += codes.count("identity_argument")
        report.defects.append(f"{exc.tool or 'bundle'}: refused at load: {exc}")
        return report
    report.tool_count = len(specs)
    for spec in specs:
        problems = spec_problems(spec)
        report.defects.extend(f"{spec.name}: {message}" for _, message in problems)
        report.write_without_approval += any(code == "write_without_approval" for code, _ in problems)
        report.timeouts += spec.timeout_s > 0
        report.output_limits += spec.max_output_bytes > 0
        report.policy_bindings += bool(spec.required_scopes)
        report.owners += bool(spec.owner.strip())
        report.rollback_statements += bool(spec.rollback_text().strip())
        if not spec.required_scopes:
            report.defects.append(f"{spec.name}: no authorization binding (required_scopes is empty)")
        identities = identity_fields(spec) if spec.identity_names == "refuse" else []
        if identities:
            report.identity_fields_in_schemas += len(identities)
            report.defects.append(f"{spec.name}: identity or authority in arguments: {', '.join(identities)}")
        executors = executor_fields(spec)
        if executors:
            report.generic_executors += 1
            report.defects.append(f"{spec.name}: generic executor parameters: {', '.join(executors)}")
        dynamic = dynamic_handler(spec)
        if dynamic:
            report.dynamic_handlers += 1
            report.defects.append(f"{spec.name}: {dynamic}")
        _shape(report, spec)
    for quality in release_quality(specs):
        report.schema_quality += quality.passed
        report.warnings.extend(f"{quality.name}: schema quality: {problem}" for problem in quality.problems)
    _probes(report)
    if reviewed is not None and effective is not None:
        drift = manifest_drift(reviewed, effective(specs))
        report.manifest = "MATCH" if not drift else "DRIFT"
        report.defects.extend(f"manifest: {d}" for d in drift)
    return report


def _shape(report: AuditReport, spec: ToolSpec) -> None:
    """The tool's inventory line, and its schema's complexity and unbounded arguments."""
    pin = code_pin(spec.handler)  # a remote tool's definition as loaded (an MCP tool's)
    report.inventory.append(
        f"tool={spec.wire_name} risk={spec.risk} approval={spec.approval.describe().replace(' ', '')}"
        f" timeout={spec.timeout_s:g}s{inventory_text(spec)}{f' pin={pin}' if pin else ''}"
    )
    shape = schema_shape(spec.contract.json_schema())
    report.complex_schemas += shape.complex
    report.warnings.extend(f"{spec.name}: {warning}" for warning in shape.warnings())
    report.warnings.extend(f"{spec.name}: {warning}" for warning in spec.load_warnings)
    if shape.unbounded:
        report.unbounded_arguments += len(shape.unbounded)
        report.defects.append(
            f"{spec.name}: unbounded arguments (give each an enum, pattern, format or maximum length,"
            f" and arrays maximum items): {', '.join(shape.unbounded)}"
        )


def audit_overrides(report: AuditReport, overrides: Mapping[str, Mapping[str, ToolSpec]]) -> None:
    """Each tenant's own implementation audited like a tool's handler, with one inventory line
    (``override= tenant= handler= reach=``) so a reviewer sees who runs what with which credential."""
    for tenant, by_name in sorted(overrides.items()):
        for name, spec in sorted(by_name.items()):
            reach = [*sorted(spec.forwarded_credentials)]
            if spec.service_credential is not None:
                reach.append(f"service:{spec.service_credential.audience}")
            report.inventory.append(
                f"override={spec.wire_name} tenant={tenant} handler={spec.handler_revision}"
                f" reach={','.join(reach) or 'none'} egress={','.join(sorted(spec.egress_hosts)) or 'none'}"
            )
            problems = [message for _, message in spec_problems(spec)]
            dynamic = dynamic_handler(spec)
            report.dynamic_handlers += dynamic is not None
            report.defects.extend(
                f"{name} for tenant {tenant}: {m}" for m in [*problems, *([dynamic] if dynamic else [])]
            )


def _probes(report: AuditReport) -> None:
    """The seeds' rejection line: measured by the probes, and PRESENT when the bundle itself holds one."""
    shell = "PRESENT" if report.generic_executors else arbitrary_shell_probe(executor_fields)
    rollback = "PRESENT" if report.rollback_statements < report.tool_count else unknown_rollback_probe()
    report.probes = f"arbitrary_shell={shell} unknown_rollback={rollback} registry_candidate={report.release}"
    if shell == "ACCEPTED" or rollback == "ACCEPTED":
        report.defects.append(f"registry: a rule that must reject is not active ({report.probes})")


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


__all__ = [
    "AuditReport",
    "ProbeResult",
    "arbitrary_shell_probe",
    "audit_overrides",
    "audit_specs",
    "dynamic_handler",
    "executor_fields",
    "identity_fields",
    "unknown_rollback_probe",
]
