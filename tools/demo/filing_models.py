"""Argument and result models of ``submit_filing``: the tool's contract with the model.

Apart from `toolgate.tools.demo.filing` (the legacy downstream and our status-check side) to keep
that module under the size limit; it re-exports them. The taxpayer is named by a reference the
account holds (TP-1001..TP-1010 are acme's demo taxpayers), never by a tenant or user id.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from toolgate.tools.spec import StrictArgs, ToolResult

FilingType = Literal["income_tax_return", "vat_return", "payroll_annual"]

Note = Literal[
    "submitted", "already existed; not resubmitted", "confirmed via status check", "found by status check"
]


class SubmitFilingArgs(StrictArgs):
    """Arguments of ``submit_filing``: exactly the legacy system's natural key."""

    taxpayer_ref: str = Field(
        pattern=r"^TP-[0-9]{4,8}$",
        description="The taxpayer's reference in this account, e.g. 'TP-1001'.",
        examples=["TP-1001"],  # a seeded acme taxpayer; the registry's positive schema fixture
    )
    tax_year: int = Field(
        ge=2000, le=2100, description="Tax year the filing is for, e.g. 2024.", examples=[2024]
    )
    filing_type: FilingType = Field(description="Kind of filing.", examples=["vat_return"])


class FilingResult(ToolResult):
    """A filing as the agency knows it, and how we learned of it."""

    confirmation_number: str
    status: Literal["submitted", "accepted"]
    taxpayer_ref: str
    tax_year: int
    filing_type: str
    note: Note


__all__ = ["FilingResult", "FilingType", "Note", "SubmitFilingArgs"]
