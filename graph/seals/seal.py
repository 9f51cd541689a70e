"""Checkpointed state is untrusted input: trusted code seals what it decided, and checks the seal.

Any client can rewrite a thread's state: ``update_state`` in process, ``threads.update_state``
on the LangGraph server, ``Command(update=...)`` on resume, or extra keys in a run's input. So
every node that changes the thread ends by sealing it: one HMAC per key of `GatewayState`, under
the store's state key and bound to the thread id, and one over all of them, which is what the
checkpoint keeps with a short tag per key (`seal_update`, `SEAL_VERSION`). Every node starts by checking
the seal (`tampered_keys`); a key whose value changed outside the gateway is named, and nothing
runs because that state says so.

Human and system messages are the user's own untrusted input and may be added by any run. The
model's messages and the gateway's tool results are sealed as an ordered list of digests, so a
call the model never made, or a result the gateway never gave, is noticed too.

A seal covers the keys of the state version it sealed (`sealed_version`): a thread sealed before
a key existed has no MAC for it, and that key must still be empty. The guard then brings the
verified state to the current version (`toolgate.graph.seals.versions`) and seals the result.

What the state will be after an update is computed by `toolgate.graph.seals.updates`; the MACs
the last node of this process computed are reused through `toolgate.graph.seals.recent`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import weakref
from collections.abc import Mapping
from functools import cache
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage

from toolgate.graph.seals.recent import RecentDigests, RecentSeals, SealedEntry, known_mac, known_macs
from toolgate.graph.seals.updates import apply_update, lean_update, state_reducers
from toolgate.graph.state import KEYS_ADDED_IN
from toolgate.store.keys import Keyring

SEAL_VERSION = "6"
"""The sealed form, named in the seal and in each of its MACs: bumped when the form changes; a
seal of another form does not verify (but see `HEX_SEAL_VERSION`, `TAGGED_SEAL_VERSION`,
`FULL_MACS_SEAL_VERSION`, `PREVIOUS_SEAL_VERSION`, `LEGACY_SEAL_VERSION`). Form 6 stores ``all``,
the MAC over every key's full MAC, and ``tags``: a `TAG_CHARS`-hex-character (two-byte) tag of
each key's MAC, in the order of `sealed_keys` (`seal_tags` reads it, `tagged_seal` writes it),
both as unpadded URL-safe base64 of their bytes (`seal_text`) rather than hex. The seal is written
at every step: form 6 is about 0.11 kB, form 5 (the same bytes in hex) 0.16 kB, form 4 (a dict of
8-character tags named by key) 0.40 kB. What vouches for the state is ``all`` (full strength: a
value changed in any key changes that key's MAC and so ``all``); the tags only name which keys
changed. A key and its tag copied from another seal of the same thread (an older checkpoint) match
on their own, never together with the rest, so a refused thread cannot be un-refused with its old
``status`` nor a spent budget reset."""

TAG_CHARS = 4
"""Hex characters of a key's MAC kept as its tag (two bytes), to name a changed key (not to vouch
for it: ``all`` does). A changed key whose tag still matches by chance (1 in 65,536) is named as
``seal`` instead."""

HEX_SEAL_VERSION = "5"
"""The form of seals made before the tags and ``all`` were base64: the same as form 6 (MACs
naming form 5) with ``tags`` one string of hex tags and ``all`` in hex. Such a seal verifies the
state it sealed, so a thread saved then is sealed again in the current form by its next node, not
refused. Neither form passes for the other: each MAC names its form."""

TAGGED_SEAL_VERSION = "4"
"""The form of seals made before the tags were one string: ``all`` in hex as in form 5 (naming form 4)
and an 8-character tag per key, stored under the key's name. Such a seal verifies the state it
sealed, so a thread saved then is sealed again in the current form by its next node, not refused."""

FORM_4_TAG_CHARS = 8
"""Hex characters of each tag in a form-4 seal."""

FULL_MACS_SEAL_VERSION = "3"
"""The form of seals made before tags: one full MAC per key and ``all`` over those stored MACs.
Such a seal verifies the state it sealed, so a thread saved then is sealed again in the current
form by its next node, not refused. A form-4 or form-5 seal cannot pass for form 3: its tags are not MACs."""

PREVIOUS_SEAL_VERSION = "2"
"""The form of seals made before ``all``: MACs as in form 3 but naming form 2. Such a seal
verifies the state it sealed, key by key, so a thread saved then is sealed again in the current
form by its next node, not refused. A form-3 seal cannot pass for form 2: its MACs name form 3."""

LEGACY_SEAL_VERSION = "1"
"""The form of seals made before states had a version: MACs as in form 2 but naming form 1, and
none for ``state_version``. Such a seal verifies the version-1 state it sealed, so a thread saved
then is migrated, not refused. Each MAC names its form, so a form-2 seal cannot pass for form 1
by losing its ``state_version`` MAC."""


@cache
def sealed_keys() -> tuple[str, ...]:
    """The keys of `GatewayState` the seal covers (all of them but the seal itself), in the order
    of the form-5 ``tags`` (a new key goes after the keys before it: `KEYS_ADDED_IN`); fixed by
    the schema, so made once (every seal and check reads it several times)."""
    return tuple(k for k in state_reducers() if k != "seal")


def seal_text(hex_text: str) -> str:
    """``hex_text`` (a MAC or a string of tags) as a form-6 seal stores it: unpadded URL-safe
    base64 of its bytes (two thirds of the hex's length)."""
    return base64.urlsafe_b64encode(bytes.fromhex(hex_text)).rstrip(b"=").decode("ascii")


def _hex_of(text: Any) -> str | None:
    """The hex of a form-6 seal's base64 string; None when it is not one."""
    if not isinstance(text, str):
        return None
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True).hex()
    except (binascii.Error, ValueError):
        return None


