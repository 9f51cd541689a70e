"""Output sanitizing: what a handler returned, made safe to put in front of the model.

Order matters: validate against the tool's result model (contract drift is an error, not
garbage forwarded), keep only the model's fields (an allowlist fails safe when a new sensitive
field appears upstream), redact secret-looking values, then bound the size with an explicit
truncation marker, and label the provenance so the model treats it as data.

Secret patterns must not fire on ordinary data: a bare ``\\d{13,19}`` run used to eat the fraction
of floats (``123.04999999999999716`` reached the model as ``123.[REDACTED]``), order ids and
timestamps. Card numbers now need a card shape, a network prefix and the Luhn checksum.
"""

from __future__ import annotations

import json
import re
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from toolgate.errors import ToolExecutionError
from toolgate.refusal_codes import lookup

REDACTED = "[REDACTED]"
TRUNCATED = "[TRUNCATED]"

_TOKEN_CHARS = r"[A-Za-z0-9._~+/\-]"  # RFC 6750 b64token (the "=" padding follows it)
_SECRET_PATTERNS = [
    # API keys (OpenAI style); needs a letter so "sk-1234-5678-9012-3456" style ids stay.
    re.compile(r"\bsk-(?=[A-Za-z0-9_\-]*[A-Za-z])[A-Za-z0-9_\-]{16,}\b"),
    re.compile(r"\bAKIA[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),  # GitHub tokens
    re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\b"),  # JWTs
    # "Bearer <token>" as written in headers; a lower-case "bearer" in prose ("payable to the
    # bearer notwithstanding ...") only counts when the token has a digit.
    re.compile(rf"\b(?:(?:Bearer|BEARER)\s+|(?i:bearer)\s+(?={_TOKEN_CHARS}*\d)){_TOKEN_CHARS}{{12,}}=*"),
    # a password in a URL's user part (``postgresql://app:hunter2@db``): the user part goes whole
    re.compile(r"(?<=://)[^\s:/@\[\]]+:[^\s/@]+(?=@)"),
    # any scheme's credential in an Authorization header (Bearer's has its own pattern above)
    re.compile(r"(?i)\bauthorization[\"']?\s*[:=]\s*[\"']?[A-Za-z]+\s+[A-Za-z0-9+/=._~-]{8,}"),
    # a PEM private key, to its END line (or the end of the text, when cut)
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE KEY-----|\Z)", re.S),
]

_KEY_VALUE = re.compile(
    r"(?i)(?:p(?:ass(?:word|wd|phrase)|wd(?![\"']?\s*[:=]\s*[/~])|rivate[_-]?key)|secret(?:[_-]?key)?"
    r"|a(?:pi|ccess)[_-]?key|(?<!preview_)token)[\"']?\s*[:=]\s*"
    r"(?![\"']?\[REDACTED\])(?![\"']?(?:true|false|null|none)\b)(?:\"[^\"\n]*\"|'[^'\n]*'|\S+)"
)
"""key=value / key: value, as configuration, exception texts and raw JSON bodies write it: the
keyword may end a compound name (``client_secret``, ``DB_PASSWORD``, ``accessToken``: the name's
head stays) and be quoted (``"api_key": "..."``, a quoted value taken whole). Not the JSON
literals (``secret: false``), not a value that is already redacted (keeps redact_text idempotent
and count_secrets at 0 on redacted text), not a ``preview_token`` (see _SECRET_KEYS), and not
``PWD=/home/...`` (the working directory, not a password)."""
_KEY_VALUE_WORDS = ("pass", "pwd", "secret", "key", "token")
"""One of these is in every text `_KEY_VALUE` matches, once casefolded (``(?i)`` also matches the
long s and the Kelvin sign, which casefold to ``s`` and ``k``; the dotless and dotted i only occur
in keywords that hold ``key`` too). A keyword may sit anywhere in a word, so the pattern is tried
at every character, about ten times the cost of the others: most texts hold none of these words
and skip it."""

