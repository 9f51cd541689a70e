"""The address a request came from: what failed sign-ins are counted and audited against.

Behind a reverse proxy every connection comes from the proxy, so one guesser would throttle every
user (`toolgate.policy.sign_in_throttle` counts per address) and the audit would name the proxy.
The operator names its proxies (``TOOLGATE_TRUSTED_PROXIES``: addresses or ranges); a connection
from one of them is attributed to the right-most ``X-Forwarded-For`` entry that is not itself a
trusted proxy. Entries further left were written by the client and prove nothing, so a client
cannot pick the address it is counted against. Without the setting the header is ignored.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Iterable
from typing import Any

from toolgate.settings import setting

FORWARDED_FOR = b"x-forwarded-for"

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@functools.lru_cache(maxsize=8)
def _networks(ranges: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(r, strict=False) for r in ranges)


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return None


def _trusted(text: str, proxies: tuple[Network, ...]) -> bool:
    found = _address(text)
    return found is not None and any(found in net for net in proxies)


def forwarded_source(peer: str | None, forwarded_for: Iterable[str], proxies: tuple[Network, ...]) -> str | None:
    """The client of a connection from ``peer``: ``peer`` itself unless it is one of ``proxies``;
    then, walking ``forwarded_for`` (the header's values in order) from the right, the first
    entry that is not a trusted proxy. An entry that is not an address ends the walk at the last
    trusted hop (a proxy never writes one; a client may)."""
    if peer is None or not proxies or not _trusted(peer, proxies):
        return peer
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",") if hop.strip()]
    source = peer
    for hop in reversed(hops):
        if _address(hop) is None:
            break
        source = str(_address(hop))
        if not _trusted(hop, proxies):
            break
    return source


def client_address(scope: Any) -> str | None:
    """The address the HTTP or WebSocket request of ASGI ``scope`` came from (see the module)."""
    client = scope.get("client")
    peer = str(client[0]) if client else None
    proxies = _networks(tuple(setting("trusted_proxies")))
    if not proxies:
        return peer
    values = [v.decode("latin-1") for k, v in scope.get("headers") or () if k.lower() == FORWARDED_FOR]
    return forwarded_source(peer, values, proxies)


__all__ = ["client_address", "forwarded_source"]
