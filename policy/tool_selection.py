"""Relevant tools per request: at most N of the principal's visible tools, chosen deterministically.

A model shown every tool it may use chooses worse as the catalog grows (the guide's case 2: 94%
with a scoped set, 81% with everything), so each request offers at most ``limit`` tools
(``TOOLGATE_MAX_TOOLS_PER_REQUEST``, default 8). The choice reads no model and no network; each
visible tool is scored on three signals and the best ``limit`` are kept:

- **role**: a tool exposed to one of the principal's roles (``exposed_to_roles``) scores 3, a
  tool behind scopes the principal holds 1 (an open tool 0);
- **intent**, the latest user request against the tool: a word of its name 4 each, a word of
  its description 1 each (at most 6), each argument pattern that accepts a value the request
  names (an order id ``O-5512`` for ``^O-[0-9]{3,8}$``) 6 (at most 12), an enum value of an argument
  named as a word 3 each (at most 6);
- **conversation state**: the tool of a pending proposal 20, a tool already called in this task
  8, a natural follow-up 5: a tool that takes an argument a result of this task returned
  (``job_id`` after ``submit_report_job`` makes ``check_job_status`` a follow-up) or that shares
  an argument with a tool called in this task (``issue_refund`` after ``lookup_order``).

Ties go by name, and the kept tools are returned sorted by name, so the same choice always makes
the same prompt prefix (`toolgate.graph.nodes.prompt_cache`). A catalog of at most ``limit`` visible
tools is offered whole. Selection only ever narrows `visible_tools`: it cannot offer a tool the
principal may not see, whatever the (untrusted) conversation holds. It is an offer, not a
permission: dispatch judges a call against the visible set, so a call to a visible tool that was
not offered this turn is judged like any other.

A tool past its deprecation window (`toolgate.tools.spec.Deprecation`, ``retired`` on
the store's clock, the ``now`` the caller passes) is never offered: every call of it is refused
``tool_deprecated``. Inside its window it is offered like any other, its description telling the
model it is deprecated.

An argument pattern is a published definition's program run on the user's text, so it is
searched with ``regex`` inside one time budget per selection (`SELECTION_PATTERN_SECONDS`): a
pattern that backtracks past it (``(a|a)*!``) is no signal, never a hung model request.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import regex

from toolgate.errors import RegistryError
from toolgate.policy.authorization import visible_tools
from toolgate.policy.principal import Principal
from toolgate.tools.registry import Registry
from toolgate.tools.spec import ToolSpec, is_retired

BUILT_IN_CHOICES = ("auto", "required", "none")
"""Tool choices that name no tool (a release may also name one of its tools)."""
DEFAULT_MAX_TOOLS = 8
"""Tools offered per request unless configured (the guide's recommendation)."""

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    [
        "the",
        "and",
        "for",
        "use",
        "one",
        "this",
        "that",
        "with",
        "from",
        "any",
        "not",
        "does",
        "anything",
        "change",
        "changes",
        "its",
        "his",
        "her",
        "you",
        "your",
        "are",
        "was",
        "were",
        "has",
        "have",
        "can",
        "will",
        "into",
        "also",
        "only",
        "each",
        "all",
        "who",
        "what",
        "when",
        "where",
        "which",
        "how",
        "before",
        "after",
        "tool",
        "tools",
        "get",
        "run",
    ]
)
_MAX_SCHEMA_DEPTH = 6

SELECTION_PATTERN_SECONDS = 0.5
"""Time every argument pattern's search of one selection may take together (see the module doc)."""


def words(text: str) -> set[str]:
    """Normalized words of ``text``: lower case, 3+ characters, no stop words, plural ``s`` cut."""
    out: set[str] = set()
    for word in _WORD.findall(text.lower()):
        if len(word) < 3 or word in _STOP:
            continue
        out.add(word[:-1] if len(word) > 4 and word.endswith("s") and not word.endswith("ss") else word)
    return out


@dataclass(frozen=True)
class Conversation:
    """What the selector reads of the thread: the latest request and this task's tool use."""

    request: str = ""
    """The latest user request's text."""
    called: frozenset[str] = frozenset()
    """Real names of the tools called since that request."""
    result_keys: frozenset[str] = frozenset()
    """Keys of the JSON objects those calls returned (any depth)."""
    pending: frozenset[str] = frozenset()
    """Real names of the tools of the thread's pending proposals."""


@dataclass(frozen=True)
class ToolProfile:
    """What intent matching reads of one tool, computed once per spec."""

    name_words: frozenset[str]
    description_words: frozenset[str]
    patterns: tuple[regex.Pattern[str], ...]
    enum_words: frozenset[str]
    arguments: frozenset[str] = field(default_factory=frozenset)


_PROFILES: dict[int, tuple[ToolSpec, ToolProfile]] = {}


