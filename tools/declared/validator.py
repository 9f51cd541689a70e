"""The validator of declared JSON Schemas: Draft 2020-12, with ``multipleOf`` in exact decimals.

``jsonschema`` checks ``multipleOf`` in binary floating point, so a price of ``19.99`` is "not a
multiple of 0.01" (``19.99 / 0.01`` is ``1998.9999999999998``): about one cent value in nine
would be refused against the schema's plain meaning. Here both numbers are read as the decimals
they were written as (the shortest text that round-trips, what the model sent and the schema
says) and divided exactly. Formats are asserted as `toolgate.tools.declared.formats` says.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from decimal import Decimal, InvalidOperation, localcontext
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError
from jsonschema.validators import extend

from toolgate.tools.declared.formats import ASSERTED_FORMATS


def _multiple_of(
    validator: Any, step: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "number"):
        return
    try:
        with localcontext() as exact:
            exact.prec = 800  # every float's decimal text fits: the remainder is exact
            fits = Decimal(repr(instance)) % Decimal(repr(step)) == 0
    except (InvalidOperation, ValueError):
        fits = False
    if not fits:
        yield ValidationError(f"is not a multiple of {step}")


DeclaredValidator: Any = extend(Draft202012Validator, {"multipleOf": _multiple_of})
"""`Draft202012Validator` with an exact ``multipleOf``."""


def declared_validator(schema: Mapping[str, Any]) -> Any:
    """The validator of one declared (already checked) schema."""
    return DeclaredValidator(schema, format_checker=ASSERTED_FORMATS)


__all__ = ["DeclaredValidator", "declared_validator"]
