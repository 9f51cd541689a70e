"""The manifest's code hash covers each handler's own code, unwrapped: generic wrappers never make
two tools look alike, and editing one handler drifts that tool only."""

from __future__ import annotations

import functools
import importlib
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from toolgate.store import SQLiteStore
from toolgate.tools import ApprovalClass, NoRollback
from toolgate.tools.audit import audit_specs
from toolgate.tools.code_hash import code_identity, code_pin, handler_source_hash, mark_code
from toolgate.tools.manifest import tool_fingerprint
from toolgate.tools.shapes.functions import from_function
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.shapes.thirdparty import spec_from_function
from toolgate.tools.spec import ToolSpec


class CityArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    city: str


class Answer(BaseModel):
    result: str


FIELDS: dict[str, Any] = dict(
    version="1.0.0",
    owner="weather-team",
    risk="read-only",
    effect="reads",
    timeout_s=5,
    max_output_bytes=1024,
    approval=ApprovalClass.none(),
    required_scopes=frozenset({"ops:read"}),
    handler_revision="x/1.0.0",
    rollback=NoRollback("read-only"),
)
MODULE = '''
def {name}_helper(city: str) -> str:
    return city.{method}()


def {name}(city: str) -> dict[str, str]:
    """Weather for one city."""
    return {{"result": {name}_helper(city)}}
'''


def _spec(function: Any) -> ToolSpec:
    return spec_from_function(function, args_model=CityArgs, result_model=Answer, **FIELDS)