# Card candidates: 13-19 digits, bare or grouped by one consistent single space or dash (first
# group of 4, then groups of 3-6: 4-4-4-4, 4-6-5, 4-4-4-4-3), never part of a decimal number or of
# a longer digit/word run (so float fractions, thousands groups, hex digests and "+1..." phone
# numbers are not candidates). _is_card then asks for a network prefix and the Luhn checksum.
_CARD_CANDIDATE = re.compile(
    r"(?<![\w.,+])(?:\d{4}(?P<sep>[ -])\d{3,6}(?:(?P=sep)\d{3,6}){1,3}|\d{13,19})(?!\w)(?![.,]\d)"
)


def _luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _is_card(candidate: str) -> bool:
    """A Luhn-valid 13-19 digit number with a card network's leading digits.

    The prefix check (Mir 2200-2204, Mastercard 2221-2720, 3-6 for Amex/Diners/JCB/Visa/
    Mastercard/Discover/Maestro/UnionPay, UnionPay/RuPay 81-82) drops the 1 in 10 ordinary numbers
    that pass Luhn by chance when they start like epoch-millisecond timestamps (1...) or dated ids
    (20...)."""
    digits = candidate.replace(" ", "").replace("-", "")
    if not 13 <= len(digits) <= 19:
        return False
    head = int(digits[:4])
    network = (
        digits[0] in "3456" or 2200 <= head <= 2204 or 2221 <= head <= 2720 or digits[:2] in ("81", "82")
    )
    return network and _luhn_ok(digits)


_SECRET_KEYS = re.compile(
    r"(?i)(password|passwd|passphrase|private_?key|secret(?!ar)|(?<!preview_)token(?!s|iz)|api[_-]?key|(?<!dis)card(?!inal)|iban"
    r"|account_?number)"
    r"|(?<![A-Za-z])(?i:ssn)(?![a-z])|(?<![A-Z])SSN|(?<=[a-z])Ssn(?![a-z])"
)
"""Keys whose values never reach the model. A ``preview_token`` is a signed, single-use handle the
model must pass back to confirm a preview; it authorizes nothing by itself. Plain words that merely
contain a keyword are not secrets: ``total_tokens``/``max_tokens`` (counts), ``tokenizer``,
``cardinality``, ``discard``, ``secretary``, and ``ssn`` inside ``className``/``businessName``."""


def _scrub(text: str) -> tuple[str, int]:
    """``text`` with secret-looking substrings replaced, and how many were replaced."""
    count = 0
    for pattern in _SECRET_PATTERNS:
        text, n = pattern.subn(REDACTED, text)
        count += n
    folded = text.casefold()
    if any(word in folded for word in _KEY_VALUE_WORDS):
        text, n = _KEY_VALUE.subn(REDACTED, text)
        count += n

    def card(match: re.Match[str]) -> str:
        nonlocal count
        if _is_card(match.group()):
            count += 1
            return REDACTED
        return match.group()

    text = _CARD_CANDIDATE.sub(card, text)
    return text, count


def redact_text(text: str) -> str:
    """Replace secret-looking substrings of ``text``."""
    return _scrub(text)[0]


def count_secrets(text: str) -> int:
    """How many secret-looking substrings ``text`` holds (for scans of logs and stored state).

    Counts exactly what `redact_text` would replace."""
    return _scrub(text)[1]


_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])")
"""An e-mail address. Not a secret (screening lets it through to tools that need one), but personal
data: records kept for people to read later, such as captured dataset cases, hold none."""


def redact_personal_text(text: str) -> str:
    """`redact_text`, and e-mail addresses replaced too (text kept for later readers, not the model)."""
    return _EMAIL.sub(REDACTED, redact_text(text))


def redact_personal(value: Any, key: str = "") -> Any:
    """`redact` with `redact_personal_text` for every string, keys included (JSON-like values kept
    for later readers)."""
    return _redacted(value, key, redact_personal_text)


