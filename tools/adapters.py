"""LangChain adapters: each ToolSpec as a StructuredTool bound to its Pydantic argument model.

The StructuredTool carries the schema to LangChain and LangGraph Studio. Invoking it directly
is refused: a handler may only run behind dispatch, approval and the execution claim.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from toolgate.errors import DirectInvocationError
from toolgate.tools.spec import ToolSpec


def to_structured_tool(spec: ToolSpec) -> StructuredTool:
    """A StructuredTool whose ``args_schema`` is the spec's argument model."""

    def refuse(**_: Any) -> Any:
        raise DirectInvocationError(spec.name)

    return StructuredTool.from_function(
        func=refuse,
        name=spec.name,
        description=spec.description,
        args_schema=spec.args_model,
        metadata={"toolgate_release_tool": True, "risk": spec.risk, "version": spec.version},
    )


__all__ = ["to_structured_tool"]
