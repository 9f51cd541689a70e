"""A local provider endpoint that answers by what it is asked, for dataset runs of a real client.

`ReplayServer` (tests/replay_openai.py) answers a fixed script in order, which fits one task; a
dataset run asks for many tasks, in an order the gate decides, some of them twice (a second
worker, a replayed turn). This stand-in answers each request from its content instead: it reads
the task's first user message, how many tool calls the model has made in the history so far and
the tools offered, asks an `Answer` function for the model's next response, and serves it in the
provider's exact wire format, built from the provider SDK's own types as the replay modules build
them: OpenAI Responses or Chat Completions (``langchain-openai``), Anthropic Messages
(``langchain-anthropic``). Every response reports usage; `served` keeps what each user message was
answered and how many tokens were reported for it. Call ids are the server's own
(``call_stub_7_0``), never the dataset's, as a real provider's are.
"""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import replay_anthropic
import replay_openai
from replay_openai import CHAT_PATH, RESPONSES_PATH, ReplayServer, Reply

from toolgate.evals.fixtures import EvalCase

Wire = Literal["responses", "chat", "anthropic"]
PATHS: dict[str, str] = {
    "responses": RESPONSES_PATH,
    "chat": CHAT_PATH,
    "anthropic": replay_anthropic.MESSAGES_PATH,
}


@dataclass(frozen=True)
class Call:
    """One tool call the stub model makes."""

    name: str
    args: Any


Response = list[Call] | str | Reply
"""The model's next response: tool calls, a final text, or an HTTP error reply."""


@dataclass(frozen=True)
class Request:
    """What the stub reads from one request, whatever the wire format."""

    user: str
    """The task's first user message."""
    calls_made: int
    """Tool calls of the model already in the history."""
    tools: dict[str, str]
    """Offered tool name -> its description."""


Answer = Callable[[Request], Response]


def scripted(cases: Iterable[EvalCase], overrides: Mapping[str, Sequence[Response]] | None = None) -> Answer:
    """A model answering each case's input with the case's scripted turns, then its final text;
    ``overrides`` (input -> turns, the last one usually a text) answers some inputs otherwise."""
    turns: dict[str, list[Response]] = {}
    for case in cases:
        if case.input in turns:
            raise ValueError(f"two cases ask {case.input!r}: the stub answers by input")
        turns[case.input] = [[Call(c.name, c.args) for c in turn] for turn in case.turns] + [case.final]
    for text, answers in (overrides or {}).items():
        turns[text] = list(answers)

    def answer(request: Request) -> Response:
        made = 0
        for response in turns[request.user]:
            if made >= request.calls_made:
                return response
            made += len(response) if isinstance(response, list) else 0
        return "I have nothing more to add."

    return answer


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))


def read_request(wire: str, body: Mapping[str, Any]) -> Request:
    """The task's first user message, the calls made so far and the offered tools."""
    if wire == "responses":
        items = list(body.get("input") or [])
        user = next(_text(i.get("content")) for i in items if i.get("role") == "user")
        made = sum(1 for i in items if i.get("type") == "function_call")
        tools = {t["name"]: str(t.get("description", "")) for t in body.get("tools") or []}
        return Request(user, made, tools)
    messages = list(body.get("messages") or [])
    user = next(_text(m.get("content")) for m in messages if m.get("role") == "user")
    if wire == "chat":
        made = sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
        tools = {
            t["function"]["name"]: str(t["function"].get("description", "")) for t in body.get("tools") or []
        }
        return Request(user, made, tools)
    made = sum(
        1
        for m in messages
        if m.get("role") == "assistant" and not isinstance(m.get("content"), str)
        for block in m["content"]
        if block.get("type") == "tool_use"
    )
    return Request(user, made, {t["name"]: str(t.get("description", "")) for t in body.get("tools") or []})


def _reply(wire: str, n: int, response: list[Call] | str, tokens: tuple[int, int]) -> Reply:
    """Response number ``n`` in ``wire``'s format, reporting ``tokens`` (input, output)."""
    calls = response if isinstance(response, list) else []
    if wire == "responses":
        output = [
            replay_openai.function_call_item(f"fc_stub_{n}_{i}", f"call_stub_{n}_{i}", c.name, c.args)
            for i, c in enumerate(calls)
        ] or [replay_openai.message_item(f"msg_stub_{n}", str(response))]
        return replay_openai.response(
            f"resp_stub_{n}", output, model="gpt-4.1-mini-2025-04-14", tokens=replay_openai.usage(*tokens)
        )
    if wire == "chat":
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else str(response)}
        if calls:
            message["tool_calls"] = [
                {
                    "id": f"call_stub_{n}_{i}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.args, separators=(",", ":"))},
                }
                for i, c in enumerate(calls)
            ]
        return replay_openai.chat_completion(
            message,
            "tool_calls" if calls else "stop",
            prompt_tokens=tokens[0],
            completion_tokens=tokens[1],
            suffix=f"stub{n}",
        )
    blocks = [
        replay_anthropic.tool_use_block(f"toolu_stub_{n}_{i}", c.name, c.args) for i, c in enumerate(calls)
    ]
    return replay_anthropic.message(
        f"msg_stub_{n}",
        blocks or [replay_anthropic.text_block(str(response))],
        stop_reason="tool_use" if calls else "end_turn",
        tokens=replay_anthropic.usage(*tokens),
    )


@dataclass
class CaseServer(ReplayServer):
    """The endpoint for ``wire``, answering every request with ``answer``. Use as a context manager."""

    answer_with: Answer | None = None
    wire: str = "responses"
    served: dict[str, list[tuple[int, int]]] = field(default_factory=lambda: defaultdict(list))
    """Per user message: the (input, output) tokens each successful response reported."""
    _numbers: Any = field(default_factory=lambda: itertools.count(1))

    def answer(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> Reply:
        """Record one request and answer it from its content."""
        with self.lock:
            self.requests.append(replay_openai.Recorded("POST", path, headers, body))
            if path != PATHS[self.wire]:
                return replay_openai.error_reply(
                    404, f"unexpected path {path}", "invalid_request_error", None
                )
            assert self.answer_with is not None
            request = read_request(self.wire, body)
            response = self.answer_with(request)
            if isinstance(response, Reply):
                return response
            n = next(self._numbers)
            tokens = (120 + 10 * request.calls_made, 9 * len(response) if isinstance(response, list) else 6)
            self.served[request.user].append(tokens)
            return _reply(self.wire, n, response, tokens)


def serve(wire: str, answer: Answer) -> CaseServer:
    """The stub endpoint for ``wire`` (enter it to serve)."""
    return CaseServer(script=[], path=PATHS[wire], answer_with=answer, wire=wire)


__all__ = [
    "PATHS",
    "Answer",
    "Call",
    "CaseServer",
    "Request",
    "Response",
    "Wire",
    "read_request",
    "scripted",
    "serve",
]
