"""Token use per model turn: read from the response, recorded on the model span, the token metric
and the audit's ``model.response`` event, and summed per task.

Providers report usage in their own shapes (the Responses API: ``input_tokens`` and
``output_tokens_details.reasoning_tokens``; Chat Completions: ``prompt_tokens`` and
``completion_tokens_details``; Anthropic: input without cache reads, thinking inside output).
The provider packages normalize them into ``AIMessage.usage_metadata`` (langchain-core's
``UsageMetadata``): ``input_tokens`` is all input, cache reads included; ``output_tokens`` all
output, reasoning included; ``input_token_details.cache_read`` and
``output_token_details.reasoning`` break them down. Only that is read here.

A figure the response did not report is unknown (``None``), never 0: a response without usage
has all figures unknown, and one that reports usage without a reasoning figure has reasoning
unknown. A sum over turns is unknown as soon as one turn's figure is.

A model whose figures are estimates, not a provider's count (the offline demo model), says so
with ``response_metadata[ESTIMATE_KEY] = "estimated"``; its figures are recorded with source
``estimated`` and never reach the token metric, which counts only what providers reported.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.messages.ai import UsageMetadata

from toolgate.telemetry.attributes import (
    GEN_AI_OPERATION_NAME,
    GEN_AI_REQUEST_MODEL,
    GEN_AI_TOKEN_TYPE,
    GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
    GEN_AI_USAGE_INPUT_TOKENS,
    GEN_AI_USAGE_OUTPUT_TOKENS,
    GEN_AI_USAGE_REASONING_OUTPUT_TOKENS,
    RELEASE,
    TOKEN_SOURCE,
)
from toolgate.telemetry.metrics import instruments
from toolgate.telemetry.spans import ModelSpan

ESTIMATE_KEY = "toolgate_token_usage"
"""``response_metadata`` key a model sets to ``"estimated"`` when its usage figures are estimates."""
BYTES_PER_TOKEN = 4
"""The estimate's divisor: about four bytes of English text or JSON per token."""
MAX_TOKENS = 10**12
"""Larger counts are not a real response's: recorded as unknown."""


def estimate_tokens(text: str) -> int:
    """Deterministic token estimate of ``text``: its UTF-8 bytes / 4, rounded up. Not a tokenizer:
    it is for figures that say ``estimated`` (offline model, scripted evals, the benchmark)."""
    return math.ceil(len(text.encode("utf-8")) / BYTES_PER_TOKEN)


def message_text(message: Any) -> str:
    """What a message puts in front of a model: its content and the tool calls it made (JSON)."""
    calls = getattr(message, "tool_calls", None) or []
    text = str(getattr(message, "content", message))
    return text + (json.dumps(calls, sort_keys=True, default=str) if calls else "")


def request_text(messages: Iterable[Any], tools: Any = ()) -> str:
    """What one model request carries: every message's text and the tool definitions (JSON)."""
    return "".join(message_text(m) for m in messages) + (json.dumps(tools, default=str) if tools else "")


def estimated_usage(messages: Iterable[Any], tools: Any, response: Any) -> UsageMetadata:
    """A ``usage_metadata`` estimated with `estimate_tokens` over the request and the response
    (no reasoning: for a model that does not reason); the model marks it with `ESTIMATE_KEY`."""
    input_tokens = estimate_tokens(request_text(messages, tools))
    output_tokens = estimate_tokens(message_text(response))
    return UsageMetadata(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
        output_token_details={"reasoning": 0},
    )


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKENS:
        return None
    return value


def _detail(details: Any, name: str) -> int | None:
    """``details[name]``, or the sum of its service-tier variants (``priority_reasoning``)."""
    if not isinstance(details, Mapping):
        return None
    if name in details:
        return _count(details[name])
    tiers = [_count(v) for k, v in details.items() if isinstance(k, str) and k.endswith("_" + name)]
    if not tiers or any(v is None for v in tiers):
        return None
    return sum(v for v in tiers if v is not None)


@dataclass(frozen=True)
class TokenUsage:
    """One model turn's tokens; ``None`` is unknown."""

    input: int | None = None
    output: int | None = None
    reasoning: int | None = None
    cache_read: int | None = None
    source: str = "unknown"
    """``reported`` (by the provider), ``estimated`` or ``unknown`` (no usage in the response)."""

    def to_detail(self) -> dict[str, Any]:
        """The audit event's ``tokens`` detail (unknown figures are ``null``)."""
        return asdict(self)

    @classmethod
    def from_detail(cls, value: Any) -> TokenUsage:
        """Read back `to_detail` (an event written before tokens were recorded: all unknown)."""
        if not isinstance(value, Mapping):
            return cls()
        source = value.get("source")
        return cls(
            input=_count(value.get("input")),
            output=_count(value.get("output")),
            reasoning=_count(value.get("reasoning")),
            cache_read=_count(value.get("cache_read")),
            source=source if source in ("reported", "estimated") else "unknown",
        )


