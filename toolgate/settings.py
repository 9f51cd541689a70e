"""Every ``TOOLGATE_*`` environment variable toolgate reads: its type, default and meaning.

This is the one place that declares them. `read_settings` parses the environment when a command,
the server or a run needs a value, never at import, so ``toolgate --help`` and ``--version`` work
whatever the environment holds. An empty variable counts as unset. A value of the wrong form
raises `InvalidSetting`, whose message is one line naming the variable and the form it expects
(``TOOLGATE_MAX_MODEL_TURNS must be an integer >= 1 (got 'eight')``); a secret's value is never
repeated in it. `read_settings` checks every variable at once, so a command refuses a bad value
before it touches anything, even one it would not have used.

Test and benchmark harness variables (``TOOLGATE_TEST_PG_URL``, ``TOOLGATE_BENCH_PG_URL``,
``TOOLGATE_PG_*``) belong to those harnesses and are not settings of the product.
"""

from __future__ import annotations

import functools
import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, SecretStr, ValidationError

from toolgate.errors import ConfigurationError
from toolgate.store.keys import MIN_SECRET_BYTES

PREFIX = "TOOLGATE_"
DEFAULT_RELEASE = "ops-tools/1.1.0"
"""The release a bare ``toolgate run`` (and the server) serves: toolgate's own demo, the wide
release of `toolgate.tools.demo` as its entry point offers it. Chosen here, where the product's
defaults are, and named by id so that reading settings never imports the demo."""
MIN_THINKING_TOKENS = 1024
"""The smallest extended-thinking budget Anthropic accepts."""


class InvalidSetting(ConfigurationError):
    """A ``TOOLGATE_*`` variable holds a value of the wrong form; the message is one line.

    Attributes:
        variable: the variable's name, e.g. ``TOOLGATE_MAX_MODEL_TURNS``.
    """

    def __init__(self, variable: str, expected: str, got: str | None) -> None:
        shown = "" if got is None else f" (got {got!r})"
        super().__init__(f"{variable} must be {expected}{shown}")
        self.variable = variable


@dataclass(frozen=True)
class Form:
    """What a refused value should have looked like, for the one-line message.

    Attributes:
        text: the expected form, e.g. ``an integer >= 1``.
        echo: False for secrets: the refused value is not repeated.
    """

    text: str
    echo: bool = True


def _split_commas(value: Any) -> Any:
    return [part.strip() for part in value.split(",")] if isinstance(value, str) else value


def _strip(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _long_enough(value: SecretStr) -> SecretStr:
    if len(value.get_secret_value().encode("utf-8")) < MIN_SECRET_BYTES:
        raise ValueError("too short")
    return value


def _networks(value: tuple[str, ...]) -> tuple[str, ...]:
    for part in value:
        ipaddress.ip_network(part, strict=False)  # ValueError: not an address or a range
    return tuple(p for p in value if p)


def _thinking_budget(value: int) -> int:
    if value != 0 and value < MIN_THINKING_TOKENS:
        raise ValueError("below the provider's minimum")
    return value


def _model_name(value: str) -> str:
    provider, _, name = value.partition(":")
    if value != "offline" and not (provider and name):
        raise ValueError("not offline or provider:model")
    return value


Count = Annotated[int, Field(ge=1), Form("an integer >= 1")]
Retries = Annotated[int, Field(ge=0), Form("an integer >= 0")]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False), Form("a number of seconds > 0")]
Wait = Annotated[float, Field(ge=0, allow_inf_nan=False), Form("a number of seconds >= 0")]
OffOrCount = Annotated[int, Field(ge=0), Form("0 (off) or an integer >= 1")]
Days = Annotated[float, Field(ge=0, allow_inf_nan=False), Form("a number of days >= 0")]
Minutes = Annotated[float, Field(ge=0, allow_inf_nan=False), Form("a number of minutes >= 0")]
WindowSeconds = Annotated[int, Field(ge=1, le=86_400), Form("an integer of seconds, 1..86400")]
Delays = Annotated[
    tuple[Annotated[float, Field(ge=0, allow_inf_nan=False)], ...],
    BeforeValidator(_split_commas),
    Field(min_length=1),
    Form("comma-separated numbers of seconds >= 0, e.g. 1,2,4,8,16"),
]
Switch = Annotated[bool, BeforeValidator(_strip), Form("1 or 0")]
Networks = Annotated[
    tuple[str, ...],
    BeforeValidator(_split_commas),
    AfterValidator(_networks),
    Form("comma-separated addresses or ranges, e.g. 10.0.0.7,192.168.0.0/16"),
]
ModelName = Annotated[
    str, AfterValidator(_model_name), Form("'offline' or 'provider:model', e.g. 'openai:gpt-4.1-mini'")
]
ThinkingTokens = Annotated[
    int,
    Field(ge=0),
    AfterValidator(_thinking_budget),
    Form(f"0 (off) or an integer >= {MIN_THINKING_TOKENS}"),
]
OpenAIApi = Annotated[Literal["responses", "chat"], BeforeValidator(_strip), Form("'responses' or 'chat'")]
StoreSecret = Annotated[
    SecretStr, AfterValidator(_long_enough), Form(f"at least {MIN_SECRET_BYTES} bytes", echo=False)
]