def profile(spec: ToolSpec) -> ToolProfile:
    """The spec's profile (cached by identity: a release's specs do not change while it runs)."""
    cached = _PROFILES.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1]
    schema = spec.contract.json_schema()
    patterns: list[regex.Pattern[str]] = []
    enums: set[str] = set()
    _walk(schema, schema.get("$defs", {}), patterns, enums, 0)
    made = ToolProfile(
        name_words=frozenset(words(spec.name.replace("_", " "))),
        description_words=frozenset(words(spec.description)),
        patterns=tuple(patterns),
        enum_words=frozenset(w for value in enums for w in words(value.replace("_", " "))),
        arguments=frozenset(schema.get("properties", {})),
    )
    if len(_PROFILES) > 4096:
        _PROFILES.clear()
    _PROFILES[id(spec)] = (spec, made)
    return made


def _walk(
    node: Any, defs: dict[str, Any], patterns: list[regex.Pattern[str]], enums: set[str], depth: int
) -> None:
    if not isinstance(node, dict) or depth > _MAX_SCHEMA_DEPTH:
        return
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        _walk(defs.get(ref.rsplit("/", 1)[1]), defs, patterns, enums, depth + 1)
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        text = r"(?<![\w-])" + pattern.strip("^$") + r"(?![\w-])"
        with contextlib.suppress(re.error, regex.error):  # a pattern re cannot compile is no signal
            re.compile(text, re.IGNORECASE)
            patterns.append(regex.compile(text, regex.IGNORECASE))
    enums.update(str(v) for v in node.get("enum", ()) if isinstance(v, str))
    for child in (*node.get("properties", {}).values(), node.get("items"), *node.get("anyOf", ())):
        _walk(child, defs, patterns, enums, depth + 1)


def score(
    spec: ToolSpec,
    principal: Principal,
    conversation: Conversation,
    request: set[str],
    deadline: float | None = None,
) -> int:
    """The tool's relevance to this request (see the module doc for the weights); its patterns
    are searched until ``deadline`` (`time.monotonic`; None: `SELECTION_PATTERN_SECONDS` from now)."""
    p = profile(spec)
    total = 3 if spec.exposed_to_roles and principal.roles & spec.exposed_to_roles else 0
    total += 1 if spec.required_scopes else 0
    total += 4 * len(p.name_words & request) + min(6, len(p.description_words & request))
    until = time.monotonic() + SELECTION_PATTERN_SECONDS if deadline is None else deadline
    total += min(12, 6 * sum(1 for pattern in p.patterns if _accepts(pattern, conversation.request, until)))
    total += min(6, 3 * len(p.enum_words & request))
    if spec.name in conversation.pending:
        total += 20
    if spec.name in conversation.called:
        total += 8
    elif p.arguments & conversation.result_keys:
        total += 5
    return total


def select_tools(
    registry: Registry,
    principal: Principal,
    conversation: Conversation,
    limit: int = DEFAULT_MAX_TOOLS,
    *,
    now: datetime | None,
) -> tuple[list[ToolSpec], list[ToolSpec]]:
    """``(visible, offered)``: the principal's visible tools and at most ``limit`` of them to offer
    this request, sorted by name; a retired tool at ``now`` (the store's clock) is never offered
    (``now`` None: no deprecation is judged, for offline measures only). A call to a visible tool
    outside ``offered`` is still judged normally by dispatch (the offer is no permission)."""
    visible = visible_tools(registry, principal)
    live = visible if now is None else [s for s in visible if not is_retired(s, now)]
    if len(live) <= limit:
        return visible, sorted(live, key=lambda s: s.name)
    request = words(conversation.request)
    called_args = frozenset(a for s in live if s.name in conversation.called for a in profile(s).arguments)
    state = Conversation(
        request=conversation.request,
        called=conversation.called,
        result_keys=conversation.result_keys | called_args,
        pending=conversation.pending,
    )
    deadline = time.monotonic() + SELECTION_PATTERN_SECONDS
    ranked = sorted(live, key=lambda s: (-score(s, principal, state, request, deadline), s.name))
    return visible, sorted(ranked[: max(0, limit)], key=lambda s: s.name)


def _accepts(pattern: regex.Pattern[str], text: str, deadline: float) -> bool:
    """Whether ``pattern`` finds a value in ``text`` before ``deadline``; a timeout is no signal."""
    left = deadline - time.monotonic()
    if left <= 0:
        return False
    try:
        return pattern.search(text, timeout=left) is not None
    except TimeoutError:
        return False


def offered_names(offered: Sequence[ToolSpec]) -> list[str]:
    """The offered tools' real names, sorted (the audit detail's ``tools_offered``)."""
    return sorted(s.name for s in offered)


def check_tool_choice(setting: str, tool_names: Iterable[str], release: str) -> None:
    """Refuse a release whose tool choice is neither a built-in value nor one of its tools."""
    if setting in BUILT_IN_CHOICES or setting in set(tool_names):
        return
    raise RegistryError(
        f"release {release}: tool_choice {setting!r} is not one of {', '.join(BUILT_IN_CHOICES)} "
        "nor the name of one of its tools"
    )


__all__ = [
    "BUILT_IN_CHOICES",
    "DEFAULT_MAX_TOOLS",
    "Conversation",
    "ToolProfile",
    "check_tool_choice",
    "offered_names",
    "profile",
    "score",
    "select_tools",
    "words",
]
