"""Export argument models as provider tool schemas.

OpenAI strict form: every object closed (``additionalProperties: false``), every property listed
in ``required``, optional values expressed as nullable, no ``default``. Anthropic form:
``name`` / ``description`` / ``input_schema``. Both are derived from the same Pydantic model, so
the schema a provider enforces and the model trusted code validates with cannot drift apart.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel

_DROP_KEYS = ("title", "default", "examples")


def _strictify(node: Any) -> Any:
    if isinstance(node, list):
        return [_strictify(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {k: _strictify(v) for k, v in node.items() if k not in _DROP_KEYS}
    if out.get("type") == "object" or "properties" in out:
        props = out.get("properties", {})
        out["type"] = "object"
        out["properties"] = props
        out["required"] = list(props)
        out["additionalProperties"] = False
    return out


def strict_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON Schema rewritten to the providers' strict-mode rules."""
    schema = copy.deepcopy(model.model_json_schema())
    strict: dict[str, Any] = _strictify(schema)
    if "$defs" in strict:
        strict["$defs"] = {name: _strictify(body) for name, body in strict["$defs"].items()}
    return strict


def openai_tool(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """OpenAI function tool in strict form (Chat Completions shape, accepted by ``bind_tools``)."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": strict_json_schema(model),
            "strict": True,
        },
    }


def anthropic_tool(name: str, description: str, model: type[BaseModel]) -> dict[str, Any]:
    """Anthropic tool definition (``input_schema``), closed like the strict form."""
    return {"name": name, "description": description, "input_schema": strict_json_schema(model)}


__all__ = ["anthropic_tool", "openai_tool", "strict_json_schema"]
