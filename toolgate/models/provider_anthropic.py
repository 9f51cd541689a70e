"""Anthropic models through ``langchain-anthropic``'s ``ChatAnthropic`` (the ``anthropic`` extra).

A Messages API response is a list of content blocks: ``thinking`` blocks (the model's reasoning,
with a ``signature``), ``redacted_thinking`` blocks (an opaque ``data``), ``text`` and
``tool_use`` blocks. When a turn used tools with extended thinking on, the next request must
carry that turn's thinking blocks back unchanged, signatures included, and answer each
``tool_use`` with a ``tool_result`` for its exact id. The client is configured so those blocks live
in the thread's checkpoint, verbatim, across an approval that waits for hours and a process
restart:

* ``output_version="v0"``: the message's content is the provider's blocks as sent, and
  ``langchain-anthropic`` sends thinking blocks back with their ``thinking`` and ``signature``
  as stored. The cross-provider ``"v1"`` format (which ``LC_OUTPUT_VERSION`` may select) would
  rebuild the blocks from standard ``reasoning`` blocks on the way back.
* ``thinking``: enabled when ``TOOLGATE_MODEL_THINKING_TOKENS`` sets a budget; the request's
  ``max_tokens`` is that budget plus ``TOOLGATE_MODEL_MAX_TOKENS`` (Anthropic counts thinking
  inside ``max_tokens``, which must exceed the budget), so the output stays bounded.
* ``max_retries=0``: toolgate's own retry policy (`toolgate.policy.retry`) decides what is retried.
* ``base_url``: ``TOOLGATE_MODEL_BASE_URL`` when set (a proxy, a local test server).
* property names Anthropic refuses (``"sort by"``) are sent as wire keys and mapped back before
  validation (`toolgate.models.anthropic_property_keys`); toolgate only ever sees the declared names.

``tool_choice`` with ``disable_parallel_tool_use`` is set when tools are bound (`Gateway.model_for`
passes ``parallel_tool_calls=False`` for a release with stateful writes). The key is read by the
client from ``ANTHROPIC_API_KEY``; toolgate never reads, prints or logs it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from toolgate.config import Settings
from toolgate.errors import ConfigurationError

OUTPUT_VERSION = "v0"
"""Provider content blocks kept as the message's content, verbatim (see the module doc)."""
TIMEOUT_S = 60.0
"""Per-request timeout; the task deadline bounds the retries around it."""
EXTRA = "anthropic"
"""The optional dependency group that installs ``langchain-anthropic``."""


def thinking_options(settings: Settings) -> dict[str, Any]:
    """``max_tokens`` and, when a budget is set, ``thinking`` for one request."""
    budget = settings.model_thinking_tokens
    if not budget:
        return {"max_tokens": settings.model_max_tokens}
    return {
        "max_tokens": settings.model_max_tokens + budget,
        "thinking": {"type": "enabled", "budget_tokens": budget},
    }


def anthropic_chat_model(name: str, settings: Settings) -> BaseChatModel:
    """``ChatAnthropic`` for model ``name``.

    Raises:
        ConfigurationError: ``langchain-anthropic`` is not installed.
    """
    try:
        import langchain_anthropic  # noqa: F401  (the extra; the subclass below is built on it)
    except ImportError as exc:
        raise ConfigurationError(
            f"model 'anthropic:{name}' needs the langchain-anthropic package: "
            f"pip install 'langgraph-toolgate[{EXTRA}]'"
        ) from exc
    from toolgate.models.anthropic_property_keys import key_mapping_chat_anthropic
    from toolgate.models.malformed_reply import reading_replies

    options: dict[str, Any] = {
        "model": name,
        "max_retries": 0,
        "timeout": TIMEOUT_S,
        "output_version": OUTPUT_VERSION,
        **thinking_options(settings),
    }
    if settings.model_base_url:
        options["base_url"] = settings.model_base_url
    model: BaseChatModel = reading_replies(key_mapping_chat_anthropic())(**options)
    return model


__all__ = ["EXTRA", "OUTPUT_VERSION", "TIMEOUT_S", "anthropic_chat_model", "thinking_options"]
