"""Chat model selection: the offline demo model by default, a real provider when configured.

Real providers are constructed with a bounded output, no client-side retries (toolgate's own
retry policy applies) and their API key read by the client library from its usual environment
variable; toolgate never reads, prints or logs the key.
"""

from __future__ import annotations

from langchain_core.language_models import BaseChatModel

from toolgate.config import Settings
from toolgate.errors import ConfigurationError
from toolgate.offline_model import OfflineDemoModel


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
    if provider == "openai":
        from langchain_openai import ChatOpenAI

        return ChatOpenAI(
            model=name,
            base_url=settings.model_base_url,
            max_completion_tokens=settings.model_max_tokens,
            max_retries=0,
            timeout=60,
        )
    try:
        from langchain.chat_models import init_chat_model
    except ImportError as exc:
        raise ConfigurationError(
            f"provider {provider!r} needs the 'langchain' package and that provider's integration installed"
        ) from exc
    model: BaseChatModel = init_chat_model(settings.model, max_tokens=settings.model_max_tokens)
    return model


__all__ = ["load_chat_model"]
