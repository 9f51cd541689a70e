"""OpenAI models through ``langchain-openai``'s ``ChatOpenAI``: the Responses API unless set otherwise.

The Responses API returns output *items* (reasoning, function calls, messages) that the next
request must carry back in order, reasoning included, and each tool result goes back as a
``function_call_output`` for its exact ``call_id``. The client is configured so those items can
live in the thread's checkpoint, verbatim, across an approval that waits for hours and a process
restart:

* ``output_version="responses/v1"``: each output item becomes one content block of the
  ``AIMessage``, as the provider sent it (``ResponseReasoningItem`` / ``ResponseFunctionToolCall``
  dumped without ``None`` fields), and ``langchain-openai`` sends those blocks back unchanged as
  input items. The cross-provider ``"v1"`` format is not used: it splits a reasoning item into one
  ``reasoning`` block per summary part with ``encrypted_content`` moved under ``extras``, turns a
  function call into a ``tool_call`` block, and rebuilds the items from those pieces on the way
  back, so what is replayed is a reconstruction, not the item the provider returned.
* ``store=False``: nothing is kept on the provider's side, so a thread never depends on provider
  state that may expire while a write waits for approval; with it,
  ``include=["reasoning.encrypted_content"]`` makes every reasoning item carry its encrypted content,
  which is what lets it be replayed statelessly (``langchain-openai`` drops a reasoning item without
  it under ``store=False``). A model whose profile says it returns no reasoning is not asked for it
  (OpenAI refuses the ``include`` for such models).
* ``max_retries=0``: toolgate's own retry policy (`toolgate.policy.retry`) decides what is retried;
  a reply the client cannot read is a failed request, a 502 (`toolgate.models.malformed_reply`).
* its HTTP clients screen every function call's arguments before the client parses them
  (`toolgate.models.argument_screen`): arguments that are not a JSON object become an invalid
  call that dispatch refuses ``malformed_arguments``, instead of crashing the client's parsing.

Every request carries the release it was made under, as the seeds' request does
(``metadata: {tool_release: ...}``, non-secret, for the provider-side audit), bound per gateway
(`release_metadata`). The two APIs differ in when they take it: the Responses API accepts
``metadata`` with ``store=False``; Chat Completions refuses ``metadata`` unless ``store`` is on
("The 'metadata' parameter is only allowed when 'store' is enabled"), and toolgate keeps nothing on
the provider's side, so a Chat Completions request carries it only for a model explicitly built
with ``store=True``. The release id is in every audit event and trace span either way.

Strict schemas and ``parallel_tool_calls`` are set when tools are bound (`Gateway.model_for`).
``TOOLGATE_OPENAI_API=chat`` selects Chat Completions instead, for endpoints that offer only that.
"""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel

from toolgate.config import Settings

RESPONSES = "responses"
CHAT = "chat"
OUTPUT_VERSION = "responses/v1"
"""Provider output items kept as the message's content blocks, verbatim (see the module doc)."""
REASONING_INCLUDE = ("reasoning.encrypted_content",)
"""What a stateless (``store=False``) request asks for so its reasoning items can be sent back."""
OPENAI_LLM_TYPE = "openai-chat"
RELEASE_METADATA_KEY = "tool_release"
"""The ``metadata`` key a request names its release under (the seeds' name)."""
TIMEOUT_S = 60.0
"""Per-request timeout; the task deadline bounds the retries around it."""


def returns_reasoning(model: BaseChatModel) -> bool:
    """False only when the model's known profile says it produces no reasoning output; an unknown
    model (a newer name, a compatible endpoint) is asked for its reasoning."""
    profile = getattr(model, "profile", None) or {}
    return profile.get("reasoning_output") is not False


def release_metadata(model: BaseChatModel, release: str) -> dict[str, Any]:
    """Request options that send ``{"tool_release": release}`` as the request's ``metadata``
    (empty for another provider, and for Chat Completions without ``store``: see the module doc).

    Sent through ``extra_body``, the client's pass-through of body fields: a ``metadata`` keyword
    bound on a LangChain model would be taken as the tracing run's metadata instead. The model's
    own ``extra_body`` is kept."""
    if getattr(model, "_llm_type", None) != OPENAI_LLM_TYPE:
        return {}
    responses = getattr(model, "use_responses_api", None) is True
    if not responses and getattr(model, "store", None) is not True:
        return {}
    own = dict(getattr(model, "extra_body", None) or {})
    metadata = {**dict(own.get("metadata") or {}), RELEASE_METADATA_KEY: release}
    return {"extra_body": {**own, "metadata": metadata}}


def openai_chat_model(name: str, settings: Settings) -> BaseChatModel:
    """``ChatOpenAI`` for model ``name`` on the configured API (``settings.openai_api``).

    The key is read by the client from ``OPENAI_API_KEY``; toolgate never reads, prints or logs it.
    """
    from langchain_openai import ChatOpenAI as Client

    from toolgate.models.argument_screen import screening_openai_clients
    from toolgate.models.malformed_reply import reading_replies

    ChatOpenAI = reading_replies(Client)

    http_client, http_async_client = screening_openai_clients()
    common: dict[str, Any] = {
        "http_client": http_client,
        "http_async_client": http_async_client,
        "model": name,
        "base_url": settings.model_base_url,
        "max_completion_tokens": settings.model_max_tokens,  # sent as max_output_tokens on Responses
        "max_retries": 0,
        "timeout": TIMEOUT_S,
    }
    if settings.openai_api == CHAT:
        return ChatOpenAI(**common, use_responses_api=False)
    model = ChatOpenAI(**common, use_responses_api=True, output_version=OUTPUT_VERSION, store=False)
    if returns_reasoning(model):
        model = model.model_copy(update={"include": list(REASONING_INCLUDE)})
    return model


__all__ = [
    "CHAT",
    "OUTPUT_VERSION",
    "REASONING_INCLUDE",
    "RELEASE_METADATA_KEY",
    "RESPONSES",
    "openai_chat_model",
    "release_metadata",
    "returns_reasoning",
]
