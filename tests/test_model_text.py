"""What the model reads in a tool definition is plain text, never reStructuredText markup.

Argument models are documented like any Python code (double backquotes, :class: roles), and
Pydantic turns their docstrings and field descriptions into schema descriptions. Every export
(`Registry.openai_tools`, `Registry.anthropic_tools`, the StructuredTool adapters) must render that
markup, for the demo release and for a team's own tool alike."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field
from support import TEST_KEY

from toolgate.graph.bootstrap import initialize_store
from toolgate.releases.bundle import NoResources, ReleaseEnv
from toolgate.store import SQLiteStore
from toolgate.tools import ApprovalClass, NoRollback
from toolgate.tools.demo.release import DEMO_RELEASES
from toolgate.tools.manifest import tool_fingerprint
from toolgate.tools.model_text import plain_text
from toolgate.tools.registry import Registry
from toolgate.tools.shapes.thirdparty import spec_from_function
from toolgate.tools.spec import HandlerContext

MARKUP = re.compile(r"``|:[a-z]+(?::[a-z]+)*:`")
"""An inline literal or a role, as reStructuredText writes them."""


def _markup_in(definition: Any) -> list[str]:
    text = json.dumps(definition, ensure_ascii=False)
    return MARKUP.findall(text)


@pytest.fixture(scope="module")
def demo_registries(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Registry]]:
    store = SQLiteStore(tmp_path_factory.mktemp("model-text") / "toolgate.sqlite", key=TEST_KEY)
    initialize_store(store, DEMO_RELEASES["ops-tools/1.1.0"])
    try:
        yield {
            release_id: release.registry(ReleaseEnv(store, secret=b"model-text"))
            for release_id, release in DEMO_RELEASES.items()
        }
    finally:
        store.close()


@pytest.mark.parametrize("release_id", sorted(DEMO_RELEASES))
def test_no_demo_definition_carries_markup(demo_registries: dict[str, Registry], release_id: str) -> None:
    registry = demo_registries[release_id]
    specs = [spec for _, spec in sorted(registry.tools.items())]
    openai = registry.openai_tools(specs)
    anthropic = registry.anthropic_tools(specs)
    assert len(openai) == len(anthropic) == len(specs) > 0
    for definition in [*openai, *anthropic]:
        text = json.dumps(definition, ensure_ascii=False)
        assert "``" not in text and ":class:" not in text, text
        assert _markup_in(definition) == [], text
    for tool in registry.structured_tools():
        assert _markup_in(tool.description) == [], tool.description


def test_demo_refund_definition_reads_exactly(demo_registries: dict[str, Registry]) -> None:
    registry = demo_registries["ops-tools/1.1.0"]
    spec = registry.tools["issue_refund"]
    (definition,) = registry.openai_tools([spec])
    assert definition == {
        "type": "function",
        "function": {
            "name": "issue_refund",
            "description": (
                "Propose a refund of part or all of one of the customer's orders, in cents. Needs "
                "two-person or finance approval before money moves; the result says pending_approval "
                "until then. Call lookup_order first; never refund more than the unrefunded amount."
            ),
            "parameters": {
                "type": "object",
                "description": "Arguments of issue_refund.",
                "properties": {
                    "order_id": {
                        "type": "string",
                        "description": (
                            "Order id exactly as shown to the customer, e.g. 'O-5512'. "
                            "Constraints: pattern ^O-[0-9]{3,8}$."
                        ),
                    },
                    "amount_cents": {
                        "type": "integer",
                        "description": (
                            "Refund amount in cents, at most the unrefunded amount. "
                            "Constraints: greater than 0, maximum 1000000."
                        ),
                    },
                    "reason": {
                        "type": "string",
                        "description": "Refund reason code.",
                        "enum": ["damaged", "not_received", "wrong_item", "other"],
                    },
                },
                "required": ["order_id", "amount_cents", "reason"],
                "additionalProperties": False,
            },
            "strict": True,
        },
    }
    (anthropic,) = registry.anthropic_tools([spec])
    assert anthropic == {
        "name": "issue_refund",
        "description": definition["function"]["description"],
        "input_schema": definition["function"]["parameters"],
    }


class Line(BaseModel):
    """One line of an :class:`~vendor.orders.Order`, priced by :func:`price_of`."""

    model_config = ConfigDict(extra="forbid")
    sku: str = Field(pattern="^[^`]+$", description="The ``sku`` as printed, see `catalog`.")


class ReorderArgs(BaseModel):
    """Arguments of ``reorder``: see :py:meth:`Order.reorder <vendor.orders.Order.reorder>`."""

    model_config = ConfigDict(extra="forbid")
    lines: list[Line] = Field(description="Lines of the :class:`Order`, as ``Line`` items.")


class NoteArgs(BaseModel):
    """Arguments of ``add_note``."""

    model_config = ConfigDict(extra="forbid")
    note: str = Field(description="The note, at most one ``paragraph``.")
    tag: str = Field(default="``raw``", description="A tag, ``raw`` when omitted.")


class Ack(BaseModel):
    accepted: bool


SPEC_FIELDS: dict[str, Any] = dict(
    version="1.0.0",
    owner="procurement",
    risk="read-only",
    effect="nothing changes",
    timeout_s=5,
    max_output_bytes=1024,
    approval=ApprovalClass.none(),
    required_scopes=frozenset({"orders:read"}),
    rollback=NoRollback("a read has nothing to undo"),
)


def reorder(lines: list[Line], ctx: HandlerContext) -> Ack:
    """Check a reorder of a past :class:`~vendor.orders.Order` (``dry run``); see `add_note`."""
    return Ack(accepted=bool(lines))


def add_note(note: str, tag: str = "``raw``") -> Ack:
    """Attach a note through :func:`vendor.notes.add`."""
    return Ack(accepted=bool(note and tag))


@pytest.fixture
def team_registry() -> Registry:
    specs = [
        spec_from_function(
            reorder, args_model=ReorderArgs, result_model=Ack, handler_revision="reorder/1", **SPEC_FIELDS
        ),
        spec_from_function(
            add_note, args_model=NoteArgs, result_model=Ack, handler_revision="add-note/1", **SPEC_FIELDS
        ),
    ]
    return Registry.of("team/1.0.0", specs, NoResources())


def test_third_party_docstrings_reach_the_model_as_plain_text(team_registry: Registry) -> None:
    spec = team_registry.tools["reorder"]
    assert spec.description.startswith("Check a reorder of a past :class:`~vendor.orders.Order`")  # kept
    (definition,) = team_registry.openai_tools([spec])
    function = definition["function"]
    assert function["description"] == "Check a reorder of a past Order (dry run); see add_note."
    parameters = function["parameters"]
    assert function["strict"] is True
    assert parameters["description"] == "Arguments of reorder: see Order.reorder."
    assert parameters["properties"]["lines"]["description"] == "Lines of the Order, as Line items."
    line = parameters["$defs"]["Line"]
    assert line["description"] == "One line of an Order, priced by price_of."
    # the constraint written into the description is the pattern exactly as declared
    assert (
        line["properties"]["sku"]["description"]
        == "The sku as printed, see catalog. Constraints: pattern ^[^`]+$."
    )
    (anthropic,) = team_registry.anthropic_tools([spec])
    assert anthropic["description"] == function["description"]
    assert anthropic["input_schema"] == parameters
    tools = {tool.name: tool for tool in team_registry.structured_tools()}
    assert tools["reorder"].description == function["description"]
    assert tools["reorder"].args_schema is ReorderArgs


def test_descriptions_change_but_data_does_not(team_registry: Registry) -> None:
    (definition,) = team_registry.openai_tools([team_registry.tools["add_note"]])
    function = definition["function"]
    assert function["strict"] is False  # an optional argument: sent as declared
    assert function["description"] == "Attach a note through vendor.notes.add."
    parameters = function["parameters"]
    assert parameters["description"] == "Arguments of add_note."
    assert parameters["properties"]["note"]["description"] == "The note, at most one paragraph."
    assert parameters["properties"]["tag"] == {
        "type": "string",
        "description": "A tag, raw when omitted.",
        "default": "``raw``",  # a value the model may send is data, kept byte for byte
    }


@pytest.mark.parametrize(
    ("written", "read"),
    [
        ("Arguments of ``issue_refund``.", "Arguments of issue_refund."),
        (":class:`Order`, :func:`lookup`, :py:meth:`~a.b.Order.refund`", "Order, lookup, refund"),
        ("`x` and `the site <https://example.com>`_", "x and the site <https://example.com>"),
        (":ref:`the guide <guide-label>`", "the guide"),
        ("```json\n{}\n```", "```json\n{}\n```"),  # a Markdown fence is not RST inline markup
        ("don`t touch it`s", "don`t touch it`s"),
        ("plain words", "plain words"),
    ],
)
def test_plain_text_renders_inline_markup(written: str, read: str) -> None:
    assert plain_text(written) == read


def count(a: int) -> Ack:
    """Count ``a``."""
    return Ack(accepted=a > 0)


def test_the_manifest_pins_the_text_the_model_is_sent() -> None:
    """The manifest hashes the exported parameters, i.e. the rendered text: markup that renders
    to the same words is the same reviewed schema."""

    class Marked(BaseModel):
        """Arguments of ``count``."""

        model_config = ConfigDict(extra="forbid")
        a: int

    class Plain(BaseModel):
        """Arguments of count."""

        model_config = ConfigDict(extra="forbid")
        a: int

    class Other(BaseModel):
        """Arguments of tally."""

        model_config = ConfigDict(extra="forbid")
        a: int

    def schema_hash(model: type[BaseModel]) -> str:
        spec = spec_from_function(
            count, args_model=model, result_model=Ack, handler_revision="count/1", **SPEC_FIELDS
        )
        return str(tool_fingerprint(spec)["schema_sha256"])

    assert schema_hash(Marked) == schema_hash(Plain) != schema_hash(Other)
