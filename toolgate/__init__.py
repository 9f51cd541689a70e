"""toolgate: models propose typed tool calls; trusted code owns authority, approval, execution and evidence."""

from toolgate.canonical import canonical_json, digest, operation_key
from toolgate.config import Settings
from toolgate.errors import (
    REJECTION_CODES,
    ApprovalError,
    ConfigurationError,
    RegistryError,
    RejectionCode,
    StoreError,
    ToolExecutionError,
    ToolgateError,
    ToolgateRuntimeError,
    ToolgateUsageError,
)
from toolgate.graph import Context, GatewayState, build_gateway, build_graph
from toolgate.policy import Principal
from toolgate.tools import ApprovalClass, NoRollback, Registry, ResourceRef, Rollback, ToolSpec
from toolgate.tools.release import Release, ReleaseEnv

__all__ = [
    "REJECTION_CODES",
    "ApprovalClass",
    "ApprovalError",
    "ConfigurationError",
    "Context",
    "GatewayState",
    "NoRollback",
    "Principal",
    "Registry",
    "RegistryError",
    "RejectionCode",
    "Release",
    "ReleaseEnv",
    "ResourceRef",
    "Rollback",
    "Settings",
    "StoreError",
    "ToolExecutionError",
    "ToolSpec",
    "ToolgateError",
    "ToolgateRuntimeError",
    "ToolgateUsageError",
    "build_gateway",
    "build_graph",
    "canonical_json",
    "digest",
    "operation_key",
]