@pytest.fixture
def modules(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A directory on sys.path and a unique module prefix; the modules are forgotten afterwards."""
    prefix = f"handlers_{uuid.uuid4().hex[:8]}"
    sys.path.insert(0, str(tmp_path))
    yield tmp_path, prefix
    sys.path.remove(str(tmp_path))
    for name in [m for m in sys.modules if m.startswith(prefix)]:
        del sys.modules[name]


def _write_and_import(directory: Path, module: str, source: str) -> ModuleType:
    (directory / f"{module}.py").write_text(textwrap.dedent(source), encoding="utf-8")
    sys.modules.pop(module, None)
    importlib.invalidate_caches()
    return importlib.import_module(module)


def _hashes(directory: Path, prefix: str, methods: dict[str, str]) -> dict[str, str]:
    hashes = {}
    for name, method in methods.items():
        module = _write_and_import(directory, f"{prefix}_{name}", MODULE.format(name=name, method=method))
        hashes[name] = handler_source_hash(_spec(getattr(module, name)))
    return hashes


def test_two_function_tools_have_different_code_hashes(modules: tuple[Path, str]) -> None:
    hashes = _hashes(*modules, {"weather_a": "upper", "weather_b": "upper"})
    assert hashes["weather_a"] != hashes["weather_b"]

    def inline_a(city: str) -> dict[str, str]:
        """Weather, as given."""
        return {"result": city}

    def inline_b(city: str) -> dict[str, str]:
        """Weather, titled."""
        return {"result": city.title()}

    assert handler_source_hash(_spec(inline_a)) != handler_source_hash(_spec(inline_b))


def test_editing_one_handler_drifts_only_that_tool(modules: tuple[Path, str]) -> None:
    before = _hashes(*modules, {"weather_a": "upper", "weather_b": "upper"})
    assert _hashes(*modules, {"weather_a": "upper", "weather_b": "upper"}) == before  # stable on re-import
    # the edit is in the module-level helper the handler calls directly
    after = _hashes(*modules, {"weather_a": "casefold", "weather_b": "upper"})
    assert after["weather_a"] != before["weather_a"]
    assert after["weather_b"] == before["weather_b"]


def _target(city: str) -> str:
    return city.upper()


def _other(city: str) -> str:
    return city.lower()


class Service:
    def lookup(self, city: str) -> str:
        return city

    def unused(self) -> str:
        return "never named by the handler"


def test_unwrapping_rules() -> None:
    alone = code_identity(_target)
    assert alone["target"].endswith("._target") and list(alone["code"]) == [alone["target"]]

    @functools.wraps(_target)
    def decorated(city: str) -> str:
        return _target(city)

    assert code_identity(decorated) == alone  # functools.wraps: __wrapped__
    assert code_identity(functools.partial(_target, "x")) == alone  # partial: its function (never its data)
    assert code_identity(mark_code(lambda a, c: None, target=_target)) == alone  # explicit wrapper mark
    bound = code_identity(Service().lookup)  # a bound method: its function
    assert bound["target"].endswith("Service.lookup") and len(bound["code"]) == 1

    def factory(function: Any) -> Any:
        def wrapper(args: Any, ctx: Any) -> Any:
            return function(args.city)

        return wrapper

    # a closure: its own code plus its captured callables, which tell two closures apart
    assert code_identity(factory(_target)) != code_identity(factory(_other))
    assert code_identity(factory(_target))["code"].keys() >= alone["code"].keys()

    service = Service()

    def handler(args: Any, ctx: Any) -> str:
        return service.lookup(args.city)

    # a captured object's methods that the closure names, from the same top-level package
    names = set(code_identity(handler)["code"])
    assert any(n.endswith("Service.lookup") for n in names) and not any(n.endswith("unused") for n in names)


def test_demo_handlers_cover_the_system_of_record_methods_they_call(tmp_path: Path) -> None:
    from toolgate.releases.bundle import ReleaseEnv
    from toolgate.tools.demo.release import DEMO_RELEASES

    store = SQLiteStore(tmp_path / "s.sqlite", key=b"k" * 16)
    registry = DEMO_RELEASES["ops-tools/1.0.0"].registry(ReleaseEnv(store, secret=b"k"))
    code = code_identity(registry.tools["issue_refund"].handler)["code"]
    assert sorted(code) == [
        "toolgate.tools.demo.catalog.demo_specs.<locals>.issue_refund",
        "toolgate.tools.demo.records.DemoSystem.refund",
    ]
    hashes = {handler_source_hash(spec) for spec in registry.tools.values()}
    assert len(hashes) == len(registry.tools)


def test_shapes_hash_the_function_not_their_adapter() -> None:
    policy = OperatorPolicy(risk="read-only", owner="weather-team", scopes=frozenset({"ops:read"}))

    def forecast_a(city: str) -> str:
        """Forecast, as given."""
        return city

    def forecast_b(city: str) -> str:
        """Forecast, doubled."""
        return city * 2

    a, b = from_function(forecast_a, policy), from_function(forecast_b, policy)
    assert handler_source_hash(a) != handler_source_hash(b)
    assert any(n.endswith("forecast_a") for n in code_identity(a.handler)["code"])


def test_remote_code_shows_its_pin_in_the_manifest_and_the_registry_audit() -> None:
    """A handler standing for code elsewhere (an MCP tool) may declare the pin of its definition
    as loaded: the code hash covers it (it is inside the identity), the manifest and the registry
    audit's inventory line show it; Python handlers show none."""
    pin = "a" * 64

    def remote(city: str) -> dict[str, str]:
        """Weather for one city, from elsewhere."""
        return {"result": city}

    with pytest.raises(ValueError, match="only with an identity that holds it"):
        mark_code(remote, identity='{"tool": "forecast"}', pin=pin)
    with pytest.raises(ValueError, match="only with an identity that holds it"):
        mark_code(remote, target=_target, pin=pin)

    def local_forecast(city: str) -> dict[str, str]:
        """Weather for one city, from here."""
        return {"result": city}

    spec = _spec(mark_code(remote, identity=f'{{"tool": "forecast", "pin": "{pin}"}}', pin=pin))
    local = _spec(local_forecast)
    assert (code_pin(spec.handler), code_pin(local.handler)) == (pin, None)
    assert tool_fingerprint(spec)["remote_pin"] == pin and "remote_pin" not in tool_fingerprint(local)
    report = audit_specs("weather/1.0.0", lambda: [spec, local])
    assert [line.endswith(f" pin={pin}") for line in report.inventory] == [True, False]