def seal_tags(seal: Mapping[str, Any]) -> dict[str, Any]:
    """Each key's tag in ``seal`` (hex), by key: read from the ``tags`` string of form 6 (base64)
    or form 5 (hex), as many keys as it holds tags, else the seal's own entries (forms 1-4 store
    one entry per key)."""
    form = seal.get("v")
    if form not in (SEAL_VERSION, HEX_SEAL_VERSION):
        return {k: seal[k] for k in sealed_keys() if k in seal}
    tags = seal.get("tags")
    if form == SEAL_VERSION:
        tags = _hex_of(tags)
    if not isinstance(tags, str) or len(tags) % TAG_CHARS:
        return {}
    chunks = [tags[i : i + TAG_CHARS] for i in range(0, len(tags), TAG_CHARS)]
    return dict(zip(sealed_keys(), chunks, strict=False)) if len(chunks) <= len(sealed_keys()) else {}


def tagged_seal(tags: Mapping[str, str], all_mac: str) -> dict[str, str]:
    """A form-6 seal of ``tags`` (hex, by key; the keys of `sealed_keys` up to the first one
    missing) and ``all`` as the seal stores it (`seal_text` of the MAC)."""
    held: list[str] = []
    for key in sealed_keys():
        if key not in tags:
            break
        held.append(tags[key])
    return {"v": SEAL_VERSION, "tags": seal_text("".join(held)), "all": all_mac}


_DIGESTS: dict[int, tuple[weakref.ref[BaseMessage], str]] = {}
"""Digests of message objects still alive in this process. A node sees the same message objects
as the node before it in the same run, so each message is digested once per run, not once per
node; a rewritten thread arrives as new objects, digested afresh."""


def message_digest(message: BaseMessage) -> str:
    """SHA-256 of what the seal covers of one message (cached per live object)."""
    key = id(message)
    known = _DIGESTS.get(key)
    if known is not None and known[0]() is message:
        return known[1]
    digest = _message_digest(message)

    def forget(_: weakref.ref[BaseMessage]) -> None:
        _DIGESTS.pop(key, None)

    _DIGESTS[key] = (weakref.ref(message, forget), digest)
    return digest


def _message_digest(message: BaseMessage) -> str:
    if isinstance(message, ToolMessage) and isinstance(message.content, str):
        # the common case, without a JSON encoder: fields joined by a separator no field contains
        fields = ("tool", message.id, message.tool_call_id, message.status, message.name, message.content)
        text = "\x1f".join("" if f is None else str(f).replace("\x1f", "\\x1f") for f in fields)
        return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    form: dict[str, Any] = {"type": message.type, "id": message.id, "content": message.content}
    if isinstance(message, AIMessage):
        form["tool_calls"] = [[c.get("id"), c.get("name"), c.get("args")] for c in message.tool_calls]
        form["invalid_tool_calls"] = [
            [c.get("id"), c.get("name"), c.get("args"), c.get("error")] for c in message.invalid_tool_calls
        ]
    if isinstance(message, ToolMessage):
        form["tool_call_id"] = message.tool_call_id
        form["status"] = message.status
        form["name"] = message.name
    text = _DIGEST_FORM(form)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


