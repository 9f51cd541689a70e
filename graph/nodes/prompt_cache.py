"""Prompt caching: every request of one release and tool set starts with the same bytes, and
the provider is told so.

Input tokens grow with every round of a tool loop, and all but the newest messages repeat the
previous request. The prefix is stable by construction: the release's trusted instructions come
first, then the tools in the registry's fixed order, and nothing per user or per request (no
names, dates or ids) is ever put before the conversation. On top of that each provider gets its
own cache control:

- OpenAI caches long prefixes by itself; ``prompt_cache_key`` routes requests that share a prefix
  to the same cache. The key names the release and a digest of its instructions and tool set,
  never a tenant or user, so every principal with the same tools shares one cache.
- Anthropic caches only up to an explicit breakpoint: the top-level ``cache_control`` places it
  on the newest message block, so each round reads the previous round's prefix (instructions,
  tools, earlier turns) from the cache.

Cached tokens come back in the usage and are recorded beside the token accounting
(``cache_read`` in `toolgate.telemetry.tokens`). Any other model gets no options.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

OPENAI_LLM_TYPE = "openai-chat"
ANTHROPIC_LLM_TYPE = "anthropic-chat"
ANTHROPIC_BREAKPOINT = {"type": "ephemeral"}
"""Anthropic's default five-minute cache: long enough for one task's rounds."""


def prefix_digest(instructions: str, tool_names: Sequence[str]) -> str:
    """A short digest of what every request of this tool set starts with."""
    material = "\x00".join([instructions, *tool_names]).encode("utf-8")
    return hashlib.sha256(material).hexdigest()[:16]


def cache_options(model: Any, release: str, instructions: str, tool_names: Sequence[str]) -> dict[str, Any]:
    """Request options that make ``model``'s provider cache the stable prefix (none for others)."""
    kind = getattr(model, "_llm_type", None)
    if kind == OPENAI_LLM_TYPE:
        return {"prompt_cache_key": f"toolgate:{release}:{prefix_digest(instructions, tool_names)}"}
    if kind == ANTHROPIC_LLM_TYPE:
        return {"cache_control": dict(ANTHROPIC_BREAKPOINT)}
    return {}


__all__ = ["ANTHROPIC_BREAKPOINT", "cache_options", "prefix_digest"]
