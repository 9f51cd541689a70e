"""A one-tool release for `tests/test_streamed_output.py`, loadable by the real server
(``TOOLGATE_RELEASE=tests/streamed_release.py:release``).

``tail_log`` is a long read whose handler is a generator: it yields the log a line at a time
(one line holds a planted API key, which must reach no client) and returns a short summary, the
bounded result the model gets. The log is longer than the tool's ``max_output_bytes``, so the
stream is cut at the bound.
"""

from __future__ import annotations

from collections.abc import Generator

from pydantic import Field
from release_files import with_manifest

from toolgate.policy.rules import PolicyRules
from toolgate.releases.bundle import Release, ReleaseEnv
from toolgate.tools.spec import ApprovalClass, HandlerContext, NoRollback, StrictArgs, ToolResult, ToolSpec

RELEASE_ID = "streamed-output/1.0.0"
TOOL = "tail_log"
PLANTED_KEY = "sk-live-PLANTEDstream0123456789abcdef"
MAX_OUTPUT_BYTES = 2048


class TailArgs(StrictArgs):
    lines: int = Field(ge=1, le=500, description="How many log lines to read.")


class TailResult(ToolResult):
    lines_read: int
    last_line: str


def log_line(number: int) -> str:
    """Line ``number`` of the log (line 3 holds the planted key)."""
    if number == 3:
        return f"0003 deploy used api_key={PLANTED_KEY}\n"
    return f"{number:04d} worker heartbeat ok, queue depth {number % 7}\n"


def tools(env: ReleaseEnv) -> list[ToolSpec]:
    def tail_log(args: TailArgs, ctx: HandlerContext) -> Generator[str, None, TailResult]:
        for number in range(1, args.lines + 1):
            yield log_line(number)
        return TailResult(lines_read=args.lines, last_line=log_line(args.lines).strip())

    return [
        ToolSpec(
            name=TOOL,
            version="1.0.0",
            owner="streaming-tests",
            description="Read the last lines of the service log; the user sees them as they are read.",
            args_model=TailArgs,
            result_model=TailResult,
            risk="read-only",
            effect="Reads the service log.",
            timeout_s=30,
            max_output_bytes=MAX_OUTPUT_BYTES,
            approval=ApprovalClass.none(),
            required_scopes=frozenset({"ops:read"}),
            handler=tail_log,  # type: ignore[arg-type]
            handler_revision="tail-log/1.0.0",
            rollback=NoRollback("read-only: nothing to undo"),
            audit_fields=frozenset({"lines"}),
        )
    ]


release = with_manifest(
    Release(
        id=RELEASE_ID,
        tools=tools,
        policy=PolicyRules.from_mapping(
            {"schema_version": 1, "policy_version": "so-1", "approval_minutes": 60}
        ),
    )
)
"""The release the streaming server serves."""
