"""Real published tool definitions through the public "bring your own tools" path (issue 30).

The corpus is read from an installed package, never copied into this repository: the Berkeley
Function Calling Leaderboard ships its definitions and ground-truth calls in its wheel
(``bfcl-eval``, installed without its dependencies by the Makefile's ``corpus`` step; only data
files and its pure type-mapping module are read, nothing of it is imported that would need them).
Its definitions are written in its own dialect (``dict``, ``float``, ``tuple``); the package's own
mapping to OpenAPI types (``GORILLA_TO_OPENAPI``) turns them into the OpenAI definitions its model
handlers send, as its ``convert_to_tool`` does.

For every distinct definition of the Python-language categories, and every importer that takes
a JSON definition (`from_openai`, `from_anthropic`, `from_langchain`), the runner counts:

- ``loaded``: definitions that load with no hand edit (an operator policy alone);
- ``must_accept``: ground-truth calls (first allowed value of each argument, omitting optional
  ones the answer leaves out) accepted as sent;
- ``broken``: the same calls broken four ways (an undeclared top-level key beside them, an
  undeclared key inside a declared object, a required argument dropped, a typed argument sent as
  the wrong JSON type), each of which must be refused (target: 0 accepted);
- every refusal class (registration problem code or call refusal code) with examples.

`run` returns the counts; ``python -m toolgate.evals.public_corpus --out FILE`` writes and prints them.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import logging
import sys
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_core.tools import StructuredTool

from toolgate.errors import RegistryError
from toolgate.tools.shapes.definitions import from_anthropic, from_openai
from toolgate.tools.shapes.langchain import from_langchain
from toolgate.tools.shapes.operator_policy import OperatorPolicy
from toolgate.tools.spec import ArgumentsInvalid, ToolSpec

PACKAGE = "bfcl_eval"
"""The installed package the corpus is read from (PyPI ``bfcl-eval``)."""
CATEGORIES = (
    "simple_python",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "irrelevance",
    "live_irrelevance",
    "live_relevance",
)
"""BFCL categories whose definitions are Python-language tools (Java and JavaScript ones are not
JSON tools, multi-turn ones are class methods)."""
POLICY = OperatorPolicy(risk="read-only", owner="public-corpus", scopes=frozenset({"corpus:read"}))
"""The only thing an integrator adds: what no definition can say for itself."""
IMPORTERS = ("openai", "anthropic", "langchain")
MAX_EXAMPLES = 3


def package_data(package: str = PACKAGE) -> Path | None:
    """The installed package's ``data`` folder (found without importing the package), or None."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    return data if data.is_dir() else None


def type_mapping(package: str = PACKAGE) -> dict[str, str]:
    """The package's own dialect-to-OpenAPI type mapping (a module of plain constants)."""
    module = __import__(f"{package}.constants.type_mappings", fromlist=["GORILLA_TO_OPENAPI"])
    return dict(module.GORILLA_TO_OPENAPI)