def redact(value: Any, key: str = "") -> Any:
    """Redact a JSON-like value recursively (by key name and by value pattern).

    Keys are text the model reads too, so they are redacted like values; a tuple is a list (a
    streamed chunk may be one); everything under a secret key is secret, however deeply nested
    (``{"api_key": {"value": ...}}``)."""
    return _redacted(value, key, redact_text)


def _redacted(value: Any, key: str, text: Callable[[str], str]) -> Any:
    """`redact` with ``text`` as the redaction of every string, a key or a value."""
    if key and _SECRET_KEYS.search(key):
        return _redact_all(value, text)
    if isinstance(value, str):
        return text(value)
    if isinstance(value, dict):
        return {(text(k) if isinstance(k, str) else k): _redacted(v, str(k), text) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redacted(v, key, text) for v in value]
    return value


def _redact_all(value: Any, text: Callable[[str], str]) -> Any:
    """``value`` under a secret key: every scalar in it replaced, its structure (keys redacted by
    ``text``) kept."""
    if isinstance(value, dict):
        return {(text(k) if isinstance(k, str) else k): _redact_all(v, text) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_all(v, text) for v in value]
    return REDACTED


def bound(payload: dict[str, Any], max_bytes: int, keep: Mapping[str, Any] | None = None) -> tuple[str, bool]:
    """Serialize ``payload`` within ``max_bytes``; over-long output is cut with a marker.

    ``keep``: fields the cut answer carries whole, ahead of the cut text, wherever they fit (a
    message's ``status`` and provenance label: cut from the sorted text, they went first, since
    ``data`` sorts before both)."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    if len(text.encode("utf-8")) <= max_bytes:
        return text, False
    for head in (dict(keep or {}), {}):  # the label only where the bound leaves room for it
        wrapper = _cut(text, max_bytes, head)
        if len(wrapper.encode("utf-8")) <= max_bytes:
            break
    return wrapper, True


def _cut(text: str, max_bytes: int, head: dict[str, Any]) -> str:
    """``{**head, truncated, marker, partial}`` with as much of ``text`` as fits ``max_bytes``."""

    def wrapped(part: str) -> str:
        return json.dumps({**head, "truncated": True, "marker": TRUNCATED, "partial": part}, ensure_ascii=False)

    room = max(0, max_bytes - len(wrapped("").encode("utf-8")))  # what the empty wrapper leaves
    clipped = text.encode("utf-8")[:room].decode("utf-8", errors="ignore")
    wrapper = wrapped(clipped)
    # the partial JSON is itself escaped inside the wrapper (every quote gains a backslash): cut
    # until the wrapper fits; each character cut removes at least one byte
    while (over := len(wrapper.encode("utf-8")) - max_bytes) > 0 and clipped:
        clipped = clipped[: max(0, len(clipped) - over)]
        wrapper = wrapped(clipped)
    return wrapper


def sanitize_result(result: Any, result_model: type[BaseModel]) -> dict[str, Any]:
    """Validate a handler result against its contract and reduce it to allowed, redacted fields.

    Every result is validated, an instance of the result model too: a subclass's own fields (a
    richer internal record returned as it is) and a ``model_construct``-ed instance (never
    validated: nested keys the contract lacks, values of the wrong type) would otherwise reach the
    model, since an instance serializes as its own class and holds what it was given. The dump
    keeps pydantic's serializer warnings quiet: they quote the values (loaded code's data) into
    the log."""
    try:
        data = result.model_dump(round_trip=True, warnings=False) if isinstance(result, BaseModel) else result
        model = result_model.model_validate(data)
    except ValidationError as exc:
        raise ToolExecutionError(
            "server_error", f"the tool's result broke its contract ({exc.error_count()} problem(s))"
        ) from exc
    except Exception as exc:  # a result that fights its own validation (RecursionError included)
        raise _invalid(exc) from None
    try:
        redacted: dict[str, Any] = redact(model.model_dump(mode="json"))
    except Exception as exc:  # not JSON: bytes, a cycle, 50,000 levels (RecursionError included)
        raise _invalid(exc) from None
    return redacted


@dataclass(frozen=True)
class PlainResult:
    """A handler's result made plain data where the handler ran (`plain_result`): the JSON
    `sanitize_result` keeps, or why it could not be kept, raised by `unwrap` in the caller."""

    data: dict[str, Any] | None = None
    failure: ToolExecutionError | None = None

    def unwrap(self) -> dict[str, Any]:
        """The sanitized result, or the `ToolExecutionError` that sanitizing it raised."""
        if self.failure is not None:
            raise self.failure
        assert self.data is not None
        return self.data


def plain_result(
    fn: Callable[..., Any], result_model: type[BaseModel], *, none_passes: bool = False
) -> Callable[..., PlainResult | None]:
    """``fn`` (a handler or status check) with its result sanitized as soon as it returns, in
    its own thread: what loaded code returns is its own objects, whose methods (a ``model_dump``,
    a serializer, a dict subclass's ``items``) are its code too and would otherwise run in the
    caller's thread, where a hang would hold the run past every deadline. A failure to sanitize
    is a value (`PlainResult.failure`), never the call's exception: callers tell a result that
    broke its contract from a handler that failed. ``none_passes``: a None result (a status
    check's "not found") is returned as None."""

    def run(*args: Any) -> PlainResult | None:
        raw = fn(*args)
        if raw is None and none_passes:
            return None
        try:
            return PlainResult(data=sanitize_result(raw, result_model))
        except ToolExecutionError as exc:
            return PlainResult(failure=exc)

    return run


def redacted_traceback(exc: BaseException) -> str:
    """``exc``'s traceback for a log, its messages redacted (`redact_text`): loaded code (a handler,
    an owner check, a review lookup) may put a password or a key into what it raises, and a log is
    read by more people than the audit log is. The frames (files, lines, code) are kept."""
    return redact_text("".join(traceback.format_exception(exc)).rstrip())


MAX_FAILURE_MESSAGE = 500
"""The most a handler's own failure message keeps, once redacted."""


def handler_failure(exc: ToolExecutionError) -> ToolExecutionError:
    """A handler's own classified failure, as trusted code may report it: a ``kind`` the catalog
    lists for handlers (anything else, whatever the handler made up, is ``server_error``) and a
    message redacted and bounded, since loaded code may put a password or a key into it and the
    message reaches the model, the operation's record and every client. A made-up kind is an
    unclassified failure, never retryable (a read is retried only on a classified one). The same exception when
    it already says nothing else (a capability's own refusal); else a new one raised from it."""
    entry = lookup("execution", exc.kind) if type(exc.kind) is str else None
    kind = exc.kind if entry is not None and entry.owner == "handler" else "server_error"
    said = exc.message if type(exc.message) is str else "the tool failed"
    message = redact_text(said)[:MAX_FAILURE_MESSAGE]
    retryable = exc.retryable is True and kind == exc.kind  # a made-up kind is unclassified: no retry
    if kind == exc.kind and message == exc.message and retryable is exc.retryable:
        return exc
    reported = ToolExecutionError(kind, message, retryable=retryable)
    reported.__cause__ = exc  # its capability refusal, if any, is still found (`denial_in`)
    return reported


def _invalid(exc: BaseException) -> ToolExecutionError:
    """A handler's result that cannot be bounded and serialized fails its own call with
    ``result_invalid``, never the run; the message names the class, never the text (which may
    carry what the result held)."""
    return ToolExecutionError(
        "result_invalid", f"the tool's result cannot be serialized ({type(exc).__name__})", retryable=False
    )


__all__ = [
    "MAX_FAILURE_MESSAGE",
    "REDACTED",
    "TRUNCATED",
    "PlainResult",
    "bound",
    "count_secrets",
    "handler_failure",
    "plain_result",
    "redact",
    "redact_personal",
    "redact_personal_text",
    "redact_text",
    "redacted_traceback",
    "sanitize_result",
]
