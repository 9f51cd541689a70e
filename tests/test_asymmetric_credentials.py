"""Asymmetric service credentials: a downstream that holds only toolgate's public keys.

`AsymmetricCredentialProvider` signs a tool's service credential with an Ed25519 or RSA key only
toolgate holds and publishes the public keys as a JWKS. A real local HTTP downstream, given only
the JWKS as JSON text, verifies every request's bearer token with `verify_service_token` and
answers 401 otherwise: the tool's call goes through; a tampered token, a token from another key,
an ``alg`` swapped in the header (``none``, or HS256 keyed with the public key) and a token for
another audience are refused.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import ProxyHandler, Request, build_opener

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from support import TEST_KEY, Harness, principal

from toolgate.config import Settings
from toolgate.errors import ConfigurationError, ToolExecutionError
from toolgate.graph.bootstrap import open_app
from toolgate.graph.delivery.executor import Executor
from toolgate.store import Store
from toolgate.testing import ScriptedChatModel
from toolgate.tools import Registry
from toolgate.tools.credentials import (
    AsymmetricCredentialProvider,
    ServiceScope,
    load_signing_key,
    verify_service_token,
)
from toolgate.tools.spec import HandlerContext

AUDIENCE = "status-api"


@dataclass
class PublicKeyDownstream:
    """A downstream holding the JWKS text and nothing else; records each verdict."""

    jwks_text: str
    port: int = 0
    verdicts: list[str] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def downstream_for() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(jwks: dict[str, Any]) -> PublicKeyDownstream:
        down = PublicKeyDownstream(jwks_text=json.dumps(jwks))

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                token = (self.headers.get("Authorization") or "").removeprefix("Bearer ")
                try:
                    claims = verify_service_token(token, json.loads(down.jwks_text), AUDIENCE)
                    status, body = 200, {"service_alias": "web", "state": "running", "restarts": 0}
                    with down.lock:
                        down.verdicts.append("accepted")
                        down.claims.append(claims)
                except ToolExecutionError as exc:
                    status, body = 401, {"error": "credential_refused"}
                    with down.lock:
                        down.verdicts.append(f"refused: {exc}")
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        down.port = server.server_address[1]
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return down

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _pem(key: ed25519.Ed25519PrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@pytest.mark.parametrize(
    "make_key",
    [
        ed25519.Ed25519PrivateKey.generate,
        lambda: rsa.generate_private_key(public_exponent=65537, key_size=2048),
    ],
    ids=["ed25519", "rs256"],
)
def test_a_downstream_with_only_the_public_keys_accepts_the_tools_credential(
    store: Store, downstream_for: Any, make_key: Any
) -> None:
    provider = AsymmetricCredentialProvider(load_signing_key(_pem(make_key())))
    jwks = provider.jwks()
    assert all(
        set(k) <= {"kty", "crv", "x", "n", "e", "kid", "alg", "use"} for k in jwks["keys"]
    )  # public only
    down = downstream_for(jwks)
    harness = Harness(store)
    status = harness.registry.tools["get_service_status"]
    result_model = status.result_model

    def through_downstream(args: Any, ctx: HandlerContext) -> Any:
        assert ctx.http is not None and ctx.service_credential is not None
        response = ctx.http.get(
            f"http://127.0.0.1:{down.port}/status/{args.service_alias}",
            headers={"Authorization": ctx.service_credential.authorization()},
        )
        return result_model.model_validate(response.raise_for_status().json())

    spec = replace(
        status,
        handler=through_downstream,
        service_credential=ServiceScope(AUDIENCE, frozenset({"status:read"})),
        egress_hosts=frozenset({f"127.0.0.1:{down.port}"}),
    )
    gateway = harness.gateway()
    registry = Registry.of(harness.registry.release, [spec], harness.system)
    executor = Executor(store, registry, gateway.auditor, gateway.directory, credential_provider=provider)
    outcome = executor.run_read(spec, {"service_alias": "web"}, principal("cust-ada"), {})
    assert down.verdicts == ["accepted"], down.verdicts
    assert outcome["state"] == "running", outcome
    [claims] = down.claims
    assert (claims["aud"], claims["scope"], claims["sub"]) == (
        AUDIENCE,
        "status:read",
        "tool:get_service_status",
    )
    # the same downstream refuses the credential once a byte of it changed
    assert spec.service_credential is not None
    token = provider.credential_for("get_service_status", spec.service_credential).token  # the cached one
    head, body, signature = token.split(".")
    tampered = f"{head}.{body}.{signature[:-2]}{'A' if signature[-2] != 'A' else 'B'}{signature[-1]}"
    request = Request(
        f"http://127.0.0.1:{down.port}/status/web", headers={"Authorization": f"Bearer {tampered}"}
    )
    with pytest.raises(HTTPError) as refused:
        build_opener(ProxyHandler({})).open(request, timeout=10)
    refused.value.close()
    assert refused.value.code == 401
    assert down.verdicts == ["accepted", "refused: service credential signature refused"]


def test_tampered_foreign_alg_swapped_and_misaddressed_tokens_are_refused() -> None:
    clock_now = [datetime(2026, 1, 1, 12, 0, tzinfo=UTC)]
    provider = AsymmetricCredentialProvider(ed25519.Ed25519PrivateKey.generate(), clock=lambda: clock_now[0])
    jwks = json.loads(json.dumps(provider.jwks()))  # what a downstream was sent
    scope = ServiceScope(AUDIENCE, frozenset({"status:read"}), tenant="acme")
    token = provider.credential_for("get_service_status", scope).token
    now = clock_now[0]
    assert verify_service_token(token, jwks, AUDIENCE, tenant="acme", now=now)["tenant"] == "acme"

    head, body, signature = token.split(".")
    claims = json.loads(base64.urlsafe_b64decode(body + "=="))
    widened = _b64(json.dumps({**claims, "scope": "status:read status:write"}).encode())
    header = json.loads(base64.urlsafe_b64decode(head + "=="))
    public_bytes = base64.urlsafe_b64decode(jwks["keys"][0]["x"] + "==")
    hs_head = _b64(json.dumps({**header, "alg": "HS256"}).encode())
    hs_sig = _b64(hmac.digest(public_bytes, f"{hs_head}.{body}".encode(), hashlib.sha256))
    none_head = _b64(json.dumps({**header, "alg": "none"}).encode())
    stranger = AsymmetricCredentialProvider(ed25519.Ed25519PrivateKey.generate(), clock=lambda: clock_now[0])
    refused = {
        "claims changed": f"{head}.{widened}.{signature}",
        "signature changed": f"{head}.{body}.{signature[::-1]}",
        "another key": stranger.credential_for("get_service_status", scope).token,
        "hs256 keyed with the public key": f"{hs_head}.{body}.{hs_sig}",
        "alg none": f"{none_head}.{body}.",
        "not a token": "not-a-token",
    }
    for what, bad in refused.items():
        with pytest.raises(ToolExecutionError) as caught:
            verify_service_token(bad, jwks, AUDIENCE, tenant="acme", now=now)
        assert caught.value.kind == "credential_refused", what
    with pytest.raises(ToolExecutionError, match="another audience"):
        verify_service_token(token, jwks, "payments-api", now=now)
    with pytest.raises(ToolExecutionError, match="another tenant"):
        verify_service_token(token, jwks, AUDIENCE, tenant="globex", now=now)
    with pytest.raises(ToolExecutionError, match="expired"):
        verify_service_token(token, jwks, AUDIENCE, now=now + timedelta(minutes=6))
    assert token not in repr(provider)


def test_rotation_keeps_the_old_public_key_published_until_its_tokens_expire() -> None:
    clock_now = [datetime(2026, 1, 1, 12, 0, tzinfo=UTC)]
    provider = AsymmetricCredentialProvider(
        ed25519.Ed25519PrivateKey.generate(), ttl_s=300, refresh_s=60, clock=lambda: clock_now[0]
    )
    scope = ServiceScope(AUDIENCE, frozenset({"status:read"}))
    old = provider.credential_for("t", scope)
    assert provider.credential_for("t", scope) is old  # cached while not near expiry
    new_kid = provider.rotate(
        load_signing_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    )
    fresh = provider.credential_for("t", scope)
    assert fresh.key_id == new_kid != old.key_id
    published = provider.jwks()
    assert [k["kid"] for k in published["keys"]] == [new_kid, old.key_id]
    assert [k["alg"] for k in published["keys"]] == ["RS256", "EdDSA"]
    assert verify_service_token(old.token, published, AUDIENCE, now=clock_now[0])
    clock_now[0] += timedelta(seconds=301)
    assert [k["kid"] for k in provider.jwks()["keys"]] == [new_kid]  # the old key retired
    with pytest.raises(ToolExecutionError):
        verify_service_token(old.token, provider.jwks(), AUDIENCE, now=clock_now[0] - timedelta(seconds=2))


def test_only_ed25519_and_rsa_2048_keys_sign() -> None:
    with pytest.raises(ValueError, match="2048"):
        load_signing_key(_pem(rsa.generate_private_key(public_exponent=65537, key_size=1024)))
    with pytest.raises(ValueError, match="Ed25519 or RSA"):
        load_signing_key(_pem(ec.generate_private_key(ec.SECP256R1())))  # type: ignore[arg-type]


def test_the_signing_key_file_setting_makes_every_gateway_sign_asymmetrically(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    pem = tmp_path / "signing.pem"
    pem.write_bytes(_pem(key))
    settings = Settings.from_env(
        {
            "TOOLGATE_DATA_DIR": str(tmp_path),
            "TOOLGATE_AUDIT_KEY": TEST_KEY.decode(),
            "TOOLGATE_SERVICE_SIGNING_KEY_FILE": str(pem),
        }
    )
    app = open_app(settings, model=ScriptedChatModel(responses=[]))
    try:
        provider = app.gateway.executor.credential_provider
        assert isinstance(provider, AsymmetricCredentialProvider)
        assert provider.jwks()["keys"][0]["x"] == _b64(
            key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        )
        assert app.gateway_with(ScriptedChatModel(responses=[])).executor.credential_provider is provider
    finally:
        app.store.close()
    unsupported = tmp_path / "ec.pem"
    unsupported.write_bytes(_pem(ec.generate_private_key(ec.SECP256R1())))  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError) as refused:
        open_app(
            replace(settings, service_signing_key_file=unsupported), model=ScriptedChatModel(responses=[])
        )
    assert "TOOLGATE_SERVICE_SIGNING_KEY_FILE" in str(refused.value) and "PRIVATE" not in str(refused.value)
