"""The positive and negative fixtures of ``registry schemas --check`` (toolgate.tools.schema.fixtures):
the schema's own example validates through the tool's real contract, and an unknown alias in its
place is refused; nothing is guessed when a string has no example."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, ConfigDict, Field
from support import cli_env, toolgate

from toolgate.tools.arguments import ModelArguments
from toolgate.tools.declared.tools import JsonSchemaArguments
from toolgate.tools.schema.fixtures import UNKNOWN_ALIAS, check_fixtures, example_arguments


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Restart(_Strict):
    service_alias: Literal["web", "worker", "scheduler"]
    reason: str = Field(max_length=200, examples=["deploy stuck"])
    drain_seconds: int = Field(ge=5, le=300)
    force: bool


class Order(_Strict):
    order_id: str = Field(pattern=r"^O-[0-9]{4,8}$", examples=["O-5512"])


class Unexampled(_Strict):
    order_id: str = Field(pattern=r"^O-[0-9]{4,8}$")


class WrongExample(_Strict):
    order_id: str = Field(pattern=r"^O-[0-9]{4,8}$", examples=["order 5512"])


class AnyText(_Strict):
    note: str = Field(pattern=r"^.{1,40}$", examples=["ok"])


class WholeExample(_Strict):
    model_config = ConfigDict(json_schema_extra={"examples": [{"sku": "SKU-7", "delta": -2}]})
    sku: str = Field(pattern=r"^SKU-[0-9]{1,6}$")
    delta: int = Field(ge=-1000, le=1000)


def test_an_example_is_built_from_the_schema_without_guessing_a_string() -> None:
    schema = ModelArguments(Restart).json_schema()
    assert example_arguments(schema) == {
        "service_alias": "web",
        "reason": "deploy stuck",
        "drain_seconds": 5,
        "force": False,
    }
    assert example_arguments(ModelArguments(Unexampled).json_schema()) is None
    assert example_arguments(ModelArguments(WholeExample).json_schema()) == {"sku": "SKU-7", "delta": -2}


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (Restart, ("PASS", "REJECTED")),  # the enum refuses the unknown alias
        (Order, ("PASS", "REJECTED")),  # so does the pattern
        (WholeExample, ("PASS", "REJECTED")),
        (Unexampled, ("MISSING", "N/A")),
        (WrongExample, ("FAIL", "N/A")),  # an example its own contract refuses
        (AnyText, ("PASS", "ACCEPTED")),  # a pattern that lets anything through
    ],
)
def test_fixtures_go_through_the_real_contract(model: type[BaseModel], expected: tuple[str, str]) -> None:
    assert check_fixtures(ModelArguments(model)) == expected


def test_a_declared_json_schema_is_checked_by_its_own_validator() -> None:
    schema = {
        "type": "object",
        "properties": {
            "region": {"type": "string", "enum": ["eu", "us"]},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50},
        },
        "required": ["region", "limit"],
        "additionalProperties": False,
    }
    contract = JsonSchemaArguments(schema)
    assert example_arguments(contract.json_schema()) == {"region": "eu", "limit": 1}
    assert check_fixtures(contract) == ("PASS", "REJECTED")
    assert UNKNOWN_ALIAS not in ("eu", "us")


def test_the_schema_check_prints_the_seeds_line(tmp_path: Path) -> None:
    result = toolgate(["registry", "schemas", "--check", "--release", "ops-tools/1.0.0"], cli_env(tmp_path))
    line = next(x for x in result.stdout.splitlines() if x.startswith("schema=get_service_status "))
    assert line == (
        "schema=get_service_status wire_name=get_service_status strict=true required=1/1"
        " additional_properties=false unsupported_keywords=0 valid_fixture=PASS unknown_alias=REJECTED problems=0"
    )
    assert result.stdout.splitlines()[-1] == "schemas_checked=PASS"
