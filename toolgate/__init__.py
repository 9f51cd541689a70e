"""toolgate: models propose typed tool calls; trusted code owns authority, approval, execution and evidence.

The names here are the public API (README, "Python API"): what a tool author writes a tool with
(`ToolSpec`, `spec_from_function`, `StrictArgs`, `ToolResult`, `HandlerContext`, the approval,
rollback and resource declarations, `ToolExecutionError`), what an embedder builds and runs the
gateway with (`Release`, `ReleaseEnv`, `Registry`, `build_gateway`, `build_graph`, `Context`,
`Principal`), and the errors either of them catches. Everything else lives in its submodule and
may change between releases.
"""

from toolgate.errors import (
    REJECTION_CODES,
    ApprovalError,
    ConfigurationError,
    IdentityError,
    NotFoundError,
    RegistryError,
    RejectionCode,
    RunRefused,
    StoreError,
    ToolExecutionError,
    ToolgateError,
    ToolgateRuntimeError,
    ToolgateUsageError,
)
from toolgate.graph import Context, build_gateway, build_graph
from toolgate.policy import Principal
from toolgate.release import Release, ReleaseEnv
from toolgate.tools import Registry
from toolgate.tools.spec import (
    ApprovalClass,
    HandlerContext,
    NoRollback,
    ResourceRef,
    ResourceStatus,
    Rollback,
    StrictArgs,
    ToolResult,
    ToolSpec,
)
from toolgate.tools.thirdparty import spec_from_function

__all__ = [
    "REJECTION_CODES",
    "ApprovalClass",
    "ApprovalError",
    "ConfigurationError",
    "Context",
    "HandlerContext",
    "IdentityError",
    "NoRollback",
    "NotFoundError",
    "Principal",
    "Registry",
    "RegistryError",
    "RejectionCode",
    "Release",
    "ReleaseEnv",
    "ResourceRef",
    "ResourceStatus",
    "Rollback",
    "RunRefused",
    "StoreError",
    "StrictArgs",
    "ToolExecutionError",
    "ToolResult",
    "ToolSpec",
    "ToolgateError",
    "ToolgateRuntimeError",
    "ToolgateUsageError",
    "build_gateway",
    "build_graph",
    "spec_from_function",
]