_DIGEST_FORM = json.JSONEncoder(sort_keys=True, default=repr, ensure_ascii=False).encode
"""How a message's digested form is encoded (what ``json.dumps(form, sort_keys=True,
default=repr, ensure_ascii=False)`` writes), by one encoder made once: ``json.dumps`` with
options makes a new encoder at every call, which costs more than encoding a short value."""

_VALUE_JSON = json.JSONEncoder(
    sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
).encode
"""How a key's value is encoded inside its MAC's text (`Sealer._mac`), by one encoder made once."""


def _vouched_version(state: Mapping[str, Any]) -> int | None:
    """The version of ``state`` whose ``state_version`` the seal verified: 1 when it is empty,
    None when it is not an int."""
    version = state.get("state_version")
    if version is None:
        return 1
    return version if type(version) is int else None


class Sealer:
    """Seals and checks the state of one thread during one node run.

    The node's pre-state is sealed once to check it; sealing the post-state then reuses the MACs
    of the keys the node did not write."""

    def __init__(self, keys: Keyring, thread_id: str) -> None:
        self.keys = keys
        self.thread_id = thread_id
        self._checked: tuple[Mapping[str, Any], dict[str, str]] | None = None
        self._version: tuple[Mapping[str, Any], int | None] | None = None
        self._exact: tuple[Mapping[str, Any], dict[str, str] | None] | None = None
        self._recent_key = (thread_id, keys.key("state"))
        self._thread_json = _VALUE_JSON(thread_id)

    def _known_exactly(self, state: Mapping[str, Any]) -> dict[str, str] | None:
        """The full MACs of ``state`` when it is exactly the state the last node of this process
        sealed for this thread (`known_macs`: its seal and the very objects), else None; looked
        up once per state (`sealed_version` and `tampered_keys` both ask)."""
        if self._exact is None or self._exact[0] is not state:
            self._exact = (state, known_macs(_RECENT.get(self._recent_key), state, sealed_keys()))
        return self._exact[1]

    def _value(self, key: str, state: Mapping[str, Any]) -> Any:
        value = state.get(key)
        if key == "messages":
            if type(value) is not list:
                return [message_digest(m) for m in value or () if isinstance(m, AIMessage | ToolMessage)]
            return _DIGESTED.digests(self._recent_key, value, _sealed_digest)
        return value

    def _mac(self, key: str, state: Mapping[str, Any], form: str = SEAL_VERSION) -> str:
        """The MAC of ``key``'s value under ``form``: of the JSON text of ``{"v": form, "thread":
        ..., "key": key, "value": value}`` with sorted keys and no whitespace, its members written
        one after the other in that sorted order (``value`` last) rather than by encoding a dict
        made for each MAC."""
        try:
            # deterministic for the values the checkpointer round-trips (types and floats kept as
            # they are); the C encoder keeps sealing a large thread cheap
            value = _VALUE_JSON(self._value(key, state))
            head = f'{{"key":{_VALUE_JSON(key)},"thread":{self._thread_json},"v":{_VALUE_JSON(form)}'
            text = f'{head},"value":{value}}}'
        except (TypeError, ValueError):
            # a value JSON cannot hold (NaN, a foreign object) was never written by trusted code
            return "unsealable"
        return self.keys.mac_text("state", text)

    def _all(self, macs: Mapping[str, Any], form: str = SEAL_VERSION) -> str:
        """The MAC binding every key's full MAC in ``macs`` together (``all`` of forms 3 and 4; in
        form 3 ``macs`` is the stored seal, in form 4 the MACs the state has now). A key ``macs``
        does not name is not listed: a seal made before a key existed (`KEYS_ADDED_IN`; the key must
        then be empty) bound the keys there were, and a seal made now names every key."""
        listed = [macs.get(k) if isinstance(macs.get(k), str) else "" for k in sealed_keys() if k in macs]
        text = json.dumps({"v": form, "thread": self.thread_id, "key": "*", "macs": listed})
        return self.keys.mac_text("state", text)

    def _full_seal(self, state: Mapping[str, Any], only: set[str] | None) -> dict[str, str]:
        """Version and one full MAC per sealed key of ``state`` (``only`` these recomputed)."""
        base = self._checked[1] if only is not None and self._checked is not None else {}
        return {
            "v": SEAL_VERSION,
            **{
                k: (self._mac(k, state) if only is None or k in only or k not in base else base[k])
                for k in sealed_keys()
            },
        }

    @staticmethod
    def _stored(full: Mapping[str, str], all_mac: str) -> dict[str, str]:
        """The seal as checkpoints hold it: version, each key's tag, ``all``."""
        return tagged_seal({k: full[k][:TAG_CHARS] for k in sealed_keys() if k in full}, seal_text(all_mac))

    def seal_of(self, state: Mapping[str, Any], *, only: set[str] | None = None) -> dict[str, str]:
        """The seal of ``state``: version, one tag per sealed key (of its MAC; ``only`` these
        recomputed) and ``all`` over the full MACs."""
        full = self._full_seal(state, only)
        return self._stored(full, self._all(full))

    def sealed_version(self, state: Mapping[str, Any]) -> int | None:
        """The state version ``state``'s seal vouches for: 1 for a seal of the legacy form (made
        before states had a version), else the ``state_version`` its MAC verifies (1 when that
        is empty). None when the seal vouches for none: missing, of an unknown form, or with a
        ``state_version`` it does not verify."""
        if self._version is not None and self._version[0] is state:
            return self._version[1]
        version = self._sealed_version(state)
        self._version = (state, version)
        return version

    def _sealed_version(self, state: Mapping[str, Any]) -> int | None:
        seal = state.get("seal")
        if not isinstance(seal, Mapping):
            return None
        form = seal.get("v")
        if form == LEGACY_SEAL_VERSION:
            return 1
        if form == SEAL_VERSION and self._known_exactly(state) is not None:
            return _vouched_version(state)  # the state this process sealed, as it was then
        if form == SEAL_VERSION:
            mac = self._expected_mac("state_version", state, _RECENT.get(self._recent_key))
            expected = mac[:TAG_CHARS]  # provisional: `tampered_keys` checks ``all`` over the rest
        elif form == HEX_SEAL_VERSION:
            expected = self._mac("state_version", state, form)[:TAG_CHARS]  # likewise
        elif form == TAGGED_SEAL_VERSION:
            expected = self._mac("state_version", state, form)[:FORM_4_TAG_CHARS]  # likewise
        elif form in (FULL_MACS_SEAL_VERSION, PREVIOUS_SEAL_VERSION):
            expected = self._mac("state_version", state, form)
        else:
            return None
        if seal_tags(seal).get("state_version") != expected:
            return None
        return _vouched_version(state)

    def _expected_mac(self, key: str, state: Mapping[str, Any], known: SealedEntry | None) -> str:
        """The current form's MAC of ``state``'s ``key``: the one the last node of this process
        computed (``known``) when the value is made of the very objects it sealed, else afresh."""
        reused = known_mac(known, key, state.get(key))
        return reused if reused is not None else self._mac(key, state)

    def tampered_keys(self, state: Mapping[str, Any]) -> list[str]:
        """The keys of ``state`` that changed outside the gateway since it was last sealed.

        A thread never sealed (a new one) may hold only the user's input: human messages. A key
        younger than the state version its seal vouches for has no MAC and must be empty.
        """
        self._checked = None
        seal = state.get("seal")
        if not isinstance(seal, Mapping):
            if seal is not None:
                return ["seal"]
            return [k for k in sealed_keys() if self._value(k, state)]
        form = seal.get("v")
        if form not in (
            SEAL_VERSION,
            HEX_SEAL_VERSION,
            TAGGED_SEAL_VERSION,
            FULL_MACS_SEAL_VERSION,
            PREVIOUS_SEAL_VERSION,
            LEGACY_SEAL_VERSION,
        ):
            return ["seal"]
        exact = self._known_exactly(state) if form == SEAL_VERSION else None
        if exact is not None:  # what this process sealed, unchanged: it verifies as it did then
            self._checked = (state, exact)
            return []
        tags = seal_tags(seal)
        version = self.sealed_version(state)
        covered = [
            k for k in sealed_keys() if version is None or KEYS_ADDED_IN.get(k, 1) <= version or k in tags
        ]
        if not all(isinstance(tags.get(k), str) for k in covered):
            return ["seal"]
        if form == SEAL_VERSION:
            known = _RECENT.get(self._recent_key)
            expected = {k: self._expected_mac(k, state, known) for k in covered}
            # sealing the node's update reuses these (current form only)
            self._checked = (state, {"v": SEAL_VERSION, **expected})
            stored = {k: mac[:TAG_CHARS] for k, mac in expected.items()}
        elif form == HEX_SEAL_VERSION:
            expected = {k: self._mac(k, state, form) for k in covered}
            stored = {k: mac[:TAG_CHARS] for k, mac in expected.items()}
        elif form == TAGGED_SEAL_VERSION:
            expected = {k: self._mac(k, state, form) for k in covered}
            stored = {k: mac[:FORM_4_TAG_CHARS] for k, mac in expected.items()}
        else:
            expected = {k: self._mac(k, state, form) for k in covered}
            stored = expected
        changed = [
            k
            for k in sealed_keys()
            if (tags.get(k) != stored[k] if k in stored else state.get(k) is not None)
        ]
        if changed:
            return changed
        if form == SEAL_VERSION and seal.get("all") != seal_text(self._all(expected, form)):
            return ["seal"]  # every tag matches, but the values are not the ones sealed together
        if form in (HEX_SEAL_VERSION, TAGGED_SEAL_VERSION) and seal.get("all") != self._all(expected, form):
            return ["seal"]  # likewise
        if form == FULL_MACS_SEAL_VERSION and seal.get("all") != self._all(seal, form):
            return ["seal"]  # every MAC is genuine, but they were not sealed together
        return changed

    def seal_update(self, state: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
        """``update`` with the seal of the state it produces."""
        update = lean_update(state, update)
        after = apply_update(state, update)
        reuse = self._checked is not None and self._checked[0] is state
        full = self._full_seal(after, set(update) if reuse else None)
        seal = self._stored(full, self._all(full))
        _RECENT.put(self._recent_key, ({k: after.get(k) for k in sealed_keys()}, full, seal))
        if "seal" in state and state["seal"] == seal:  # nothing changed: the seal is not written again
            return update
        return {**update, "seal": seal}


_RECENT = RecentSeals()
"""This process's recent seals, shared by every `Sealer`."""
_DIGESTED = RecentDigests()
"""The message lists this process's seals digested last, per thread, shared by every `Sealer`."""


def _sealed_digest(message: Any) -> str | None:
    """The digest a seal lists for ``message``: AI and tool messages only (None for the others)."""
    return message_digest(message) if isinstance(message, AIMessage | ToolMessage) else None


def seal_of(keys: Keyring, thread_id: str, state: Mapping[str, Any]) -> dict[str, str]:
    """The seal of ``state`` for ``thread_id``: version, one tag per sealed key and ``all``."""
    return Sealer(keys, thread_id).seal_of(state)


def tampered_keys(keys: Keyring, thread_id: str, state: Mapping[str, Any]) -> list[str]:
    """The keys of ``state`` changed outside the gateway since it was last sealed (see `Sealer`)."""
    return Sealer(keys, thread_id).tampered_keys(state)


def seal_update(
    keys: Keyring, thread_id: str, state: Mapping[str, Any], update: Mapping[str, Any]
) -> dict[str, Any]:
    """``update`` with the seal of the state it produces."""
    return Sealer(keys, thread_id).seal_update(state, update)


__all__ = [
    "FORM_4_TAG_CHARS",
    "FULL_MACS_SEAL_VERSION",
    "HEX_SEAL_VERSION",
    "LEGACY_SEAL_VERSION",
    "PREVIOUS_SEAL_VERSION",
    "SEAL_VERSION",
    "TAGGED_SEAL_VERSION",
    "TAG_CHARS",
    "Sealer",
    "seal_of",
    "seal_tags",
    "seal_text",
    "seal_update",
    "sealed_keys",
    "tagged_seal",
    "tampered_keys",
]
