"""Redaction of what the evaluation gate writes and shows: reports, their HTML view, printed lines.

Reports leave the machine (attached to reviews, signed, kept as release evidence), so they are
redacted the way tool output is (`toolgate.policy.output`, the one definition of a secret-looking
value): every string is scrubbed of keys, tokens and card numbers, and a case's input, which
holds what a person typed, is redacted by key as well. Keys of the report itself stay: they name
figures (``token_source``), not secrets.
"""

from __future__ import annotations

from typing import Any

from toolgate.policy.output import redact, redact_text


def scrubbed(value: Any) -> Any:
    """``value`` with every string it holds passed through `redact_text` (keys kept: a report's own
    keys such as ``token_source`` name figures, not secrets)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, dict):
        return {k: scrubbed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [scrubbed(v) for v in value]
    return value


def redacted_report(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` as it may be written or shown: every string scrubbed (`scrubbed`), and each case's
    ``input`` redacted by key and value (`toolgate.policy.output.redact`)."""
    out: dict[str, Any] = scrubbed(body)
    for run in ("candidate", "control"):
        if isinstance(out.get(run), dict):
            for case in out[run].get("cases", []):
                if "input" in case:
                    case["input"] = redact(case["input"], "input")
    return out


def unredacted(report: dict[str, Any]) -> bool:
    """True when ``report`` holds something `redacted_report` would change (a report written
    before reports were redacted, or edited by hand): such a report is not signed."""
    return redacted_report(report) != report


__all__ = ["redacted_report", "scrubbed", "unredacted"]