def to_openai(function: Mapping[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    """A BFCL function as the OpenAI definition its handlers send (its ``convert_to_tool``: the
    parameters an ``object``, every property's type mapped, ``string`` when unknown or absent)."""
    item = copy.deepcopy(dict(function))
    parameters = item.get("parameters") or {"properties": {}}
    parameters["type"] = "object"
    parameters["properties"] = _cast(parameters.get("properties") or {}, mapping)
    return {"type": "function", "function": {**item, "parameters": parameters}}


def _cast(properties: dict[str, Any], mapping: Mapping[str, str]) -> dict[str, Any]:
    for value in properties.values():
        kind = value.get("type")
        value["type"] = mapping.get(kind, "string") if isinstance(kind, str) else "string"
        if kind == "float":
            value["format"] = "float"
        if value["type"] in ("array", "object"):
            if isinstance(value.get("properties"), dict):
                value["properties"] = _cast(value["properties"], mapping)
            elif isinstance(value.get("items"), dict):
                items = value["items"]
                items["type"] = mapping.get(items.get("type"), "string")
                if items["type"] == "array" and isinstance(items.get("items"), dict):
                    items["items"]["type"] = mapping.get(items["items"].get("type"), "string")
                elif items["type"] == "object" and isinstance(items.get("properties"), dict):
                    items["properties"] = _cast(items["properties"], mapping)
    return properties


def ground_truth_call(answer: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    """The call a ground-truth answer stands for: the first allowed value of each argument (``""``
    means "may be omitted"), nested objects resolved the same way."""
    return _resolve_object(answer, schema)


def _resolve_object(answer: Mapping[str, Any], schema: Mapping[str, Any]) -> dict[str, Any]:
    props = schema.get("properties") or {}
    out: dict[str, Any] = {}
    for key, alternatives in answer.items():
        options = alternatives if isinstance(alternatives, list) else [alternatives]
        chosen = [option for option in options if option != ""]
        if chosen:
            out[key] = _resolve(chosen[0], props.get(key) or {})
    return out


def _resolve(value: Any, schema: Mapping[str, Any]) -> Any:
    if schema.get("type") == "object" and isinstance(value, dict) and schema.get("properties"):
        return _resolve_object(value, schema)
    found = schema.get("items")
    items: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    if (
        schema.get("type") == "array"
        and isinstance(value, list)
        and items.get("type") == "object"
        and items.get("properties")
    ):
        return [_resolve_object(v, items) if isinstance(v, dict) else v for v in value]
    return value


def broken_calls(call: Mapping[str, Any], schema: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``call`` broken in ways the tool must refuse, each with its kind."""
    props: Mapping[str, Any] = schema.get("properties") or {}
    yield "undeclared_top_level", {**call, "forward_all_to": "attacker@example.com"}
    for key, value in call.items():
        if isinstance(value, dict) and (props.get(key) or {}).get("type") == "object":
            yield "undeclared_nested", {**call, key: {**value, "forward_all_to": "attacker@example.com"}}
            break
    for key in schema.get("required") or []:
        if key in call:
            yield "required_dropped", {k: v for k, v in call.items() if k != key}
            break
    for key, value in call.items():
        kind = (props.get(key) or {}).get("type")
        if kind in ("integer", "number", "boolean") and "enum" not in props[key]:
            yield "wrong_type", {**call, key: "not a " + kind}
            break
        if kind == "string" and isinstance(value, str):
            yield "wrong_type", {**call, key: {"not": "a string"}}
            break


@dataclass
class Tally:
    """Counts with up to `MAX_EXAMPLES` examples per class."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=dict)

    def add(self, key: str, example: str) -> None:
        self.counts[key] += 1
        shown = self.examples.setdefault(key, [])
        if len(shown) < MAX_EXAMPLES:
            shown.append(example[:300])

    def view(self) -> dict[str, Any]:
        return {k: {"count": n, "examples": self.examples[k]} for k, n in sorted(self.counts.items())}


def _implementation(**arguments: Any) -> str:
    return "ok"


def _load(importer: str, definition: dict[str, Any]) -> ToolSpec:
    function = definition["function"]
    if importer == "openai":
        return from_openai(definition, _implementation, POLICY)
    if importer == "anthropic":
        anthropic = {
            "name": function["name"],
            "description": function.get("description", ""),
            "input_schema": function["parameters"],
        }
        return from_anthropic(anthropic, _implementation, POLICY)
    tool = StructuredTool(
        name=function["name"],
        description=function.get("description") or function["name"],
        args_schema=function["parameters"],
        func=_implementation,
    )
    return from_langchain(tool, POLICY)


def _refusal_class(exc: RegistryError) -> str:
    codes = sorted({str(code) for code, _ in (exc.problems or [])}) or ["registry_error"]
    return "load:" + "+".join(codes)


def run(data: Path, *, importers: tuple[str, ...] = IMPORTERS) -> dict[str, Any]:
    """Every count the module docstring lists, for the corpus under ``data``."""
    mapping = type_mapping()
    definitions: dict[str, dict[str, Any]] = {}
    answers: list[tuple[str, dict[str, Any]]] = []  # (definition key, ground-truth answer)
    for category in CATEGORIES:
        questions = data / f"BFCL_v4_{category}.json"
        if not questions.is_file():
            continue
        truth = _by_id(data / "possible_answer" / f"BFCL_v4_{category}.json")
        for line in questions.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            by_name: dict[str, str] = {}
            for function in entry.get("function") or []:
                definition = to_openai(function, mapping)
                key = json.dumps(definition, sort_keys=True)
                definitions.setdefault(key, definition)
                by_name[function["name"]] = key
            for call in truth.get(entry["id"], []):
                if isinstance(call, dict):
                    for name, answer in call.items():
                        if name in by_name and isinstance(answer, dict):
                            answers.append((by_name[name], answer))
    quiet = logging.getLogger("toolgate.tools")  # every load warning is counted below instead
    level, quiet.level = quiet.level, logging.ERROR
    try:
        return _run(definitions, answers, importers)
    finally:
        quiet.setLevel(level)


def _run(
    definitions: dict[str, dict[str, Any]],
    answers: list[tuple[str, dict[str, Any]]],
    importers: tuple[str, ...],
) -> dict[str, Any]:
    refusals = Tally()
    loaded: Counter[str] = Counter()
    specs: dict[str, ToolSpec] = {}
    warnings = Tally()
    for importer in importers:
        for key, definition in definitions.items():
            name = definition["function"]["name"]
            try:
                spec = _load(importer, definition)
            except RegistryError as exc:
                refusals.add(f"{importer}:{_refusal_class(exc)}", f"{name}: {exc}")
                continue
            loaded[importer] += 1
            if importer == "openai":
                specs[key] = spec
                for warning in spec.load_warnings:
                    warnings.add(warning.split(": ", 1)[1].split(" (")[0].split(";")[0], f"{name}: {warning}")
    accepted = Counter[str]()
    for key, answer in answers:
        found = specs.get(key)
        if found is None:
            accepted["must_accept_unloaded"] += 1
            continue
        spec, schema = found, definitions[key]["function"]["parameters"]
        call = ground_truth_call(answer, schema)
        if _accepts(spec, call, refusals, "must_accept"):
            accepted["must_accept_accepted"] += 1
        for kind, broken in broken_calls(call, schema):
            accepted["broken_calls"] += 1
            if _accepts(spec, broken, Tally(), kind):
                accepted["broken_accepted"] += 1
                refusals.add(f"broken_accepted:{kind}", f"{spec.name}: {json.dumps(broken)[:200]}")
    return {
        "source": f"{PACKAGE} (PyPI bfcl-eval) {_version()}",
        "definitions": len(definitions),
        "loaded_as_published": dict(loaded),
        "must_accept_calls": len(answers),
        "must_accept_accepted": accepted["must_accept_accepted"],
        "must_accept_of_unloaded_tools": accepted["must_accept_unloaded"],
        "broken_calls": accepted["broken_calls"],
        "broken_accepted": accepted["broken_accepted"],
        "load_warnings": warnings.view(),
        "refusal_classes": refusals.view(),
    }


def _accepts(spec: ToolSpec, call: dict[str, Any], refusals: Tally, what: str) -> bool:
    try:
        spec.parse_arguments(call)
    except ArgumentsInvalid as exc:
        refusals.add(f"{what}:{exc.code}:{_kind(exc.problems[0][1])}", f"{spec.name}: {exc}")
        return False
    offending = sorted(set(spec.identity_keys(call)))
    if offending:
        refusals.add(f"{what}:identity_in_arguments", f"{spec.name}: {offending}")
        return False
    return True


def _kind(problem: str) -> str:
    """A problem's class: its words without the schema's particulars (``must be one of [...]``)."""
    words = problem.split(" (")[0]
    return "must be one of its enum" if words.startswith("must be one of") else words[:60]


def _by_id(path: Path) -> dict[str, list[Any]]:
    if not path.is_file():
        return {}
    out: dict[str, list[Any]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        out[entry["id"]] = entry.get("ground_truth") or []
    return out


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("bfcl-eval")
    except PackageNotFoundError:
        return "unknown"


def summary_lines(results: Mapping[str, Any]) -> list[str]:
    """The counts as ``key=value`` lines, then one line per refusal class with its first example."""
    lines = [
        f"source={results['source']}",
        f"definitions={results['definitions']}",
        *(f"loaded_as_published.{k}={v}" for k, v in sorted(results["loaded_as_published"].items())),
        f"must_accept_calls={results['must_accept_calls']}",
        f"must_accept_accepted={results['must_accept_accepted']}",
        f"must_accept_of_unloaded_tools={results['must_accept_of_unloaded_tools']}",
        f"broken_calls={results['broken_calls']}",
        f"broken_accepted={results['broken_accepted']}",
    ]
    for name, found in results["refusal_classes"].items():
        lines.append(f"refusal {name} count={found['count']} e.g. {found['examples'][0][:160]!r}")
    for name, found in results["load_warnings"].items():
        lines.append(f"warning {name!r} count={found['count']} e.g. {found['examples'][0][:160]!r}")
    return lines


def main(argv: list[str] | None = None, out: Callable[[str], None] = print) -> int:
    """``python -m toolgate.evals.public_corpus [--out FILE]``: run, print, write the counts."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = package_data()
    if data is None:
        out(f"error=the corpus package {PACKAGE} is not installed (pip install --no-deps bfcl-eval)")
        return 2
    results = run(data)
    for line in summary_lines(results):
        out(line)
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "CATEGORIES",
    "PACKAGE",
    "POLICY",
    "broken_calls",
    "ground_truth_call",
    "main",
    "package_data",
    "run",
    "summary_lines",
    "to_openai",
    "type_mapping",
]
