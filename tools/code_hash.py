"""What code a tool's handler runs, and its hash: the ``code_sha256`` a release manifest pins.

Why separate from the manifest: deciding which code stands for a handler (unwrapping adapters,
closures, partials and bound methods down to the team's own function, or an identity string for
code that runs elsewhere) is its own set of rules, used by the manifest, by the registry audit
(`code_target`) and by every wrapper that builds a handler (`mark_code`), none of which needs the
rest of the manifest.
"""

from __future__ import annotations

import functools
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from toolgate.canonical import digest
from toolgate.tools.spec import ToolSpec

TARGET_ATTRIBUTE = "__toolgate_target__"
"""Set by a wrapper on the function it builds, naming the callable whose code the tool runs
(``spec_from_function``'s adapter, every ``from_*`` shape such as
`toolgate.tools.shapes.functions.from_function`)."""
CODE_ATTRIBUTE = "__toolgate_code__"
"""Set instead of a target when the tool's code is not Python in this process (an MCP server's
tool): a stable identity string that stands for that code (never a secret)."""
PIN_ATTRIBUTE = "__toolgate_pin__"
"""Set beside an identity when the remote code's definition was pinned at load (an MCP tool's
`toolgate.tools.shapes.mcp_pinned.tool_pin`): a SHA-256 the manifest and the registry audit show."""
_MAX_UNWRAP = 32

_W = TypeVar("_W", bound=Callable[..., Any])


def mark_code(
    wrapper: _W,
    *,
    target: Callable[..., Any] | None = None,
    identity: str | None = None,
    pin: str | None = None,
) -> _W:
    """Tell `handler_source_hash` what code ``wrapper`` stands for: ``target``'s, or ``identity``
    for code that lives elsewhere (with its ``pin`` when its definition was pinned at load; the
    identity must hold the pin too, so the code hash covers it). Wrappers call this so a generic
    adapter never becomes the code hash of every tool it adapts."""
    if (target is None) == (identity is None):
        raise ValueError("mark_code needs exactly one of target and identity")
    if pin is not None and (identity is None or pin not in identity):
        raise ValueError("mark_code takes a pin only with an identity that holds it")
    if target is not None:
        setattr(wrapper, TARGET_ATTRIBUTE, target)
    else:
        setattr(wrapper, CODE_ATTRIBUTE, identity)
    if pin is not None:
        setattr(wrapper, PIN_ATTRIBUTE, pin)
    return wrapper


def handler_source_hash(spec: ToolSpec) -> str:
    """SHA-256 of the canonical form of `code_identity` of the handler: its own code, unwrapped."""
    return digest(code_identity(spec.handler))


def code_identity(handler: object) -> dict[str, Any]:
    """The code a handler runs, as ``{"target": name, "code": {name: source}}``.

    Why: a manifest must drift when, and only when, the code of *that* tool changes. Rules:

    - Unwrapping, outermost first: ``__toolgate_code__`` (an identity string for remote code)
      ends the walk; ``__toolgate_target__`` (set by wrappers, see `mark_code`), a
      `functools.partial`'s ``func``, a bound method's ``__func__`` (its instance becomes a
      receiver, below), ``__wrapped__`` (`functools.wraps`), a callable instance's class
      ``__call__`` (the instance becomes a receiver) are followed to the target function.
    - The target's dedented source (or, without source, its code object) is the core.
    - A closure's captured callables are hashed the same way, recursively: they are what tells
      two closures made by one factory apart (a generic wrapper around two functions).
    - One level of direct calls into the target's own top-level package is added: module-level
      functions it names (also ``module.function``), and methods of its receivers (captured
      objects, a bound method's instance) that it names (``system.refund(...)``). Library and
      standard-library code is pinned by dependency versions instead, so a Python upgrade does not
      drift every manifest.
    - Data is never hashed: captured values, partial arguments and instance state are
      configuration and may hold secrets. Pin what they mean with ``handler_revision``.
    """
    code: dict[str, str] = {}
    target = _collect(handler, code, set())
    return {"target": target, "code": code}


def code_target(handler: object) -> object:
    """The callable whose code ``handler`` runs, by the unwrapping rules of `code_identity` (the
    handler itself when it declares remote code). Reviews (the registry audit) read this one."""
    return _unwrap(handler)[0]


