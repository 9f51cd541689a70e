"""Purchase-preview tokens: ``pvt_<id>.<base64url HMAC-SHA256>``.

The HMAC covers the preview id, the tenant, the canonical JSON of the stored payload and the
expiry. A token is verified against the *stored* preview row, never taken at its word, so a
forged token and a tampered stored payload are both refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import re
from typing import Any

from toolgate.canonical import canonical_json
from toolgate.errors import ToolExecutionError
from toolgate.store import Tx

TOKEN_PATTERN = r"^pvt_[0-9a-f]{24}\.[A-Za-z0-9_-]{43}$"
"""A well-formed token: the preview id, a dot, the unpadded base64url MAC."""
_TOKEN = re.compile(TOKEN_PATTERN)


def preview_id_of(token: str) -> str | None:
    """The preview id inside a well-formed token (``None`` for anything else)."""
    if not _TOKEN.match(token):
        return None
    return token[len("pvt_") : token.index(".")]


def token_mac(key: bytes, preview_id: str, tenant_id: str, payload: dict[str, Any], expires_at: str) -> str:
    """The MAC half of a token, over everything the preview binds."""
    message = canonical_json(
        {"id": preview_id, "tenant": tenant_id, "payload": payload, "expires_at": expires_at}
    )
    digest = hmac.new(key, message.encode("utf-8"), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def verified_preview(tx: Tx, key: bytes, tenant_id: str, token: str) -> dict[str, Any]:
    """The stored preview behind ``token``: signature over the stored row first, then tenant.

    Another tenant's preview is refused as unknown, so a token says nothing about other accounts.
    """
    preview_id = preview_id_of(token)
    row = None
    if preview_id is not None:
        row = tx.one("SELECT * FROM sor_po_previews WHERE preview_id = ?", (preview_id,))
    if preview_id is None or row is None:
        raise ToolExecutionError("caller_error", "unknown preview token; run preview_purchase_order again")
    expected = token_mac(key, preview_id, row["tenant_id"], json.loads(row["payload"]), row["expires_at"])
    if not hmac.compare_digest(expected, token.rsplit(".", 1)[1]):
        raise ToolExecutionError(
            "caller_error", "preview token signature does not match the stored preview (forged or tampered)"
        )
    if row["tenant_id"] != tenant_id:
        raise ToolExecutionError("caller_error", "unknown preview token; run preview_purchase_order again")
    return row


__all__ = ["TOKEN_PATTERN", "preview_id_of", "token_mac", "verified_preview"]
