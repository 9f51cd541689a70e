"""Provider refusals by class: detected in a response or an error, audited, routed to review.

A provider refusal is neither an answer nor a transport failure. It arrives in two ways:

* **in content** (HTTP 200): an OpenAI Responses API ``refusal`` content part of a message output
  item (kept as a ``{"type": "refusal"}`` block by ``output_version="responses/v1"``), Chat
  Completions' ``message.refusal`` (``additional_kwargs["refusal"]`` in ``langchain-openai``),
  Anthropic's ``stop_reason == "refusal"`` (``response_metadata["stop_reason"]``, with
  ``stop_details``), or output stopped by a content filter (Chat Completions
  ``finish_reason == "content_filter"``, Responses ``incomplete_details.reason == "content_filter"``);
* **as an exception**: ``langchain_core``'s ``ModelRefusalError`` (``langchain-openai``'s
  ``OpenAIRefusalError``), ``openai.ContentFilterFinishReasonError``, or a provider's status error
  whose body says a policy blocked the request (OpenAI and Azure ``content_filter`` /
  ``content_policy_violation`` codes, a prompt flagged under the usage policy, Anthropic's
  "Output blocked by content filtering policy").

The retry matrix's ``refusal`` class never retries (`toolgate.policy.retry`) and its fallback,
``explain_or_review``, ends the task as ``needs_review`` with the refusal explained: no tool of
that turn runs and nothing from it is proposed. The reason kept (audit and status) is bounded and
redacted: it is provider text, and may echo what the user sent.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from toolgate.policy.output import redact_text

MAX_REASON_CHARS = 200
"""The refusal text kept in the audit detail and the task's status reason, at most."""

KINDS = ("refusal", "content_filter", "policy_error")
"""``refusal``: the model declined; ``content_filter``: its output was filtered; ``policy_error``:
the provider refused the request with an error."""

_POLICY_CODES = frozenset({"content_filter", "content_policy_violation", "responsibleaipolicyviolation"})
_POLICY_TEXT = re.compile(
    r"content (?:filter(?:ing)?|management) policy|flagged as potentially violating|usage polic",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Refusal:
    """One detected refusal."""

    provider: str
    """``openai``, ``anthropic`` or ``unknown``."""
    kind: str
    """One of `KINDS`."""
    raised: bool
    """True when it came as an exception, False when in the response's content."""
    reason: str
    """Bounded, redacted provider text (may be empty)."""

    def detail(self) -> dict[str, Any]:
        """The ``model.refused`` audit detail."""
        return {"provider": self.provider, "kind": self.kind, "raised": self.raised, "reason": self.reason}

    def status_reason(self) -> str:
        """The task's status reason (the CLI prints it after "Task stopped for human review:")."""
        said = f": {self.reason.rstrip('.')}" if self.reason else ""  # the final answer adds the stop
        return f"model refused ({self.provider} {self.kind}){said}"


def bounded(text: Any) -> str:
    """``text`` as one redacted line of at most `MAX_REASON_CHARS` characters."""
    line = " ".join(str(text or "").split())
    line = redact_text(line)
    return line if len(line) <= MAX_REASON_CHARS else line[: MAX_REASON_CHARS - 3] + "..."


def _provider_of_message(message: Any) -> str:
    meta = getattr(message, "response_metadata", None) or {}
    provider = str(meta.get("model_provider") or "")
    if provider in ("openai", "anthropic"):
        return provider
    return "anthropic" if "stop_reason" in meta else ("openai" if "finish_reason" in meta else "unknown")


def _refusal_blocks(content: Any) -> list[Mapping[str, Any]]:
    """``refusal`` blocks at the top level of ``content`` or inside a message output item."""
    found: list[Mapping[str, Any]] = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, Mapping):
            continue
        if block.get("type") == "refusal":
            found.append(block)
        elif block.get("type") == "message" and isinstance(block.get("content"), list):
            found.extend(_refusal_blocks(block["content"]))
    return found


def refusal_in_response(message: Any) -> Refusal | None:
    """The refusal a provider returned as content of ``message`` (an ``AIMessage``), or None."""
    provider = _provider_of_message(message)
    meta: Mapping[str, Any] = getattr(message, "response_metadata", None) or {}
    blocks = _refusal_blocks(getattr(message, "content", None))
    if blocks:
        return Refusal(
            provider, "refusal", False, bounded(" ".join(str(b.get("refusal") or "") for b in blocks))
        )
    said = (getattr(message, "additional_kwargs", None) or {}).get("refusal")
    if said:
        return Refusal(provider, "refusal", False, bounded(said))
    if meta.get("stop_reason") == "refusal":
        details = meta.get("stop_details") or {}
        details = details if isinstance(details, Mapping) else {}
        text = details.get("explanation") or details.get("category") or _text_of(message)
        return Refusal("anthropic", "refusal", False, bounded(text))
    incomplete = meta.get("incomplete_details")
    incomplete_reason = incomplete.get("reason") if isinstance(incomplete, Mapping) else None
    if "content_filter" in (meta.get("finish_reason"), incomplete_reason):
        return Refusal(provider, "content_filter", False, bounded("output stopped by a content filter"))
    return None


def _text_of(message: Any) -> str:
    try:
        return str(message.text)
    except Exception:
        return ""


def _provider_of_error(exc: BaseException) -> str:
    for cls in type(exc).__mro__:
        root = cls.__module__.split(".")[0]
        if root in ("openai", "langchain_openai"):
            return "openai"
        if root in ("anthropic", "langchain_anthropic"):
            return "anthropic"
    return "unknown"


def _error_body(exc: BaseException) -> Mapping[str, Any]:
    body = getattr(exc, "body", None)
    if not isinstance(body, Mapping):
        return {}
    inner = body.get("error")
    return inner if isinstance(inner, Mapping) else body


def refusal_in_error(exc: BaseException) -> Refusal | None:
    """The refusal ``exc`` stands for (a refusal or policy error a client raised), or None."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    provider = _provider_of_error(exc)
    if "ModelRefusalError" in names:
        return Refusal(provider, "refusal", True, bounded(str(exc)))
    if "ContentFilterFinishReasonError" in names:
        return Refusal(provider, "content_filter", True, bounded("output stopped by a content filter"))
    body = _error_body(exc)
    code = str(body.get("code") or getattr(exc, "code", None) or "").lower()
    inner = body.get("innererror")
    inner_code = str(inner.get("code") or "").lower() if isinstance(inner, Mapping) else ""
    message = str(body.get("message") or "")
    status = getattr(exc, "status_code", None)
    # the wording alone decides only for a request refused outright (400/403), never a transient status
    worded = status in (400, 403) and _POLICY_TEXT.search(message) is not None
    if code in _POLICY_CODES or inner_code in _POLICY_CODES or worded:
        return Refusal(provider, "policy_error", True, bounded(message or code))
    return None


def refused_update(auditor: Any, refusal: Refusal, **ids: Any) -> dict[str, Any]:
    """Audit ``refusal`` (``model.refused``) and return the task's state update: the refusal
    class's fallback (``explain_or_review``) ends the task as ``needs_review``, explained."""
    auditor.record("model.refused", "refused", code=refusal.kind, detail=refusal.detail(), **ids)
    return {"status": "needs_review", "status_reason": refusal.status_reason()}


__all__ = [
    "KINDS",
    "MAX_REASON_CHARS",
    "Refusal",
    "bounded",
    "refusal_in_error",
    "refusal_in_response",
    "refused_update",
]