def code_pin(handler: object) -> str | None:
    """The pin of the remote code ``handler`` stands for (`mark_code`'s ``pin``: an MCP tool's
    definition as loaded), or None."""
    pin = getattr(_unwrap(handler)[0], PIN_ATTRIBUTE, None)
    return pin if isinstance(pin, str) else None


def _collect(obj: object, code: dict[str, str], seen: set[int]) -> str:
    target, receivers = _unwrap(obj)
    identity = getattr(target, CODE_ATTRIBUTE, None)
    if isinstance(identity, str):
        code[f"declared:{identity}"] = identity
        return f"declared:{identity}"
    name = _qualified_name(target)
    if id(target) in seen:
        return name
    seen.add(id(target))
    code[name] = _source(target)
    if not isinstance(target, types.FunctionType):
        return name
    for cell in target.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned after the closure was made)
            continue
        if callable(value) and not isinstance(value, type):
            _collect(value, code, seen)
        elif not isinstance(value, type | types.ModuleType):
            receivers.append(value)
    for helper in _direct_calls(target, receivers):
        code.setdefault(_qualified_name(helper), _source(helper))
    return name


def _unwrap(obj: object) -> tuple[object, list[object]]:
    receivers: list[object] = []
    for _ in range(_MAX_UNWRAP):
        if isinstance(getattr(obj, CODE_ATTRIBUTE, None), str):
            break
        target = getattr(obj, TARGET_ATTRIBUTE, None)
        if target is not None:
            obj = target
        elif isinstance(obj, functools.partial):
            obj = obj.func
        elif inspect.ismethod(obj):
            receivers.append(obj.__self__)
            obj = obj.__func__
        elif getattr(obj, "__wrapped__", None) is not None:
            obj = obj.__wrapped__  # type: ignore[attr-defined]
        elif (
            not isinstance(obj, type | types.FunctionType | types.BuiltinFunctionType)
            and callable(obj)
            and isinstance(inspect.getattr_static(type(obj), "__call__", None), types.FunctionType)
        ):
            receivers.append(obj)
            obj = type(obj).__call__
        else:
            break
    return obj, receivers


def _direct_calls(function: types.FunctionType, receivers: list[object]) -> Iterator[Callable[..., Any]]:
    """Functions of the target's own top-level package that ``function`` names directly."""
    package = _package(function)
    names = _names(function.__code__)
    for name in sorted(names):
        value = function.__globals__.get(name)
        if isinstance(value, types.ModuleType) and _package(value) == package:
            for attribute in sorted(names):
                member = inspect.getattr_static(value, attribute, None)
                if isinstance(member, types.FunctionType) and _package(member) == package:
                    yield member
        elif value is not None and not isinstance(value, type):
            helper, _ = _unwrap(value)
            if isinstance(helper, types.FunctionType) and _package(helper) == package:
                yield helper
    for receiver in receivers:
        cls = type(receiver)
        if _package(cls) != package:
            continue
        for name in sorted(names):
            member = inspect.getattr_static(cls, name, None)
            if isinstance(member, staticmethod | classmethod):
                member = member.__func__
            elif isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType):
                yield member


def _names(code: types.CodeType) -> set[str]:
    """Global and attribute names used by ``code`` and the functions, lambdas and comprehensions
    nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _package(obj: object) -> str:
    module = obj.__name__ if isinstance(obj, types.ModuleType) else getattr(obj, "__module__", None)
    return str(module or "?").split(".", 1)[0]


def _qualified_name(obj: object) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _source(obj: object) -> str:
    """Dedented source; without source (built at run time), a rendering of the code object."""
    try:
        return textwrap.dedent(inspect.getsource(obj))  # type: ignore[arg-type]
    except (OSError, TypeError):
        code = getattr(obj, "__code__", None)
        return _render_code(code) if isinstance(code, types.CodeType) else _qualified_name(obj)


def _render_code(code: types.CodeType) -> str:
    consts = [
        _render_code(c)
        if isinstance(c, types.CodeType)
        else repr(sorted(c, key=repr) if isinstance(c, frozenset) else c)  # set order varies per process
        for c in code.co_consts
    ]
    return f"{code.co_qualname}:{code.co_code.hex()}:{code.co_names}:{code.co_varnames}:{consts}"


__all__ = [
    "CODE_ATTRIBUTE",
    "PIN_ATTRIBUTE",
    "TARGET_ATTRIBUTE",
    "code_identity",
    "code_pin",
    "code_target",
    "handler_source_hash",
    "mark_code",
]
