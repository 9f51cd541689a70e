"""Which argument models run their team's own code when validated (and dumped), and so are
validated as loaded code (`toolgate.tools.argument_code`), and which validate inline, with no hop.

Every way a Pydantic model can call back into Python is caught; a plain model (types,
constraints, literals, enums, nested models, Rust-engine patterns) is not, so the common tool
costs nothing more."""

from __future__ import annotations

import enum
from typing import Annotated, Any, Literal

import pytest
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    computed_field,
    field_serializer,
    field_validator,
    model_validator,
)
from support import Harness

from toolgate.store import Store
from toolgate.tools import loaded_code
from toolgate.tools.argument_code import runs_own_code
from toolgate.tools.arguments import ModelArguments
from toolgate.tools.handler import StrictArgs


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Lenient(enum.Enum):
    RED = "red"

    @classmethod
    def _missing_(cls, value: object) -> Lenient:
        return cls.RED


class Inner(StrictArgs):
    sku: str = Field(pattern=r"^[A-Z]+-[0-9]+$", max_length=20)


class WithDefaultFactory(StrictArgs):
    tags: list[str] = Field(default_factory=list)


class Plain(StrictArgs):
    order_id: str = Field(min_length=1, max_length=64)
    reason: Literal["damaged", "late", "other"] = "other"
    color: Color = Color.RED
    items: list[Inner] = []
    limits: dict[str, int] = {"a": 1}
    note: str | None = None


class WithFieldValidator(StrictArgs):
    x: str

    @field_validator("x")
    @classmethod
    def check(cls, value: str) -> str:
        return value


class WithModelValidator(StrictArgs):
    x: str

    @model_validator(mode="after")
    def check(self) -> WithModelValidator:
        return self


class WithSerializer(StrictArgs):
    x: str

    @field_serializer("x")
    def dump(self, value: str) -> str:
        return value


class WithComputed(StrictArgs):
    x: str

    @computed_field  # type: ignore[prop-decorator]
    @property
    def y(self) -> str:
        return self.x


class WithPostInit(StrictArgs):
    x: str

    def model_post_init(self, context: Any) -> None:
        pass


class WithInit(StrictArgs):
    x: str

    def __init__(self, **data: Any) -> None:
        super().__init__(**data)


class WithAnnotated(StrictArgs):
    x: Annotated[str, AfterValidator(lambda v: v)]


class WithMissing(StrictArgs):
    color: Lenient


class WithPythonRe(StrictArgs):
    model_config = ConfigDict(regex_engine="python-re")
    x: str = Field(pattern=r"^(a+)+$")


class Opaque:
    def __deepcopy__(self, memo: Any) -> Opaque:
        return self


class WithObjectDefault(StrictArgs):
    model_config = ConfigDict(arbitrary_types_allowed=True)
    x: Opaque = Opaque()


class WithNestedCode(StrictArgs):
    inner: list[WithFieldValidator]


@pytest.mark.parametrize(
    "model",
    [
        WithDefaultFactory,
        WithFieldValidator,
        WithModelValidator,
        WithSerializer,
        WithComputed,
        WithPostInit,
        WithInit,
        WithAnnotated,
        WithMissing,
        WithPythonRe,
        WithObjectDefault,
        WithNestedCode,
    ],
)
def test_a_model_that_calls_back_into_python_is_loaded_code(model: type[BaseModel]) -> None:
    assert runs_own_code(model) is True


def test_a_plain_model_validates_inline() -> None:
    assert runs_own_code(Plain) is False


def test_the_demo_tools_validate_inline(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = Harness(store)
    models = [s.args_model for s in harness.registry.tools.values() if isinstance(s.contract, ModelArguments)]
    assert models and not any(runs_own_code(m) for m in models)

    def no_hop(*_: Any) -> Any:
        raise AssertionError("a plain model's arguments took a hop to loaded code")

    monkeypatch.setattr(loaded_code, "lookup", no_hop)
    refund = harness.registry.tools["issue_refund"]
    kept = refund.parse_arguments({"order_id": "O-5512", "amount_cents": 100, "reason": "damaged"})
    assert refund.handler_arguments(kept).order_id == "O-5512"


def test_a_model_with_its_own_code_is_validated_on_a_worker_with_the_same_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hops: list[str] = []
    real = loaded_code.lookup

    def counted(fn: Any, *args: Any) -> Any:
        hops.append(getattr(fn, "__name__", "?"))
        return real(fn, *args)

    monkeypatch.setattr(loaded_code, "lookup", counted)
    contract = ModelArguments(WithFieldValidator)
    assert contract.parse({"x": "a"}) == {"x": "a"}
    assert contract.for_handler({"x": "a"}).x == "a"  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="x"):  # ArgumentsInvalid, as inline
        contract.parse({"x": 1})
    assert hops == ["_parse", "_validated", "_parse"]
