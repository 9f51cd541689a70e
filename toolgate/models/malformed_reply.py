"""A provider reply its client cannot turn into a message is a failed request, not a crash.

The reply is the provider's (or a proxy's), and so untrusted input: content that is a number, no
``choices``, ``tool_calls`` that are not a list, a ``tool_use`` input nested past the parser's
recursion limit. ``langchain-openai`` and the ``anthropic`` SDK raise whatever their parsing
meets (``TypeError``, ``KeyError``, ``IndexError``, ``RecursionError``...), and the model node,
which classifies transport failures and refusals and re-raises anything else as a bug of its
own, let the run crash. Raised inside the client's call, such an exception is the reply's
fault: the client classes toolgate builds (`reading_replies`) raise it as `MalformedReply`, which
the model node audits ``model.failed`` (code ``malformed_reply``, the client's exception class in
its detail) and the turn ends for review, as after a failed request. It is not retried: the
provider did answer, and what it sent is no transport failure. A transport failure and a refusal
pass through as raised; so does anything raised outside the client's call (toolgate's own code),
which stays a crash, never hidden.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

from langchain_core.language_models import BaseChatModel
from langchain_core.outputs import ChatResult

from toolgate.policy.refusals import refusal_in_error
from toolgate.policy.retry import classify_model_error

ModelClass = TypeVar("ModelClass", bound=type[BaseChatModel])


MALFORMED = "malformed_reply"
"""The code ``model.failed`` is audited with for a reply the client could not read."""


class MalformedReply(Exception):
    """The provider answered, but its client could not read the reply (see the module docstring);
    no transport status, so `toolgate.policy.retry` never retries it."""

    def __init__(self, kind: str) -> None:
        super().__init__(f"the provider's reply could not be read ({kind})")
        self.kind = kind


def _judged(exc: Exception) -> Exception:
    """``exc`` itself when it is a transport failure or a refusal, else `MalformedReply`."""
    if isinstance(exc, MalformedReply) or classify_model_error(exc) is not None or refusal_in_error(exc) is not None:
        return exc
    return MalformedReply(type(exc).__name__)


def _one_message(result: ChatResult) -> ChatResult:
    """``result`` when it holds a message (a reply with no ``choices`` gives none, and the caller's
    ``generations[0]`` then fails outside the client), else `MalformedReply`."""
    if not result.generations:
        raise MalformedReply("no message")
    return result


@functools.cache
def reading_replies(cls: ModelClass) -> ModelClass:
    """``cls`` (a provider's chat model class) whose calls raise `MalformedReply` for a reply its
    client could not read, made once per class. Same name, so telemetry's model label does not
    change."""

    def _generate(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return _one_message(cls._generate(self, *args, **kwargs))
        except Exception as exc:
            judged = _judged(exc)
            if judged is exc:
                raise
            raise judged from exc

    async def _agenerate(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return _one_message(await cls._agenerate(self, *args, **kwargs))
        except Exception as exc:
            judged = _judged(exc)
            if judged is exc:
                raise
            raise judged from exc

    namespace = {"_generate": _generate, "_agenerate": _agenerate, "__module__": cls.__module__}
    return type(cls.__name__, (cls,), namespace)  # type: ignore[return-value]


__all__ = ["MALFORMED", "MalformedReply", "reading_replies"]
