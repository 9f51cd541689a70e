"""A real local downstream for handler tests: an HTTP server on 127.0.0.1 (a free port) that
records every request's Authorization header, refuses unknown and revoked tokens (401), performs
a refund once per Idempotency-Key and answers a status check by that key.

`refund_tool` replaces the demo ``issue_refund`` with a tool that acts through this server with
the requesting user's own ``crm_token``, through its egress capability only.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from toolgate.tools.spec import HandlerContext, ToolSpec


@dataclass
class Downstream:
    """What the fake downstream saw and holds."""

    port: int = 0
    tokens: set[str] = field(default_factory=set)
    revoked: set[str] = field(default_factory=set)
    requests: list[dict[str, Any]] = field(default_factory=list)
    effects: dict[str, dict[str, Any]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def authorizations(self, method: str | None = None) -> list[str | None]:
        """The Authorization header of every request (of ``method``), in order."""
        with self.lock:
            return [r["authorization"] for r in self.requests if method in (None, r["method"])]


def serve(downstream: Downstream) -> tuple[ThreadingHTTPServer, threading.Thread]:
    """Start the fake on a free port of 127.0.0.1 (stop it with ``server.shutdown()``)."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorized(self) -> bool:
            header = self.headers.get("Authorization")
            with downstream.lock:
                downstream.requests.append(
                    {
                        "method": self.command,
                        "path": self.path,
                        "authorization": header,
                        "idempotency_key": self.headers.get("Idempotency-Key"),
                    }
                )
                token = (header or "").removeprefix("Bearer ")
                ok = token in downstream.tokens and token not in downstream.revoked
            if not ok:
                self._answer(401, {"error": "invalid_token"})
            return ok

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if not self._authorized():
                return
            key = self.headers.get("Idempotency-Key") or ""
            with downstream.lock:
                effect = downstream.effects.setdefault(
                    key,
                    {
                        "refund_id": f"R-{len(downstream.effects) + 1}",
                        "order_id": body["order_id"],
                        "amount_cents": body["amount_cents"],
                        "status": "refunded",
                    },
                )
            self._answer(201, effect)

        def do_GET(self) -> None:
            if not self._authorized():
                return
            with downstream.lock:
                effect = downstream.effects.get(self.path.rsplit("/", 1)[-1])
            self._answer(200, effect) if effect else self._answer(404, {"error": "not_found"})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    downstream.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def refund_tool(
    refund: ToolSpec,
    downstream: Downstream,
    *,
    after_effect: Callable[[], None] | None = None,
    **overrides: Any,
) -> ToolSpec:
    """``issue_refund`` acting through ``downstream`` as the requesting user (``crm_token``);
    ``after_effect`` runs once the downstream answered (e.g. raise: a lost response)."""
    result_model = refund.result_model

    def handler(args: Any, ctx: HandlerContext) -> Any:
        assert ctx.http is not None
        response = ctx.http.post(
            f"{downstream.base}/refunds",
            headers={
                "Authorization": f"Bearer {ctx.credential('crm_token')}",
                "Idempotency-Key": ctx.require_idempotency_key(),
            },
            json={"order_id": args.order_id, "amount_cents": args.amount_cents},
        ).raise_for_status()
        if after_effect is not None:
            after_effect()
        return result_model.model_validate(response.json())

    def status(args: Any, ctx: HandlerContext) -> Any:
        assert ctx.http is not None
        response = ctx.http.get(
            f"{downstream.base}/refunds/{ctx.require_idempotency_key()}",
            headers={"Authorization": f"Bearer {ctx.credential('crm_token')}"},
        )
        if response.status == 404:
            return None
        return result_model.model_validate(response.raise_for_status().json())

    fields: dict[str, Any] = {
        "handler": handler,
        "reconcile": status,
        "forwarded_credentials": frozenset({"crm_token"}),
        "egress_hosts": frozenset({f"127.0.0.1:{downstream.port}"}),
        **overrides,
    }
    return replace(refund, **fields)


__all__ = ["Downstream", "refund_tool", "serve"]