def usage_of(message: Any) -> TokenUsage:
    """The tokens a model response reports in its ``usage_metadata``."""
    meta = getattr(message, "usage_metadata", None)
    if not isinstance(meta, Mapping):
        return TokenUsage()
    input_tokens, output_tokens = _count(meta.get("input_tokens")), _count(meta.get("output_tokens"))
    if input_tokens is None and output_tokens is None:
        return TokenUsage()
    response_metadata = getattr(message, "response_metadata", None) or {}
    estimated = isinstance(response_metadata, Mapping) and response_metadata.get(ESTIMATE_KEY) == "estimated"
    return TokenUsage(
        input=input_tokens,
        output=output_tokens,
        reasoning=_detail(meta.get("output_token_details"), "reasoning"),
        cache_read=_detail(meta.get("input_token_details"), "cache_read"),
        source="estimated" if estimated else "reported",
    )


def record_usage(span: ModelSpan, usage: TokenUsage, *, model: str, release: str) -> None:
    """Set the GenAI usage attributes on the model span (unknown figures are left unset) and
    record reported input and output tokens in ``gen_ai.client.token.usage``."""
    span.set(GEN_AI_USAGE_INPUT_TOKENS, usage.input)
    span.set(GEN_AI_USAGE_OUTPUT_TOKENS, usage.output)
    span.set(GEN_AI_USAGE_REASONING_OUTPUT_TOKENS, usage.reasoning)
    span.set(GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS, usage.cache_read)
    span.set(TOKEN_SOURCE, usage.source)
    if usage.source != "reported":
        return
    attributes = {GEN_AI_OPERATION_NAME: "chat", GEN_AI_REQUEST_MODEL: model, RELEASE: release}
    histogram = instruments().token_usage
    for kind, value in (("input", usage.input), ("output", usage.output)):
        if value is not None:
            histogram.record(value, {**attributes, GEN_AI_TOKEN_TYPE: kind})


def _sum(values: list[int | None]) -> int | None:
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


@dataclass(frozen=True)
class TokenTotals:
    """The tokens of several model turns (one task); a figure is unknown when any turn's is."""

    input: int | None
    output: int | None
    reasoning: int | None
    model_turns: int
    without_usage: int
    """Turns whose response reported no usage at all."""
    source: str
    """``reported``, ``estimated`` or ``unknown`` when all turns agree, else ``mixed``."""

    def figures(self) -> dict[str, Any]:
        """``input``, ``output``, ``reasoning`` (``"unknown"`` where not known), turns and source."""
        shown = {k: "unknown" if v is None else v for k, v in asdict(self).items()}
        if not self.without_usage:
            shown.pop("without_usage")
        return shown

    def line(self) -> str:
        """``tokens input=... output=... reasoning=... model_turns=... source=...``."""
        return "tokens " + " ".join(f"{k}={v}" for k, v in self.figures().items())


def total(usages: Iterable[TokenUsage]) -> TokenTotals:
    """Sum ``usages`` (one per model turn)."""
    turns = list(usages)
    sources = {u.source for u in turns}
    return TokenTotals(
        input=_sum([u.input for u in turns]),
        output=_sum([u.output for u in turns]),
        reasoning=_sum([u.reasoning for u in turns]),
        model_turns=len(turns),
        without_usage=sum(u.source == "unknown" for u in turns),
        source=sources.pop() if len(sources) == 1 else ("mixed" if sources else "unknown"),
    )


def task_messages_total(messages: list[Any]) -> TokenTotals:
    """The tokens of the last task turn in ``messages`` (a thread's): the model responses after
    the last user message, not the final answers the gateway writes itself (named ``toolgate``)."""
    start = max((i for i, m in enumerate(messages) if isinstance(m, HumanMessage)), default=-1)
    turns = [m for m in messages[start + 1 :] if isinstance(m, AIMessage) and m.name != "toolgate"]
    return total(usage_of(m) for m in turns)


__all__ = [
    "BYTES_PER_TOKEN",
    "ESTIMATE_KEY",
    "TokenTotals",
    "TokenUsage",
    "estimate_tokens",
    "estimated_usage",
    "message_text",
    "record_usage",
    "request_text",
    "task_messages_total",
    "total",
    "usage_of",
]
