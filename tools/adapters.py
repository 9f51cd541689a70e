"""LangChain adapters: each ToolSpec as a StructuredTool bound to its argument schema.

The StructuredTool carries the schema to LangChain and LangGraph Studio, under the tool's wire
name (the name a model calls; the real name is in ``metadata["toolgate_name"]``). Invoking it
directly is refused: a handler may only run behind dispatch, approval and the execution claim.
Its description is the text the model is sent (`toolgate.tools.model_text.plain_text`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import StructuredTool

from toolgate.errors import DirectInvocationError
from toolgate.tools.declared.tools import contract_of
from toolgate.tools.model_text import plain_text, plain_text_schema
from toolgate.tools.spec import ToolSpec, model_description


def to_structured_tool(spec: ToolSpec) -> StructuredTool:
    """A StructuredTool whose ``args_schema`` is the spec's Pydantic argument model, or for a tool
    registered from a JSON Schema the declared schema itself (never a lossy model of it, only its
    descriptions rendered as plain text), described as the model is told."""

    def refuse(**_: Any) -> Any:
        raise DirectInvocationError(spec.name)

    return StructuredTool.from_function(
        func=refuse,
        name=spec.wire_name,
        description=plain_text(model_description(spec)),
        args_schema=(
            spec.args_model
            if contract_of(spec.args_model) is None
            else plain_text_schema(spec.contract.json_schema())
        ),
        metadata={
            "toolgate_release_tool": True,
            "toolgate_name": spec.name,
            "risk": spec.risk,
            "version": spec.version,
        },
    )


__all__ = ["to_structured_tool"]
