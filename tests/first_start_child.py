"""One process of `tests/test_first_start.py`: opens the application on a fresh store together
with its siblings, all released by one file barrier.

``python tests/first_start_child.py READY_DIR GO_FILE NAME``: imports everything first, writes
``READY_DIR/NAME`` (so the test knows this child is at the gate), waits until ``GO_FILE`` exists
(a gate, not a timing window), then runs what a starting process runs: the store secret, the
store and its schema, the release's setup (`open_app`) and the checkpointer (`App.graph`); on a
demo release it seeds the demo people as `make demo` does. It prints ``ok name=NAME key=FP``:
FP is an HMAC of a fixed text under the store's secret, so siblings that ended with different
secrets print different ones.
"""

from __future__ import annotations

import hashlib
import hmac
import sys
import time
from pathlib import Path

from toolgate.config import Settings
from toolgate.graph.bootstrap import open_app
from toolgate.tools.demo.identities import seed_demo_identities

GATE_LIMIT_S = 300.0
"""A child the test never releases gives up (the test fails, never hangs)."""


def main(ready_dir: Path, go: Path, name: str) -> int:
    (ready_dir / name).write_text("ready")
    deadline = time.monotonic() + GATE_LIMIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            print(f"gate never opened name={name}", file=sys.stderr)
            return 3
        time.sleep(0.002)
    app = open_app(Settings.from_env())
    try:
        with app.graph():
            pass
        if app.registry.release.startswith("ops-tools/"):
            seed_demo_identities(app.gateway.directory)
        fingerprint = hmac.new(app.store.keys.secret, b"toolgate/first-start", hashlib.sha256).hexdigest()
    finally:
        app.store.close()
    print(f"ok name={name} key={fingerprint[:16]}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