class EnvSettings(BaseModel):
    """The ``TOOLGATE_*`` variables of one process, parsed (field ``x`` is ``TOOLGATE_X``)."""

    model_config = ConfigDict(
        alias_generator=lambda name: PREFIX + name.upper(),
        extra="ignore",
        frozen=True,
        use_attribute_docstrings=True,
    )

    data_dir: Path | None = None
    """Where embedded SQLite files and the generated store secret (``audit.key``) live; unset:
    ``./.toolgate`` (the LangGraph server: ``./.toolgate/server``)."""
    database_url: str | None = Field(default=None, repr=False)
    """``postgresql://...`` for PostgreSQL or ``sqlite:///PATH``; unset: SQLite in the data directory."""
    model: ModelName = "offline"
    """``offline`` (the deterministic demo model) or ``provider:model``."""
    model_base_url: str | None = None
    """Base URL of an OpenAI-compatible endpoint."""
    model_max_tokens: Count = 800
    """Bound on the model's output tokens per turn."""
    model_thinking_tokens: ThinkingTokens = 0
    """Extended-thinking budget per turn for ``anthropic:`` models, on top of the output bound
    (``0``: no thinking)."""
    openai_api: OpenAIApi = "responses"
    """The OpenAI API ``openai:`` models use: ``responses`` (reasoning items kept across turns) or
    ``chat`` (Chat Completions, for endpoints that offer only that)."""
    release: str = DEFAULT_RELEASE
    """The release to serve: an installed id, ``package.module:attribute`` or ``path/to/release.py:attribute``."""
    audit_key: StoreSecret | None = None
    """The store's secret (the same for every process on one store); unset: generated into the data directory."""
    token: SecretStr | None = None
    """The acting person's token, proving who ``--as`` names."""
    allow_model_requests: Switch = True
    """``0`` refuses to construct a real provider model (the tests set it)."""
    max_model_turns: Count = 24
    """Model calls per task (a thread keeps the limits it started with)."""
    max_tool_calls: Count = 40
    """Tool calls per task."""
    max_calls_per_turn: Count = 32
    """Calls judged one by one in one model turn; the rest are refused as one batch."""
    max_tools_per_request: Count = 8
    """Tools offered to the model per request, the most relevant of those the principal may see
    (`toolgate.policy.tool_selection`); a catalog this small or smaller is offered whole."""
    deadline_s: Seconds = 300.0
    """Autonomous running time of a task, restarted by each human decision."""
    max_validation_retries: Retries = 2
    """Invalid-argument retries per tool before human review."""
    max_identical_calls: Count = 2
    """Identical calls (name and arguments) allowed per task."""
    reconcile_delays: Delays = (1.0, 2.0, 4.0, 8.0, 16.0)
    """Waits between status checks of an unknown outcome."""
    max_parallel_calls: Count = 5
    """Independent calls of one turn running at once."""
    batch_deadline_s: Seconds = 120.0
    """Wall-clock budget of one turn's batch of calls."""
    claim_lease_s: Seconds = 60.0
    """Lease of an execution claim."""
    duplicate_wait_s: Wait = 30.0
    """How long a duplicate delivery waits for the stored result."""
    audit_retention_days: Days = 90.0
    """Default age for ``toolgate audit retention``."""
    waker_interval_s: Wait = 2.0
    """How often the server resumes threads whose approval was decided elsewhere (``0``: never)."""
    sign_in_failures_per_source: Count = 30
    """Failed sign-ins a minute from one address before it is throttled (`toolgate.policy.sign_in_throttle`)."""
    sign_in_failures_per_person: Count = 10
    """Failed sign-ins a minute for one person named on the CLI before they are throttled."""
    sign_in_window_s: WindowSeconds = 60
    """The window (on the store's clock) the sign-in failure limits count in."""
    trusted_proxies: Networks = ()
    """Reverse proxies whose ``X-Forwarded-For`` names the client (`toolgate.graph.server.client_address`);
    none: a request's address is its connection's, whatever it sends."""
    max_concurrent_model_requests: Count = 16
    """Model requests in flight at once in this process; past it (after ``admission_wait_s``) a
    run ends ``overloaded`` with a ``retry_after_s``, its checkpoint intact."""
    max_concurrent_model_requests_per_tenant: Count = 8
    """Model requests in flight at once in this process for one tenant."""
    max_concurrent_tool_executions: Count = 32
    """Tool handlers (reads and approved writes) running at once in this process; past it the
    call is refused ``overloaded`` (a write stays approved)."""
    max_concurrent_tool_executions_per_tenant: Count = 16
    """Tool handlers running at once in this process for one tenant."""
    admission_wait_s: Wait = 0.2
    """How long a request waits for a free slot before it is refused ``overloaded``."""
    cluster_model_requests_per_tenant: OffOrCount = 0
    """Model requests in flight at once for one tenant across every process on the store (slots
    held in the store's ``admission_slots``); ``0``: no cluster cap (no store call at all)."""
    cluster_tool_executions_per_tenant: OffOrCount = 0
    """Tool handlers running at once for one tenant across every process on the store; ``0``: off."""
    cluster_slot_ttl_s: Seconds = 300.0
    """How long a cluster slot lives on the store's clock without a renewal: a running call's slot is
    renewed every third of it, so it need not exceed the longest call; a slot of a process that died
    frees itself this long after its last renewal (shorter frees a dead process's share sooner)."""
    service_signing_key_file: Path | None = None
    """A PEM file holding an Ed25519 or RSA (2048 bits or more) private key: service credentials are
    then signed with it (``EdDSA``/``RS256``), for downstreams that verify with the public keys
    alone (`toolgate.tools.credentials.AsymmetricCredentialProvider`); unset: HS256 tokens keyed by
    the store's secret."""
    gate_dataset: Path | None = None
    """The dataset a candidate's gate run must cover whole before shadow, canary or promote
    (`toolgate.releases.evidence`); unset: the packaged ``tool-calling-v1``."""
    canary_min_calls: Retries = 20
    """Calls a canaried candidate must have judged before it may be promoted."""
    canary_min_minutes: Minutes = 60.0
    """Minutes (the store's clock) a canary must have run before it may be promoted."""


