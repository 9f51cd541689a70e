"""What loaded code raises may carry a password or a key; the logs keep its traceback (files,
lines, the exception's class) with the messages redacted (issue 27, item 1)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from toolgate.graph.worker import waker
from toolgate.policy.output import redacted_traceback

PLANTED = "password=hunter2 api_key=sk-live-planted-0001"


def _raise() -> None:
    raise RuntimeError(f"downstream refused ({PLANTED})")


def test_a_redacted_traceback_keeps_the_frames_and_drops_the_secret() -> None:
    try:
        _raise()
    except RuntimeError as exc:
        text = redacted_traceback(exc)
    assert "Traceback" in text and "_raise" in text and "RuntimeError" in text
    assert "hunter2" not in text and "sk-live-planted-0001" not in text


def test_a_failed_wake_is_logged_without_the_secret(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def failing(thread_id: str) -> bool:
        _raise()
        return True

    monkeypatch.setattr(waker, "wake_thread", failing)
    with caplog.at_level(logging.WARNING, logger=waker.log.name):
        assert asyncio.run(waker.wake_quietly("t-1")) is False
    assert "could not wake thread t-1" in caplog.text and "RuntimeError" in caplog.text
    assert "hunter2" not in caplog.text and "sk-live-planted-0001" not in caplog.text
    assert all(record.exc_info is None for record in caplog.records)  # no unredacted copy rides along
