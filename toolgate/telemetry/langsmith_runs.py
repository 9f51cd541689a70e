"""LangSmith run metadata: which release and which operation keys a graph node's run touched.

Attached only when LangSmith tracing is enabled; otherwise nothing is sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any


def langsmith_enabled() -> bool:
    """True when LangSmith tracing is on (``LANGSMITH_TRACING=true`` or an active LangSmith run)."""
    try:
        from langsmith.utils import tracing_is_enabled
    except ImportError:  # pragma: no cover - langsmith is a runtime dependency
        value = os.environ.get("LANGSMITH_TRACING") or os.environ.get("LANGCHAIN_TRACING_V2") or ""
        return value.strip().lower() == "true"
    return tracing_is_enabled() is True


def langsmith_metadata(release: str, operation_keys: Iterable[str]) -> dict[str, Any]:
    """LangSmith run metadata: ``{"toolgate_release": ..., "toolgate_operation_keys": [...]}``.

    Metadata is only a dict; it is sent only by LangSmith's tracer, which runs only when
    LangSmith tracing is enabled. Callers attach it behind `langsmith_enabled`.
    """
    return {
        "toolgate_release": release,
        "toolgate_operation_keys": sorted({str(k) for k in operation_keys if k}),
    }


def annotate_langsmith_run(release: str, operation_keys: Iterable[str]) -> bool:
    """Add `langsmith_metadata` to the current LangSmith run (the running graph node).

    Does nothing (and returns False) unless LangSmith tracing is enabled and a run is active.
    """
    if not langsmith_enabled():
        return False
    try:
        from langsmith.run_helpers import get_current_run_tree
    except ImportError:  # pragma: no cover
        return False
    run = get_current_run_tree()
    if run is None:
        return False
    run.add_metadata(langsmith_metadata(release, operation_keys))
    return True


__all__ = ["annotate_langsmith_run", "langsmith_enabled", "langsmith_metadata"]
