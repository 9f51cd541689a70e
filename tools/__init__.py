"""Capabilities: specs the model never sees, strict schemas it does, and the release registry."""

from toolgate.tools.adapters import to_structured_tool
from toolgate.tools.registry import Registry
from toolgate.tools.schema.export import anthropic_tool, openai_tool, strict_json_schema
from toolgate.tools.spec import (
    ApprovalClass,
    Handler,
    HandlerContext,
    NoRollback,
    ResourceRef,
    ResourceResolver,
    ResourceStatus,
    Risk,
    Rollback,
    ToolSpec,
)

__all__ = [
    "ApprovalClass",
    "Handler",
    "HandlerContext",
    "NoRollback",
    "Registry",
    "ResourceRef",
    "ResourceResolver",
    "ResourceStatus",
    "Risk",
    "Rollback",
    "ToolSpec",
    "anthropic_tool",
    "openai_tool",
    "strict_json_schema",
    "to_structured_tool",
]
