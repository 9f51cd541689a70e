"""Where the modules of the previous layout went (issue 26 moved them into subpackages), so code
written against it (a team's release package, an integrator's harness, a deployment's
``langgraph.json``) keeps importing while it moves over.

An old module name imports the module that now holds its code, with a `DeprecationWarning` naming
the new one: ``import toolgate.tools.shapes_functions`` is ``toolgate.tools.shapes.functions``. A
name that became a package (``toolgate.graph.review``, ``toolgate.cli``, ...) keeps answering the
old module's attributes the same way (``toolgate.graph.review.decide``). Nothing inside toolgate
uses these names (the suite turns the warning into an error), and a test imports every one of them.
Installed once, by ``toolgate/__init__.py``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

MOVED_MODULES: dict[str, str] = {
    "toolgate.anthropic_property_keys": "toolgate.models.anthropic_property_keys",
    "toolgate.cli_audit": "toolgate.cli.audit",
    "toolgate.cli_captured": "toolgate.cli.captured",
    "toolgate.cli_common": "toolgate.cli.common",
    "toolgate.cli_deadletter": "toolgate.cli.deadletter",
    "toolgate.cli_dispatch": "toolgate.cli.dispatch",
    "toolgate.cli_evals": "toolgate.cli.evals",
    "toolgate.cli_identities": "toolgate.cli.identities",
    "toolgate.cli_registry": "toolgate.cli.registry",
    "toolgate.cli_release": "toolgate.cli.release",
    "toolgate.cli_report": "toolgate.cli.report",
    "toolgate.cli_verify": "toolgate.cli.verify",
    "toolgate.cli_waits": "toolgate.cli.waits",
    "toolgate.cli_worker": "toolgate.cli.worker",
    "toolgate.evals.adversarial_arguments": "toolgate.evals.adversarial.arguments",
    "toolgate.evals.adversarial_authority": "toolgate.evals.adversarial.authority",
    "toolgate.evals.adversarial_baseline": "toolgate.evals.adversarial.baseline",
    "toolgate.evals.adversarial_case": "toolgate.evals.adversarial.case",
    "toolgate.evals.adversarial_injection": "toolgate.evals.adversarial.injection",
    "toolgate.evals.adversarial_names": "toolgate.evals.adversarial.names",
    "toolgate.evals.adversarial_rules": "toolgate.evals.adversarial.rules",
    "toolgate.evals.captured_export": "toolgate.evals.captured.export",
    "toolgate.evals.captured_review": "toolgate.evals.captured.review",
    "toolgate.evals.captured_rows": "toolgate.evals.captured.rows",
    "toolgate.evals.dataset_build": "toolgate.evals.dataset.build",
    "toolgate.evals.dataset_cases_approvals": "toolgate.evals.dataset.approvals",
    "toolgate.evals.dataset_cases_arguments": "toolgate.evals.dataset.arguments",
    "toolgate.evals.dataset_cases_batches": "toolgate.evals.dataset.batches",
    "toolgate.evals.dataset_cases_budgets": "toolgate.evals.dataset.budgets",
    "toolgate.evals.dataset_cases_delivery": "toolgate.evals.dataset.delivery",
    "toolgate.evals.dataset_cases_injection": "toolgate.evals.dataset.injection",
    "toolgate.evals.dataset_cases_refusal": "toolgate.evals.dataset.refusal",
    "toolgate.evals.dataset_cases_selection": "toolgate.evals.dataset.selection",
    "toolgate.evals.dataset_cases_tenancy": "toolgate.evals.dataset.tenancy",
    "toolgate.evals.dataset_helpers": "toolgate.evals.dataset.helpers",
    "toolgate.evals.dispatch_runner": "toolgate.evals.adversarial.runner",
    "toolgate.evals.incident_case": "toolgate.evals.captured.incident_case",
    "toolgate.evals.incident_records": "toolgate.evals.captured.incident_records",
    "toolgate.graph.api_access": "toolgate.graph.server.access",
    "toolgate.graph.api_decisions": "toolgate.graph.server.decisions",
    "toolgate.graph.api_reads": "toolgate.graph.server.reads",
    "toolgate.graph.api_serving": "toolgate.graph.server.serving",
    "toolgate.graph.app": "toolgate.graph.server.app",
    "toolgate.graph.auth": "toolgate.graph.server.auth",
    "toolgate.graph.batch": "toolgate.graph.nodes.batch",
    "toolgate.graph.capability_audit": "toolgate.graph.delivery.capability_audit",
    "toolgate.graph.claimed_write": "toolgate.graph.delivery.claimed_write",
    "toolgate.graph.dead_letters": "toolgate.graph.delivery.dead_letters",
    "toolgate.graph.delegation": "toolgate.graph.delivery.delegation",
    "toolgate.graph.delivery_checks": "toolgate.policy.authority",
    "toolgate.graph.delivery_refusals": "toolgate.policy.authority",
    "toolgate.graph.edits": "toolgate.graph.review.edits",
    "toolgate.graph.execution": "toolgate.graph.delivery.executor",
    "toolgate.graph.guard": "toolgate.graph.seals.guard",
    "toolgate.graph.handler_scope": "toolgate.graph.delivery.handler_scope",
    "toolgate.graph.delivery.handlers": "toolgate.tools.loaded_code",
    "toolgate.graph.handlers": "toolgate.tools.loaded_code",
    "toolgate.graph.hitl": "toolgate.graph.review.hitl",
    "toolgate.graph.http": "toolgate.graph.server.http",
    "toolgate.graph.prompt_cache": "toolgate.graph.nodes.prompt_cache",
    "toolgate.graph.proposal_cache": "toolgate.graph.review.proposal_cache",
    "toolgate.graph.proposals": "toolgate.graph.review.proposals",
    "toolgate.graph.recent_seals": "toolgate.graph.seals.recent",
    "toolgate.graph.recovery": "toolgate.graph.delivery.recovery",
    "toolgate.graph.release_loaded": "toolgate.graph.rollout.loaded",
    "toolgate.graph.release_manifest": "toolgate.graph.rollout.manifest",
    "toolgate.graph.review_facts": "toolgate.graph.review.facts",
    "toolgate.graph.rollback": "toolgate.graph.review.rollback",
    "toolgate.graph.rollout_stop": "toolgate.graph.rollout.stop",
    "toolgate.graph.routed_node": "toolgate.graph.rollout.router",
    "toolgate.graph.same_resource": "toolgate.graph.delivery.same_resource",
    "toolgate.graph.seal": "toolgate.graph.seals.seal",
    "toolgate.graph.server_context": "toolgate.graph.server.context",
    "toolgate.graph.shadow": "toolgate.graph.rollout.shadow",
    "toolgate.graph.state_updates": "toolgate.graph.seals.updates",
    "toolgate.graph.state_versions": "toolgate.graph.seals.versions",
    "toolgate.graph.thread_pins": "toolgate.graph.rollout.router",
    "toolgate.graph.tool_offer": "toolgate.graph.nodes.tool_offer",
    "toolgate.graph.wait_delegation": "toolgate.graph.waits.delegation",
    "toolgate.graph.wait_pass": "toolgate.graph.waits.progress",
    "toolgate.graph.waker": "toolgate.graph.worker.waker",
    "toolgate.graph.worker_backoff": "toolgate.graph.worker.backoff",
    "toolgate.graph.worker_delivery": "toolgate.graph.worker.delivery",
    "toolgate.graph.worker_loop": "toolgate.graph.worker.loop",
    "toolgate.graph.worker_options": "toolgate.graph.worker.options",
    "toolgate.graph.worker_signals": "toolgate.graph.worker.signals",
    "toolgate.model_anthropic": "toolgate.models.provider_anthropic",
    "toolgate.model_openai": "toolgate.models.provider_openai",
    "toolgate.offline_choice": "toolgate.models.offline_choice",
    "toolgate.offline_model": "toolgate.models.offline",
    "toolgate.policy.demo_identities": "toolgate.tools.demo.identities",
    "toolgate.policy.rollout": "toolgate.releases.rules",
    "toolgate.policy.rollout_signals": "toolgate.releases.signals",
    "toolgate.release": "toolgate.releases.bundle",
    "toolgate.release_control": "toolgate.releases.control",
    "toolgate.release_evidence": "toolgate.releases.evidence",
    "toolgate.release_loader": "toolgate.releases.loader",
    "toolgate.release_migrate": "toolgate.releases.migrate",
    "toolgate.release_rollback": "toolgate.releases.rollback",
    "toolgate.release_status": "toolgate.releases.status",
    "toolgate.scaffold_project": "toolgate.scaffold.project",
    "toolgate.scaffold_release": "toolgate.scaffold.release",
    "toolgate.tools.audit_probes": "toolgate.tools.audit",
    "toolgate.tools.declared_checks": "toolgate.tools.declared.checks",
    "toolgate.tools.declared_errors": "toolgate.tools.declared.errors",
    "toolgate.tools.declared_formats": "toolgate.tools.declared.formats",
    "toolgate.tools.declared_validator": "toolgate.tools.declared.validator",
    "toolgate.tools.operator_policy": "toolgate.tools.shapes.operator_policy",
    "toolgate.tools.registry_fields": "toolgate.tools.spec",
    "toolgate.tools.schema_export": "toolgate.tools.schema.export",
    "toolgate.tools.schema_fixtures": "toolgate.tools.schema.fixtures",
    "toolgate.tools.schema_shape": "toolgate.tools.schema.shape",
    "toolgate.tools.schema_walk": "toolgate.tools.schema.walk",
    "toolgate.tools.shapes_calls": "toolgate.tools.shapes.calls",
    "toolgate.tools.shapes_definitions": "toolgate.tools.shapes.definitions",
    "toolgate.tools.shapes_functions": "toolgate.tools.shapes.functions",
    "toolgate.tools.shapes_langchain": "toolgate.tools.shapes.langchain",
    "toolgate.tools.shapes_mcp": "toolgate.tools.shapes.mcp",
    "toolgate.tools.spec_checks": "toolgate.tools.spec",
    "toolgate.tools.thirdparty": "toolgate.tools.shapes.thirdparty",
    "toolgate.tools.wire_properties": "toolgate.tools.wire",
}
"""Old module name -> the module that holds its code now."""

MOVED_TO_PACKAGE: dict[str, str] = {
    "toolgate.cli": "toolgate.cli.app",
    "toolgate.evals.adversarial": "toolgate.evals.adversarial.cases",
    "toolgate.evals.captured": "toolgate.evals.captured.capture",
    "toolgate.graph.delivery": "toolgate.graph.delivery.result",
    "toolgate.graph.review": "toolgate.graph.review.decisions",
    "toolgate.graph.rollout": "toolgate.graph.rollout.router",
    "toolgate.graph.server": "toolgate.graph.server.process",
    "toolgate.models": "toolgate.models.selection",
    "toolgate.scaffold": "toolgate.scaffold.command",
    "toolgate.tools.declared": "toolgate.tools.declared.tools",
}
"""Old module names that are packages now -> the module that holds the old module's code."""


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; import it from there", DeprecationWarning, stacklevel=3)


class _Alias(importlib.abc.Loader):
    def __init__(self, old: str, new: str) -> None:
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _warn(self.old, self.new)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """The module was imported under its own name already."""


class MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds an old module name and imports the module that replaced it."""

    def find_spec(
        self, fullname: str, path: Any = None, target: Any = None
    ) -> importlib.machinery.ModuleSpec | None:
        new = MOVED_MODULES.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new))


def install() -> None:
    """Put the finder on ``sys.meta_path`` once."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())


def old_attributes(package: str) -> Callable[[str], Any]:
    """A package's module ``__getattr__``: the attributes of the old module of the same name."""

    def __getattr__(name: str) -> Any:
        if name.startswith("__") or importlib.util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(name)  # a submodule of the package: the import system loads it
        new = MOVED_TO_PACKAGE[package]
        module = importlib.import_module(new)
        if not hasattr(module, name):
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        _warn(f"{package}.{name}", f"{new}.{name}")
        return getattr(module, name)

    return __getattr__


__all__ = ["MOVED_MODULES", "MOVED_TO_PACKAGE", "MovedModuleFinder", "install", "old_attributes"]