VARIABLES: tuple[str, ...] = tuple(PREFIX + name.upper() for name in EnvSettings.model_fields)
"""Every variable `EnvSettings` reads, in declaration order."""


def read_settings(env: Mapping[str, str] | None = None) -> EnvSettings:
    """Every setting in ``env`` (default: the process environment), parsed when called.

    A parse is kept for as long as the variables keep their values.

    Raises:
        InvalidSetting: the first variable, in declaration order, whose value has the wrong form.
    """
    source = os.environ if env is None else env
    return _parse(tuple((name, source.get(name) or "") for name in VARIABLES))


def setting(name: str) -> Any:
    """One setting (``name`` is the field, e.g. ``max_model_turns``) from the process environment now.

    For defaults made often, such as a `Context`'s knobs: it reads one variable, not all of them.

    Raises:
        InvalidSetting: the variable's value has the wrong form.
    """
    variable = PREFIX + name.upper()
    return getattr(_parse(((variable, os.environ.get(variable) or ""),)), name)


@functools.lru_cache(maxsize=128)
def _parse(values: tuple[tuple[str, str], ...]) -> EnvSettings:
    given = {name: value for name, value in values if value}
    try:
        return EnvSettings.model_validate(given)
    except ValidationError as exc:
        raise _invalid(exc, given) from None


def _invalid(exc: ValidationError, given: Mapping[str, str]) -> InvalidSetting:
    variable = str(exc.errors()[0]["loc"][0])
    info = EnvSettings.model_fields[variable.removeprefix(PREFIX).lower()]
    form = _form([*info.metadata, *get_args(info.annotation)]) or Form("a valid value", echo=False)
    return InvalidSetting(variable, form.text, given[variable] if form.echo else None)


def _form(annotations: list[Any]) -> Form | None:
    """The `Form` declared on a field, also inside ``Optional[Annotated[...]]``."""
    for item in annotations:
        found = item if isinstance(item, Form) else _form(list(get_args(item)))
        if found:
            return found
    return None


__all__ = ["DEFAULT_RELEASE", "VARIABLES", "EnvSettings", "InvalidSetting", "read_settings", "setting"]
