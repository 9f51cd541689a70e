"""toolgate: models propose typed tool calls; trusted code owns authority, approval, execution and evidence.

The names here are the public API (README, "Python API"): what a tool author writes a tool with
(`ToolSpec`, `spec_from_function`, `StrictArgs`, `ToolResult`, `HandlerContext`, the approval,
rollback and resource declarations, `ToolExecutionError`), what an embedder builds and runs the
gateway with (`Release`, `ReleaseEnv`, `Registry`, `build_gateway`, `build_graph`, `Context`,
`Principal`), and the errors either of them catches. `build_gateway` and `build_graph` are the
parts the composition root (`toolgate.graph.bootstrap.open_app`) builds every running gateway
with; tests get one from `toolgate.testing.open_test_app`. Everything else lives in its submodule
and may change between releases.
"""

from typing import TYPE_CHECKING

from toolgate.lazy_exports import lazy_exports
from toolgate.moved_modules import install as install_moved_modules

if TYPE_CHECKING:
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
    from toolgate.releases.bundle import Release, ReleaseEnv
    from toolgate.tools import Registry
    from toolgate.tools.shapes.thirdparty import spec_from_function
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

_EXPORTS = {
    "REJECTION_CODES": "toolgate.errors",
    "ApprovalError": "toolgate.errors",
    "ConfigurationError": "toolgate.errors",
    "IdentityError": "toolgate.errors",
    "NotFoundError": "toolgate.errors",
    "RegistryError": "toolgate.errors",
    "RejectionCode": "toolgate.errors",
    "RunRefused": "toolgate.errors",
    "StoreError": "toolgate.errors",
    "ToolExecutionError": "toolgate.errors",
    "ToolgateError": "toolgate.errors",
    "ToolgateRuntimeError": "toolgate.errors",
    "ToolgateUsageError": "toolgate.errors",
    "Context": "toolgate.graph",
    "build_gateway": "toolgate.graph",
    "build_graph": "toolgate.graph",
    "Principal": "toolgate.policy",
    "Release": "toolgate.releases.bundle",
    "ReleaseEnv": "toolgate.releases.bundle",
    "Registry": "toolgate.tools",
    "ApprovalClass": "toolgate.tools.spec",
    "HandlerContext": "toolgate.tools.spec",
    "NoRollback": "toolgate.tools.spec",
    "ResourceRef": "toolgate.tools.spec",
    "ResourceStatus": "toolgate.tools.spec",
    "Rollback": "toolgate.tools.spec",
    "StrictArgs": "toolgate.tools.spec",
    "ToolResult": "toolgate.tools.spec",
    "ToolSpec": "toolgate.tools.spec",
    "spec_from_function": "toolgate.tools.shapes.thirdparty",
}
"""Where each public name lives: imported on first use (`toolgate.lazy_exports`)."""

install_moved_modules()  # the previous layout's module names keep importing (deprecated)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

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
