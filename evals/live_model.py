"""The chat model a gate run scores with: the dataset's scripted turns (the default), or a real
provider model built the way the product builds it.

``toolgate evals run --model openai:gpt-4.1-mini`` runs every case of the candidate and of the
control with that model, built by `toolgate.models.selection.load_chat_model` from the process's settings
(``TOOLGATE_MODEL_BASE_URL``, ``TOOLGATE_OPENAI_API``, ``TOOLGATE_MODEL_MAX_TOKENS``...), so what
is scored is what would serve: the bundle's descriptions, schemas and instructions as the model
reads them. Both releases get the same model, so a difference between them is the bundle's.

`choose_model` refuses before anything runs (`ModelUnavailable`, one stable code each): a name
that is not ``PROVIDER:NAME``, model requests switched off (``TOOLGATE_ALLOW_MODEL_REQUESTS=0``),
a provider LangChain does not know or whose package is missing, and a provider whose key variable
is unset. It builds the model once to prove the construction works; no request is sent. The key
is read by the provider's client only: toolgate asks whether its variable is set, never its value.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from langchain_core.language_models import BaseChatModel
from pydantic import ValidationError

from toolgate.config import Settings
from toolgate.errors import ConfigurationError, ModelUnavailable
from toolgate.evals.fixtures import SCRIPTED
from toolgate.models.selection import KEY_VARIABLES, PROVIDERS, load_chat_model

_FORM = re.compile(r"^[a-z][a-z0-9_-]*:[A-Za-z0-9][A-Za-z0-9._:/@-]*$")
"""``provider:name``; a name may hold ``:``, ``/`` and ``@`` (``ollama:llama3.1:8b``)."""


@dataclass(frozen=True, kw_only=True)
class EvalModel:
    """The model every case of a gate run is run with."""

    name: str = SCRIPTED
    """``scripted``, or ``provider:name`` as ``TOOLGATE_MODEL`` takes it."""
    settings: Settings | None = field(default=None, repr=False)
    """What a live model is built from (base URL, API, output bound); None when scripted."""

    @property
    def live(self) -> bool:
        """True for a provider model, False for the scripted turns."""
        return self.name != SCRIPTED

    def build(self) -> BaseChatModel | None:
        """A fresh chat model (None: each case's scripted model)."""
        if not self.live or self.settings is None:
            return None
        return load_chat_model(replace(self.settings, model=self.name))


def choose_model(name: str, settings: Settings, env: Mapping[str, str] | None = None) -> EvalModel:
    """The model named by ``--model`` (``scripted`` or ``provider:name``), checked and built once.

    ``env`` (default: the process environment) is only asked whether a provider's key variable is set.

    Raises:
        ModelUnavailable: the name, the settings or the provider refuse it (see the module doc).
    """
    if name == SCRIPTED:
        return EvalModel()
    if not _FORM.match(name):
        raise ModelUnavailable(
            "model_malformed", "--model must be 'scripted' or PROVIDER:NAME, e.g. openai:gpt-4.1-mini"
        )
    if not settings.allow_model_requests:
        raise ModelUnavailable(
            "model_requests_disabled",
            f"model {name!r} refused: TOOLGATE_ALLOW_MODEL_REQUESTS=0; nothing was run",
        )
    provider = name.partition(":")[0]
    variable = KEY_VARIABLES.get(provider)
    if variable is not None and not (os.environ if env is None else env).get(variable):
        raise ModelUnavailable(
            "model_key_missing", f"model {name!r} needs {variable} set in the environment; nothing was run"
        )
    chosen = EvalModel(name=name, settings=settings)
    try:
        chosen.build()
    except ConfigurationError as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError) and not isinstance(cause, ValidationError):
            known = ", ".join(sorted(PROVIDERS))
            raise ModelUnavailable(
                "unknown_provider",
                f"model {name!r} refused: unknown provider {provider!r} (built in: {known};"
                " others through LangChain's init_chat_model); nothing was run",
            ) from exc
        code = "provider_not_installed" if isinstance(cause, ImportError) else "model_refused"
        raise ModelUnavailable(code, f"{exc}; nothing was run") from exc
    except Exception as exc:  # the client library refused its own construction
        reason = (str(exc).splitlines() or [""])[0][:200]
        raise ModelUnavailable(
            "model_refused", f"model {name!r} refused: {type(exc).__name__}: {reason}; nothing was run"
        ) from exc
    return chosen


__all__ = ["SCRIPTED", "EvalModel", "choose_model"]
