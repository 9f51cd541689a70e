"""Adversarial dispatch cases: they prove that dispatch fails closed.

Each case is one scripted model turn (or a short script) against the demo release, with the
outcome trusted code must reach for the call under test: a rejection code, ``ACCEPTED`` for a
read that runs, or ``PROPOSAL_CREATED`` for an authorized write that waits for approval. The
set covers every rejection code, unicode look-alike names, malformed JSON, 1 MB strings, deeply
nested JSON, path traversal, SQL and shell fragments, identity smuggling and prompt injection
inside tool output.

This module is the suite: it puts the families in their one stable order and names the extra
principals they need. What a case is lives in `toolgate.evals.adversarial.case`; the cases
themselves live per attack family (the ``toolgate.evals.adversarial_*`` modules: baseline,
names, arguments, authority, rules, injection, files), so a reviewer reads one kind of attack at a time.
"""

from __future__ import annotations

from toolgate.evals.adversarial.arguments import argument_form_cases, value_screen_cases
from toolgate.evals.adversarial.authority import authority_cases
from toolgate.evals.adversarial.baseline import baseline_cases
from toolgate.evals.adversarial.case import AdversarialCase
from toolgate.evals.adversarial.files import file_cases
from toolgate.evals.adversarial.injection import injection_cases
from toolgate.evals.adversarial.names import tool_name_cases
from toolgate.evals.adversarial.rules import rule_cases

CASES: tuple[AdversarialCase, ...] = (
    *baseline_cases(),
    *tool_name_cases(),
    *argument_form_cases(),
    *authority_cases(),
    *rule_cases(),
    *value_screen_cases(),
    *injection_cases(),
    *file_cases(),
)
"""Every adversarial case, in a stable order."""

EXTRA_IDENTITIES = [
    {
        "user_id": "gina_support",
        "tenant_id": "globex",
        "roles": ["support"],
        "scopes": ["orders:read", "refunds:request"],
        "display_name": "Globex support",
    },
    {
        "user_id": "gina_ops",
        "tenant_id": "globex",
        "roles": ["operator"],
        "scopes": ["ops:read", "ops:restart"],
        "display_name": "Globex operator",
    },
]
"""Principals some cases need beyond the demo identities."""

__all__ = ["CASES", "EXTRA_IDENTITIES"]
