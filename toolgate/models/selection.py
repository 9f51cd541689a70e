"""Chat model selection: the offline demo model by default, a real provider when configured.

``TOOLGATE_MODEL`` is ``offline`` or ``provider:model``. Each provider with its own construction
has a builder in `PROVIDERS` (``toolgate.model_<provider>``); any other provider goes through
LangChain's ``init_chat_model``. Real providers are constructed with a bounded output, no
client-side retries (toolgate's own retry policy applies) and their API key read by the client
library from its usual environment variable; toolgate never reads, prints or logs the key.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from langchain_core.language_models import BaseChatModel

from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.models.offline import OfflineDemoModel
from toolgate.models.provider_anthropic import anthropic_chat_model
from toolgate.models.provider_openai import openai_chat_model

ModelBuilder = Callable[[str, Settings], BaseChatModel]
"""Builds a provider's chat model from the model name (after ``provider:``) and the settings."""

PROVIDERS: Mapping[str, ModelBuilder] = {"openai": openai_chat_model, "anthropic": anthropic_chat_model}
"""Providers with their own construction; the rest go through `other_provider_model`."""
KEY_VARIABLES: Mapping[str, str] = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
"""The environment variable each of `PROVIDERS` reads its key from (through its client library).
Callers that must refuse early may ask whether it is set; toolgate never reads its value."""


def other_provider_model(provider: str, name: str, settings: Settings) -> BaseChatModel:
    """A provider without its own builder, through LangChain's ``init_chat_model``."""
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ConfigurationError(
            f"provider {provider!r} needs the 'langchain' package and that provider's integration installed"
        ) from exc
    try:
        model: BaseChatModel = init_chat_model(f"{provider}:{name}", max_tokens=settings.model_max_tokens)
    except (ImportError, ValueError) as exc:  # no integration package, or a provider LangChain does not know
        reason = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise ConfigurationError(f"model '{provider}:{name}' refused: {reason}") from exc
    return model


def load_chat_model(settings: Settings) -> BaseChatModel:
    """The chat model named by ``settings.model`` (``offline`` or ``provider:model``)."""
    if settings.model == "offline":
        return OfflineDemoModel()
    if not settings.allow_model_requests:
        raise ConfigurationError(
            f"real model {settings.model!r} refused: TOOLGATE_ALLOW_MODEL_REQUESTS=0 (tests use the scripted model)"
        )
    provider, _, name = settings.model.partition(":")
    if not name:
        raise ConfigurationError(
            "TOOLGATE_MODEL must be 'offline' or 'provider:model', e.g. 'openai:gpt-4.1-mini'"
        )
    build = PROVIDERS.get(provider)
    if build is None:
        return other_provider_model(provider, name, settings)
    return build(name, settings)


__all__ = ["KEY_VARIABLES", "PROVIDERS", "ModelBuilder", "load_chat_model", "other_provider_model"]
